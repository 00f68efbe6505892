"""Nested keys of Composite specs: normalisation, display, and the set-like keys view."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Set
from typing import TYPE_CHECKING, Any

import torch

from tdrl.data.specs.errors import MSG_KEY, SpecKeyError

if TYPE_CHECKING:
    from tdrl.data.specs.base import TensorSpec

__all__: list[str] = []

NestedKey = str | tuple[str, ...]


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
                raise SpecKeyError(MSG_KEY.format(key=key))
        return tuple(out)
    raise SpecKeyError(MSG_KEY.format(key=key))


def _is_key(key: Any) -> bool:
    """Whether ``key`` is a str or a (nested) tuple of str (not an index like ``(0, 1)``)."""
    if isinstance(key, str):
        return True
    return (
        isinstance(key, tuple)
        and bool(key)
        and all(isinstance(k, str) or (isinstance(k, tuple) and _is_key(k)) for k in key)
    )


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
        if isinstance(key, tuple):
            if not _is_key(key):
                return False
            key = _unravel(key)
            if len(key) == 1:
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


class _KeyViews:
    """Key, value and item views of a Composite, cached until any Composite changes.

    Subclasses provide ``_specs``, the mapping of their own entries.
    """

    _specs: dict
    _cache: dict
    _cache_version: int

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
            leaf = (not isinstance(spec, _KeyViews)) if is_leaf is None else is_leaf(type(spec))
            if include_nested and isinstance(spec, _KeyViews) and not leaf:
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
