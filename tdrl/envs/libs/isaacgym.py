"""IsaacGymEnvs tasks as tdrl envs: :class:`IsaacGymWrapper` and :class:`IsaacGymEnv`.

Written against IsaacGymEnvs 1.5 (``isaacgymenvs.make(seed, task, num_envs, sim_device,
rl_device, graphics_device_id, headless)`` returns a ``VecTask``) on Isaac Gym Preview 4. A
``VecTask`` steps all its envs at once on the GPU: ``step(actions)`` returns
``(obs_dict, rewards, resets, extras)`` as torch tensors (``obs_dict["obs"]``, and
``obs_dict["states"]`` for asymmetric tasks; ``extras["time_outs"]`` marks time limits), and
``reset_idx(env_ids)`` resets some envs; resets draw from torch's generator. Isaac Gym must be imported before torch, so a
program using it starts with ``import isaacgym``; tdrl itself never imports it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.envs._td_fast import all_true
from tdrl.envs.common import EnvBase
from tdrl.envs.libs.backends import BackendModule

__all__ = ["IsaacGymEnv", "IsaacGymWrapper"]

_HAS_ISAACGYM = importlib.util.find_spec("isaacgym") is not None
MISSING_ISAACGYM = (
    "IsaacGymEnv needs Isaac Gym (from NVIDIA, imported before torch) and the "
    "'isaacgymenvs' package (pip install isaacgymenvs)"
)


class IsaacGymWrapper(EnvBase):
    """Wraps a built IsaacGymEnvs ``VecTask``: a batched env of batch size ``[num_envs]``.

    Entries: one per member of the task's observation dict (``"obs"``, and ``"states"`` for
    asymmetric actor-critic tasks), ``"action"`` bounded by the task's action space,
    ``"reward"`` and the done flags (``"truncated"`` from ``extras["time_outs"]``). The data
    stay on the task's RL device.

    The task resets finished envs itself during its next step and computes observations only
    in its steps: a reset calls ``reset_idx`` for the envs marked in ``"_reset"`` (all of them
    without a mask), and the observation entries it returns hold the task's last observation
    buffer until the next step. Resets draw from torch's generator, which :meth:`set_seed`
    seeds.

    Args:
        env: the ``VecTask``.

    Keyword Args:
        device: the device of the data (default: the task's ``rl_device``).

    Examples:
        >>> import isaacgym  # doctest: +SKIP
        >>> import isaacgymenvs  # doctest: +SKIP
        >>> task = isaacgymenvs.make(0, "Ant", 16, "cuda:0", "cuda:0", headless=True)  # doctest: +SKIP
        >>> IsaacGymWrapper(task).rollout(4)["next", "obs"].shape  # doctest: +SKIP
        torch.Size([16, 4, 60])
    """

    def __init__(self, env: Any = None, *, device: Any = None, spec_locked: bool = True) -> None:
        if env is None or not (hasattr(env, "num_envs") and hasattr(env, "reset_idx")):
            raise TypeError(
                f"IsaacGymWrapper env: expected an IsaacGymEnvs VecTask, got {type(env).__name__}"
            )
        num_envs = int(env.num_envs)
        if device is None:
            device = getattr(env, "rl_device", None) or getattr(env, "device", None)
        super().__init__(device=device, batch_size=[num_envs], spec_locked=spec_locked)
        self._env = env
        self._make_specs()

    def _make_specs(self) -> None:
        env = self._env
        batch = self.batch_size
        device = self.device
        observation = Composite(shape=batch, device=device)
        observation["obs"] = Unbounded(
            (*batch, *env.observation_space.shape), dtype=torch.float32, device=device
        )
        num_states = int(getattr(env, "num_states", 0) or 0)
        if num_states:
            observation["states"] = Unbounded(
                (*batch, num_states), dtype=torch.float32, device=device
            )
        self.observation_spec = observation
        space = env.action_space
        low = torch.tensor(np.broadcast_to(space.low, space.shape), dtype=torch.float32)
        high = torch.tensor(np.broadcast_to(space.high, space.shape), dtype=torch.float32)
        self.action_spec = Bounded(
            low.expand(*batch, *space.shape),
            high.expand(*batch, *space.shape),
            (*batch, *space.shape),
            dtype=torch.float32,
            device=device,
        )
        self.reward_spec = Unbounded((*batch, 1), dtype=torch.float32, device=device)
        flag = Categorical(2, (*batch, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch, device=device
        )

    #: The isaacgym module (read on the class or an instance; imported when first read).
    lib = BackendModule("isaacgym")

    def _observations(self, obs_dict: dict) -> dict[str, torch.Tensor]:
        device = self.device
        return {key: obs_dict[key].to(device) for key in self.observation_spec.keys()}

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        env = self._env
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        if mask is None or all_true(mask):
            ids = torch.arange(self.batch_size[0], device=env.device)
        else:
            ids = mask.reshape(self.batch_size).nonzero().squeeze(-1).to(env.device)
        env.reset_idx(ids)
        obs_dict = env.reset()
        source = self._observations(obs_dict)
        false = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        source.update(done=false, terminated=false.clone(), truncated=false.clone())
        return TensorDict(source, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self._env
        action = tensordict.get("action").to(getattr(env, "rl_device", self.device))
        obs_dict, reward, resets, extras = env.step(action)
        shape = (*self.batch_size, 1)
        done = resets.to(self.device).bool().reshape(shape)
        time_outs = (extras or {}).get("time_outs")
        if time_outs is None:
            truncated = torch.zeros_like(done)
        else:
            truncated = time_outs.to(self.device).bool().reshape(shape) & done
        source = self._observations(obs_dict)
        source.update(
            reward=reward.to(self.device, torch.float32).reshape(shape),
            done=done,
            terminated=done & ~truncated,
            truncated=truncated,
        )
        return TensorDict(source, batch_size=self.batch_size, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        """Seed torch's generators: IsaacGymEnvs tasks draw their resets from them."""
        if seed is not None:
            torch.manual_seed(int(seed))

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the task's viewer and simulation when it offers ``close``."""
        self.is_closed = True
        close = getattr(self._env, "close", None)
        if close is not None:
            close()


class IsaacGymEnv(IsaacGymWrapper):
    """Builds an IsaacGymEnvs task (``isaacgymenvs.make``) and wraps it.

    Args:
        task: the task name, e.g. ``"Ant"``.
        num_envs: the number of parallel envs (the batch size).

    Keyword Args:
        device: the simulation and RL device (default ``"cuda:0"``).
        headless: run without a viewer (default True).
        seed: the seed ``isaacgymenvs.make`` gives the task.
        **kwargs: passed to ``isaacgymenvs.make`` (e.g. ``graphics_device_id``, ``cfg``).

    Examples:
        >>> import isaacgym  # doctest: +SKIP
        >>> env = IsaacGymEnv(task="Ant", num_envs=2000, device="cuda:0")  # doctest: +SKIP
        >>> env.batch_size  # doctest: +SKIP
        torch.Size([2000])
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        *,
        device: Any = "cuda:0",
        headless: bool = True,
        seed: int = 0,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if not _HAS_ISAACGYM:
            raise ImportError(MISSING_ISAACGYM)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"IsaacGymEnv num_envs: expected a positive int, got {num_envs!r}")
        self.__dict__["task"] = task
        self.__dict__["_make_kwargs"] = dict(
            task=task,
            num_envs=num_envs,
            sim_device=str(device),
            rl_device=str(device),
            headless=headless,
            **kwargs,
        )
        import isaacgymenvs

        task_env = isaacgymenvs.make(seed=seed, **self._make_kwargs)
        super().__init__(task_env, device=device, spec_locked=spec_locked)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task={self.task!r}, batch_size={self.batch_size})"
