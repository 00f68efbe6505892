"""The core of ``step_mdp``: bring the ``"next"`` entry to the root in one pass."""

from __future__ import annotations

from typing import Any

from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, unravel_key

from tdrl.envs._keys import as_tuple
from tdrl.envs._td_fast import entries, fast_get

_EMPTY: frozenset = frozenset()
_NESTED = (TensorDict, LazyStackedTensorDict)


def excluded_set(*key_lists: Any) -> dict:
    """Normalise key lists into ``{level prefix: frozenset of names}`` (the keys to drop)."""
    levels: dict = {}
    for keys in key_lists:
        if keys is None:
            continue
        if isinstance(keys, (str, tuple)):
            keys = [keys]
        for key in keys:
            key = as_tuple(unravel_key(key))
            levels.setdefault(key[:-1], set()).add(key[-1])
    return {prefix: frozenset(names) for prefix, names in levels.items()}


def mdp_plan(
    reward_keys: Any,
    done_keys: Any,
    action_keys: Any,
    exclude_reward: bool,
    exclude_done: bool,
    exclude_action: bool,
) -> tuple[dict, tuple]:
    """The ``excluded`` levels and ``kept_root`` keys that :func:`merge_next` needs."""
    excluded = excluded_set(
        reward_keys if exclude_reward else None,
        done_keys if exclude_done else None,
        action_keys if exclude_action else None,
    )
    if exclude_action:
        kept_root = ()
    elif isinstance(action_keys, (str, tuple)):
        kept_root = (action_keys,)
    else:
        kept_root = tuple(action_keys)
    return excluded, kept_root


def _fresh(
    td: TensorDictBase, prefix: tuple, excluded: dict, device: Any, keep_empty: bool
) -> TensorDictBase:
    names = excluded.get(prefix, _EMPTY)
    source = {}
    for key, value in td.items():
        if key in names:
            continue
        kind = type(value)
        if kind is TensorDict or kind is LazyStackedTensorDict:
            value = _fresh_nested(value, (*prefix, key), excluded, device, keep_empty)
            if value is None:
                continue
        source[key] = value
    return TensorDict._new_unsafe(source, batch_size=td.batch_size, device=device, nested=False)


def _fresh_nested(
    value: TensorDictBase, prefix: tuple, excluded: dict, device: Any, keep_empty: bool
) -> TensorDictBase | None:
    """A fresh copy of a nested level (a lazy stack element-wise), None when left empty.

    With ``keep_empty``, a level that was empty to begin with (an empty Composite of the
    specs) is kept; only the levels the exclusions emptied are dropped.
    """
    if type(value) is LazyStackedTensorDict:
        parts = [_fresh(part, prefix, excluded, device, keep_empty) for part in value.tensordicts]
        if _dropped(any(part._tensordict for part in parts), value, keep_empty):
            return None
        return LazyStackedTensorDict.lazy_stack(parts, value.stack_dim)
    fresh = _fresh(value, prefix, excluded, device, keep_empty)
    return None if _dropped(bool(fresh._tensordict), value, keep_empty) else fresh


def _dropped(has_entries: bool, original: TensorDictBase, keep_empty: bool) -> bool:
    """Whether a level is left out of the result: ``has_entries`` says what is left in it.

    A level with nothing left is dropped, unless ``keep_empty`` and the ``original``
    level held nothing to begin with.
    """
    return not has_entries and not (keep_empty and not _has_entries(original))


def _has_entries(value: TensorDictBase) -> bool:
    """Whether a level holds any entry (in any element of a lazy stack)."""
    if type(value) is LazyStackedTensorDict:
        return any(_has_entries(part) for part in value.tensordicts)
    return bool(value._tensordict)


def keep_preset_entries(preset: Any, next_tensordict: TensorDictBase) -> None:
    """Copy into ``next_tensordict`` the entries of ``preset`` it lacks (nested levels merged).

    ``preset`` is what the input of ``step`` already held under ``"next"`` (e.g. written by a
    policy); the env's own output wins where both have an entry.
    """
    if not isinstance(preset, TensorDictBase):
        return
    for key, value in entries(preset).items():
        current = fast_get(next_tensordict, key)
        if current is None:
            next_tensordict.set(key, value)
        elif isinstance(current, TensorDictBase) and isinstance(value, TensorDictBase):
            keep_preset_entries(value, current)


def set_next(td: TensorDictBase, next_td: TensorDictBase) -> None:
    """``td.set("next", next_td)``; a dict store when both are plain tensordicts that agree.

    A step output built by the env has the input's batch size and device and no dim names,
    so ``set`` would neither move, reshape nor rename it; anything else goes through ``set``.
    """
    if (
        type(td) is TensorDict
        and type(next_td) is TensorDict
        and next_td.batch_size == td.batch_size
        and next_td.device == td.device
        and td._td_dim_names is None
        and next_td._td_dim_names is None
        and not td.is_locked
    ):
        td._tensordict["next"] = next_td
    else:
        td.set("next", next_td)


def attach_next(td: TensorDictBase, next_td: TensorDictBase, preset: Any) -> TensorDictBase:
    """The ``"next"`` bookkeeping of a step: put ``next_td`` under ``"next"`` of ``td``.

    ``preset`` is what ``td`` held under ``"next"`` before the step (or None): its entries
    that the step did not produce are kept. Returns ``td``.
    """
    if preset is not None:
        keep_preset_entries(preset, next_td)
    set_next(td, next_td)
    return td


def _merge(
    root: TensorDictBase | None,
    nxt: TensorDictBase,
    prefix: tuple,
    excluded: dict,
    batch_size: Any,
    device: Any,
    keep_empty: bool,
) -> TensorDictBase:
    names = excluded.get(prefix, _EMPTY)
    if root is not None:
        source = dict(entries(root))
        if not prefix:
            source.pop("next", None)
        for name in names:
            source.pop(name, None)
        root_tds = [key for key, value in source.items() if type(value) in _NESTED]
    else:
        source = {}
        root_tds = ()
    next_entries = entries(nxt)
    for key, value in next_entries.items():
        if key in names:
            continue
        kind = type(value)
        if kind is TensorDict:
            previous = source.get(key)
            merged = _merge(
                previous if type(previous) is TensorDict else None,
                value,
                (*prefix, key),
                excluded,
                value.batch_size,
                device,
                keep_empty,
            )
            if _dropped(bool(merged._tensordict), value, keep_empty):
                # nothing left in the group (e.g. only a per-group reward): drop it
                source.pop(key, None)
                continue
            value = merged
        elif kind is LazyStackedTensorDict:
            value = _merge_stack(
                source.get(key), value, (*prefix, key), excluded, device, keep_empty
            )
            if value is None:
                source.pop(key, None)
                continue
        source[key] = value
    for key in root_tds:
        if key not in next_entries:
            fresh = _fresh_nested(source[key], (*prefix, key), excluded, device, keep_empty)
            if fresh is not None:
                source[key] = fresh
            else:
                del source[key]
    return TensorDict._new_unsafe(source, batch_size=batch_size, device=device, nested=False)


def _merge_stack(
    previous: Any,
    nxt: LazyStackedTensorDict,
    prefix: tuple,
    excluded: dict,
    device: Any,
    keep_empty: bool,
) -> LazyStackedTensorDict | None:
    """Merge a lazily stacked level element by element (elements may hold different keys)."""
    parts = nxt.tensordicts
    dim = nxt.stack_dim
    if (
        type(previous) is LazyStackedTensorDict
        and previous.stack_dim == dim
        and len(previous.tensordicts) == len(parts)
    ):
        roots = list(previous.tensordicts)
    elif isinstance(previous, TensorDictBase) and previous.batch_size == nxt.batch_size:
        roots = list(previous.unbind(dim))
    else:
        roots = [None] * len(parts)
    merged = [
        _merge(root, part, prefix, excluded, part.batch_size, device, keep_empty)
        for root, part in zip(roots, parts)
    ]
    if _dropped(any(part._tensordict for part in merged), nxt, keep_empty):
        return None
    return LazyStackedTensorDict.lazy_stack(merged, dim)


def _merge_flat(tensordict: TensorDict, excluded: dict) -> TensorDictBase | None:
    """Fast path of :func:`merge_next` for flat data (no nested tensordict); None otherwise."""
    source = dict(tensordict._tensordict)
    nxt = source.pop("next", None)
    if type(nxt) is not TensorDict:
        return None
    names = excluded.get((), _EMPTY)
    for name in names:
        source.pop(name, None)
    nested = _NESTED
    for value in source.values():
        if type(value) in nested:
            return None
    for key, value in nxt._tensordict.items():
        if type(value) in nested:
            return None
        if key not in names:
            source[key] = value
    return TensorDict._new_unsafe(
        source, batch_size=tensordict.batch_size, device=tensordict.device, nested=False
    )


def merge_next(
    tensordict: TensorDictBase,
    excluded: dict,
    keep_other: bool,
    kept_root: tuple = (),
    keep_empty: bool = False,
) -> TensorDictBase:
    """Return a new tensordict holding ``tensordict["next"]`` merged over the root.

    Every nesting level gets a fresh container, so later in-place updates of the
    result never leak into ``tensordict``; nested levels left without entries are
    dropped, except, with ``keep_empty``, those that held none to begin with (an env's
    empty Composite specs, which its steps carry over). ``kept_root`` lists root keys
    kept even when ``keep_other`` is False (the action when it is not excluded).
    """
    if keep_other and type(tensordict) is TensorDict:
        flat = _merge_flat(tensordict, excluded)
        if flat is not None:
            return flat
    if type(tensordict) is LazyStackedTensorDict:
        # sub-envs with different shapes: merge each stacked element on its own
        return LazyStackedTensorDict.lazy_stack(
            [
                merge_next(td, excluded, keep_other, kept_root, keep_empty)
                for td in tensordict.tensordicts
            ],
            tensordict.stack_dim,
        )
    nxt = fast_get(tensordict, "next")
    if nxt is None:
        raise KeyError("step_mdp expects a 'next' entry in the input tensordict; none was found")
    if keep_other:
        root = tensordict
    elif kept_root:
        root = tensordict.select(*kept_root, strict=False)
    else:
        root = None
    return _merge(root, nxt, (), excluded, tensordict.batch_size, tensordict.device, keep_empty)
