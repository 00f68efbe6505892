"""Nested keys of Composite specs: normalisation, display, and the set-like keys view."""

from __future__ import annotations

from collections.abc import Iterator, Set
from typing import Any

import torch

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
                raise TypeError(f"spec keys must be str or tuples of str, got {key!r}")
        return tuple(out)
    raise TypeError(f"spec keys must be str or tuples of str, got {key!r}")


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
