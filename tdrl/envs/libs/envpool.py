"""MultiThreadedEnv: batched envs stepped by EnvPool's C++ thread pool (optional extra).

Written against EnvPool 1.2 (``envpool.make(task_id, env_type="gym", num_envs=N, seed=S)``;
gymnasium-style ``reset(env_id)`` / ``step(action, env_id)`` over a subset of the envs).
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import Categorical, Composite, Unbounded
from tdrl.envs._td_fast import all_true
from tdrl.envs.common import EnvBase
from tdrl.envs.libs._gym_spaces import make_space_codec
from tdrl.envs.libs.backends import BackendModule

__all__ = ["MultiThreadedEnv", "MultiThreadedEnvWrapper"]

_HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None


def _fix_lower_bounds(space: Any) -> Any:
    """``space`` with float lower bounds equal to the dtype's tiniest positive number made -inf.

    EnvPool 1.2 declares unbounded float observations (its DeepMind Control tasks) with a
    lower bound of ``numeric_limits<T>::min()``, the smallest *positive* number, where
    ``-inf`` is meant; taken literally, every negative observation would be out of its spec.
    """
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, dict):
        return type(space)({key: _fix_lower_bounds(sub) for key, sub in spaces.items()})
    low = getattr(space, "low", None)
    dtype = getattr(space, "dtype", None)
    if low is None or dtype is None or not np.issubdtype(dtype, np.floating):
        return space
    tiny = np.finfo(dtype).tiny
    if not np.any(low == tiny):
        return space
    low = np.where(low == tiny, -np.inf, low)
    return type(space)(low=low, high=space.high, shape=space.shape, dtype=dtype)


def _num_envs(env: Any) -> int:
    config = getattr(getattr(env, "spec", None), "config", None)
    count = getattr(config, "num_envs", None)
    if count is None:
        count = getattr(env, "num_envs", None)
    if count is None:
        raise TypeError(
            f"MultiThreadedEnvWrapper env: expected an envpool env with spec.config.num_envs, "
            f"got {type(env).__name__}"
        )
    return int(count)


class MultiThreadedEnvWrapper(EnvBase):
    """Wraps an EnvPool env (``envpool.make(..., env_type="gym")``) as a batched tdrl env.

    The batch size is ``[num_envs]``. ``"_reset"`` masks reset only the marked
    envs (EnvPool's ``env_id``); ``"_step"`` masks step only the marked ones.

    Args:
        env: the EnvPool env.
        categorical_action_encoding: discrete actions as integers instead of one-hot.
        device: the device of the data.

    Examples:
        >>> import gymnasium
        >>> class FakePool:  # the few members of an EnvPool env the wrapper uses
        ...     observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))
        ...     action_space = gymnasium.spaces.Discrete(2)
        ...     num_envs = 3
        ...     def reset(self, env_id=None):
        ...         return np.zeros((3 if env_id is None else len(env_id), 2), np.float32), {}
        ...     def step(self, action, env_id=None):
        ...         n = len(action)
        ...         return (np.ones((n, 2), np.float32), np.ones(n), np.zeros(n, bool),
        ...                 np.zeros(n, bool), {})
        >>> env = MultiThreadedEnvWrapper(FakePool(), categorical_action_encoding=True)
        >>> env.rollout(2)["next", "observation"].shape
        torch.Size([3, 2, 2])
    """

    def __init__(
        self,
        env: Any = None,
        *,
        categorical_action_encoding: bool = False,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if env is None:
            raise TypeError("MultiThreadedEnvWrapper needs an EnvPool env (env=...)")
        num_envs = _num_envs(env)
        super().__init__(device=device, batch_size=torch.Size([num_envs]), **kwargs)
        self._env = env
        self.num_workers = num_envs
        batch = (num_envs,)
        self._obs_codec = make_space_codec(
            _fix_lower_bounds(env.observation_space), batch, False, device
        )
        self._action_codec = make_space_codec(
            env.action_space, batch, categorical_action_encoding, device
        )
        obs_spec = self._obs_codec.spec
        if isinstance(obs_spec, Composite):
            self.full_observation_spec = obs_spec
        else:
            self.observation_spec = Composite(observation=obs_spec, shape=batch)
        self.action_spec = self._action_codec.spec
        self.reward_spec = Unbounded((num_envs, 1), device=device)
        flag = Categorical(2, (num_envs, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch
        )

    #: The envpool module (read on the class or an instance; imported when first read).
    lib = BackendModule("envpool")

    def _pad(self, raw: Any, ids: np.ndarray | None) -> Any:
        """Rows of the envs ``ids`` placed in a full-batch array (zeros elsewhere)."""
        if ids is None:
            return raw
        if isinstance(raw, dict):
            return {key: self._pad(value, ids) for key, value in raw.items()}
        raw = np.asarray(raw)
        full = np.zeros((self.batch_size[0], *raw.shape[1:]), dtype=raw.dtype)
        full[ids] = raw
        return full

    def _observations(self, raw: Any, ids: np.ndarray | None) -> dict:
        value = self._obs_codec.read(self._pad(raw, ids))
        if isinstance(value, TensorDictBase):
            return dict(value.items())
        return {"observation": value}

    def _full(
        self, rows: dict, ids: np.ndarray | None, template: TensorDictBase | None
    ) -> TensorDictBase:
        """Full-batch data; with ``ids``, other envs keep the template's values (or zeros)."""
        if ids is not None and template is not None:
            index = torch.as_tensor(ids, dtype=torch.long)
            for key, value in rows.items():
                previous = template.get(key, None)
                if isinstance(previous, torch.Tensor) and previous.shape == value.shape:
                    merged = previous.clone().to(value.dtype)
                    merged[index] = value[index]
                    rows[key] = merged
        return TensorDict(rows, batch_size=self.batch_size, device=self.device)

    @staticmethod
    def _ids(mask: torch.Tensor | None) -> np.ndarray | None:
        if mask is None:
            return None
        mask = mask.reshape(mask.shape[0], -1).any(-1)
        if all_true(mask):
            return None
        return mask.nonzero().squeeze(-1).cpu().numpy().astype(np.int32)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if self.is_closed:
            self._reopen()
        ids = self._ids(tensordict.get("_reset", None) if tensordict is not None else None)
        result = self._env.reset(ids) if ids is not None else self._env.reset()
        observation = result[0] if isinstance(result, tuple) else result
        rows = self._observations(observation, ids)
        false = torch.zeros((self.batch_size[0], 1), dtype=torch.bool)
        rows.update(done=false, terminated=false.clone(), truncated=false.clone())
        return self._full(rows, ids, tensordict)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        ids = self._ids(tensordict.get("_step", None))
        action = self._action_codec.write(tensordict.get("action"))
        if ids is None:
            result = self._env.step(action)
        else:
            result = self._env.step(np.asarray(action)[ids], ids)
        if len(result) == 5:
            observation, reward, terminated, truncated, _ = result
        else:
            observation, reward, done, info = result
            truncated = np.asarray(info.get("TimeLimit.truncated", np.zeros_like(done)))
            terminated = np.logical_and(done, np.logical_not(truncated))
        rows = self._observations(observation, ids)
        terminated = torch.as_tensor(self._pad(np.asarray(terminated, dtype=bool), ids)).reshape(
            -1, 1
        )
        truncated = torch.as_tensor(self._pad(np.asarray(truncated, dtype=bool), ids)).reshape(
            -1, 1
        )
        rows.update(
            reward=torch.as_tensor(self._pad(np.asarray(reward, dtype=np.float32), ids)).reshape(
                -1, 1
            ),
            terminated=terminated,
            truncated=truncated,
            done=terminated | truncated,
        )
        return self._full(rows, ids, tensordict if ids is not None else None)

    def _set_seed(self, seed: int | None) -> None:
        # EnvPool seeds at construction; MultiThreadedEnv rebuilds the pool with the seed.
        if seed is None:
            return
        rebuild = getattr(self, "_rebuild", None)
        if rebuild is None:
            warnings.warn(
                "MultiThreadedEnvWrapper.set_seed: an EnvPool env is seeded when it is built "
                "(envpool.make(..., seed=...)); the wrapped pool keeps its seed",
                stacklevel=3,
            )
            return
        rebuild(seed)

    def _reopen(self) -> None:
        """Build a new pool after :meth:`close` (only envs built by name can)."""
        rebuild = getattr(self, "_rebuild", None)
        if rebuild is None:
            raise RuntimeError(
                "MultiThreadedEnvWrapper: the EnvPool env was closed and cannot be rebuilt; "
                "wrap a new one (MultiThreadedEnv rebuilds its pool on reset)"
            )
        rebuild(self._last_seed)
        self.is_closed = False

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the pool (a MultiThreadedEnv builds a new one at its next reset)."""
        close = getattr(self._env, "close", None)
        if close is not None:
            close()
        self.is_closed = True


class MultiThreadedEnv(MultiThreadedEnvWrapper):
    """Builds an EnvPool env (``envpool.make``) with ``num_workers`` envs and wraps it.

    Requires the optional ``envpool`` package.

    Args:
        num_workers: the number of envs.
        env_name: the EnvPool task id, e.g. ``"CartPole-v1"`` or ``"Pong-v5"``.
        create_env_kwargs: extra arguments of ``envpool.make``.
        categorical_action_encoding: discrete actions as integers instead of one-hot.
        device: the device of the data.

    Examples:
        >>> from tdrl.envs import MultiThreadedEnv
        >>> env = MultiThreadedEnv(4, "CartPole-v1")  # doctest: +SKIP
        >>> env.rollout(10).shape  # doctest: +SKIP
        torch.Size([4, 10])
    """

    def __init__(
        self,
        num_workers: int,
        env_name: str,
        *,
        create_env_kwargs: dict | None = None,
        categorical_action_encoding: bool = False,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if not _HAS_ENVPOOL:
            raise ImportError(
                "MultiThreadedEnv needs the optional 'envpool' package (pip install envpool)"
            )
        self.env_name = env_name.replace("ALE/", "")
        self.create_env_kwargs = dict(create_env_kwargs or {})
        self._last_seed: int | None = None
        env = self._make(num_workers, self.create_env_kwargs)
        super().__init__(
            env,
            categorical_action_encoding=categorical_action_encoding,
            device=device,
            **kwargs,
        )

    def _make(self, num_workers: int, kwargs: dict) -> Any:
        import envpool

        return envpool.make(self.env_name, env_type="gym", num_envs=num_workers, **kwargs)

    def _rebuild(self, seed: int | None) -> None:
        """Replace the pool by a new one seeded with ``seed`` (the default seed when None)."""
        if not self.is_closed:
            self._env.close()
        self._last_seed = seed
        kwargs = dict(self.create_env_kwargs)
        if seed is not None:
            kwargs["seed"] = int(seed) % 2**31
        self._env = self._make(self.num_workers, kwargs)


def _make_from_id(env_id: str, **kwargs: Any) -> MultiThreadedEnv:
    """``MultiThreadedEnv(2, env_id)`` for ``tdrl check-env --lib envpool``."""
    return MultiThreadedEnv(2, env_id, **kwargs)
