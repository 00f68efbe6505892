"""The :class:`TensorSpec` base class and the shape helpers every spec shares.

A spec describes one entry of a TensorDict: its shape (leading batch dims included),
dtype, device and the set of values it may take. Leaf specs subclass :class:`TensorSpec`
and implement a handful of hooks (``_rand``, ``_in_domain``, ``_project``); everything
shape-related (expand, index, squeeze, unsqueeze, reshape, clone, to) is shared here.

A ``-1`` in a shape marks a *dynamic* dim: any size is accepted there by :meth:`is_in`,
and :meth:`rand` / :meth:`zero` / :meth:`one` use size 1 for it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

__all__ = ["DEVICE_TYPING", "TensorSpec"]

DEVICE_TYPING = torch.device | str | int

ShapeLike = int | Sequence[int] | torch.Size

#: torch functions (``torch.stack``...) that specs implement, filled by the modules that define them.
_TORCH_HANDLERS: dict[Callable, Callable] = {}

_NUMPY_TO_TORCH = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}

MSG_SHAPE = "{where}: expected shape {expected}, got {got}"
MSG_DTYPE = "{where}: expected dtype {expected}, got {got}"


def _at(what: str, key: Any) -> str:
    """``"what at key 'k'"``, or just ``what`` for a spec checked on its own."""
    return what if key is None else f"{what} at key {key!r}"


def _as_shape(shape: ShapeLike | None, name: str = "shape") -> torch.Size | None:
    """Normalise an int / sequence / Size to a ``torch.Size`` (``None`` stays ``None``)."""
    if shape is None:
        return None
    if isinstance(shape, torch.Size):
        dims = tuple(shape)
    elif isinstance(shape, (int, np.integer)):
        dims = (int(shape),)
    else:
        try:
            dims = tuple(int(d) for d in shape)
        except TypeError as err:
            raise TypeError(f"{name} must be an int or a sequence of ints, got {shape!r}") from err
    for dim in dims:
        if dim < -1:
            raise ValueError(f"{name} dims must be >= 0 or -1 (dynamic), got {tuple(dims)}")
    return torch.Size(dims)


def _as_device(device: DEVICE_TYPING | None) -> torch.device:
    """Normalise a device argument; ``None`` gives torch's default device."""
    if device is None:
        return torch.get_default_device()
    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


def _as_dtype(dtype: Any, default: torch.dtype) -> torch.dtype:
    """Accept a torch dtype, a numpy dtype / type or a dtype name."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and hasattr(torch, dtype.removeprefix("torch.")):
        candidate = getattr(torch, dtype.removeprefix("torch."))
        if isinstance(candidate, torch.dtype):
            return candidate
    try:
        return _NUMPY_TO_TORCH[np.dtype(dtype)]
    except (TypeError, KeyError) as err:
        raise TypeError(f"dtype must be a torch dtype, got {dtype!r}") from err


def _safe_shape(shape: torch.Size) -> torch.Size:
    """The shape with every dynamic ``-1`` dim replaced by 1."""
    if -1 not in shape:
        return shape
    return torch.Size(1 if d == -1 else d for d in shape)


def _shape_matches(got: Sequence[int], expected: Sequence[int]) -> bool:
    """Whether ``got`` equals ``expected`` where ``-1`` in ``expected`` matches any size."""
    if len(got) != len(expected):
        return False
    return all(e == g or e == -1 for g, e in zip(got, expected))


def _ends_with(got: Sequence[int], expected: Sequence[int]) -> bool:
    """Whether ``got`` ends with ``expected`` (``-1`` in ``expected`` matches any size)."""
    if len(got) < len(expected):
        return False
    return _shape_matches(got[len(got) - len(expected) :], expected)


def _normalize_index(index: Any, ndim: int) -> tuple:
    """Turn an index into a tuple with any ``...`` spelled out for ``ndim`` batch dims."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(item is Ellipsis for item in index):
        position = next(i for i, item in enumerate(index) if item is Ellipsis)
        used = sum(1 for item in index if item is not None and item is not Ellipsis)
        fill = (slice(None),) * max(ndim - used, 0)
        index = index[:position] + fill + index[position + 1 :]
    return index


def _indexed_shape(shape: torch.Size, index: tuple) -> torch.Size:
    """Shape obtained by indexing a tensor of ``shape`` with ``index``."""
    cpu_index = tuple(item.cpu() if isinstance(item, torch.Tensor) else item for item in index)
    try:
        return torch.empty(()).expand(_safe_shape(shape))[cpu_index].shape
    except IndexError as err:
        raise IndexError(
            f"cannot index a spec with batch shape {tuple(shape)} by {index!r}: {err}"
        ) from None


def _expand_target(old: torch.Size, new: Sequence[int], event_ndim: int) -> torch.Size:
    """Validate an expand request and return the resulting shape (``-1`` keeps a dim)."""
    new = tuple(new)
    if len(new) < len(old):
        raise ValueError(
            f"cannot expand a spec of shape {tuple(old)} to {new}: "
            "the new shape must have at least as many dims"
        )
    lead = len(new) - len(old)
    result = list(new[:lead])
    for i, (old_dim, new_dim) in enumerate(zip(old, new[lead:])):
        is_event = i >= len(old) - event_ndim
        if new_dim == -1 or new_dim == old_dim:
            result.append(old_dim)
        elif old_dim == 1 and not is_event:
            result.append(new_dim)
        else:
            raise ValueError(
                f"cannot expand a spec of shape {tuple(old)} to {new}: "
                f"dim {lead + i} has size {old_dim}, got {new_dim}"
            )
    if any(d < 0 for d in result[:lead]):
        raise ValueError(f"cannot expand to {new}: new leading dims must be >= 0")
    return torch.Size(result)


def _extra_shape(shape: ShapeLike | None) -> torch.Size:
    """The ``shape`` argument of rand/zero/one: extra leading dims."""
    if shape is None:
        return torch.Size()
    return _as_shape(shape)


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
    _event_ndim: ClassVar[int] = 0
    #: Names of tensor attributes whose leading dims follow the spec's shape.
    _shaped_tensors: ClassVar[tuple[str, ...]] = ()

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

    def _full_shape(self, shape: ShapeLike | None) -> torch.Size:
        extra = _extra_shape(shape)
        return torch.Size((*extra, *_safe_shape(self.shape)))

    # ------------------------------------------------------------------ sampling
    def _own_shape(self) -> torch.Size:
        """The spec's shape with dynamic dims set to 1, cached per ``shape`` object."""
        shape = self.shape
        cache = self.__dict__.get("_own_shape_cache")
        if cache is not None and cache[0] is shape:
            return cache[1]
        full = torch.Size(_safe_shape(shape))
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

    # ------------------------------------------------------------------ membership
    def _mismatch(self, val: Any, key: Any = None) -> Exception | None:
        """The error describing why ``val`` is not in the spec, or ``None`` when it is."""
        where = _at("spec mismatch", key)
        if not isinstance(val, torch.Tensor):
            return TypeError(f"{where}: expected a torch.Tensor, got {type(val).__name__}")
        if not _ends_with(val.shape, self.shape):
            expected = f"(*, {', '.join(str(d) for d in self.shape)})" if self.shape else "(*)"
            return ValueError(
                MSG_SHAPE.format(where=where, expected=expected, got=tuple(val.shape))
            )
        if val.dtype != self.dtype:
            return TypeError(MSG_DTYPE.format(where=where, expected=self.dtype, got=val.dtype))
        if not self._in_domain(val):
            return ValueError(f"{where}: value out of the spec's domain ({self!r})")
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
        """Raise a ValueError / TypeError naming what differs when ``val`` is not in the spec."""
        error = self._mismatch(val, key)
        if error is not None:
            raise error

    def type_check(self, value: Any, key: Any = None) -> None:
        """Raise a TypeError when ``value`` is not a tensor of the spec's dtype."""
        where = _at("type mismatch", key)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{where}: expected a torch.Tensor, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise TypeError(MSG_DTYPE.format(where=where, expected=self.dtype, got=value.dtype))

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

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Convert a numpy array / python value to a tensor of the spec's dtype and device.

        A value missing a trailing singleton dim of the spec (e.g. a scalar reward for a
        ``(1,)`` spec) gets it added.
        """
        device = None if ignore_device else self.device
        if isinstance(val, torch.Tensor):
            out = val.to(device=device, dtype=self.dtype) if device else val.to(dtype=self.dtype)
        else:
            if isinstance(val, np.ndarray) and not val.flags.writeable:
                val = val.copy()
            out = torch.as_tensor(val, dtype=self.dtype, device=device)
        return self._fix_encoded_shape(out)

    def _fix_encoded_shape(self, out: torch.Tensor) -> torch.Tensor:
        shape = self.shape
        if shape and not _ends_with(out.shape, shape) and shape[-1] == 1:
            if _ends_with(out.shape, shape[:-1]):
                out = out.unsqueeze(-1)
        return out

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None) -> np.ndarray:
        """Convert ``val`` to a numpy array (``safe=True`` checks it is in the spec first)."""
        if safe:
            self.assert_is_in(val)
        return val.detach().cpu().numpy()

    # ------------------------------------------------------------------ shape ops
    def _with_shape(
        self, shape: torch.Size, fn: Callable[[torch.Tensor], torch.Tensor]
    ) -> TensorSpec:
        """A shallow copy with a new shape; ``fn`` maps each shaped tensor attribute."""
        out = copy.copy(self)
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
        """A spec with a singleton dim inserted at ``dim`` (among the batch dims).

        A position inside the value dims is accepted when the value dims before it
        are singletons: the result is the same as inserting before the value dims.
        """
        ndim = self.ndim
        pos = dim + ndim + 1 if dim < 0 else dim
        if self._batch_ndim < pos <= ndim and all(
            size == 1 for size in self.shape[self._batch_ndim : pos]
        ):
            pos = self._batch_ndim
        if not 0 <= pos <= self._batch_ndim:
            raise ValueError(
                f"cannot unsqueeze {type(self).__name__} of shape {tuple(self.shape)} at dim {dim}: "
                f"expected a dim in [{-ndim - 1}, {self._batch_ndim}] outside the value dims"
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
            full = tensor.expand(*_safe_shape(batch), *tail)
            return full[index]

        return self._with_shape(new_shape, _index)

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
        out = copy.copy(self)
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
            out = self._cast_dtype(dest)
            return out
        device = _as_device(dest)
        if device == self.device:
            return self
        out = copy.copy(self)
        out.device = device
        for name in self._shaped_tensors:
            value = getattr(self, name)
            if value is not None:
                setattr(out, name, value.to(device))
        return out

    def _cast_dtype(self, dtype: torch.dtype) -> TensorSpec:
        out = copy.copy(self)
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

    def cardinality(self) -> int:
        """Number of distinct values one element of the spec can take."""
        raise TypeError(
            f"{type(self).__name__} with domain {self.domain!r} has no finite cardinality"
        )

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


def _mask_or_none(
    mask: Any, expected: torch.Size, device: torch.device, owner: str
) -> torch.Tensor | None:
    """Validate a boolean action mask of shape ``expected``."""
    if mask is None:
        return None
    mask = torch.as_tensor(mask, device=device)
    if mask.dtype != torch.bool:
        raise TypeError(f"{owner} mask: expected dtype torch.bool, got {mask.dtype}")
    if not _shape_matches(mask.shape, expected) and mask.shape != _safe_shape(expected):
        try:
            mask = mask.expand(_safe_shape(expected))
        except RuntimeError:
            raise ValueError(
                f"{owner} mask: expected shape {tuple(expected)}, got {tuple(mask.shape)}"
            ) from None
    return mask


def _check_n(n: Any, owner: str) -> int:
    """Validate a number of categories."""
    if isinstance(n, torch.Tensor):
        n = n.item()
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"{owner}: n must be an int, got {type(n).__name__}")
    if n <= 0:
        raise ValueError(f"{owner}: n must be > 0, got {n}")
    return int(n)
