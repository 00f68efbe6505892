"""Transforms that change the shape or the batch size of entries."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.transforms.transform import (
    NestedKey,
    ObservationTransform,
    Transform,
    map_input_specs,
    map_output_specs,
)

__all__ = [
    "BatchSizeTransform",
    "FlattenObservation",
    "PermuteTransform",
    "SqueezeTransform",
    "UnsqueezeTransform",
]

IMAGE_KEYS = ["pixels"]


class _ShapeTransform(ObservationTransform):
    """Shared spec plumbing of the transforms that change the shape of entries."""

    def _transform_spec(self, spec: Any) -> Any:
        raise NotImplementedError

    def _inv_transform_spec(self, spec: Any) -> Any:
        raise NotImplementedError

    def transform_output_spec(self, output_spec: Any) -> Any:
        output_spec = Transform.transform_output_spec(self, output_spec)
        return map_output_specs(
            self, output_spec, self.in_keys, self.out_keys, self._transform_spec
        )

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        return observation_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        input_spec = super().transform_input_spec(input_spec)
        return map_input_specs(
            self, input_spec, self.in_keys_inv, self.out_keys_inv, self._inv_transform_spec
        )


def _zero_shape(spec: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Size:
    return fn(torch.zeros(tuple(max(d, 1) for d in spec.shape), device="meta")).shape


def _reshaped(spec: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A copy of ``spec`` whose shape (and bounds) went through the tensor map ``fn``."""
    shape = spec.shape
    new_shape = _zero_shape(spec, fn)

    def apply(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.ndim < len(shape):
            return tensor
        return fn(tensor.expand(torch.Size((*shape, *tensor.shape[len(shape) :]))))

    return spec._with_shape(new_shape, apply)


class FlattenObservation(_ShapeTransform):
    """Flattens the dims ``first_dim`` to ``last_dim`` of entries into one.

    Args:
        first_dim: the first dim to flatten (negative: counted from the end).
        last_dim: the last dim to flatten (negative: counted from the end).
        in_keys: the entries to flatten (default ``["pixels"]``).
        out_keys: where to write the results (default: in place).
        allow_positive_dim: accept dims counted from the start of the tensor.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import FlattenObservation
        >>> t = FlattenObservation(-3, -1, in_keys=["pixels"])
        >>> t(TensorDict({"pixels": torch.zeros(5, 3, 4, 4)}, [5]))["pixels"].shape
        torch.Size([5, 48])
    """

    def __init__(
        self,
        first_dim: int,
        last_dim: int,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ) -> None:
        if not allow_positive_dim and (first_dim >= 0 or last_dim >= 0):
            raise ValueError(
                "FlattenObservation: expected negative first_dim and last_dim (counted from "
                f"the end), got {first_dim} and {last_dim}; pass allow_positive_dim=True "
                "to count from the start"
            )
        super().__init__(in_keys=IMAGE_KEYS if in_keys is None else in_keys, out_keys=out_keys)
        self.first_dim = first_dim
        self.last_dim = last_dim

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.flatten(self.first_dim, self.last_dim)

    def _transform_spec(self, spec: Any) -> Any:
        return _reshaped(spec, self._apply_transform)

    def _inv_transform_spec(self, spec: Any) -> Any:
        return spec

    def __repr__(self) -> str:
        return (
            f"FlattenObservation(first_dim={self.first_dim}, last_dim={self.last_dim}, "
            f"in_keys={self.in_keys}, out_keys={self.out_keys})"
        )


class UnsqueezeTransform(_ShapeTransform):
    """Inserts a singleton dim in entries (and removes it on the inverse path).

    Dims index the whole entry, env batch dims included, as ``torch.unsqueeze`` does:
    negative values count from the end, non-negative ones (with
    ``allow_positive_dim=True``) from the first dim. The inverse path removes the dim
    only where it has size 1 (as ``torch.squeeze(dim)`` does).

    Args:
        dim: where to insert the dim.
        in_keys: output entries to unsqueeze.
        out_keys: where to write the results (default: in place).
        in_keys_inv: input entries the base env expects without the dim.
        out_keys_inv: their outside names (default: ``in_keys_inv``).

    Keyword Args:
        allow_positive_dim: accept a non-negative ``dim``.

    Examples:
        >>> from tdrl.envs import GymEnv, TransformedEnv, UnsqueezeTransform, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), UnsqueezeTransform(-2, in_keys=["observation"]))
        >>> check_env_specs(env)
        >>> env.reset()["observation"].shape
        torch.Size([1, 3])
    """

    _inverse_op = False

    def __init__(
        self,
        dim: int | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        allow_positive_dim: bool = False,
    ) -> None:
        if dim is None:
            raise TypeError(f"{type(self).__name__}: the dim argument is required")
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"{type(self).__name__} dim: expected an int, got {dim!r}")
        if dim >= 0 and not allow_positive_dim:
            raise ValueError(
                f"{type(self).__name__} dim: expected a negative dim (counted from the end), "
                f"got {dim}; pass allow_positive_dim=True to count from the first dim"
            )
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dim = dim
        self.allow_positive_dim = allow_positive_dim

    def _unsqueeze(self, value: torch.Tensor) -> torch.Tensor:
        return value.unsqueeze(self.dim)

    def _squeeze(self, value: torch.Tensor) -> torch.Tensor:
        return value.squeeze(self.dim)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self._inverse_op:
            return self._squeeze(value)
        return self._unsqueeze(value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self._inverse_op:
            return self._unsqueeze(value)
        return self._squeeze(value)

    def _transform_spec(self, spec: Any) -> Any:
        return _reshaped(spec, self._apply_transform)

    # the outside spec of an input entry is the inner one seen through the forward op
    _inv_transform_spec = _transform_spec

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dim={self.dim}, in_keys={self.in_keys}, "
            f"out_keys={self.out_keys}, in_keys_inv={self.in_keys_inv}, "
            f"out_keys_inv={self.out_keys_inv})"
        )


class SqueezeTransform(UnsqueezeTransform):
    """Removes a singleton dim from entries (and inserts it back on the inverse path).

    Takes the same arguments as :class:`UnsqueezeTransform`; dims index the whole
    entry. Like ``torch.squeeze(dim)``, an entry whose ``dim`` is not of size 1 is
    left as it is.

    Examples:
        >>> from tdrl.envs import GymEnv, SqueezeTransform, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(
        ...     GymEnv("Pendulum-v1"), SqueezeTransform(-1, in_keys_inv=["action"]))
        >>> env.action_spec.shape
        torch.Size([])
        >>> check_env_specs(env)
    """

    _inverse_op = True


class PermuteTransform(_ShapeTransform):
    """Permutes the trailing dims of entries (the inverse permutation on the inverse path).

    Args:
        dims: the new order of the last ``len(dims)`` dims, as negative indices
            (e.g. ``[-1, -3, -2]`` moves channels first for ``(H, W, C)`` images).
        in_keys: output entries to permute.
        out_keys: where to write the results (default: in place).
        in_keys_inv: input entries to permute back before the base env reads them.
        out_keys_inv: their outside names (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import PermuteTransform
        >>> t = PermuteTransform([-1, -3, -2], in_keys=["pixels"])
        >>> t(TensorDict({"pixels": torch.zeros(8, 6, 3)}, []))["pixels"].shape
        torch.Size([3, 8, 6])
    """

    def __init__(
        self,
        dims: Sequence[int],
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ) -> None:
        dims = [int(d) for d in dims]
        if sorted(dims) != list(range(-len(dims), 0)):
            raise ValueError(
                "PermuteTransform dims: Only tailing dims with negative indices can be permuted: "
                f"expected a permutation of {list(range(-len(dims), 0))}, got {dims}"
            )
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dims = dims
        inverse = [0] * len(dims)
        for position, source in enumerate(dims):
            inverse[source + len(dims)] = position - len(dims)
        self._inverse_dims = inverse

    @staticmethod
    def _permute(value: torch.Tensor, dims: list) -> torch.Tensor:
        lead = list(range(value.ndim - len(dims)))
        return value.permute(*lead, *[d + value.ndim for d in dims])

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self.dims)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self._inverse_dims)

    def _transform_spec(self, spec: Any) -> Any:
        return _reshaped(spec, self._apply_transform)

    # the outside spec of an input entry is the inner one seen through the forward op
    _inv_transform_spec = _transform_spec

    def __repr__(self) -> str:
        return f"PermuteTransform(dims={self.dims}, in_keys={self.in_keys})"


class BatchSizeTransform(Transform):
    """Changes the batch size of an env.

    Either give the new ``batch_size`` (for envs that accept any batch, such as
    stateless ones: resets then produce data of that batch size), or a
    ``reshape_fn`` applied to every output (its inverse is applied to the inputs).

    Keyword Args:
        batch_size: the new batch size.
        reshape_fn: a function reshaping a tensordict (e.g. ``lambda td: td.reshape(-1)``).
        reset_func: builds the reset output from ``(tensordict, tensordict_reset)``.
        env_kwarg: pass the env to ``reset_func`` as ``env=``.

    Examples:
        >>> from tdrl.envs import BatchSizeTransform, PendulumEnv, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(PendulumEnv(), BatchSizeTransform(batch_size=[3]))
        >>> env.batch_size
        torch.Size([3])
        >>> env.rollout(4).batch_size
        torch.Size([3, 4])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        *,
        batch_size: Sequence[int] | torch.Size | None = None,
        reshape_fn: Callable[[TensorDictBase], TensorDictBase] | None = None,
        reset_func: Callable[..., TensorDictBase] | None = None,
        env_kwarg: bool = False,
    ) -> None:
        super().__init__()
        if reshape_fn is not None and (batch_size is not None or reset_func is not None):
            raise ValueError(
                "BatchSizeTransform: reshape_fn cannot be combined with batch_size or reset_func"
            )
        if batch_size is None and reshape_fn is None and reset_func is None:
            raise ValueError(
                "BatchSizeTransform: expected one of batch_size, reshape_fn or reset_func, got none"
            )
        self.batch_size = None if batch_size is None else torch.Size(batch_size)
        self.reshape_fn = reshape_fn
        self.reset_func = reset_func
        self.env_kwarg = env_kwarg
        self._base_batch_size: torch.Size | None = None

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        """The new batch size."""
        self._base_batch_size = batch_size
        if self.batch_size is not None:
            return self.batch_size
        if self.reshape_fn is not None:
            return self.reshape_fn(TensorDict({}, batch_size=batch_size)).batch_size
        return batch_size

    def _new_spec(self, spec: Any) -> Any:
        if self.batch_size is not None:
            if spec.shape == self.batch_size:
                return spec
            return spec.expand(self.batch_size)
        if self.reshape_fn is not None:
            target = self.reshape_fn(TensorDict({}, batch_size=spec.shape)).batch_size
            return spec.reshape(target)
        return spec

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Give the output specs the new batch size."""
        return self._new_spec(super().transform_output_spec(output_spec))

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Give the input specs the new batch size."""
        return self._new_spec(super().transform_input_spec(input_spec))

    def _reset_env_preprocess(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        if self.batch_size is not None and tensordict is None:
            container = self.container
            device = None if container is None else container.device
            return TensorDict({}, batch_size=self.batch_size, device=device)
        if self.reshape_fn is not None and tensordict is not None:
            return tensordict.reshape(self._base_batch_size)
        return tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self.reset_func is not None:
            if self.env_kwarg:
                return self.reset_func(tensordict, tensordict_reset, env=self.container)
            return self.reset_func(tensordict, tensordict_reset)
        if self.reshape_fn is not None:
            return self.reshape_fn(tensordict_reset)
        if self.batch_size is not None and tensordict_reset.batch_size != self.batch_size:
            return tensordict_reset.expand(self.batch_size).clone()
        return tensordict_reset

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        # without an env (a replay buffer's transform) there is no batch size to go back to
        if self.reshape_fn is not None and self._base_batch_size is not None:
            return tensordict.reshape(self._base_batch_size)
        return tensordict

    def _needs_inverse(self) -> bool:
        return self.reshape_fn is not None

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.reshape_fn is not None:
            return self.reshape_fn(next_tensordict)
        return next_tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.reshape_fn is not None:
            return self.reshape_fn(next_tensordict)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Apply ``reshape_fn`` (other settings only concern envs)."""
        return self._call(tensordict)

    def __repr__(self) -> str:
        return f"BatchSizeTransform(batch_size={self.batch_size}, reshape_fn={self.reshape_fn})"
