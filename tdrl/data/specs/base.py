"""The :class:`TensorSpec` base class: what every spec shares.

A spec describes one entry of a TensorDict: its shape (leading batch dims included),
dtype, device and the set of values it may take. Leaf specs subclass :class:`TensorSpec`
and implement a handful of hooks (``_rand``, ``_in_domain``, ``_project``, ``_to_tensor``);
everything shape-related (expand, index, squeeze, unsqueeze, reshape, clone, to) is shared
here.

A ``-1`` in a shape marks a *dynamic* dim: any size is accepted there by :meth:`is_in`,
and :meth:`rand` / :meth:`zero` / :meth:`one` use size 1 for it.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from tdrl.data.specs.errors import (
    MSG_DTYPE,
    MSG_SHAPE,
    SpecEncodeShapeError,
    SpecTypeError,
    SpecValueError,
    _at,
)
from tdrl.data.specs.shapes import (
    DEVICE_TYPING,
    ShapeLike,
    _as_device,
    _as_shape,
    _ends_with,
    _expand_target,
    _extra_shape,
    _index_tensor,
    _indexed_shape,
    _normalize_index,
    _safe_shape,
    _shape_matches,
)

__all__ = ["DEVICE_TYPING", "TensorSpec"]

#: torch functions (``torch.stack``...) that specs implement, filled by the modules that define them.
_TORCH_HANDLERS: dict[Callable, Callable] = {}

#: Input types whose shape is known from the type and ``.shape``: their encode plans can be kept.
_PLANNED_TYPES = (torch.Tensor, np.ndarray, np.generic, int, float, bool)

#: The spec package: its ``_CHECK_SPEC_ENCODE`` flag turns on value checks in encode / to_numpy.
_PACKAGE = sys.modules[__package__]


def _checks_on() -> bool:
    return _PACKAGE._CHECK_SPEC_ENCODE


def _add_last_dim(value: torch.Tensor) -> torch.Tensor:
    return value.unsqueeze(-1)


def _fit_plan(got: torch.Size, expected: torch.Size) -> Callable | None:
    """How to give a value of shape ``got`` the spec's shape ``expected``.

    Returns ``None`` when nothing is needed, a callable otherwise. Only singleton dims may
    be added or removed (a scalar reward for a ``(1,)`` spec); any other difference raises.
    """
    if got == expected or _shape_matches(got, expected):
        return None
    if len(expected) == len(got) + 1 and expected[-1] == 1 and _shape_matches(got, expected[:-1]):
        return _add_last_dim
    target = _safe_shape(expected)
    if -1 not in expected and [d for d in got if d != 1] == [d for d in target if d != 1]:
        return lambda value: value.reshape(target)
    numel, expected_numel = int(np.prod(got)), int(np.prod(target))
    detail = (
        f" (shape {tuple(expected)} is invalid for input of size {numel})"
        if numel != expected_numel
        else " (only singleton dims can be added or removed)"
    )
    raise SpecEncodeShapeError(
        f"Shape mismatch: cannot encode a value of shape {tuple(got)} with a spec of shape "
        f"{tuple(expected)}{detail}"
    )


class TensorSpec:
    """Base class of every spec: shape, device, dtype and domain of one tensor entry.

    Subclasses describe a set of values (an interval, categories, one-hot vectors...).
    ``shape`` includes the leading batch dims; ``rand(shape)``, ``zero(shape)`` and
    ``one(shape)`` add ``shape`` as extra leading dims. A ``-1`` dim is dynamic: ``is_in``
    accepts any size there and ``rand`` / ``zero`` / ``one`` use size 1. ``is_in`` checks
    shape, dtype and domain; ``assert_is_in`` raises an error saying which one differs.
    ``zero()`` is all zeros even where zero is outside the domain (e.g. one-hot vectors).

    Examples:
        >>> from tdrl.data import Bounded
        >>> spec = Bounded(-1.0, 1.0, shape=(2,))
        >>> isinstance(spec, TensorSpec)
        True
        >>> spec.rand((5,)).shape
        torch.Size([5, 2])
    """

    #: Identity used by ``==`` (aliases and thin subclasses compare equal to their base).
    _kind: ClassVar[str] = "tensor"
    #: Number of trailing dims that describe one value and cannot be indexed as batch dims.
    _event_ndim: int = 0
    #: Names of tensor attributes whose leading dims follow the spec's shape.
    _shaped_tensors: ClassVar[tuple[str, ...]] = ()
    #: Memoized encoding plans (see :meth:`memoize_encode`); ``None`` when memoization is off.
    _encode_memo: tuple | None = None

    shape: torch.Size
    device: torch.device
    dtype: torch.dtype
    domain: str

    def __init__(
        self,
        shape: ShapeLike,
        device: DEVICE_TYPING | None,
        dtype: torch.dtype,
        domain: str,
    ) -> None:
        self.shape = _as_shape(shape)
        self.device = _as_device(device)
        self.dtype = dtype
        self.domain = domain

    # ------------------------------------------------------------------ basics
    @property
    def ndim(self) -> int:
        """Number of dims of the spec's shape."""
        return len(self.shape)

    def ndimension(self) -> int:
        """Number of dims of the spec's shape."""
        return len(self.shape)

    @property
    def _batch_ndim(self) -> int:
        return len(self.shape) - self._event_ndim

    def _full_shape(self, shape: ShapeLike | None) -> tuple[int, ...]:
        """``shape`` extra dims followed by the spec's own (a plain tuple: factories take it faster)."""
        return (*_extra_shape(shape), *self._own_shape())

    def clear_device_(self) -> TensorSpec:
        """Leaf specs always have a device: nothing to clear. Returns ``self``."""
        return self

    # ------------------------------------------------------------------ sampling
    def _own_shape(self) -> tuple[int, ...]:
        """The spec's shape with dynamic dims set to 1, cached per ``shape`` object.

        A plain tuple: torch's factory functions parse it faster than a ``torch.Size``.
        """
        shape = self.shape
        cache = self.__dict__.get("_own_shape_cache")
        if cache is not None and cache[0] is shape:
            return cache[1]
        full = tuple(_safe_shape(shape))
        self.__dict__["_own_shape_cache"] = (shape, full)
        return full

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """A random value in the spec, with ``shape`` extra leading dims."""
        if shape is None or (isinstance(shape, tuple) and not shape):
            return self._rand(self._own_shape())
        return self._rand(self._full_shape(shape))

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement rand()")

    def zero(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """An all-zero tensor of the spec's dtype and device, with ``shape`` extra leading dims."""
        if shape is None:
            return torch.zeros(self._own_shape(), dtype=self.dtype, device=self.device)
        return torch.zeros(self._full_shape(shape), dtype=self.dtype, device=self.device)

    def one(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """An all-one tensor of the spec's dtype and device, with ``shape`` extra leading dims."""
        return torch.ones(self._full_shape(shape), dtype=self.dtype, device=self.device)

    def zeros(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Alias of :meth:`zero`."""
        return self.zero(shape)

    def ones(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Alias of :meth:`one`."""
        return self.one(shape)

    def sample(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Alias of :meth:`rand`."""
        return self.rand(shape)

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """Every value one element of the spec can take, stacked along a new first dim.

        Batch elements share the value: the result has shape ``(cardinality(), *shape)``.
        Only discrete specs with a finite, reasonably small set of values support it.
        """
        raise RuntimeError(
            f"Cannot enumerate a {type(self).__name__} spec with domain {self.domain!r}: "
            "its values are not a finite set"
        )

    # ------------------------------------------------------------------ membership
    def _mismatch(self, val: Any, key: Any = None) -> Exception | None:
        """The error describing why ``val`` is not in the spec, or ``None`` when it is."""
        where = _at("spec mismatch", key)
        if not isinstance(val, torch.Tensor):
            return SpecTypeError(f"{where}: expected a torch.Tensor, got {type(val).__name__}")
        if not _ends_with(val.shape, self.shape):
            expected = f"(*, {', '.join(str(d) for d in self.shape)})" if self.shape else "(*)"
            return SpecValueError(
                MSG_SHAPE.format(where=where, expected=expected, got=tuple(val.shape))
            )
        if val.dtype != self.dtype:
            return SpecTypeError(MSG_DTYPE.format(where=where, expected=self.dtype, got=val.dtype))
        if not self._in_domain(val):
            return SpecValueError(f"{where}: value out of the spec's domain ({self!r})")
        return None

    def _in_domain(self, val: torch.Tensor) -> bool:
        return True

    def is_in(self, val: Any) -> bool:
        """Whether ``val`` has the spec's shape (extra leading dims allowed), dtype and domain."""
        return (
            isinstance(val, torch.Tensor)
            and val.dtype == self.dtype
            and _ends_with(val.shape, self.shape)
            and self._in_domain(val)
        )

    def contains(self, val: Any) -> bool:
        """Alias of :meth:`is_in`."""
        return self.is_in(val)

    def assert_is_in(self, val: Any, key: Any = None) -> None:
        """Raise an error naming what differs when ``val`` is not in the spec.

        The error is a :class:`~tdrl.data.specs.errors.SpecValueError` (shape, domain) or
        :class:`~tdrl.data.specs.errors.SpecTypeError` (type, dtype); both are also
        ``AssertionError``.
        """
        error = self._mismatch(val, key)
        if error is not None:
            raise error

    def type_check(self, value: Any, key: Any = None) -> None:
        """Raise a TypeError when ``value`` is not a tensor of the spec's dtype."""
        where = _at("type mismatch", key)
        if not isinstance(value, torch.Tensor):
            raise SpecTypeError(f"{where}: expected a torch.Tensor, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise SpecTypeError(MSG_DTYPE.format(where=where, expected=self.dtype, got=value.dtype))

    # ------------------------------------------------------------------ conversion
    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Map ``val`` to the closest value in the spec (clamp, round, argmax...).

        ``val`` must end with the spec's shape; the result has the spec's dtype and device.
        """
        if not isinstance(val, torch.Tensor):
            val = torch.as_tensor(val, device=self.device)
        if not _ends_with(val.shape, self.shape):
            raise ValueError(
                MSG_SHAPE.format(
                    where="cannot project", expected=tuple(self.shape), got=tuple(val.shape)
                )
            )
        if val.device != self.device:
            val = val.to(self.device)
        return self._project(val)

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        return val.to(self.dtype)

    def _to_tensor(self, val: Any, device: torch.device | None) -> torch.Tensor:
        """``val`` (tensor, numpy array, python value) as a tensor of the spec's dtype."""
        if isinstance(val, torch.Tensor):
            return val.to(device=device, dtype=self.dtype) if device else val.to(self.dtype)
        if isinstance(val, np.ndarray) and not val.flags.writeable:
            val = val.copy()
        return torch.as_tensor(val, dtype=self.dtype, device=device)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Convert a numpy array / python value to a tensor of the spec's dtype, device and shape.

        The value must have the spec's shape, up to singleton dims (a scalar reward for a
        ``(1,)`` spec gets its dim); anything else raises a
        :class:`~tdrl.data.specs.errors.SpecEncodeShapeError` (a ValueError and a
        RuntimeError). With ``ignore_device`` the result stays where torch puts it.
        With memoized encoding on (:meth:`memoize_encode`), the conversion chosen for an
        input type and shape is reused for the next inputs of the same type and shape.
        """
        memo = self._encode_memo
        if memo is not None:
            plan = self._memo_plan(memo, val, ignore_device)
            if plan is not None:
                out = plan(val)
                if _checks_on():
                    self._check_encoded(out)
                return out
        device = None if ignore_device else self.device
        out = self._to_tensor(val, device)
        fit = _fit_plan(out.shape, self.shape)
        if fit is not None:
            out = fit(out)
        if memo is not None and isinstance(val, _PLANNED_TYPES):
            self._remember_plan(val, ignore_device, device, fit)
        if _checks_on():
            self._check_encoded(out)
        return out

    def _check_encoded(self, out: torch.Tensor) -> None:
        error = self._mismatch(out)
        if error is not None:
            raise type(error)(f"encode produced a value outside the spec: {error}")

    # ------------------------------------------------------------------ memoized encoding
    def memoize_encode(self, mode: bool = True) -> TensorSpec:
        """Turn memoized encoding on (or off with ``mode=False``); returns ``self``.

        With memoization on, :meth:`encode` remembers, per input type and shape, how it
        converted the input (which conversion, which reshape) and replays it without
        deciding again. A plan is dropped when the spec's shape, dtype or device changes;
        :meth:`erase_memoize_cache` drops them all.
        """
        self._encode_memo = (None, {}) if mode else None
        return self

    def erase_memoize_cache(self) -> TensorSpec:
        """Forget the memoized encoding plans (memoization stays on if it was); returns ``self``."""
        if self._encode_memo is not None:
            self._encode_memo = (None, {})
        return self

    def _memo_plan(self, memo: tuple, val: Any, ignore_device: bool) -> Callable | None:
        signature, plans = memo
        if (
            signature is None
            or signature[0] is not self.shape
            or signature[1] is not self.dtype
            or signature[2] is not self.device
        ):
            return None
        return plans.get((type(val), getattr(val, "shape", None), ignore_device))

    def _remember_plan(
        self, val: Any, ignore_device: bool, device: torch.device | None, fit: Callable | None
    ) -> None:
        signature, plans = self._encode_memo
        current = (self.shape, self.dtype, self.device)
        if signature is None or any(a is not b for a, b in zip(signature, current)):
            plans = {}
            self._encode_memo = (current, plans)
        convert = self._to_tensor

        def plan(value: Any) -> torch.Tensor:
            out = convert(value, device)
            return out if fit is None else fit(out)

        plans[(type(val), getattr(val, "shape", None), ignore_device)] = plan

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None) -> np.ndarray:
        """Convert ``val`` to a numpy array.

        ``safe=True`` checks that ``val`` is in the spec first (``None`` follows the
        ``_CHECK_SPEC_ENCODE`` debug flag of :mod:`tdrl.data.specs`).
        """
        if safe or (safe is None and _checks_on()):
            self.assert_is_in(val)
        return val.detach().cpu().numpy()

    # ------------------------------------------------------------------ shape ops
    def _copy(self) -> TensorSpec:
        """A shallow copy with its own memoized-encoding cache."""
        out = copy.copy(self)
        if out._encode_memo is not None:
            out._encode_memo = (None, {})
        return out

    def _with_shape(
        self, shape: torch.Size, fn: Callable[[torch.Tensor], torch.Tensor]
    ) -> TensorSpec:
        """A shallow copy with a new shape; ``fn`` maps each shaped tensor attribute."""
        out = self._copy()
        out.shape = torch.Size(shape)
        for name in self._shaped_tensors:
            value = getattr(self, name)
            if value is not None:
                setattr(out, name, fn(value))
        return out

    def expand(self, *shape: int | ShapeLike) -> TensorSpec:
        """A spec with extra leading dims (or singleton batch dims broadcast); ``-1`` keeps a dim."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new_shape = _expand_target(self.shape, shape, self._event_ndim)
        old_batch = self._batch_ndim
        new_batch = tuple(_safe_shape(new_shape[: len(new_shape) - self._event_ndim]))

        def _expand(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.expand(*new_batch, *tensor.shape[old_batch:])

        return self._with_shape(new_shape, _expand)

    def unsqueeze(self, dim: int) -> TensorSpec:
        """A spec with a singleton dim inserted at ``dim``.

        The new dim must fall among the batch dims, or after value dims of size 1 only
        (inserting a 1 after a size-1 dim is the same as inserting it before).
        """
        ndim = self.ndim
        pos = dim + ndim + 1 if dim < 0 else dim
        batch_ndim = self._batch_ndim
        if batch_ndim < pos <= ndim and all(d == 1 for d in self.shape[batch_ndim:pos]):
            pos = batch_ndim
        if not 0 <= pos <= batch_ndim:
            raise ValueError(
                f"cannot unsqueeze {type(self).__name__} of shape {tuple(self.shape)} at dim {dim}: "
                f"expected a dim in [{-ndim - 1}, {batch_ndim}] outside the value dims"
            )
        new_shape = torch.Size((*self.shape[:pos], 1, *self.shape[pos:]))
        return self._with_shape(new_shape, lambda t: t.unsqueeze(pos))

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """A spec with singleton batch dims removed (all of them, or only ``dim``)."""
        batch_ndim = self._batch_ndim
        if dim is None:
            dims = [i for i in range(batch_ndim) if self.shape[i] == 1]
        else:
            pos = dim + self.ndim if dim < 0 else dim
            if not 0 <= pos < self.ndim:
                raise ValueError(f"dim {dim} out of range for shape {tuple(self.shape)}")
            if pos >= batch_ndim and self.shape[pos] == 1:
                raise ValueError(
                    f"cannot squeeze dim {dim} of {type(self).__name__}: it is a value dim"
                )
            dims = [pos] if self.shape[pos] == 1 else []
        if not dims:
            return self.clone()
        new_shape = torch.Size(d for i, d in enumerate(self.shape) if i not in dims)

        def _squeeze(tensor: torch.Tensor) -> torch.Tensor:
            for d in reversed(dims):
                tensor = tensor.squeeze(d)
            return tensor

        return self._with_shape(new_shape, _squeeze)

    def reshape(self, *shape: int | ShapeLike) -> TensorSpec:
        """A spec with the batch dims reshaped; value dims must stay at the end unchanged."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        batch_ndim = self._batch_ndim
        event = self.shape[batch_ndim:]
        target = tuple(shape)
        if self._event_ndim and tuple(target[len(target) - self._event_ndim :]) != tuple(event):
            raise ValueError(
                f"cannot reshape {type(self).__name__} of shape {tuple(self.shape)} to {target}: "
                f"the last dims must stay {tuple(event)}"
            )
        new_batch = torch.empty(_safe_shape(self.shape[:batch_ndim]), device="meta").reshape(
            target[: len(target) - self._event_ndim]
        )
        new_shape = torch.Size((*new_batch.shape, *event))

        def _reshape(tensor: torch.Tensor) -> torch.Tensor:
            tail = tensor.shape[batch_ndim:]
            return tensor.expand(*_safe_shape(self.shape[:batch_ndim]), *tail).reshape(
                *new_batch.shape, *tail
            )

        return self._with_shape(new_shape, _reshape)

    view = reshape

    def __getitem__(self, index: Any) -> TensorSpec:
        """Index the spec along its batch dims, like a tensor of its shape."""
        batch_ndim = self._batch_ndim
        index = _normalize_index(index, batch_ndim)
        batch = self.shape[:batch_ndim]
        new_batch = _indexed_shape(batch, index)
        new_shape = torch.Size((*new_batch, *self.shape[batch_ndim:]))

        def _index(tensor: torch.Tensor) -> torch.Tensor:
            tail = tensor.shape[batch_ndim:]
            return _index_tensor(tensor.expand(*_safe_shape(batch), *tail), index)

        return self._with_shape(new_shape, _index)

    def index_select(self, dim: int, index: torch.Tensor) -> TensorSpec:
        """The spec of ``torch.index_select(value, dim, index)`` for values of this spec.

        ``dim`` must be a batch dim; value dims (the categories of a one-hot vector...)
        cannot be selected from.
        """
        pos = dim + self.ndim if dim < 0 else dim
        if not 0 <= pos < self.ndim:
            raise IndexError(
                f"index_select: dim {dim} out of range for a spec of shape {tuple(self.shape)}"
            )
        if pos >= self._batch_ndim:
            raise ValueError(
                f"Cannot index_select along the last dimension(s) of {type(self).__name__} "
                f"(dim {dim} of shape {tuple(self.shape)}): they hold one value, not batch elements"
            )
        index = torch.as_tensor(index)
        if index.ndim != 1 or index.dtype.is_floating_point or index.dtype == torch.bool:
            raise TypeError(
                f"index_select: expected a 1-D integer index, got shape {tuple(index.shape)} "
                f"and dtype {index.dtype}"
            )
        return self[(slice(None),) * pos + (index,)]

    def unbind(self, dim: int = 0) -> tuple[TensorSpec, ...]:
        """The specs of the slices along batch dim ``dim`` (like ``tensor.unbind``)."""
        pos = dim + self.ndim if dim < 0 else dim
        if not 0 <= pos < self._batch_ndim or self.shape[pos] < 0:
            raise ValueError(
                f"cannot unbind {type(self).__name__} of shape {tuple(self.shape)} along dim {dim}"
            )
        prefix = (slice(None),) * pos
        return tuple(self[(*prefix, i)] for i in range(self.shape[pos]))

    def clone(self) -> TensorSpec:
        """A deep copy: tensor attributes are cloned, so the copy can be changed on its own."""
        out = self._copy()
        for name in self._shaped_tensors:
            value = getattr(self, name)
            if value is not None:
                setattr(out, name, value.clone())
        return out

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> TensorSpec:
        """A copy on another device (or with another dtype); ``self`` when nothing changes."""
        if isinstance(dest, torch.dtype):
            if dest == self.dtype:
                return self
            return self._cast_dtype(dest)
        device = _as_device(dest)
        if device == self.device:
            return self
        out = self._copy()
        out.device = device
        for name in self._shaped_tensors:
            value = getattr(self, name)
            if value is not None:
                setattr(out, name, value.to(device))
        return out

    def _cast_dtype(self, dtype: torch.dtype) -> TensorSpec:
        out = self._copy()
        out.dtype = dtype
        return out

    def cpu(self) -> TensorSpec:
        """A copy on the CPU."""
        return self.to("cpu")

    def cuda(self, device: int | None = None) -> TensorSpec:
        """A copy on a CUDA device."""
        return self.to(torch.device("cuda") if device is None else torch.device("cuda", device))

    # ------------------------------------------------------------------ comparison
    def _same_attributes(self, other: TensorSpec) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, TensorSpec)
            and self._kind == other._kind
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.device == other.device
            and self.domain == other.domain
            and self._same_attributes(other)
        )

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def cardinality(self) -> int | float:
        """Number of distinct values one element of the spec can take (``inf`` when continuous)."""
        return float("inf")

    def _repr_extra(self) -> str:
        return ""

    def __repr__(self) -> str:
        extra = self._repr_extra()
        return (
            f"{type(self).__name__}(shape={tuple(self.shape)}, "
            f"{extra + ', ' if extra else ''}device={self.device}, dtype={self.dtype}, "
            f"domain={self.domain})"
        )

    # ------------------------------------------------------------------ torch functions
    @classmethod
    def __torch_function__(
        cls,
        func: Callable,
        types: tuple,
        args: tuple = (),
        kwargs: dict | None = None,
    ) -> Any:
        handler = _TORCH_HANDLERS.get(func)
        if handler is None:
            return NotImplemented
        return handler(*args, **(kwargs or {}))


def _index_select(
    input: TensorSpec, dim: int, index: torch.Tensor, *, out: Any = None
) -> TensorSpec:
    """``torch.index_select`` on a spec: the spec of the selected values."""
    if out is not None:
        raise TypeError("index_select on a spec does not support out=")
    return input.index_select(dim, index)


_TORCH_HANDLERS[torch.index_select] = _index_select
