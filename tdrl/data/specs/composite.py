"""The :class:`Composite` spec: a (nested) mapping of keys to specs, describing a TensorDict."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs.base import TensorSpec, _checks_on
from tdrl.data.specs.errors import MSG_KEY, SpecKeyError
from tdrl.data.specs.keys import (
    NestedKey,
    _display,
    _is_key,
    _KeyViews,
    _shape_starts_with,
    _unravel,
    _Version,
)
from tdrl.data.specs.locking import _Lockable
from tdrl.data.specs.names import (
    Names,
    _Named,
    _names_after_expand,
    _names_after_index,
    _names_after_squeeze,
    _names_after_unsqueeze,
)
from tdrl.data.specs.shapes import (
    DEVICE_TYPING,
    ShapeLike,
    _as_device,
    _as_shape,
    _expand_target,
    _extra_shape,
    _indexed_shape,
    _normalize_index,
    _safe_shape,
)

__all__ = ["Composite"]

_new_td = getattr(TensorDict, "_new_unsafe", TensorDict)

#: Entry names refused because they are the names of spec attributes.
_FORBIDDEN_KEYS = frozenset({"shape", "device", "dtype", "space"})


def _is_plain(spec: Any) -> bool:
    """Whether ``spec`` is a Composite whose batch shape can be set (not a stack)."""
    return isinstance(spec, Composite) and not spec._stacked


class Composite(_KeyViews, _Named, _Lockable, TensorSpec):
    """A mapping of keys to specs that describes a (nested) TensorDict.

    Args:
        *args: at most one mapping (a dict or another Composite) of key -> spec.
        shape: leading batch dims shared by every entry (default ``()``); each entry's
            shape must start with it. ``batch_size`` is accepted as an alias.
        device: device of the entries; entries are moved to it when set. ``None`` lets
            entries live on different devices.
        data_cls: optional TensorDict subclass / tensorclass used for ``rand`` / ``zero``
            outputs (built with its ``from_tensordict`` when it has one).
        names: optional names of the batch dims (``None`` for an unnamed dim); nested
            Composites and sampled TensorDicts carry them.
        **kwargs: further key -> spec entries.

    Nested entries are reached with tuple keys (``spec["agents", "action"]``); setting a
    nested key creates the intermediate Composites with the parent's shape and device. A
    nested Composite whose own shape is shorter than the parent's (but whose entries
    start with the parent's shape) takes the parent's shape. The names ``shape``,
    ``device``, ``dtype`` and ``space`` cannot be used as keys. Integer / slice indexing
    applies to the batch dims. ``project`` writes the projected values into its input.

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
    #: Whether this is a stack of Composites (its shape follows the elements).
    _stacked = False

    def __init__(
        self,
        *args: Mapping[str, TensorSpec | None],
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        data_cls: type | None = None,
        **kwargs: TensorSpec | Mapping | None,
    ) -> None:
        options = {}
        for option in ("batch_size", "names"):
            value = kwargs.get(option)
            if value is not None and not isinstance(value, (TensorSpec, Mapping)):
                options[option] = kwargs.pop(option)
        if "batch_size" in options:
            if shape is not None:
                raise TypeError("Composite: pass shape or batch_size, not both")
            shape = options["batch_size"]
        if len(args) > 1:
            raise TypeError(f"Composite takes at most one positional mapping, got {len(args)}")
        self._shape = torch.Size(()) if shape is None else _as_shape(shape)
        self._device = None if device is None else _as_device(device)
        self._specs: dict[str, TensorSpec | None] = {}
        self._locked = False
        self._cache: dict = {}
        self._cache_version = -1
        self._names: Names | None = None
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
        if "names" in options:
            self.names = options["names"]

    @classmethod
    def _from_entries(
        cls,
        specs: dict[str, TensorSpec | None],
        shape: torch.Size,
        device: torch.device | None,
        data_cls: type | None = None,
        names: Names | None = None,
    ) -> Composite:
        """Build without validation (internal: entries already satisfy the invariants)."""
        out = Composite.__new__(Composite)
        out._shape = torch.Size(shape)
        out._device = device
        out._specs = specs
        out._locked = False
        out._cache = {}
        out._cache_version = -1
        out._names = None if names is None else list(names)
        out.data_cls = data_cls
        return out

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cache"] = {}
        state["_cache_version"] = -1
        return self._lock_state_for_pickle(state)

    def _children(self) -> Iterator[Composite]:
        return (spec for spec in self._specs.values() if isinstance(spec, Composite))

    # ------------------------------------------------------------------ attributes
    @property
    def shape(self) -> torch.Size:
        """Leading batch dims shared by all entries.

        Setting it checks that every entry starts with the new shape; nested Composites
        that do not take the new shape too.
        """
        return self._shape

    @shape.setter
    def shape(self, value: ShapeLike) -> None:
        new_shape = _as_shape(value)
        self._check_batch_shape(new_shape, ())
        self._apply_batch_shape(new_shape)

    batch_size = shape

    def _check_batch_shape(self, shape: torch.Size, prefix: tuple) -> None:
        for key, spec in self._specs.items():
            if spec is None or _shape_starts_with(spec.shape, shape):
                continue
            if _is_plain(spec):
                spec._check_batch_shape(shape, (*prefix, key))
                continue
            raise ValueError(
                f"cannot set Composite shape to {tuple(shape)}: entry "
                f"{_display((*prefix, key))!r} has shape {tuple(spec.shape)}, which does not "
                "start with it"
            )

    def _apply_batch_shape(self, shape: torch.Size) -> None:
        if len(shape) != len(self._shape):
            self._names = None
        self._shape = shape
        for spec in self._specs.values():
            if _is_plain(spec) and not _shape_starts_with(spec.shape, shape):
                spec._apply_batch_shape(shape)
        _Version.value += 1

    def _with_batch_shape(self, shape: torch.Size) -> Composite:
        """A copy holding the same entries with batch shape ``shape`` (nested ones too)."""
        specs = {
            key: spec._with_batch_shape(shape)
            if _is_plain(spec) and not _shape_starts_with(spec.shape, shape)
            else spec
            for key, spec in self._specs.items()
        }
        return Composite._from_entries(specs, shape, self._device, self.data_cls)

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

    def clear_device_(self) -> Composite:
        """Drop the device of this Composite and of the nested ones; returns ``self``.

        Entries keep their own devices; the Composite no longer moves new entries.
        """
        self._device = None
        for child in self._children():
            child.clear_device_()
        return self

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype shared by every leaf, or ``None`` when they differ."""
        dtypes = {spec.dtype for spec in self.values(True, True) if spec is not None}
        return dtypes.pop() if len(dtypes) == 1 else None

    # ------------------------------------------------------------------ key access
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
            raise SpecKeyError(f"Composite entries are set by key: {MSG_KEY.format(key=key)}")
        flat = _unravel(key)
        self._set(flat, value, flat)

    def set(self, key: NestedKey, spec: TensorSpec | Mapping | None) -> Composite:
        """Set an entry (nested keys create intermediate Composites); returns ``self``."""
        self[key] = spec
        return self

    def _set(self, key: tuple[str, ...], value: Any, full_key: tuple[str, ...]) -> None:
        head = key[0]
        if len(key) > 1:
            child = self._specs.get(head)
            if child is None:
                self._check_unlocked(_display(full_key))
                self._check_key_name(head)
                child = Composite._from_entries({}, self._shape, self._device, names=self._names)
                self._specs[head] = child
            elif not isinstance(child, Composite):
                raise KeyError(
                    f"cannot set key {_display(full_key)!r}: entry {head!r} is a "
                    f"{type(child).__name__}, not a Composite"
                )
            child._set(key[1:], value, full_key)
            _Version.value += 1
            return
        self._check_unlocked(_display(full_key))
        self._check_key_name(head)
        self._specs[head] = self._adopt(value, full_key)
        _Version.value += 1

    @staticmethod
    def _check_key_name(key: str) -> None:
        if key in _FORBIDDEN_KEYS:
            raise AttributeError(
                f"the key {key!r} cannot be set: it is the name of a spec attribute "
                f"(reserved keys: {sorted(_FORBIDDEN_KEYS)})"
            )

    def _adopt(self, value: Any, full_key: tuple[str, ...]) -> TensorSpec | None:
        """``value`` made fit to be an entry: a spec with this Composite's batch shape / device."""
        if isinstance(value, Mapping) and not isinstance(value, TensorSpec):
            value = Composite(value, shape=self._shape, device=self._device)
        if value is None:
            return None
        if not isinstance(value, TensorSpec):
            raise TypeError(
                f"Composite entry {_display(full_key)!r}: expected a TensorSpec or None, "
                f"got {type(value).__name__}"
            )
        if not _shape_starts_with(value.shape, self._shape):
            if not (_is_plain(value) and value._leaves_start_with(self._shape)):
                raise ValueError(
                    f"spec shape mismatch at key {_display(full_key)!r}: expected a shape "
                    f"starting with the Composite's shape {tuple(self._shape)}, got "
                    f"{tuple(value.shape)}"
                )
            value = value._with_batch_shape(self._shape)
        if self._device is not None and value.device != self._device:
            value = value.to(self._device)
        if self._names is not None and _is_plain(value):
            value._set_names(self._names + value.names[len(self._names) :])
        return value

    def _leaves_start_with(self, shape: torch.Size) -> bool:
        for spec in self._specs.values():
            if spec is None or _shape_starts_with(spec.shape, shape):
                continue
            if not (_is_plain(spec) and spec._leaves_start_with(shape)):
                return False
        return True

    def __delitem__(self, key: NestedKey) -> None:
        flat = _unravel(key)
        parent = self._lookup(flat[:-1]) if len(flat) > 1 else self
        if not isinstance(parent, Composite) or flat[-1] not in parent._specs:
            raise KeyError(f"key {_display(flat)!r} not found in Composite")
        parent._check_unlocked(_display(flat))
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
            if isinstance(value, Composite) and _is_plain(current):
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
        """A Composite with the same shape, device and names, and no entries."""
        return Composite._from_entries({}, self._shape, self._device, self.data_cls, self._names)

    # ------------------------------------------------------------------ sampling
    def _to_data(self, source: dict, extra: torch.Size) -> TensorDictBase:
        batch = torch.Size((*extra, *_safe_shape(self._shape)))
        td = _new_td(source, batch_size=batch, device=self._device)
        if self._names is not None:
            td.names = [None] * len(extra) + self._names
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

    def enumerate(self, use_mask: bool = False) -> TensorDictBase:
        """Every joint value of the leaves, stacked along a new first dim.

        Batch elements share the value: the result has batch size
        ``(cardinality(), *shape)`` (the batch dims are expanded views).
        """
        unbatched = self[(0,) * self.ndim] if self.ndim else self
        leaves = [(k, v) for k, v in unbatched.items(True, True) if v is not None]
        values = [spec.enumerate(use_mask) for _, spec in leaves]
        counts = [value.shape[0] for value in values]
        if values:
            grids = torch.meshgrid(*[torch.arange(n) for n in counts], indexing="ij")
            picked = [value[grid.reshape(-1)] for value, grid in zip(values, grids)]
        else:
            picked = []
        total = int(np.prod(counts)) if counts else 1
        out = TensorDict(
            dict(zip([k for k, _ in leaves], picked)), batch_size=(total,), device=self._device
        )
        batch = _safe_shape(self._shape)
        return out.reshape(total, *([1] * len(batch))).expand(total, *batch)

    # ------------------------------------------------------------------ membership
    def _entry(self, val: Any, name: str, prefix: tuple) -> Any:
        entry = val.get(name, None)
        if entry is None:
            raise KeyError(
                f"spec mismatch at key {_display((*prefix, name))!r}: the spec has this entry "
                "but the value has none"
            )
        return entry

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
            try:
                entry = self._entry(val, name, prefix)
            except KeyError as err:
                return err
            error = spec._mismatch(entry, _display((*prefix, name)))
            if error is not None:
                return error
        return None

    def is_in(self, val: Any) -> bool:
        """Whether every entry of ``val`` is in its spec.

        An entry of the spec missing from ``val`` raises a KeyError.
        """
        if not isinstance(val, (TensorDictBase, Mapping)):
            return False
        for name, spec in self._present():
            if isinstance(spec, Composite) and spec.is_empty(recurse=True):
                continue
            if not spec.is_in(self._entry(val, name, ())):
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
        """Project every entry of ``val`` that is outside its spec, in place; returns ``val``."""
        for name, spec in self._present():
            entry = val.get(name, None)
            if entry is None or spec.is_in(entry):
                continue
            projected = spec.project(entry)
            if projected is not entry:
                if isinstance(val, TensorDictBase):
                    val.set(name, projected)
                else:
                    val[name] = projected
        return val

    def encode(self, vals: Mapping[str, Any], *, ignore_device: bool = False) -> TensorDictBase:
        """Convert a (nested) dict of numpy / python values to a TensorDict.

        Each value goes through its entry's ``encode``; an error names the key.
        """
        out = {}
        specs = self._specs
        for name, value in vals.items():
            spec = specs.get(name)
            if spec is None:
                raise KeyError(
                    f"cannot encode key {name!r}: The Composite instance with keys "
                    f"{list(specs)} has no spec for it"
                )
            try:
                out[name] = spec.encode(value, ignore_device=ignore_device)
            except (ValueError, TypeError, RuntimeError) as err:
                raise type(err)(f"cannot encode key {name!r}: {err}") from err
        return TensorDict(
            out, batch_size=_safe_shape(self._shape), device=None if ignore_device else self._device
        )

    def memoize_encode(self, mode: bool = True) -> Composite:
        """Turn memoized encoding on (or off) for every entry; returns ``self``."""
        for spec in self._specs.values():
            if spec is not None:
                spec.memoize_encode(mode)
        return self

    def erase_memoize_cache(self) -> Composite:
        """Forget the memoized encoding plans of every entry; returns ``self``."""
        for spec in self._specs.values():
            if spec is not None:
                spec.erase_memoize_cache()
        return self

    def to_numpy(self, val: TensorDictBase, safe: bool | None = None) -> dict:
        """A nested dict of numpy arrays (``safe=True`` checks ``val`` is in the spec first)."""
        if safe or (safe is None and _checks_on()):
            self.assert_is_in(val)
        return {
            name: spec.to_numpy(val.get(name), safe=False)
            for name, spec in self._present()
            if name in val.keys()
        }

    # ------------------------------------------------------------------ shape ops
    def _map(
        self,
        fn: Callable[[TensorSpec], TensorSpec],
        shape: torch.Size,
        device: Any,
        names: Names | None = None,
    ) -> Composite:
        specs = {k: (None if v is None else fn(v)) for k, v in self._specs.items()}
        return Composite._from_entries(specs, shape, device, self.data_cls, names)

    def expand(self, *shape: int | ShapeLike) -> Composite:
        """A Composite with new leading dims (or singleton batch dims broadcast)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new_shape = _expand_target(self._shape, shape, 0)
        ndim = self.ndim
        names = None if self._names is None else _names_after_expand(self._names, len(new_shape))
        return self._map(
            lambda s: s.expand((*new_shape, *s.shape[ndim:])), new_shape, self._device, names
        )

    def unsqueeze(self, dim: int) -> Composite:
        """A Composite with a singleton batch dim inserted at ``dim``."""
        ndim = self.ndim
        pos = dim + ndim + 1 if dim < 0 else dim
        if not 0 <= pos <= ndim:
            raise ValueError(
                f"cannot unsqueeze a Composite of shape {tuple(self._shape)} at dim {dim}"
            )
        new_shape = torch.Size((*self._shape[:pos], 1, *self._shape[pos:]))
        names = None if self._names is None else _names_after_unsqueeze(self._names, pos)
        return self._map(lambda s: s.unsqueeze(pos), new_shape, self._device, names)

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

        names = None if self._names is None else _names_after_squeeze(self._names, dims)
        return self._map(_squeeze, new_shape, self._device, names)

    def reshape(self, *shape: int | ShapeLike) -> Composite:
        """A Composite with its batch dims reshaped (names are dropped)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new_shape = torch.empty(_safe_shape(self._shape), device="meta").reshape(shape).shape
        ndim = self.ndim
        return self._map(lambda s: s.reshape(*new_shape, *s.shape[ndim:]), new_shape, self._device)

    view = reshape

    def _index(self, index: Any) -> Composite:
        index = _normalize_index(index, self.ndim)
        new_shape = _indexed_shape(self._shape, index)
        names = None if self._names is None else _names_after_index(self._names, index)
        return self._map(lambda s: s[index], new_shape, self._device, names)

    def clone(self) -> Composite:
        """A deep copy (unlocked, names kept)."""
        return self._map(lambda s: s.clone(), self._shape, self._device, self._names)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> Composite:
        """A copy on another device (or with leaves cast to a dtype); ``self`` when unchanged."""
        if isinstance(dest, torch.dtype):
            return self._map(lambda s: s.to(dest), self._shape, self._device, self._names)
        device = _as_device(dest)
        if device == self._device:
            return self
        return self._map(lambda s: s.to(device), self._shape, device, self._names)

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

    __hash__ = None  # type: ignore[assignment]

    def cardinality(self) -> int | float:
        """Number of joint values of the leaves (``inf`` when one is continuous)."""
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
