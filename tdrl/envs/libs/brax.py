"""Brax (JAX) envs as tdrl envs: :class:`BraxWrapper` and :class:`BraxEnv`, differentiable on demand.

Written against brax 0.14 (``env.reset(key) -> State``, ``env.step(state, action) -> State``,
``State(pipeline_state, obs, reward, done, metrics, info)``, actions in ``[-1, 1]``) on jax
0.10. The whole brax ``State`` lives in the data (``"state"``), so the env is stateless and
batch-unlocked, and every step of a batch is one vectorised (``jax.vmap``, ``jax.jit`` by
default) call. Arrays cross through DLPack (see :mod:`tdrl.envs.libs.jax_utils`). With
``requires_grad=True`` a step is a torch autograd function whose backward pass is brax's
vector-Jacobian product, so gradients flow from rewards and observations to actions and
earlier states.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.envs.common import EnvBase
from tdrl.envs.libs._workers import parallel_copies, pop_num_workers
from tdrl.envs.libs.backends import BackendModule
from tdrl.envs.libs.jax_utils import (
    PyTreeCodec,
    flatten_batch,
    jax_to_torch,
    maybe_jit,
    split_keys,
    torch_to_jax,
)

__all__ = ["BraxEnv", "BraxWrapper"]

_HAS_BRAX = importlib.util.find_spec("brax") is not None
MISSING_BRAX = "{name} needs the optional 'brax' package (pip install brax)"


class _DifferentiableStep(torch.autograd.Function):
    """``step(differentiable inputs, other inputs)`` with JAX's vjp as the backward pass.

    The step returns ``(float outputs, other outputs)``; only the float outputs carry
    gradients.
    """

    @staticmethod
    def forward(ctx: Any, step: Callable, n_diff: int, *inputs: torch.Tensor) -> tuple:
        import jax

        arrays = [torch_to_jax(tensor) for tensor in inputs]
        differentiable, others = arrays[:n_diff], arrays[n_diff:]
        outputs, vjp, aux = jax.vjp(lambda *diff: step(diff, others), *differentiable, has_aux=True)
        ctx.vjp = vjp
        ctx.n_others = len(others)
        ctx.shapes = [(tuple(out.shape), out.dtype) for out in outputs]
        floats = [jax_to_torch(out) for out in outputs]
        rest = [jax_to_torch(out) for out in aux]
        ctx.mark_non_differentiable(*rest)
        ctx.n_floats = len(floats)
        return (*floats, *rest)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
        import jax.numpy as jnp

        cotangents = tuple(
            jnp.zeros(shape, dtype) if grad is None else torch_to_jax(grad)
            for grad, (shape, dtype) in zip(grads[: ctx.n_floats], ctx.shapes)
        )
        input_grads = ctx.vjp(cotangents)
        return (None, None, *[jax_to_torch(grad) for grad in input_grads], *[None] * ctx.n_others)


class BraxWrapper(EnvBase):
    """Wraps a built brax env (``brax.envs.get_environment(...)``).

    Entries: ``"observation"`` (brax's ``state.obs``; a dict observation gives one
    ``("observation", key)`` entry per key), ``"action"`` (Bounded in
    ``[-1, 1]``), ``"reward"`` (float32, ``(1,)``), the done flags (``"truncated"`` comes from
    ``state.info["truncation"]`` when the env carries one, e.g. under brax's
    ``EpisodeWrapper``), and ``"state"``: every leaf of brax's ``State`` pytree.

    The env is batch-unlocked: a reset with a tensordict of batch size ``[16]`` starts 16
    episodes; resets draw fresh keys from the env's key, set by :meth:`set_seed`.

    Args:
        env: the brax env.

    Keyword Args:
        batch_size: the env's default batch size (the batch of a reset without input).
        requires_grad: make steps differentiable (see the module docstring).
        jit: compile the vectorised reset and step with ``jax.jit`` (default True).
        device: the device of the data.

    Examples:
        >>> from brax import envs  # doctest: +SKIP
        >>> env = BraxWrapper(envs.get_environment("fast"), batch_size=[3])  # doctest: +SKIP
        >>> env.rollout(2)["next", "observation"].shape  # doctest: +SKIP
        torch.Size([3, 2, 2])
    """

    batch_locked = False

    def __init__(
        self,
        env: Any = None,
        *,
        batch_size: Any = None,
        requires_grad: bool = False,
        jit: bool = True,
        device: Any = None,
        spec_locked: bool = True,
    ) -> None:
        if env is None or not (hasattr(env, "observation_size") and hasattr(env, "step")):
            raise TypeError(f"BraxWrapper env: expected a brax Env, got {type(env).__name__}")
        import jax

        super().__init__(device=device, batch_size=batch_size, spec_locked=spec_locked)
        self._env = env
        self.requires_grad = bool(requires_grad)
        self.jit = jit
        self._key = jax.random.PRNGKey(0)
        self._reset_fn = maybe_jit(jax.vmap(env.reset), jit)
        self._step_fn = maybe_jit(jax.vmap(env.step), jit)
        self._make_specs()

    def _make_specs(self) -> None:
        import jax

        state = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))
        codec = self._codec = PyTreeCodec(state)
        self._float_leaves = [dtype.is_floating_point for dtype in codec.dtypes]
        # an array observation is "observation"; a dict one gives ("observation", key) entries
        self._obs_entries = [
            (index, ("observation", *key[1:]) if len(key) > 1 else "observation")
            for index, key in enumerate(codec.keys)
            if key[0] == "obs"
        ]
        self._reward_index = codec.keys.index(("reward",))
        self._done_index = codec.keys.index(("done",))
        truncation = ("info", "truncation")
        self._truncation_index = codec.keys.index(truncation) if truncation in codec.keys else None
        batch = self.batch_size
        device = self.device
        state_spec = Composite(
            {
                key: Unbounded((*batch, *shape), dtype=dtype, device=device)
                for key, shape, dtype in zip(codec.keys, codec.shapes, codec.dtypes)
            },
            shape=batch,
            device=device,
        )
        observation_spec = Composite(state=state_spec, shape=batch, device=device)
        for index, key in self._obs_entries:
            observation_spec[key] = Unbounded(
                (*batch, *codec.shapes[index]), dtype=codec.dtypes[index], device=device
            )
        self.observation_spec = observation_spec
        # the state is also an input of the step (batched envs send their workers the inputs)
        self.state_spec = Composite(state=state_spec.clone(), shape=batch, device=device)
        self.action_spec = Bounded(
            -1.0, 1.0, (*batch, int(self._env.action_size)), dtype=torch.float32, device=device
        )
        self.reward_spec = Unbounded((*batch, 1), dtype=torch.float32, device=device)
        flag = Categorical(2, (*batch, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch, device=device
        )

    #: The brax module (read on the class or an instance; imported when first read).
    lib = BackendModule("brax")

    # ------------------------------------------------------------------ conversion
    def _output(self, leaves: list[torch.Tensor], batch: torch.Size) -> TensorDictBase:
        """The step data from the new state's leaves (torch tensors with a flat batch dim)."""
        device = self.device
        codec = self._codec
        tensors = [leaf.reshape((*batch, *shape)) for leaf, shape in zip(leaves, codec.shapes)]
        if device is not None:
            tensors = [tensor.to(device) for tensor in tensors]
        done = (tensors[self._done_index] != 0).reshape(*batch, 1)
        if self._truncation_index is not None:
            truncated = (tensors[self._truncation_index] != 0).reshape(*batch, 1) & done
        else:
            truncated = torch.zeros_like(done)
        source = {
            "state": codec.tensors_to_tensordict(tensors, batch, device),
            "reward": tensors[self._reward_index].reshape(*batch, 1),
            "done": done,
            "terminated": done & ~truncated,
            "truncated": truncated,
        }
        data = TensorDict(source, batch_size=batch, device=device)
        for index, key in self._obs_entries:
            data.set(key, tensors[index])
        return data

    # ------------------------------------------------------------------ env protocol
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        import jax

        batch = tensordict.batch_size if tensordict is not None else self.batch_size
        self._key, keys = split_keys(self._key, math.prod(batch))
        state = self._reset_fn(keys)
        leaves = [jax_to_torch(leaf) for leaf in jax.tree_util.tree_leaves(state)]
        data = self._output(leaves, batch)
        del data["reward"]
        return data

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        import jax

        batch = tensordict.batch_size
        ndim = len(batch)
        leaves = [flatten_batch(t, ndim) for t in self._codec.tensors_of(tensordict.get("state"))]
        action = flatten_batch(tensordict.get("action").to(torch.float32), ndim)
        if not self.requires_grad:
            state = self._codec.tensors_to_tree(leaves, 1)
            new_state = self._step_fn(state, torch_to_jax(action))
            outputs = [jax_to_torch(leaf) for leaf in jax.tree_util.tree_leaves(new_state)]
            return self._output(outputs, batch)
        return self._output(self._differentiable_step(leaves, action), batch)

    def _differentiable_step(self, leaves: list[torch.Tensor], action: torch.Tensor) -> list:
        """The new state's leaves, differentiable w.r.t. the action and the float leaves."""
        import jax

        floats = [leaf for leaf, is_float in zip(leaves, self._float_leaves) if is_float]
        others = [leaf for leaf, is_float in zip(leaves, self._float_leaves) if not is_float]
        float_mask = self._float_leaves
        treedef = self._codec.treedef
        step_fn = self._step_fn

        def step(differentiable: tuple, rest: list) -> tuple:
            action_array, *float_arrays = differentiable
            float_iter, rest_iter = iter(float_arrays), iter(rest)
            state = treedef.unflatten(
                [next(float_iter) if is_float else next(rest_iter) for is_float in float_mask]
            )
            new_leaves = jax.tree_util.tree_leaves(step_fn(state, action_array))
            new_floats = tuple(leaf for leaf, is_float in zip(new_leaves, float_mask) if is_float)
            new_rest = tuple(leaf for leaf, is_float in zip(new_leaves, float_mask) if not is_float)
            return new_floats, new_rest

        outputs = _DifferentiableStep.apply(step, 1 + len(floats), action, *floats, *others)
        float_out, rest_out = iter(outputs[: len(floats)]), iter(outputs[len(floats) :])
        return [next(float_out) if is_float else next(rest_out) for is_float in float_mask]

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        import jax

        self._key = jax.random.PRNGKey(int(seed) % 2**32)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={type(self._env).__name__}, batch_size={self.batch_size}, "
            f"requires_grad={self.requires_grad})"
        )


class _AvailableEnvs:
    """Class attribute: the names brax registers (empty without brax)."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        if not _HAS_BRAX:
            return []
        from brax import envs

        return sorted(getattr(envs, "_envs", {}))  # brax keeps its registry in this dict


class BraxEnv(BraxWrapper):
    """Builds a brax env by name (``brax.envs.get_environment``) and wraps it.

    With ``num_workers=N``, returns a started :class:`~tdrl.envs.ParallelEnv` of ``N``
    copies instead.

    Args:
        env_name: a registered name, e.g. ``"ant"`` or ``"fast"`` (see :attr:`available_envs`).

    Keyword Args:
        batch_size, requires_grad, jit, device: as in :class:`BraxWrapper`.
        num_workers: build this many copies in a ParallelEnv.
        **kwargs: passed to ``brax.envs.get_environment`` (e.g. ``backend="spring"``).

    Examples:
        >>> from tdrl.envs import BraxEnv
        >>> env = BraxEnv("fast", batch_size=[4], requires_grad=True)  # doctest: +SKIP
        >>> data = env.rollout(3)  # doctest: +SKIP
        >>> data["next", "reward"].sum().backward()  # doctest: +SKIP
    """

    available_envs = _AvailableEnvs()

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Build one env, or a ParallelEnv of copies with ``num_workers``."""
        num_workers = pop_num_workers(kwargs, cls.__name__)
        if num_workers is None:
            return super().__new__(cls)
        return parallel_copies(cls, num_workers, args, kwargs)

    def __init__(
        self,
        env_name: str,
        *,
        batch_size: Any = None,
        requires_grad: bool = False,
        jit: bool = True,
        device: Any = None,
        spec_locked: bool = True,
        num_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not _HAS_BRAX:
            raise ImportError(MISSING_BRAX.format(name="BraxEnv"))
        available = type(self).available_envs
        if env_name not in available:
            raise ValueError(f"BraxEnv env_name: expected one of {available}, got {env_name!r}")
        from brax import envs

        self.env_name = env_name
        super().__init__(
            envs.get_environment(env_name, **kwargs),
            batch_size=batch_size,
            requires_grad=requires_grad,
            jit=jit,
            device=device,
            spec_locked=spec_locked,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env_name={self.env_name!r}, batch_size={self.batch_size}, "
            f"requires_grad={self.requires_grad})"
        )
