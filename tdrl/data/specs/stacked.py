"""Stacks of specs: ``torch.stack`` support, :class:`Stacked` (leaves) and :class:`StackedComposite`.

Stacking identical specs gives a plain spec with one more dim. Stacking specs that differ
(heterogeneous shapes, e.g. agents with different observation sizes) keeps the elements:
:class:`Stacked` for leaves and :class:`StackedComposite` for Composites, whose ``rand`` /
``zero`` return a ``LazyStackedTensorDict``. Dims that differ between elements show as
``-1`` in the stacked shape.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from tdrl.data.specs.base import _TORCH_HANDLERS, TensorSpec, _checks_on
from tdrl.data.specs.composite import Composite
from tdrl.data.specs.errors import SpecStackError, _at
from tdrl.data.specs.keys import _display, _Version
from tdrl.data.specs.shapes import (
    DEVICE_TYPING,
    ShapeLike,
    _as_device,
    _ends_with,
    _extra_shape,
    _normalize_index,
)

__all__ = ["Stacked", "StackedComposite", "stack_specs"]


def _nested(parts: list[torch.Tensor]) -> torch.Tensor:
    """A nested tensor of ``parts`` (torch warns that the strided layout is a prototype)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.as_nested_tensor(parts)


def _stacked_shape(shapes: Sequence[torch.Size], dim: int, count: int) -> torch.Size:
    first = shapes[0]
    dims = [d if all(s[i] == d for s in shapes) else -1 for i, d in enumerate(first)]
    dims.insert(dim, count)
    return torch.Size(dims)


def _leaf_kind(spec: TensorSpec) -> str:
    """The kind of a leaf spec; a stack of leaves has the kind of its elements."""
    return _leaf_kind(spec.specs[0]) if isinstance(spec, Stacked) else spec._kind


def _norm_dim(dim: int, ndim: int, what: str) -> int:
    pos = dim + ndim + 1 if dim < 0 else dim
    if not 0 <= pos <= ndim:
        raise ValueError(f"cannot stack {what} of {ndim} dims along dim {dim}")
    return pos


class _StackedMixin:
    """Shared shape logic of stacks: elements, stack dim, indexing and re-stacking."""

    _elements: list
    dim: int

    def _stack_ndim(self) -> int:
        raise NotImplementedError

    def _restack(self, elements: list, dim: int) -> Any:
        return torch.stack(elements, dim)

    def __len__(self) -> int:
        return len(self._elements)

    @property
    def stack_dim(self) -> int:
        """The dim along which the elements are stacked (the same as ``dim``)."""
        return self.dim

    def unbind(self, dim: int = 0) -> tuple:
        """The stacked elements when ``dim`` is the stack dim."""
        pos = dim + self._stack_ndim() if dim < 0 else dim
        if pos == self.dim:
            return tuple(self._elements)
        raise ValueError(f"can only unbind a stack along its stack dim {self.dim}, got {dim}")

    def _index_stack(self, index: Any) -> Any:
        index = _normalize_index(index, self._stack_ndim())
        dim = self.dim
        if len(index) <= dim:
            shift = sum(isinstance(i, (int, np.integer)) for i in index) - sum(
                i is None for i in index
            )
            return self._restack([e[index] for e in self._elements], dim - shift)
        before, item, after = index[:dim], index[dim], index[dim + 1 :]
        if any(i is None or isinstance(i, torch.Tensor) for i in before):
            raise IndexError(f"unsupported index {index!r} before the stack dim of a stacked spec")
        shift = sum(isinstance(i, (int, np.integer)) for i in before)
        rest = (*before, *after)
        trivial = all(isinstance(i, slice) and i == slice(None) for i in rest)
        if isinstance(item, (int, np.integer)):
            element = self._elements[int(item)]
            return element if trivial else element[rest]
        if isinstance(item, slice):
            chosen = self._elements[item]
        elif isinstance(item, (torch.Tensor, list, range)):
            chosen = [self._elements[int(i)] for i in torch.as_tensor(item).reshape(-1).tolist()]
        else:
            raise IndexError(f"unsupported index {item!r} along the stack dim")
        if not trivial:
            chosen = [e[rest] for e in chosen]
        return self._restack(list(chosen), dim - shift)

    def _expand_stack(self, shape: tuple) -> Any:
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        own = self.shape
        if not _ends_with(torch.Size(d if d != -1 else 0 for d in shape), own) and not all(
            s == o or s == -1 or o == -1 for s, o in zip(shape[len(shape) - len(own) :], own)
        ):
            raise ValueError(
                f"cannot expand a stacked spec of shape {tuple(own)} to {tuple(shape)}: "
                "only new leading dims can be added"
            )
        lead = tuple(shape[: len(shape) - len(own)])
        elements = [e.expand((*lead, *e.shape)) for e in self._elements]
        return self._restack(elements, self.dim + len(lead))

    def _unsqueeze_stack(self, dim: int) -> Any:
        pos = _norm_dim(dim, self._stack_ndim(), "a stacked spec")
        if pos <= self.dim:
            return self._restack([e.unsqueeze(pos) for e in self._elements], self.dim + 1)
        return self._restack([e.unsqueeze(pos - 1) for e in self._elements], self.dim)

    def _squeeze_stack(self, dim: int | None) -> Any:
        shape = self.shape
        if dim is None:
            out: Any = self
            for pos in reversed(range(len(shape))):
                if shape[pos] == 1:
                    out = out.squeeze(pos)
            return out
        pos = dim + len(shape) if dim < 0 else dim
        if shape[pos] != 1:
            return self.clone()
        if pos == self.dim:
            return self._elements[0].clone()
        if pos < self.dim:
            return self._restack([e.squeeze(pos) for e in self._elements], self.dim - 1)
        return self._restack([e.squeeze(pos - 1) for e in self._elements], self.dim)


class Stacked(_StackedMixin, TensorSpec):
    """A stack of leaf specs that may differ (shape, bounds...), e.g. one spec per agent.

    Args:
        *specs: the leaf specs, all with the same number of dims, dtype and device.
        dim: the stack dim in the resulting shape.

    Dims where the elements differ are ``-1`` in ``shape``. ``rand()`` / ``zero()`` stack
    the elements' values, as a nested tensor when their shapes differ (``dim=0`` only).
    ``spec[i]`` along the stack dim returns element ``i``.

    Examples:
        >>> import torch
        >>> from tdrl.data import Unbounded
        >>> spec = torch.stack([Unbounded((2,)), Unbounded((3,))], 0)
        >>> type(spec).__name__, spec.shape
        ('Stacked', torch.Size([2, -1]))
        >>> spec[1]
        Unbounded(shape=(3,), device=cpu, dtype=torch.float32, domain=continuous)
        >>> [t.shape for t in spec.rand().unbind(0)]
        [torch.Size([2]), torch.Size([3])]
    """

    _kind = "stacked"

    def __init__(self, *specs: TensorSpec, dim: int = 0) -> None:
        if len(specs) == 1 and isinstance(specs[0], (list, tuple)):
            specs = tuple(specs[0])
        if not specs:
            raise ValueError("Stacked needs at least one spec")
        for i, spec in enumerate(specs):
            if not isinstance(spec, TensorSpec) or isinstance(spec, Composite):
                raise TypeError(
                    f"Stacked element {i}: expected a leaf TensorSpec, got {type(spec).__name__}"
                )
        first = specs[0]
        kinds = sorted(
            {type(s).__name__ for s in specs if _leaf_kind(s) != _leaf_kind(first)}
            | {type(first).__name__}
        )
        if len(kinds) > 1:
            raise SpecStackError(
                "Stacking specs cannot occur: Found more than one type of specs in the list "
                f"({kinds}); a stack holds one kind of spec"
            )
        for i, spec in enumerate(specs[1:], 1):
            if spec.ndim != first.ndim:
                raise SpecStackError(
                    f"Ndims differ: Stacked element {i} has shape {tuple(spec.shape)}, "
                    f"expected {first.ndim} dims like element 0"
                )
            if spec.dtype != first.dtype:
                raise SpecStackError(
                    f"Dtypes differ: Stacked element {i} has dtype {spec.dtype}, "
                    f"expected {first.dtype} like element 0"
                )
            if spec.device != first.device:
                raise SpecStackError(
                    f"Devices differ: Stacked element {i} is on {spec.device}, "
                    f"expected {first.device} like element 0"
                )
        dim = _norm_dim(dim, first.ndim, "leaf specs")
        shape = _stacked_shape([s.shape for s in specs], dim, len(specs))
        super().__init__(shape, first.device, first.dtype, first.domain)
        self._elements = list(specs)
        self.dim = dim

    @property
    def specs(self) -> list[TensorSpec]:
        """The stacked elements."""
        return self._elements

    def _stack_ndim(self) -> int:
        return self.ndim

    def _values(self, method: str, shape: ShapeLike | None) -> torch.Tensor:
        extra = _extra_shape(shape)
        parts = [getattr(s, method)(extra) for s in self._elements]
        if all(p.shape == parts[0].shape for p in parts):
            return torch.stack(parts, self.dim + len(extra))
        if self.dim + len(extra) != 0:
            raise ValueError(
                f"Stacked.{method}: elements have different shapes {[tuple(p.shape) for p in parts]}; "
                "they can only be returned as a nested tensor when stacked along dim 0"
            )
        return _nested(parts)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Stacked random values (a nested tensor when the elements' shapes differ)."""
        return self._values("rand", shape)

    def zero(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Stacked zeros (a nested tensor when the elements' shapes differ)."""
        return self._values("zero", shape)

    def one(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Stacked ones (a nested tensor when the elements' shapes differ)."""
        return self._values("one", shape)

    def _parts(self, val: Any) -> list | None:
        if isinstance(val, (list, tuple)):
            return list(val)
        if not isinstance(val, torch.Tensor):
            return None
        if val.is_nested:
            return list(val.unbind(0)) if self.dim == 0 else None
        if val.ndim < self.ndim or not _ends_with(val.shape, self.shape):
            return None
        return list(val.unbind(val.ndim - self.ndim + self.dim))

    def is_in(self, val: Any) -> bool:
        """Whether each slice of ``val`` along the stack dim is in its element spec."""
        parts = self._parts(val)
        if parts is None or len(parts) != len(self._elements):
            return False
        return all(spec.is_in(part) for spec, part in zip(self._elements, parts))

    def _mismatch(self, val: Any, key: Any = None) -> Exception | None:
        parts = self._parts(val)
        if parts is None or len(parts) != len(self._elements):
            got = (
                tuple(val.shape)
                if isinstance(val, torch.Tensor) and not val.is_nested
                else type(val).__name__
            )
            return ValueError(
                f"{_at('spec mismatch', key)}: expected shape {tuple(self.shape)}, got {got}"
            )
        for i, (spec, part) in enumerate(zip(self._elements, parts)):
            error = spec._mismatch(part, key)
            if error is not None:
                return type(error)(f"{error} (stacked element {i})")
        return None

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Project each slice along the stack dim into its element spec."""
        parts = self._parts(val)
        if parts is None or len(parts) != len(self._elements):
            raise ValueError(
                f"cannot project: expected shape {tuple(self.shape)}, got {tuple(val.shape)}"
            )
        projected = [spec.project(part) for spec, part in zip(self._elements, parts)]
        if isinstance(val, torch.Tensor) and val.is_nested:
            return _nested(projected)
        return torch.stack(projected, val.ndim - self.ndim + self.dim)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Encode each slice along the stack dim with its element spec."""
        if not isinstance(val, torch.Tensor):
            if isinstance(val, (list, tuple)) and not all(
                np.shape(v) == np.shape(val[0]) for v in val
            ):
                parts = [
                    s.encode(v, ignore_device=ignore_device) for s, v in zip(self._elements, val)
                ]
                return _nested(parts)
            val = torch.as_tensor(np.asarray(val))
        if val.is_nested:
            parts = [
                s.encode(p, ignore_device=ignore_device)
                for s, p in zip(self._elements, val.unbind(0))
            ]
            return _nested(parts)
        dim = val.ndim - self.ndim + self.dim
        parts = [
            s.encode(p, ignore_device=ignore_device)
            for s, p in zip(self._elements, val.unbind(dim))
        ]
        return torch.stack(parts, dim)

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None) -> Any:
        """A numpy array (a list of arrays for a nested tensor)."""
        if safe or (safe is None and _checks_on()):
            self.assert_is_in(val)
        if isinstance(val, torch.Tensor) and val.is_nested:
            return [p.detach().cpu().numpy() for p in val.unbind(0)]
        return val.detach().cpu().numpy()

    def __getitem__(self, index: Any) -> TensorSpec:
        """Element ``i`` along the stack dim, or a stack of indexed elements."""
        return self._index_stack(index)

    def expand(self, *shape: int | ShapeLike) -> TensorSpec:
        """Add new leading dims."""
        return self._expand_stack(shape)

    def unsqueeze(self, dim: int) -> TensorSpec:
        """Insert a singleton dim."""
        return self._unsqueeze_stack(dim)

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """Remove singleton dims."""
        return self._squeeze_stack(dim)

    def memoize_encode(self, mode: bool = True) -> Stacked:
        """Turn memoized encoding on (or off) in every element; returns ``self``."""
        for spec in self._elements:
            spec.memoize_encode(mode)
        return self

    def erase_memoize_cache(self) -> Stacked:
        """Forget the memoized encoding plans of every element; returns ``self``."""
        for spec in self._elements:
            spec.erase_memoize_cache()
        return self

    def clone(self) -> Stacked:
        """A deep copy."""
        return Stacked(*[s.clone() for s in self._elements], dim=self.dim)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> Stacked:
        """A copy on another device / with another dtype."""
        if not isinstance(dest, torch.dtype) and _as_device(dest) == self.device:
            return self
        return Stacked(*[s.to(dest) for s in self._elements], dim=self.dim)

    def _same_attributes(self, other: TensorSpec) -> bool:
        return (
            self.dim == other.dim
            and len(self._elements) == len(other._elements)
            and all(a == b for a, b in zip(self._elements, other._elements))
        )

    def cardinality(self) -> int:
        """Product of the elements' cardinalities."""
        total = 1
        for spec in self._elements:
            total *= spec.cardinality()
        return total

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(s) for s in self._elements)
        return f"Stacked(\n    {inner},\n    dim={self.dim}, shape={tuple(self.shape)})"


class StackedComposite(_StackedMixin, Composite):
    """A stack of Composites that may differ (entry shapes, exclusive keys...).

    Args:
        *composites: Composites with the same shape.
        dim: the stack dim among the batch dims of the result.

    Entries common to every element are reached by key: ``spec[key]`` stacks the
    elements' entries. ``rand()`` / ``zero()`` / ``one()`` return a
    ``LazyStackedTensorDict``; ``spec[i]`` along the stack dim returns element ``i``.

    Examples:
        >>> import torch
        >>> from tdrl.data import Composite, Unbounded
        >>> spec = torch.stack([Composite(obs=Unbounded((2,))), Composite(obs=Unbounded((3,)))], 0)
        >>> type(spec).__name__, spec.shape, spec["obs"].shape
        ('StackedComposite', torch.Size([2]), torch.Size([2, -1]))
        >>> td = spec.rand()
        >>> type(td).__name__, spec.is_in(td)
        ('LazyStackedTensorDict', True)
    """

    _kind = "stacked_composite"
    _stacked = True

    def __init__(self, *composites: Composite, dim: int = 0) -> None:
        if len(composites) == 1 and isinstance(composites[0], (list, tuple)):
            composites = tuple(composites[0])
        if not composites:
            raise ValueError("StackedComposite needs at least one Composite")
        first = composites[0]
        for i, spec in enumerate(composites):
            if not isinstance(spec, Composite):
                raise TypeError(
                    f"StackedComposite element {i}: expected a Composite, got {type(spec).__name__}"
                )
            if spec.shape != first.shape:
                raise ValueError(
                    f"StackedComposite element {i}: expected shape {tuple(first.shape)} like element 0, "
                    f"got {tuple(spec.shape)}"
                )
        self.dim = _norm_dim(dim, first.ndim, "Composites")
        self._elements = list(composites)
        self._locked = False
        self._cache = {}
        self._cache_version = -1
        self.data_cls = None

    # The stacked view of the common entries, rebuilt when any Composite changes.
    @property
    def _specs(self) -> dict[str, TensorSpec | None]:  # type: ignore[override]
        return self._cached("stacked_specs", self._build_specs)

    def _build_specs(self) -> dict[str, TensorSpec | None]:
        first = self._elements[0]
        out: dict[str, TensorSpec | None] = {}
        for key in first._specs:
            values = [c._specs.get(key) if key in c._specs else ... for c in self._elements]
            if any(v is ... for v in values):
                continue
            if all(v is None for v in values):
                out[key] = None
            elif any(v is None for v in values):
                continue
            else:
                out[key] = torch.stack(values, self.dim)
        return out

    @property
    def composites(self) -> list[Composite]:
        """The stacked Composites."""
        return self._elements

    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        """Batch shape: the elements' shape with the stack dim inserted."""
        return _stacked_shape([c.shape for c in self._elements], self.dim, len(self._elements))

    @property
    def _shape(self) -> torch.Size:  # type: ignore[override]
        return self.shape

    @property
    def device(self) -> torch.device | None:  # type: ignore[override]
        """Device of the first element."""
        return self._elements[0].device

    @property
    def _device(self) -> torch.device | None:  # type: ignore[override]
        return self._elements[0].device

    def _stack_ndim(self) -> int:
        return self.ndim

    def _set(self, key: tuple[str, ...], value: Any, full_key: tuple[str, ...]) -> None:
        self._check_unlocked(_display(full_key))
        if value is None or isinstance(value, dict):
            parts = [value] * len(self._elements)
        else:
            if not isinstance(value, TensorSpec):
                raise TypeError(
                    f"Composite entry {full_key!r}: expected a TensorSpec, got {type(value).__name__}"
                )
            if value.shape[: self.ndim] != self.shape[: self.ndim] and not isinstance(
                value, _StackedMixin
            ):
                value = value.expand((*self.shape, *value.shape[self.ndim :]))
            parts = (
                list(value.unbind(self.dim))
                if isinstance(value, _StackedMixin)
                else [value[(slice(None),) * self.dim + (i,)] for i in range(len(self._elements))]
            )
        for element, part in zip(self._elements, parts):
            element._set(key, part, full_key)
        _Version.value += 1

    def __delitem__(self, key: Any) -> None:
        """Delete an entry from every element that holds it (KeyError when none does)."""
        holders = [e for e in self._elements if key in e.keys(include_nested=True)]
        if not holders:
            raise KeyError(f"key {key!r} not found in any element of the StackedComposite")
        self._check_unlocked(key)
        for element in holders:
            del element[key]
        _Version.value += 1

    def type_check(self, value: Any, key: Any = None, *, selected_keys: Any = None) -> None:
        """Check dtypes element by element (heterogeneous entries cannot be stacked)."""
        key = selected_keys if key is None else key
        if key is not None or not isinstance(value, TensorDictBase):
            Composite.type_check(self, value, key)
            return
        parts = self._parts(value)
        if parts is None or len(parts) != len(self._elements):
            raise ValueError(
                f"type_check: expected a TensorDict with batch size ending with "
                f"{tuple(self.shape)}, got {tuple(value.batch_size)}"
            )
        for element, part in zip(self._elements, parts):
            element.type_check(part)

    def select(self, *keys: Any, strict: bool = True) -> StackedComposite:
        """A stack of the elements' selections."""
        return StackedComposite(
            *[c.select(*keys, strict=strict) for c in self._elements], dim=self.dim
        )

    def exclude(self, *keys: Any) -> StackedComposite:
        """A stack of the elements without the given entries."""
        return StackedComposite(*[c.exclude(*keys) for c in self._elements], dim=self.dim)

    def update(self, other: Composite | dict) -> StackedComposite:
        """Set every leaf of ``other`` (nested keys merge); returns ``self``."""
        if not isinstance(other, Composite):
            other = Composite(other, shape=self.shape)
        for key, value in other.items(True, True):
            self[key] = value
        return self

    def _children(self) -> Iterator[Composite]:
        return iter(self._elements)

    def clear_device_(self) -> StackedComposite:
        """Drop the device of every element; returns ``self``."""
        for element in self._elements:
            element.clear_device_()
        return self

    def memoize_encode(self, mode: bool = True) -> StackedComposite:
        """Turn memoized encoding on (or off) in every element; returns ``self``."""
        for element in self._elements:
            element.memoize_encode(mode)
        return self

    def erase_memoize_cache(self) -> StackedComposite:
        """Forget the memoized encoding plans of every element; returns ``self``."""
        for element in self._elements:
            element.erase_memoize_cache()
        return self

    def _lazy(self, method: str, shape: ShapeLike | None) -> LazyStackedTensorDict:
        extra = _extra_shape(shape)
        parts = [getattr(c, method)(extra) for c in self._elements]
        return LazyStackedTensorDict.lazy_stack(parts, dim=self.dim + len(extra))

    def rand(self, shape: ShapeLike | None = None) -> LazyStackedTensorDict:
        """Random values of every element, lazily stacked."""
        return self._lazy("rand", shape)

    def zero(self, shape: ShapeLike | None = None) -> LazyStackedTensorDict:
        """Zeros of every element, lazily stacked."""
        return self._lazy("zero", shape)

    def one(self, shape: ShapeLike | None = None) -> LazyStackedTensorDict:
        """Ones of every element, lazily stacked."""
        return self._lazy("one", shape)

    def _parts(self, val: Any) -> list | None:
        if not isinstance(val, TensorDictBase) or val.ndim < self.ndim:
            return None
        return list(val.unbind(val.ndim - self.ndim + self.dim))

    def is_in(self, val: Any) -> bool:
        """Whether each slice of ``val`` along the stack dim is in its element Composite."""
        parts = self._parts(val)
        if parts is None or len(parts) != len(self._elements):
            return False
        return all(c.is_in(p) for c, p in zip(self._elements, parts))

    def _mismatch(self, val: Any, key: Any = None) -> Exception | None:
        parts = self._parts(val)
        if parts is None or len(parts) != len(self._elements):
            got = tuple(val.batch_size) if isinstance(val, TensorDictBase) else type(val).__name__
            return ValueError(
                f"spec mismatch at key {key if key is not None else '<root>'!r}: expected a TensorDict "
                f"with batch size ending with {tuple(self.shape)}, got {got}"
            )
        for c, p in zip(self._elements, parts):
            error = c._mismatch(p, key)
            if error is not None:
                return error
        return None

    def project(self, val: TensorDictBase) -> TensorDictBase:
        """Project each slice along the stack dim into its element Composite."""
        parts = self._parts(val)
        if parts is None or len(parts) != len(self._elements):
            raise ValueError(f"cannot project: expected batch size ending with {tuple(self.shape)}")
        projected = [c.project(p) for c, p in zip(self._elements, parts)]
        return LazyStackedTensorDict.lazy_stack(projected, dim=val.ndim - self.ndim + self.dim)

    def __getitem__(self, index: Any) -> Any:
        """An entry by key (stacked over elements) or the stack indexed along its batch dims."""
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)
        ):
            return Composite.__getitem__(self, index)
        return self._index_stack(index)

    def _restack(self, elements: list, dim: int) -> Any:
        return torch.stack(elements, dim)

    def expand(self, *shape: int | ShapeLike) -> Any:
        """Add new leading dims."""
        return self._expand_stack(shape)

    def unsqueeze(self, dim: int) -> Any:
        """Insert a singleton batch dim."""
        return self._unsqueeze_stack(dim)

    def squeeze(self, dim: int | None = None) -> Any:
        """Remove singleton batch dims."""
        return self._squeeze_stack(dim)

    def clone(self) -> StackedComposite:
        """A deep copy."""
        return StackedComposite(*[c.clone() for c in self._elements], dim=self.dim)

    def empty(self) -> StackedComposite:
        """A stack of empty Composites with the same shapes."""
        return StackedComposite(*[c.empty() for c in self._elements], dim=self.dim)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> StackedComposite:
        """A copy on another device / with leaves of another dtype."""
        return StackedComposite(*[c.to(dest) for c in self._elements], dim=self.dim)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StackedComposite)
            and self.dim == other.dim
            and len(self._elements) == len(other._elements)
            and all(a == b for a, b in zip(self._elements, other._elements))
        )

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(c).replace("\n", "\n    ") for c in self._elements)
        return f"StackedComposite(\n    {inner},\n    dim={self.dim}, shape={tuple(self.shape)})"


def stack_specs(specs: Sequence[TensorSpec], dim: int = 0, *, out: Any = None) -> TensorSpec:
    """Stack specs like tensors: equal specs give a plain spec with a new dim, others a stack.

    This is what ``torch.stack([spec, ...], dim)`` calls.

    Examples:
        >>> import torch
        >>> from tdrl.data import Bounded
        >>> torch.stack([Bounded(0.0, 1.0, shape=(2,))] * 3, 0).shape
        torch.Size([3, 2])
    """
    if out is not None:
        raise TypeError("stacking specs does not support out=")
    specs = list(specs)
    if not specs:
        raise ValueError("cannot stack an empty list of specs")
    first = specs[0]
    is_composite = isinstance(first, Composite)
    for i, spec in enumerate(specs):
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"cannot stack specs: element {i} is a {type(spec).__name__}")
        if isinstance(spec, Composite) != is_composite:
            raise TypeError("cannot stack Composite specs with leaf specs")
    if is_composite:
        pos = _norm_dim(dim, first.ndim, "Composites")
        if all(type(s) is Composite and s == first for s in specs[1:]) and type(first) is Composite:
            out_spec = first.unsqueeze(pos)
            new_shape = list(out_spec.shape)
            new_shape[pos] = len(specs)
            return out_spec.expand(new_shape).clone() if len(specs) > 1 else out_spec
        return StackedComposite(*specs, dim=pos)
    pos = _norm_dim(dim, first.ndim, "leaf specs")
    if isinstance(first, Stacked):
        if pos == 0 and all(s == first for s in specs[1:]):
            return first.expand(len(specs), *first.shape)
        return Stacked(*specs, dim=pos)
    if all(s == first for s in specs[1:]):
        try:
            out_spec = first.unsqueeze(pos)
        except ValueError:
            return Stacked(*specs, dim=pos)
        new_shape = list(out_spec.shape)
        new_shape[pos] = len(specs)
        return out_spec.expand(new_shape).clone() if len(specs) > 1 else out_spec
    return Stacked(*specs, dim=pos)


_TORCH_HANDLERS[torch.stack] = stack_specs
