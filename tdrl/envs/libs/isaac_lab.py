"""Isaac Lab envs as tdrl envs: :class:`IsaacLabWrapper`.

Written against Isaac Lab 2.x: tasks are gymnasium envs (``gymnasium.make("Isaac-Ant-v0",
cfg=env_cfg)``) whose unwrapped env (``ManagerBasedRLEnv`` or ``DirectRLEnv``) runs
``num_envs`` copies on ``device``, with ``single_observation_space`` (a Dict of observation
groups, ``"policy"`` first) and ``single_action_space``. ``reset()`` returns
``(observations, extras)``; ``step(actions)`` returns ``(observations, rewards, terminated,
truncated, extras)``, all torch tensors, and resets finished envs itself in the same step:
the observations it returns for them are the first of their next episode. Isaac Lab is
imported only when an env is built.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.envs.common import EnvBase
from tdrl.envs.libs.backends import BackendModule

__all__ = ["IsaacLabWrapper"]

_HAS_ISAACLAB = importlib.util.find_spec("isaaclab") is not None


def _box_spec(space: Any, batch: torch.Size, device: Any) -> Any:
    shape = tuple(space.shape)
    dtype = getattr(torch, np.dtype(space.dtype).name)
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float64), shape)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float64), shape)
    if np.isfinite(low).all() and np.isfinite(high).all():
        return Bounded(
            torch.tensor(low, dtype=dtype).expand(*batch, *shape),
            torch.tensor(high, dtype=dtype).expand(*batch, *shape),
            (*batch, *shape),
            dtype=dtype,
            device=device,
        )
    return Unbounded((*batch, *shape), dtype=dtype, device=device)


class IsaacLabWrapper(EnvBase):
    """Wraps an Isaac Lab env: a batched env of batch size ``[num_envs]`` on the env's device.

    Entries: one per observation group (``"policy"``, ``"critic"``, ...; with
    ``rename_policy=True`` the ``"policy"`` group is ``"observation"``), ``"action"``, a
    ``"reward"`` of shape ``(num_envs, 1)`` and the done flags.

    Isaac Lab resets finished envs inside ``step``, so the wrapper is an auto-resetting env
    (see :class:`~tdrl.envs.EnvBase`'s ``auto_reset``): the first observations of the next
    episodes are kept for the following reset, which then runs no simulation, and the
    observations of a finished episode's last step are replaced by NaN (Isaac Lab does not
    report them).

    Args:
        env: the Isaac Lab env (as returned by ``gymnasium.make``).

    Keyword Args:
        rename_policy: expose the ``"policy"`` group as ``"observation"``.
        device: the device of the data (default: the env's).

    Examples:
        >>> import gymnasium  # doctest: +SKIP
        >>> env = IsaacLabWrapper(gymnasium.make("Isaac-Ant-v0", cfg=cfg))  # doctest: +SKIP
        >>> env.rollout(3)["next", "policy"].shape  # doctest: +SKIP
        torch.Size([4096, 3, 60])
    """

    def __init__(
        self,
        env: Any = None,
        *,
        rename_policy: bool = False,
        device: Any = None,
        spec_locked: bool = True,
    ) -> None:
        unwrapped = getattr(env, "unwrapped", env)
        if env is None or not hasattr(unwrapped, "single_action_space"):
            raise TypeError(
                "IsaacLabWrapper env: expected an Isaac Lab env (with num_envs and "
                f"single_action_space), got {type(unwrapped).__name__}"
            )
        num_envs = int(unwrapped.num_envs)
        super().__init__(
            device=device if device is not None else getattr(unwrapped, "device", None),
            batch_size=[num_envs],
            spec_locked=spec_locked,
            auto_reset=True,
        )
        self._env = env
        self.rename_policy = rename_policy
        self._make_specs(unwrapped)

    def _key(self, group: str) -> str:
        return "observation" if self.rename_policy and group == "policy" else group

    def _make_specs(self, unwrapped: Any) -> None:
        batch = self.batch_size
        device = self.device
        spaces = getattr(unwrapped.single_observation_space, "spaces", None)
        if spaces is None:
            spaces = {"policy": unwrapped.single_observation_space}
        self._groups = list(spaces)
        self.observation_spec = Composite(
            {self._key(group): _box_spec(space, batch, device) for group, space in spaces.items()},
            shape=batch,
            device=device,
        )
        self.action_spec = _box_spec(unwrapped.single_action_space, batch, device)
        self.reward_spec = Unbounded((*batch, 1), dtype=torch.float32, device=device)
        flag = Categorical(2, (*batch, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch, device=device
        )

    #: The isaaclab module (read on the class or an instance; imported when first read).
    lib = BackendModule("isaaclab")

    def _observations(self, observations: Any) -> dict[str, torch.Tensor]:
        if not isinstance(observations, dict):
            observations = {"policy": observations}
        return {
            self._key(group): torch.as_tensor(observations[group], device=self.device)
            for group in self._groups
        }

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        observations, _ = self._env.reset(**kwargs)
        source = self._observations(observations)
        false = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        source.update(done=false, terminated=false.clone(), truncated=false.clone())
        return TensorDict(source, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        observations, reward, terminated, truncated, _ = self._env.step(tensordict.get("action"))
        shape = (*self.batch_size, 1)
        terminated = torch.as_tensor(terminated, device=self.device).bool().reshape(shape)
        truncated = torch.as_tensor(truncated, device=self.device).bool().reshape(shape)
        source = self._observations(observations)
        source.update(
            reward=torch.as_tensor(reward, device=self.device).float().reshape(shape),
            terminated=terminated,
            truncated=truncated,
            done=terminated | truncated,
        )
        return TensorDict(source, batch_size=self.batch_size, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._env.reset(seed=int(seed))

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the simulation."""
        self.is_closed = True
        self._env.close()


def _make_from_id(env_id: str, **kwargs: Any) -> IsaacLabWrapper:
    """``IsaacLabWrapper(gymnasium.make(env_id))`` for ``tdrl check-env --lib isaaclab``."""
    import gymnasium

    return IsaacLabWrapper(gymnasium.make(env_id, **kwargs))
