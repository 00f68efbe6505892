"""Multi-objective gymnasium envs (MO-Gymnasium) as tdrl envs: :class:`MOGymWrapper`, :class:`MOGymEnv`.

Written against mo-gymnasium 1.3: its envs follow gymnasium's API but ``step`` returns a
numpy vector of rewards, one per objective, described by the env's ``reward_space`` (a Box).
Vector envs are ``mo_gymnasium.wrappers.vector.MOSyncVectorEnv``. mo-gymnasium is imported only
when an env is built. It depends on ``pygame`` (which replaces ``pygame-ce`` when both are
installed; rendering works with either).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch

from tdrl.data.specs import Unbounded
from tdrl.envs.libs._gym_plan import GymStepPlan
from tdrl.envs.libs.gym import GymWrapper

__all__ = ["MOGymEnv", "MOGymWrapper"]

_HAS_MO_GYM = importlib.util.find_spec("mo_gymnasium") is not None
MISSING_MO_GYM = "{name} needs the optional 'mo-gymnasium' package (pip install mo-gymnasium)"


def _reward_space(env: Any) -> Any:
    space = getattr(env, "reward_space", None)
    if space is None:
        space = getattr(getattr(env, "unwrapped", env), "reward_space", None)
    if space is None or not hasattr(space, "shape"):
        raise TypeError(
            f"MOGymWrapper env: expected a multi-objective env with a reward_space, got "
            f"{type(getattr(env, 'unwrapped', env)).__name__}"
        )
    return space


class MOGymWrapper(GymWrapper):
    """Wraps a built MO-Gymnasium env: a :class:`~tdrl.envs.GymWrapper` with vector rewards.

    ``"reward"`` has one entry per objective: its spec is ``Unbounded((*batch, n_objectives))``
    with the dtype of the env's ``reward_space``. Every other behaviour (specs of the
    observations and actions, pixels, frame skip summing the reward vectors, vector envs) is
    :class:`~tdrl.envs.GymWrapper`'s.

    Args:
        env: the MO-Gymnasium env (``mo_gymnasium.make(...)``) or an ``MOSyncVectorEnv``.
        categorical_action_encoding: discrete actions as integers instead of one-hot.
        **kwargs: the keyword arguments of :class:`~tdrl.envs.GymWrapper`.

    Examples:
        >>> import mo_gymnasium
        >>> env = MOGymWrapper(mo_gymnasium.make("minecart-v0"))
        >>> env.rollout(3)["next", "reward"].shape
        torch.Size([3, 3])
    """

    def _make_specs(self, env: Any) -> None:
        super()._make_specs(env)
        space = _reward_space(env)
        shape = tuple(int(n) for n in space.shape)
        if len(shape) != 1:
            raise ValueError(
                f"MOGymWrapper reward_space: expected a 1-d Box (one entry per objective), got "
                f"shape {shape}"
            )
        dtype = getattr(torch, np.dtype(space.dtype).name)
        self.__dict__["_reward_shape"] = (*self.batch_size, *shape)
        self.__dict__["_reward_numpy_dtype"] = np.dtype(space.dtype)
        self.reward_spec = Unbounded(self._reward_shape, dtype=dtype, device=self.device)

    def _make_step_plan(self) -> GymStepPlan:
        return _VectorRewardPlan(self)


class _VectorRewardPlan(GymStepPlan):
    """The gym step plan with one reward entry per objective."""

    def simulate(self, action: Any) -> tuple:
        """One (frame-skipped) simulator step; the reward vector is checked and copied."""
        observation, reward, terminated, truncated, info = super().simulate(action)
        owner = self._owner
        reward = np.array(reward, dtype=owner._reward_numpy_dtype, copy=True)
        if reward.size != int(np.prod(owner._reward_shape)):
            raise ValueError(
                f"MOGymWrapper reward: expected {owner._reward_shape} values (reward_space), got "
                f"shape {reward.shape}"
            )
        return observation, reward, terminated, truncated, info

    def reward(self, reward: Any) -> torch.Tensor:
        """The reward vector as a tensor of the reward spec's shape."""
        return torch.from_numpy(np.asarray(reward).reshape(self._owner._reward_shape))


class MOGymEnv(MOGymWrapper):
    """Builds an MO-Gymnasium env by id (``mo_gymnasium.make``) and wraps it.

    With ``num_envs=N`` the N copies run in an ``MOSyncVectorEnv`` and the env comes back
    inside a ``TransformedEnv`` (see :class:`~tdrl.envs.GymEnv`), with rewards of shape
    ``(N, n_objectives)``.

    Args:
        env_name: the registered id, e.g. ``"minecart-v0"``.
        categorical_action_encoding: discrete actions as integers instead of one-hot.

    Keyword Args:
        num_envs: build a vector env of this many copies (0: a single env).
        from_pixels, pixels_only, frame_skip, device, ...: as in :class:`~tdrl.envs.GymWrapper`.
        **kwargs: passed to ``mo_gymnasium.make`` (``render_mode="rgb_array"`` is set with
            ``from_pixels``).

    Examples:
        >>> from tdrl.envs import MOGymEnv
        >>> env = MOGymEnv("mo-mountaincarcontinuous-v0")
        >>> env.reward_spec.shape
        torch.Size([2])
    """

    @classmethod
    def _wants_vector(cls, args: tuple, kwargs: dict) -> bool:
        return bool(kwargs.get("num_envs", 0))

    def __init__(
        self,
        env_name: str,
        categorical_action_encoding: bool = False,
        *,
        num_envs: int = 0,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if not _HAS_MO_GYM:
            raise ImportError(MISSING_MO_GYM.format(name="MOGymEnv"))
        if not isinstance(env_name, str):
            raise TypeError(f"MOGymEnv env_name: expected a str id, got {type(env_name).__name__}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 0:
            raise ValueError(f"MOGymEnv num_envs: expected an int >= 0, got {num_envs!r}")
        import mo_gymnasium

        if from_pixels:
            kwargs.setdefault("render_mode", "rgb_array")
        if num_envs:
            from mo_gymnasium.wrappers.vector import MOSyncVectorEnv

            env = MOSyncVectorEnv(
                [lambda: mo_gymnasium.make(env_name, **kwargs) for _ in range(num_envs)]
            )
        else:
            env = mo_gymnasium.make(env_name, **kwargs)
        self.__dict__["env_name"] = env_name
        super().__init__(
            env,
            categorical_action_encoding,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
            spec_locked=spec_locked,
        )
