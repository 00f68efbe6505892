"""Dim names of Composite specs: validation and how shape operations carry them.

Names label the batch dims of a Composite (``["batch", "time"]``); ``None`` marks an
unnamed dim. They follow the dims through expand, squeeze, unsqueeze, unbind and
indexing, and TensorDicts sampled from a named Composite carry them. They take no part
in equality.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__: list[str] = []

Names = list[str | None]


def _check_names(names: Sequence[Any], ndim: int) -> Names:
    names = list(names)
    if len(names) != ndim:
        raise ValueError(f"Expected {ndim} names, but got {len(names)} names: {names}")
    for name in names:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"Composite names must be str or None, got {name!r}")
    given = [name for name in names if name is not None]
    if len(set(given)) != len(given):
        raise ValueError(f"Composite names must be unique, got {names}")
    return names


def _refined(current: Names, new: Sequence[Any]) -> Names:
    """``current`` names refined by ``new`` (``...`` stands for the dims not listed)."""
    new = list(new)
    if any(name is Ellipsis for name in new):
        position = new.index(Ellipsis)
        fill = len(current) - (len(new) - 1)
        new = new[:position] + current[position : position + fill] + new[position + 1 :]
    new = _check_names(new, len(current))
    for old, name in zip(current, new):
        if old is not None and name is not None and old != name:
            raise RuntimeError(
                f"cannot coerce Composite names {current} to {new}: dim named {old!r} "
                f"cannot be renamed {name!r}"
            )
    return [name if name is not None else old for old, name in zip(current, new)]


def _names_after_index(names: Names, index: tuple) -> Names | None:
    """Names after indexing the batch dims with a normalised ``index`` (``None``: unknown)."""
    out: Names = []
    position = 0
    for item in index:
        if item is None:
            out.append(None)
        elif isinstance(item, (int, np.integer)):
            position += 1
        elif isinstance(item, slice):
            out.append(names[position] if position < len(names) else None)
            position += 1
        else:
            # advanced indexing moves and merges dims: the result is unnamed
            return None
    return out + names[position:]


def _names_after_squeeze(names: Names, dims: Sequence[int]) -> Names:
    return [name for i, name in enumerate(names) if i not in dims]


def _names_after_unsqueeze(names: Names, pos: int) -> Names:
    return [*names[:pos], None, *names[pos:]]


def _names_after_expand(names: Names, new_ndim: int) -> Names:
    return [None] * (new_ndim - len(names)) + names


class _Named:
    """Dim names of a Composite: the ``names`` property, ``refine_names`` and propagation.

    Subclasses provide ``ndim``, ``clone()`` and ``_children()``; a child takes part in
    name propagation unless it is a stack of Composites (``_stacked``).
    """

    _names: Names | None = None
    _stacked: bool = False

    @property
    def names(self) -> Names:
        """Names of the batch dims (``None`` for unnamed dims).

        Setting a list of ``ndim`` names (or ``None`` to erase them) names the nested
        Composites' leading dims too.
        """
        if self._names is None:
            return [None] * self.ndim
        return list(self._names)

    @names.setter
    def names(self, value: list[str | None] | None) -> None:
        if value is None:
            self._erase_names()
            return
        self._set_names(_check_names(value, self.ndim))

    def _set_names(self, names: Names) -> None:
        self._names = list(names)
        for child in self._children():
            if not child._stacked:
                child._set_names(names + child.names[len(names) :])

    def _has_names(self) -> bool:
        return self._names is not None and any(name is not None for name in self._names)

    def _erase_names(self) -> None:
        self._names = None
        for child in self._children():
            if not child._stacked:
                child._erase_names()

    def refine_names(self, *names: str | None) -> Any:
        """A copy whose unnamed dims get the given names (``...`` stands for the dims not listed).

        A dim that already has a name keeps it; giving it another name raises a RuntimeError.
        """
        out = self.clone()
        out._set_names(_refined(self.names, names))
        return out
