"""Stacking of rollout steps: one ``torch.stack`` per leaf, driven by the first step's keys.

A rollout keeps one tensordict per step; they all share the structure of the first one.
:func:`stack_steps` reads that structure once, gathers each leaf across steps with list
comprehensions over the raw entry dicts (no per-step tree walk) and stacks each leaf once.
Root entries that merely repeat the previous step's ``"next"`` entries (the observations
``step_mdp`` brought to the root) are rebuilt with a single ``cat`` of the stacked ``"next"``
leaf. Steps that do not share one structure of plain tensors raise :class:`Irregular`, and
the caller falls back on tensordict's own stack.
"""

from __future__ import annotations

from operator import attrgetter, is_, itemgetter
from typing import Any

import torch
from tensordict import TensorDict

__all__ = ["Irregular", "stack_steps"]


_ENTRIES = attrgetter("_tensordict")
_BATCH = attrgetter("batch_size")


class Irregular(Exception):
    """The steps do not share one structure of plain tensors."""


def _shifted(column: list, next_column: list) -> bool:
    """Whether ``column[t + 1] is next_column[t]`` for every step."""
    return all(map(is_, column[1:], next_column))


def _stack_level(
    tds: list,
    dim: int,
    device: Any,
    next_columns: dict | None,
    next_built: TensorDict | None,
    root: bool,
) -> tuple[TensorDict, dict]:
    """Stack one nesting level; returns the result and the columns of its leaves."""
    first = tds[0]
    first_entries = first._tensordict
    keys = first_entries.keys()
    batch = first.batch_size
    # C-level passes (map) instead of a Python loop: the same structure means the same
    # type, batch size and number of keys, and every key of the first step (a missing
    # one raises KeyError when its column is gathered below)
    if set(map(type, tds)) != {TensorDict}:
        raise Irregular
    entries = list(map(_ENTRIES, tds))
    if len(set(map(_BATCH, tds))) != 1 or set(map(len, entries)) != {len(keys)}:
        raise Irregular
    count = len(tds)
    source: dict = {}
    columns: dict = {}
    ordered = list(keys)
    if root and "next" in first_entries:
        # "next" first: root leaves repeating the previous "next" leaves then cost one cat
        ordered.remove("next")
        ordered.insert(0, "next")
    for key in ordered:
        value = first_entries[key]
        try:
            column = list(map(itemgetter(key), entries))
        except KeyError as err:
            raise Irregular from err
        if type(value) is TensorDict:
            if root and key == "next":
                built, sub_columns = _stack_level(column, dim, device, None, None, False)
                next_columns, next_built = sub_columns, built
            else:
                sub_next = next_columns.get(key) if next_columns else None
                sub_built = next_built._tensordict.get(key) if type(sub_next) is dict else None
                if type(sub_built) is not TensorDict:
                    sub_next = sub_built = None
                built, sub_columns = _stack_level(column, dim, device, sub_next, sub_built, False)
            source[key] = built
            columns[key] = sub_columns
            continue
        if not isinstance(value, torch.Tensor):
            raise Irregular
        columns[key] = column
        previous = next_columns.get(key) if next_columns else None
        if count > 1 and type(previous) is list and _shifted(column, previous):
            shifted = next_built._tensordict[key].narrow(dim, 0, count - 1)
            source[key] = torch.cat([column[0].unsqueeze(dim), shifted], dim)
        else:
            source[key] = torch.stack(column, dim)
    batch_size = torch.Size((*batch[:dim], count, *batch[dim:]))
    return TensorDict._new_unsafe(
        source, batch_size=batch_size, device=device, nested=False
    ), columns


def stack_steps(steps: list, dim: int) -> TensorDict:
    """Stack same-structured plain tensordicts along ``dim``; raises :class:`Irregular`."""
    first = steps[0]
    if type(first) is not TensorDict:
        raise Irregular
    try:
        return _stack_level(steps, dim, first.device, None, None, True)[0]
    except (RuntimeError, TypeError) as err:
        raise Irregular from err
