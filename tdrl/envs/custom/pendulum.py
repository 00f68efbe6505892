"""A stateless pendulum with the dynamics of gymnasium's ``Pendulum-v1``."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.envs.common import EnvBase

__all__ = ["PendulumEnv"]


def _angle_normalize(x: torch.Tensor) -> torch.Tensor:
    return ((x + math.pi) % (2 * math.pi)) - math.pi


class PendulumEnv(EnvBase):
    """A stateless, batch-unlocked inverted pendulum (gymnasium ``Pendulum-v1`` dynamics).

    The state (``th``, ``thdot``) and the physical parameters (``params``) are
    read from the input tensordict, so one env instance runs any batch size:
    the batch size of the data passed to ``reset`` / ``step`` decides it. The
    reward is ``-(th**2 + 0.1 * thdot**2 + 0.001 * u**2)`` with ``th``
    normalised to ``[-pi, pi)``; the episode never terminates. ``reset(data,
    set_state=True)`` starts from the ``th`` / ``thdot`` of ``data`` instead of
    drawing them.

    Args:
        td_params: parameters (as built by :meth:`gen_params`); defaults are used when None.
        seed: seed of the env's random generator (initial states).
        device: the device of the data.

    Examples:
        >>> from tensordict import TensorDict
        >>> env = PendulumEnv(seed=0)
        >>> data = env.rollout(5)
        >>> data["next", "th"].shape
        torch.Size([5])
        >>> batch = env.rollout(5, tensordict=TensorDict(batch_size=[8]))
        >>> batch.batch_size
        torch.Size([8, 5])
        >>> state = env.reset()
        >>> bool(env.reset(state.clone(), set_state=True)["th"] == state["th"])
        True
    """

    metadata = {"render_modes": [], "render_fps": 30}
    _batch_locked = False
    _supports_set_state = True
    DEFAULT_X = math.pi
    DEFAULT_Y = 1.0

    def __init__(
        self, td_params: TensorDictBase | None = None, seed: int | None = None, device: Any = None
    ) -> None:
        super().__init__(device=device, batch_size=())
        if td_params is None:
            td_params = self.gen_params(device=self.device)
        self._make_spec(td_params)
        self.__dict__["_generator"] = torch.Generator(device=self.device or "cpu")
        if seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        self.set_seed(seed)

    @staticmethod
    def gen_params(g: float = 10.0, batch_size: Any = None, device: Any = None) -> TensorDictBase:
        """Physical parameters: max speed and torque, time step, gravity, mass, length."""
        batch_size = torch.Size([] if batch_size is None else batch_size)
        params = {
            "max_speed": 8.0,
            "max_torque": 2.0,
            "dt": 0.05,
            "g": g,
            "m": 1.0,
            "l": 1.0,
        }
        source = {
            k: torch.full(batch_size, v, dtype=torch.float32, device=device)
            for k, v in params.items()
        }
        return TensorDict(
            {"params": TensorDict(source, batch_size=batch_size, device=device)},
            batch_size=batch_size,
            device=device,
        )

    def _make_spec(self, td_params: TensorDictBase) -> None:
        max_speed = float(td_params["params", "max_speed"].reshape(-1)[0])
        max_torque = float(td_params["params", "max_torque"].reshape(-1)[0])
        params = Composite(
            {
                key: Unbounded((), dtype=torch.float32)
                for key in ("max_speed", "max_torque", "dt", "g", "m", "l")
            }
        )
        self.observation_spec = Composite(
            th=Bounded(-math.pi, math.pi, (), dtype=torch.float32),
            thdot=Bounded(-max_speed, max_speed, (), dtype=torch.float32),
            params=params,
        )
        self.state_spec = self.observation_spec.clone()
        self.action_spec = Bounded(-max_torque, max_torque, (1,), dtype=torch.float32)
        self.reward_spec = Unbounded((1,), dtype=torch.float32)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if tensordict is None or tensordict.get("params", None) is None:
            batch_size = tensordict.batch_size if tensordict is not None else self.batch_size
            params = self.gen_params(batch_size=batch_size, device=self.device)["params"]
        else:
            batch_size = tensordict.batch_size
            params = tensordict.get("params")
        if kwargs.get("set_state") and tensordict is not None and "th" in tensordict:
            th = tensordict.get("th").clone()
            thdot = tensordict.get("thdot").clone()
        else:
            generator = self._generator
            th = (
                torch.rand(batch_size, generator=generator, device=self.device) * 2 - 1
            ) * self.DEFAULT_X
            thdot = (
                torch.rand(batch_size, generator=generator, device=self.device) * 2 - 1
            ) * self.DEFAULT_Y
        return TensorDict._new_unsafe(
            {
                "th": th,
                "thdot": thdot,
                "params": params,
                "done": torch.zeros((*batch_size, 1), dtype=torch.bool, device=self.device),
                "terminated": torch.zeros((*batch_size, 1), dtype=torch.bool, device=self.device),
            },
            batch_size=batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        th = tensordict.get("th")
        thdot = tensordict.get("thdot")
        params = tensordict.get("params")
        g = params.get("g")
        m = params.get("m")
        length = params.get("l")
        dt = params.get("dt")
        max_speed = params.get("max_speed")
        max_torque = params.get("max_torque")
        u = tensordict.get("action").squeeze(-1)
        u = torch.maximum(torch.minimum(u, max_torque), -max_torque)
        costs = _angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        new_thdot = thdot + (3 * g / (2 * length) * th.sin() + 3.0 / (m * length**2) * u) * dt
        new_thdot = torch.maximum(torch.minimum(new_thdot, max_speed), -max_speed)
        new_th = _angle_normalize(th + new_thdot * dt)
        reward = -costs.unsqueeze(-1)
        done = torch.zeros_like(reward, dtype=torch.bool)
        return TensorDict._new_unsafe(
            {
                "th": new_th,
                "thdot": new_thdot,
                "params": params,
                "reward": reward,
                "done": done,
                "terminated": done,
            },
            batch_size=tensordict.batch_size,
            device=self.device,
        )

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._generator.manual_seed(seed)
