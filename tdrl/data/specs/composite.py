"""The :class:`Composite` spec: a (nested) mapping of keys to specs, describing a TensorDict."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Set
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs.base import (
    DEVICE_TYPING,
    ShapeLike,
    TensorSpec,
    _as_device,
    _as_shape,
    _expand_target,
    _extra_shape,
    _indexed_shape,
    _normalize_index,
    _safe_shape,
)

__all__ = ["Composite"]

NestedKey = str | tuple[str, ...]

_new_td = getattr(TensorDict, "_new_unsafe", TensorDict)


class _Version:
    """A counter bumped on every Composite mutation; caches compare against it."""

    value = 0


def _unravel(key: Any) -> tuple[str, ...]:
    """A key as a flat tuple of strings; TypeError for anything else."""
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key:
        out: list[str] = []
        for part in key:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, tuple):
                out.extend(_unravel(part))
            else:
                raise TypeError(f"spec keys must be str or tuples of str, got {key!r}")
        return tuple(out)
    raise TypeError(f"spec keys must be str or tuples of str, got {key!r}")


def _is_key(key: Any) -> bool:
    if isinstance(key, str):
        return True
    return isinstance(key, tuple) and bool(key) and all(isinstance(k, (str, tuple)) for k in key)


def _display(key: tuple[str, ...]) -> str | tuple[str, ...]:
    return key[0] if len(key) == 1 else key


def _shape_starts_with(shape: torch.Size, prefix: torch.Size) -> bool:
    if len(shape) < len(prefix):
        return False
    return all(p == s or p == -1 or s == -1 for s, p in zip(shape, prefix))


class _CompositeKeys(Set):
    """A read-only, set-like view of a Composite's keys (nested keys are tuples)."""

    __slots__ = ("_keys", "_lookup")

    def __init__(self, keys: tuple) -> None:
        self._keys = keys
        self._lookup = frozenset(keys)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, tuple) and len(key) == 1:
            key = key[0]
        try:
            return key in self._lookup
        except TypeError:
            return False

    def __iter__(self) -> Iterator:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    @classmethod
    def _from_iterable(cls, iterable: Any) -> set:
        return set(iterable)

    def __repr__(self) -> str:
        return f"_CompositeKeys({list(self._keys)})"


class Composite(TensorSpec):
    """A mapping of keys to specs that describes a (nested) TensorDict.

    Args:
        *args: at most one mapping (a dict or another Composite) of key -> spec.
        shape: leading batch dims shared by every entry (default ``()``); each entry's
            shape must start with it. ``batch_size`` is accepted as an alias.
        device: device of the entries; entries are moved to it when set. ``None`` lets
            entries live on different devices.
        data_cls: optional TensorDict subclass / tensorclass used for ``rand`` / ``zero``
            outputs (built with its ``from_tensordict`` when it has one).
        **kwargs: further key -> spec entries.

    Nested entries are reached with tuple keys (``spec["agents", "action"]``); setting a
    nested key creates the intermediate Composites with the parent's shape and device.
    Integer / slice indexing applies to the batch dims.

    Examples:
        >>> import torch
        >>> from tdrl.data import Bounded, Unbounded
        >>> spec = Composite(obs=Unbounded((4, 3)), shape=(4,))
        >>> spec["agents", "action"] = Bounded(-1.0, 1.0, shape=(4, 2))
        >>> sorted(spec.keys(True, True), key=str)
        [('agents', 'action'), 'obs']
        >>> td = spec.rand()
        >>> td.batch_size, td["agents", "action"].shape
        (torch.Size([4]), torch.Size([4, 2]))
        >>> spec.is_in(td)
        True
        >>> spec[0].shape
        torch.Size([])
    """

    _kind = "composite"
    domain = "composite"

    def __init__(
        self,
        *args: Mapping[str, TensorSpec | None],
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        data_cls: type | None = None,
        **kwargs: TensorSpec | Mapping | None,
    ) -> None:
        batch_size = kwargs.get("batch_size")
        if batch_size is not None and not isinstance(batch_size, (TensorSpec, Mapping)):
            del kwargs["batch_size"]
            if shape is not None:
                raise TypeError("Composite: pass shape or batch_size, not both")
            shape = batch_size
        if len(args) > 1:
            raise TypeError(f"Composite takes at most one positional mapping, got {len(args)}")
        self._shape = torch.Size(()) if shape is None else _as_shape(shape)
        self._device = None if device is None else _as_device(device)
        self._specs: dict[str, TensorSpec | None] = {}
        self._locked = False
        self._cache: dict = {}
        self._cache_version = -1
        self.data_cls = data_cls
        entries: dict = {}
        for arg in args:
            if isinstance(arg, Composite):
                entries.update(arg._specs)
            elif isinstance(arg, Mapping):
                entries.update(arg)
            else:
                raise TypeError(
                    f"Composite positional argument must be a mapping, got {type(arg).__name__}"
                )
        entries.update(kwargs)
        for key, value in entries.items():
            self._set((key,) if isinstance(key, str) else _unravel(key), value, _unravel(key))

    @classmethod
    def _from_entries(
        cls,
        specs: dict[str, TensorSpec | None],
        shape: torch.Size,
        device: torch.device | None,
        data_cls: type | None = None,
    ) -> Composite:
        """Build without validation (internal: entries already satisfy the invariants)."""
        out = Composite.__new__(Composite)
        out._shape = torch.Size(shape)
        out._device = device
        out._specs = specs
        out._locked = False
        out._cache = {}
        out._cache_version = -1
        out.data_cls = data_cls
        return out

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cache"] = {}
        state["_cache_version"] = -1
        return state

    # ------------------------------------------------------------------ attributes
    @property
    def shape(self) -> torch.Size:
        """Leading batch dims shared by all entries."""
        return self._shape

    @shape.setter
    def shape(self, value: ShapeLike) -> None:
        new_shape = _as_shape(value)
        for key, spec in self._specs.items():
            if spec is not None and not _shape_starts_with(spec.shape, new_shape):
                raise ValueError(
                    f"cannot set Composite shape to {tuple(new_shape)}: entry {key!r} has shape "
                    f"{tuple(spec.shape)}, which does not start with it"
                )
        self._shape = new_shape

    batch_size = shape

    @property
    def device(self) -> torch.device | None:
        """Device of the entries (``None`` when they may differ)."""
        return self._device

    @device.setter
    def device(self, value: DEVICE_TYPING | None) -> None:
        if value is None:
            self._device = None
            return
        device = _as_device(value)
        for key, spec in list(self._specs.items()):
            if spec is not None:
                self._specs[key] = spec.to(device)
        self._device = device
        _Version.value += 1

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype shared by every leaf, or ``None`` when they differ."""
        dtypes = {spec.dtype for spec in self.values(True, True) if spec is not None}
        return dtypes.pop() if len(dtypes) == 1 else None

    @property
    def is_locked(self) -> bool:
        """Whether entries can no longer be set or deleted."""
        return self._locked

    def lock_(self, recurse: bool = True) -> Composite:
        """Forbid setting / deleting entries (in nested Composites too by default)."""
        self._locked = True
        if recurse:
            for spec in self._specs.values():
                if isinstance(spec, Composite):
                    spec.lock_(recurse=True)
        return self

    def unlock_(self, recurse: bool = True) -> Composite:
        """Allow setting / deleting entries again."""
        self._locked = False
        if recurse:
            for spec in self._specs.values():
                if isinstance(spec, Composite):
                    spec.unlock_(recurse=True)
        return self

    # ------------------------------------------------------------------ key access
    def _cached(self, name: Any, build: Callable[[], Any]) -> Any:
        if self._cache_version != _Version.value:
            self._cache = {}
            self._cache_version = _Version.value
        try:
            return self._cache[name]
        except KeyError:
            value = self._cache[name] = build()
            return value

    def _walk(
        self, include_nested: bool, leaves_only: bool, is_leaf: Callable[[type], bool] | None
    ) -> tuple[tuple[NestedKey, TensorSpec | None], ...]:
        out: list = []
        for key, spec in self._specs.items():
            leaf = (not isinstance(spec, Composite)) if is_leaf is None else is_leaf(type(spec))
            if include_nested and isinstance(spec, Composite) and not leaf:
                for sub_key, sub_spec in spec.items(True, leaves_only, is_leaf=is_leaf):
                    full = (key, *sub_key) if isinstance(sub_key, tuple) else (key, sub_key)
                    out.append((full, sub_spec))
            if not leaves_only or leaf:
                out.append((key, spec))
        return tuple(out)

    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> tuple[tuple[NestedKey, TensorSpec | None], ...]:
        """``(key, spec)`` pairs; nested keys are tuples when ``include_nested`` is True."""
        if is_leaf is not None:
            return self._walk(include_nested, leaves_only, is_leaf)
        return self._cached(
            ("items", include_nested, leaves_only),
            lambda: self._walk(include_nested, leaves_only, None),
        )

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> _CompositeKeys:
        """A set-like view of the keys (cached until the spec changes)."""
        if is_leaf is not None:
            return _CompositeKeys(
                tuple(k for k, _ in self._walk(include_nested, leaves_only, is_leaf))
            )
        return self._cached(
            ("keys", include_nested, leaves_only),
            lambda: _CompositeKeys(tuple(k for k, _ in self.items(include_nested, leaves_only))),
        )

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> tuple[TensorSpec | None, ...]:
        """The specs, in key order."""
        if is_leaf is not None:
            return tuple(v for _, v in self._walk(include_nested, leaves_only, is_leaf))
        return self._cached(
            ("values", include_nested, leaves_only),
            lambda: tuple(v for _, v in self.items(include_nested, leaves_only)),
        )

    def _present(self) -> tuple[tuple[str, TensorSpec], ...]:
        return self._cached(
            "present", lambda: tuple((k, v) for k, v in self._specs.items() if v is not None)
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, key: object) -> bool:
        if not _is_key(key):
            return False
        return key in self.keys(include_nested=isinstance(key, tuple))

    def _lookup(self, key: tuple[str, ...]) -> TensorSpec | None:
        node: Any = self
        for i, part in enumerate(key):
            if not isinstance(node, Composite):
                raise KeyError(
                    f"key {_display(key)!r} not found: entry {_display(key[:i])!r} is a "
                    f"{type(node).__name__}, not a Composite"
                )
            try:
                node = node._specs[part]
            except KeyError:
                raise KeyError(
                    f"key {_display(key)!r} not found in Composite; available keys: {list(node._specs)}"
                ) from None
        return node

    def __getitem__(self, index: Any) -> Any:
        """An entry (str / tuple key) or the spec indexed along its batch dims."""
        if isinstance(index, str):
            try:
                return self._specs[index]
            except KeyError:
                raise KeyError(
                    f"key {index!r} not found in Composite; available keys: {list(self._specs)}"
                ) from None
        if _is_key(index):
            return self._lookup(_unravel(index))
        return self._index(index)

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The entry at ``key`` or ``default`` when it is missing."""
        try:
            return self._lookup(_unravel(key))
        except KeyError:
            return default

    def __setitem__(self, key: NestedKey, value: TensorSpec | Mapping | None) -> None:
        if not _is_key(key):
            raise TypeError(f"Composite entries are set by str or tuple-of-str key, got {key!r}")
        flat = _unravel(key)
        self._set(flat, value, flat)

    def set(self, key: NestedKey, spec: TensorSpec | Mapping | None) -> Composite:
        """Set an entry (nested keys create intermediate Composites); returns ``self``."""
        self[key] = spec
        return self

    def _check_unlocked(self, full_key: tuple[str, ...]) -> None:
        if self._locked:
            raise RuntimeError(
                f"cannot set or delete key {_display(full_key)!r}: the Composite is locked "
                "(call unlock_() first)"
            )

    def _set(self, key: tuple[str, ...], value: Any, full_key: tuple[str, ...]) -> None:
        self._check_unlocked(full_key)
        head = key[0]
        if len(key) > 1:
            child = self._specs.get(head)
            if child is None:
                child = Composite._from_entries({}, self._shape, self._device)
                self._specs[head] = child
            elif not isinstance(child, Composite):
                raise KeyError(
                    f"cannot set key {_display(full_key)!r}: entry {head!r} is a "
                    f"{type(child).__name__}, not a Composite"
                )
            child._set(key[1:], value, full_key)
            _Version.value += 1
            return
        if isinstance(value, Mapping) and not isinstance(value, TensorSpec):
            value = Composite(value, shape=self._shape, device=self._device)
        if value is not None:
            if not isinstance(value, TensorSpec):
                raise TypeError(
                    f"Composite entry {_display(full_key)!r}: expected a TensorSpec or None, "
                    f"got {type(value).__name__}"
                )
            if not _shape_starts_with(value.shape, self._shape):
                raise ValueError(
                    f"spec shape mismatch at key {_display(full_key)!r}: expected a shape starting "
                    f"with the Composite's shape {tuple(self._shape)}, got {tuple(value.shape)}"
                )
            if self._device is not None and value.device != self._device:
                value = value.to(self._device)
        self._specs[head] = value
        _Version.value += 1

    def __delitem__(self, key: NestedKey) -> None:
        flat = _unravel(key)
        parent = self._lookup(flat[:-1]) if len(flat) > 1 else self
        if not isinstance(parent, Composite) or flat[-1] not in parent._specs:
            raise KeyError(f"key {_display(flat)!r} not found in Composite")
        parent._check_unlocked(flat)
        del parent._specs[flat[-1]]
        _Version.value += 1

    def pop(self, key: NestedKey, *default: Any) -> Any:
        """Remove an entry and return it (or ``default`` when it is missing)."""
        try:
            value = self[key]
        except KeyError:
            if default:
                return default[0]
            raise
        del self[key]
        return value

    def update(self, other: Composite | Mapping) -> Composite:
        """Set every entry of ``other``, merging nested Composites; returns ``self``."""
        items = other._specs.items() if isinstance(other, Composite) else other.items()
        for key, value in items:
            current = self.get(key)
            if (
                isinstance(value, Composite)
                and isinstance(current, Composite)
                and type(current) is Composite
            ):
                current.update(value)
            else:
                self[key] = value
        return self

    def select(self, *keys: NestedKey, strict: bool = True) -> Composite:
        """A new Composite holding copies of the given entries only."""
        out = self.empty()
        for key in keys:
            flat = _unravel(key)
            try:
                value = self._lookup(flat)
            except KeyError:
                if strict:
                    raise
                continue
            node_src, node_dst = self, out
            for part in flat[:-1]:
                node_src = node_src._specs[part]
                if part not in node_dst._specs:
                    node_dst._specs[part] = node_src.empty()
                node_dst = node_dst._specs[part]
            node_dst._specs[flat[-1]] = None if value is None else value.clone()
        _Version.value += 1
        return out

    def exclude(self, *keys: NestedKey) -> Composite:
        """A copy without the given entries (missing keys are ignored)."""
        out = self.clone()
        for key in keys:
            if key in out.keys(True):
                del out[key]
        return out

    def is_empty(self, recurse: bool = False) -> bool:
        """Whether there are no entries (with ``recurse``: no leaves in nested Composites)."""
        if recurse:
            return all(
                spec is None or (isinstance(spec, Composite) and spec.is_empty(recurse=True))
                for spec in self._specs.values()
            )
        return not self._specs

    def empty(self) -> Composite:
        """A Composite with the same shape and device and no entries."""
        return Composite._from_entries({}, self._shape, self._device, self.data_cls)

    # ------------------------------------------------------------------ sampling
    def _to_data(self, source: dict, extra: torch.Size) -> TensorDictBase:
        batch = torch.Size((*extra, *_safe_shape(self._shape)))
        td = _new_td(source, batch_size=batch, device=self._device)
        if self.data_cls is not None:
            convert = getattr(self.data_cls, "from_tensordict", None)
            return convert(td) if convert is not None else self.data_cls(td)
        return td

    def rand(self, shape: ShapeLike | None = None) -> TensorDictBase:
        """A TensorDict of random values, batch size ``shape + self.shape``."""
        extra = _extra_shape(shape)
        return self._to_data({k: v.rand(extra) for k, v in self._present()}, extra)

    def zero(self, shape: ShapeLike | None = None) -> TensorDictBase:
        """A TensorDict of zeros, batch size ``shape + self.shape``."""
        extra = _extra_shape(shape)
        return self._to_data({k: v.zero(extra) for k, v in self._present()}, extra)

    def one(self, shape: ShapeLike | None = None) -> TensorDictBase:
        """A TensorDict of ones, batch size ``shape + self.shape``."""
        extra = _extra_shape(shape)
        return self._to_data({k: v.one(extra) for k, v in self._present()}, extra)

    # ------------------------------------------------------------------ membership
    def _mismatch(self, val: Any, key: Any = None) -> Exception | None:
        prefix = () if key is None else (_unravel(key) if _is_key(key) else ())
        if not isinstance(val, (TensorDictBase, Mapping)):
            return TypeError(
                f"spec mismatch at key {_display(prefix) if prefix else '<root>'!r}: expected a "
                f"TensorDict, got {type(val).__name__}"
            )
        for name, spec in self._present():
            if isinstance(spec, Composite) and spec.is_empty(recurse=True):
                continue
            full = (*prefix, name)
            entry = val.get(name, None)
            if entry is None:
                return ValueError(
                    f"spec mismatch at key {_display(full)!r}: expected an entry, got none"
                )
            error = spec._mismatch(entry, _display(full))
            if error is not None:
                return error
        return None

    def is_in(self, val: Any) -> bool:
        """Whether every entry of the spec is present in ``val`` and in its spec."""
        if not isinstance(val, (TensorDictBase, Mapping)):
            return False
        for name, spec in self._present():
            if isinstance(spec, Composite) and spec.is_empty(recurse=True):
                continue
            entry = val.get(name, None)
            if entry is None or not spec.is_in(entry):
                return False
        return True

    def type_check(self, value: Any, key: Any = None, *, selected_keys: Any = None) -> None:
        """Check dtypes of ``value``'s entries (or of one entry when ``key`` is given)."""
        key = selected_keys if key is None else key
        if key is not None and _is_key(key):
            spec = self[key]
            entry = value.get(key) if isinstance(value, (TensorDictBase, Mapping)) else value
            spec.type_check(entry, _display(_unravel(key)))
            return
        if key is not None:
            for item in key:
                self.type_check(value, item)
            return
        for name, spec in self._present():
            entry = value.get(name, None)
            if entry is not None:
                if isinstance(spec, Composite):
                    spec.type_check(entry)
                else:
                    spec.type_check(entry, name)

    def project(self, val: TensorDictBase) -> TensorDictBase:
        """A shallow copy of ``val`` whose entries are projected into their specs."""
        out = val.copy()
        for name, spec in self._present():
            entry = val.get(name, None)
            if entry is not None and not spec.is_in(entry):
                out.set(name, spec.project(entry))
        return out

    def encode(self, vals: Mapping[str, Any], *, ignore_device: bool = False) -> TensorDictBase:
        """Convert a (nested) dict of numpy / python values to a TensorDict."""
        out = {}
        for name, value in vals.items():
            spec = self._specs.get(name)
            if spec is None:
                raise KeyError(f"cannot encode key {name!r}: it has no spec in this Composite")
            out[name] = spec.encode(value, ignore_device=ignore_device)
        return TensorDict(
            out, batch_size=_safe_shape(self._shape), device=None if ignore_device else self._device
        )

    def to_numpy(self, val: TensorDictBase, safe: bool | None = None) -> dict:
        """A nested dict of numpy arrays."""
        if safe:
            self.assert_is_in(val)
        return {
            name: spec.to_numpy(val.get(name))
            for name, spec in self._present()
            if name in val.keys()
        }

    # ------------------------------------------------------------------ shape ops
    def _map(
        self, fn: Callable[[TensorSpec], TensorSpec], shape: torch.Size, device: Any
    ) -> Composite:
        specs = {k: (None if v is None else fn(v)) for k, v in self._specs.items()}
        return Composite._from_entries(specs, shape, device, self.data_cls)

    def expand(self, *shape: int | ShapeLike) -> Composite:
        """A Composite with new leading dims (or singleton batch dims broadcast)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new_shape = _expand_target(self._shape, shape, 0)
        ndim = self.ndim
        return self._map(lambda s: s.expand((*new_shape, *s.shape[ndim:])), new_shape, self._device)

    def unsqueeze(self, dim: int) -> Composite:
        """A Composite with a singleton batch dim inserted at ``dim``."""
        ndim = self.ndim
        pos = dim + ndim + 1 if dim < 0 else dim
        if not 0 <= pos <= ndim:
            raise ValueError(
                f"cannot unsqueeze a Composite of shape {tuple(self._shape)} at dim {dim}"
            )
        new_shape = torch.Size((*self._shape[:pos], 1, *self._shape[pos:]))
        return self._map(lambda s: s.unsqueeze(pos), new_shape, self._device)

    def squeeze(self, dim: int | None = None) -> Composite:
        """A Composite with singleton batch dims removed (all of them, or only ``dim``)."""
        ndim = self.ndim
        if dim is None:
            dims = [i for i, d in enumerate(self._shape) if d == 1]
        else:
            pos = dim + ndim if dim < 0 else dim
            if not 0 <= pos < ndim:
                raise ValueError(
                    f"cannot squeeze dim {dim} of a Composite of shape {tuple(self._shape)}"
                )
            dims = [pos] if self._shape[pos] == 1 else []
        if not dims:
            return self.clone()
        new_shape = torch.Size(d for i, d in enumerate(self._shape) if i not in dims)

        def _squeeze(spec: TensorSpec) -> TensorSpec:
            for d in reversed(dims):
                spec = spec.squeeze(d)
            return spec

        return self._map(_squeeze, new_shape, self._device)

    def reshape(self, *shape: int | ShapeLike) -> Composite:
        """A Composite with its batch dims reshaped."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new_shape = torch.empty(_safe_shape(self._shape), device="meta").reshape(shape).shape
        ndim = self.ndim
        return self._map(lambda s: s.reshape(*new_shape, *s.shape[ndim:]), new_shape, self._device)

    view = reshape

    def _index(self, index: Any) -> Composite:
        if not self.ndim:
            raise IndexError(f"cannot index a Composite with empty shape by {index!r}")
        index = _normalize_index(index, self.ndim)
        new_shape = _indexed_shape(self._shape, index)
        return self._map(lambda s: s[index], new_shape, self._device)

    def clone(self) -> Composite:
        """A deep copy (unlocked)."""
        return self._map(lambda s: s.clone(), self._shape, self._device)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> Composite:
        """A copy on another device (or with leaves cast to a dtype); ``self`` when unchanged."""
        if isinstance(dest, torch.dtype):
            return self._map(lambda s: s.to(dest), self._shape, self._device)
        device = _as_device(dest)
        if device == self._device:
            return self
        return self._map(lambda s: s.to(device), self._shape, device)

    # ------------------------------------------------------------------ comparison
    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Composite) or other._kind != self._kind:
            return False
        if self._shape != other._shape or self._device != other._device:
            return False
        if self._specs.keys() != other._specs.keys():
            return False
        return all(value == other._specs[key] for key, value in self._specs.items())

    def cardinality(self) -> int:
        """Number of joint values of the (discrete) leaves."""
        total = 1
        for spec in self.values(True, True):
            if spec is not None:
                total *= spec.cardinality()
        return total

    def __repr__(self) -> str:
        lines = []
        for key, spec in self._specs.items():
            text = repr(spec).replace("\n", "\n    ")
            lines.append(f"    {key}: {text}")
        body = ",\n".join(lines)
        return (
            f"Composite(\n{body}{',' if body else ''}\n    device={self._device},\n"
            f"    shape={tuple(self._shape)})"
        )
