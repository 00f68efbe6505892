"""Jumanji (JAX) envs as tdrl envs: :class:`JumanjiWrapper` and :class:`JumanjiEnv`.

Written against jumanji 1.1 (``env.reset(key) -> (state, timestep)``,
``env.step(state, action) -> (state, timestep)``, ``jumanji.specs`` for observations and
actions) on jax 0.10. The simulator state lives in the data (``"state"``), so the env is
stateless and batch-unlocked: any batch of states steps in one vectorised (``jax.vmap``, and
``jax.jit`` by default) call. Arrays cross through DLPack (see
:mod:`tdrl.envs.libs.jax_utils`). jax and jumanji are imported only when an env is built.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import (
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)
from tdrl.envs.common import EnvBase
from tdrl.envs.libs.backends import BackendModule
from tdrl.envs.libs.jax_utils import (
    PyTreeCodec,
    flatten_batch,
    jax_to_torch,
    maybe_jit,
    split_keys,
    torch_to_jax,
)

__all__ = ["JumanjiEnv", "JumanjiWrapper", "jumanji_spec_to_spec"]

_HAS_JUMANJI = importlib.util.find_spec("jumanji") is not None
MISSING_JUMANJI = "{name} needs the optional 'jumanji' package (pip install jumanji)"
_LAST = 2  # dm_env / jumanji StepType.LAST


def _torch_dtype(dtype: Any) -> torch.dtype:
    return getattr(torch, np.dtype(dtype).name) if np.dtype(dtype) != np.bool_ else torch.bool


def _fields(value: Any) -> list[str]:
    if hasattr(value, "_fields"):
        return list(value._fields)
    if hasattr(value, "__dataclass_fields__"):
        return list(value.__dataclass_fields__)
    raise TypeError(f"jumanji spec: cannot list the fields of {type(value).__name__}")


def jumanji_spec_to_spec(spec: Any, categorical_action_encoding: bool = True) -> Any:
    """Convert a ``jumanji.specs`` spec (unbatched) to a tdrl spec.

    ``DiscreteArray`` and ``MultiDiscreteArray`` give integer (or one-hot) specs,
    ``BoundedArray`` gives :class:`Bounded` (a boolean one gives ``Categorical(2)``),
    ``Array`` gives :class:`Unbounded`, and a structured ``Spec`` gives a :class:`Composite`
    with one entry per field.
    """
    from jumanji import specs

    if isinstance(spec, specs.DiscreteArray):
        n = int(spec.num_values)
        if categorical_action_encoding:
            return Categorical(n, tuple(spec.shape), dtype=_torch_dtype(spec.dtype))
        return OneHot(n, (*spec.shape, n))
    if isinstance(spec, specs.MultiDiscreteArray):
        nvec = [int(n) for n in np.asarray(spec.num_values).reshape(-1)]
        if categorical_action_encoding:
            return MultiCategorical(nvec, tuple(spec.shape), dtype=_torch_dtype(spec.dtype))
        return MultiOneHot(nvec)
    if isinstance(spec, specs.BoundedArray):
        dtype = _torch_dtype(spec.dtype)
        shape = tuple(spec.shape)
        if dtype == torch.bool:
            return Categorical(2, shape, dtype=torch.bool)
        low = torch.tensor(np.broadcast_to(np.asarray(spec.minimum), shape), dtype=dtype)
        high = torch.tensor(np.broadcast_to(np.asarray(spec.maximum), shape), dtype=dtype)
        return Bounded(low, high, shape, dtype=dtype)
    if isinstance(spec, specs.Array):
        return Unbounded(tuple(spec.shape), dtype=_torch_dtype(spec.dtype))
    if isinstance(spec, specs.Spec):
        names = _fields(spec.generate_value())
        return Composite(
            {
                name: jumanji_spec_to_spec(getattr(spec, name), categorical_action_encoding)
                for name in names
            }
        )
    raise TypeError(f"jumanji spec: unsupported {type(spec).__name__}")


def _batched(spec: Any, batch_size: torch.Size) -> Any:
    return spec.expand(*batch_size, *spec.shape) if batch_size else spec


class JumanjiWrapper(EnvBase):
    """Wraps a built Jumanji env.

    The observation entries are the fields of jumanji's observation (an ``"observation"``
    entry when it is a single array), ``"action"`` follows the action spec (integers by
    default), ``"reward"`` is float32 with a trailing dim of 1 for scalar rewards, and
    ``"state"`` holds the simulator state (one entry per leaf of its pytree). An episode ends
    ``terminated`` when its discount is 0 and ``truncated`` otherwise.

    The env is batch-unlocked: a reset with a tensordict of batch size ``[16]`` starts 16
    episodes, and a step advances whatever batch of states it receives. Resets draw fresh
    keys from :attr:`key`, which :meth:`set_seed` sets.

    Args:
        env: the jumanji env (``jumanji.make(...)``).
        categorical_action_encoding: discrete actions as integers (default) or one-hot.

    Keyword Args:
        batch_size: the env's default batch size (the batch of a reset without input).
        jit: compile the vectorised reset and step with ``jax.jit`` (default True).
        device: the device of the data.

    Examples:
        >>> import jumanji  # doctest: +SKIP
        >>> env = JumanjiWrapper(jumanji.make("Snake-v1"), batch_size=[4])  # doctest: +SKIP
        >>> env.rollout(3)["next", "grid"].shape  # doctest: +SKIP
        torch.Size([4, 3, 12, 12, 5])
    """

    batch_locked = False

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = True,
        *,
        batch_size: Any = None,
        jit: bool = True,
        device: Any = None,
        spec_locked: bool = True,
    ) -> None:
        if env is None or not (hasattr(env, "reset") and hasattr(env, "observation_spec")):
            raise TypeError(
                f"JumanjiWrapper env: expected a jumanji Environment, got {type(env).__name__}"
            )
        import jax

        super().__init__(device=device, batch_size=batch_size, spec_locked=spec_locked)
        self._env = env
        self.jit = jit
        self.categorical_action_encoding = categorical_action_encoding
        self.key = jax.random.PRNGKey(0)
        self._reset_fn = maybe_jit(jax.vmap(env.reset), jit)
        self._step_fn = maybe_jit(jax.vmap(env.step), jit)
        self._make_specs()

    # ------------------------------------------------------------------ construction
    def _make_specs(self) -> None:
        import jax

        state, timestep = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))
        self._state_codec = PyTreeCodec(state)
        self._obs_codec = PyTreeCodec(timestep.observation)
        self._single_observation = len(self._obs_codec.keys) == 1 and not _is_structured(
            timestep.observation
        )
        if self._single_observation:
            self._obs_codec.keys = [("observation",)]
        declared = jumanji_spec_to_spec(self._env.observation_spec, True)
        observation = {}
        for path, shape, dtype in zip(
            self._obs_codec.keys, self._obs_codec.shapes, self._obs_codec.dtypes
        ):
            key = path[0] if len(path) == 1 else path
            spec = declared if self._single_observation else declared.get(key, None)
            if (
                spec is None
                or isinstance(spec, (Composite, Categorical, MultiCategorical))
                and spec.dtype != torch.bool
                or tuple(spec.shape) != shape
            ):
                # integer observations keep their dtype but not the declared range, which
                # some jumanji envs leave (e.g. -1 for "none yet")
                spec = Unbounded(shape, dtype=dtype)
            observation[key] = spec.to(dtype) if spec.dtype != dtype else spec
        observation_spec = Composite()
        for key, spec in observation.items():
            observation_spec[key] = spec
        observation_spec["state"] = Composite(
            {
                key: Unbounded(shape, dtype=dtype)
                for key, shape, dtype in zip(
                    self._state_codec.keys, self._state_codec.shapes, self._state_codec.dtypes
                )
            }
        )
        batch = self.batch_size
        device = self.device
        self.observation_spec = _batched(observation_spec, batch).to(device or "cpu")
        # the state is also an input of the step (batched envs send their workers the inputs)
        self.state_spec = Composite(
            state=self.observation_spec["state"].clone(), shape=batch, device=device
        )
        action = jumanji_spec_to_spec(self._env.action_spec, self.categorical_action_encoding)
        self.action_spec = _batched(action, batch).to(device or "cpu")
        self._action_dtype = np.dtype(self._env.action_spec.dtype)
        reward_shape = tuple(self._env.reward_spec.shape) or (1,)
        self._reward_shape = reward_shape
        self.reward_spec = Unbounded((*batch, *reward_shape), dtype=torch.float32, device=device)
        flag = Categorical(2, (*batch, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch, device=device
        )

    #: The jumanji module (read on the class or an instance; imported when first read).
    lib = BackendModule("jumanji")

    # ------------------------------------------------------------------ conversion
    def read_action(self, action: torch.Tensor) -> torch.Tensor:
        """The simulator's action (integer indices) from the action entry."""
        if not self.categorical_action_encoding:
            action = self.action_spec.to_categorical(action)
        return action.to(getattr(torch, self._action_dtype.name))

    def _output(self, state: Any, timestep: Any, batch: torch.Size) -> TensorDictBase:
        device = self.device
        leaves = self._obs_codec.leaves_to_tensors(_leaves(timestep.observation), batch, device)
        source: dict[str, Any] = {}
        for key, tensor in zip(self._obs_codec.keys, leaves):
            source[key[0] if len(key) == 1 else key] = tensor
        source["state"] = self._state_codec.to_tensordict(state, batch, device)
        last = jax_to_torch(timestep.step_type, device).reshape(*batch, 1) == _LAST
        discount = jax_to_torch(timestep.discount, device).reshape(*batch, -1)[..., :1]
        terminated = last & (discount == 0)
        source["reward"] = (
            jax_to_torch(timestep.reward, device)
            .to(torch.float32)
            .reshape(*batch, *self._reward_shape)
        )
        source["terminated"] = terminated
        source["truncated"] = last & ~terminated
        source["done"] = last
        data = TensorDict({}, batch_size=batch, device=device)
        for key, value in source.items():
            data.set(key, value)
        return data

    # ------------------------------------------------------------------ env protocol
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        batch = tensordict.batch_size if tensordict is not None else self.batch_size
        self.key, keys = split_keys(self.key, math.prod(batch))
        state, timestep = self._reset_fn(keys)
        data = self._output(state, timestep, batch)
        del data["reward"]
        return data

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        state = self._state_codec.to_tree(tensordict.get("state"), len(batch))
        action = flatten_batch(self.read_action(tensordict.get("action")), len(batch))
        state, timestep = self._step_fn(state, torch_to_jax(action))
        return self._output(state, timestep, batch)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        import jax

        self.key = jax.random.PRNGKey(int(seed) % 2**32)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={type(self._env).__name__}, batch_size={self.batch_size})"
        )


def _is_structured(value: Any) -> bool:
    return (
        hasattr(value, "_fields")
        or hasattr(value, "__dataclass_fields__")
        or isinstance(value, dict)
    )


def _leaves(tree: Any) -> list:
    import jax

    return jax.tree_util.tree_leaves(tree)


class _AvailableEnvs:
    """Class attribute: the registered jumanji env ids, sorted (empty without jumanji)."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        if not _HAS_JUMANJI:
            return []
        import jumanji

        return sorted(jumanji.registered_environments())


class JumanjiEnv(JumanjiWrapper):
    """Builds a registered Jumanji env (``jumanji.make(env_name)``) and wraps it.

    Args:
        env_name: a registered id, e.g. ``"Snake-v1"`` (see :attr:`available_envs`).
        categorical_action_encoding: discrete actions as integers (default) or one-hot.

    Keyword Args:
        batch_size, jit, device: as in :class:`JumanjiWrapper`.
        **kwargs: passed to ``jumanji.make``.

    Examples:
        >>> from tdrl.envs import JumanjiEnv
        >>> env = JumanjiEnv("Snake-v1")  # doctest: +SKIP
        >>> env.reset(TensorDict(batch_size=[8]))["grid"].shape  # doctest: +SKIP
        torch.Size([8, 12, 12, 5])
    """

    available_envs = _AvailableEnvs()

    def __init__(
        self,
        env_name: str,
        categorical_action_encoding: bool = True,
        *,
        batch_size: Any = None,
        jit: bool = True,
        device: Any = None,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if not _HAS_JUMANJI:
            raise ImportError(MISSING_JUMANJI.format(name="JumanjiEnv"))
        available = type(self).available_envs
        if env_name not in available:
            raise ValueError(f"JumanjiEnv env_name: expected one of {available}, got {env_name!r}")
        import jumanji

        self.env_name = env_name
        super().__init__(
            jumanji.make(env_name, **kwargs),
            categorical_action_encoding,
            batch_size=batch_size,
            jit=jit,
            device=device,
            spec_locked=spec_locked,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env_name={self.env_name!r}, batch_size={self.batch_size})"
