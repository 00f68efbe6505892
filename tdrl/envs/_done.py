"""Done / terminated / truncated completion, on the spec side and on the data side.

Every done level of an env carries both ``"done"`` and ``"terminated"`` (plus
``"truncated"`` when the env provides it). :func:`complete_done_spec` adds the
missing spec entries and returns one :class:`DoneCompletion` per level, which
:func:`complete_done_data` replays on each step and reset output: an entry the
data lacks is derived from the others (a lone ``"done"`` counts as terminated).
Nothing here walks a spec per step.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs._keys import (
    DoneCompletion,
    as_tuple,
    from_tuple,
    group_done_keys,
    leaf_keys,
    reset_key_for,
)
from tdrl.envs._partial import align_mask, effective_masks
from tdrl.envs._td_fast import any_true, fast_get


def complete_done_spec(full_done_spec: Any) -> tuple[Any, list[DoneCompletion]]:
    """Add the missing done/terminated entries of each done level.

    Returns the (possibly cloned) spec and the data-side completion plan. The
    spec passed in is never modified.
    """
    plan: list[DoneCompletion] = []
    spec = full_done_spec
    cloned = False
    for prefix, keys in group_done_keys(leaf_keys(full_done_spec)):
        names = {as_tuple(k)[-1] for k in keys}
        if not names & {"done", "terminated", "truncated"}:
            continue

        def key(name: str, prefix: tuple[str, ...] = prefix) -> Any:
            return from_tuple((*prefix, name))

        source = key(
            "done" if "done" in names else "terminated" if "terminated" in names else "truncated"
        )
        for name in ("done", "terminated"):
            if name not in names:
                if not cloned:
                    spec = spec.clone()
                    cloned = True
                spec[key(name)] = spec[source].clone()
        truncated = key("truncated") if "truncated" in names else None
        # a declared truncated entry the env does not write reads False
        plan.append(
            DoneCompletion(key("done"), key("terminated"), truncated, truncated is not None)
        )
    return spec, plan


def complete_done_data(data: TensorDictBase, plan: list[DoneCompletion]) -> bool:
    """Write the ``done`` / ``terminated`` entries that ``data`` lacks.

    Returns True when a level has none of its entries: the caller fills them with
    False (see :func:`fill_missing_done`), which needs the specs.
    """
    empty_level = False
    for level in plan:
        done = fast_get(data, level.done)
        terminated = fast_get(data, level.terminated)
        if done is not None and terminated is not None:
            if level.fill_truncated and fast_get(data, level.truncated) is None:
                data.set(level.truncated, torch.zeros_like(done))
            continue
        truncated = fast_get(data, level.truncated) if level.truncated is not None else None
        if done is None and terminated is None:
            if truncated is None:
                empty_level = True
                continue
            data.set(level.terminated, torch.zeros_like(truncated))
            data.set(level.done, truncated)
        elif terminated is None:
            data.set(level.terminated, done if truncated is None else done & ~truncated)
        else:
            data.set(level.done, terminated if truncated is None else terminated | truncated)
        if level.fill_truncated and truncated is None:
            data.set(level.truncated, torch.zeros_like(data.get(level.done)))
    return empty_level


def fill_missing_done(
    data: TensorDictBase, done_keys: list, full_done_spec: Any, env_ndim: int
) -> None:
    """Write ``False`` for the done entries a ``_reset`` did not return."""
    for key in done_keys:
        if fast_get(data, key) is None:
            extra = data.batch_size[: data.batch_dims - env_ndim]
            data.set(key, full_done_spec[key].zero(extra))


def check_done_after_reset(data: TensorDictBase, done_flag_keys: list, masks: dict | None) -> None:
    """Raise if an element that was reset is still done (``masks``: level prefix -> ``_reset``)."""
    masks = effective_masks(masks) if masks else {}
    for key in done_flag_keys:
        done = fast_get(data, key)
        if done is None:
            continue
        prefix = as_tuple(key)[:-1]
        mask = next(
            (masks[prefix[:i]] for i in range(len(prefix) + 1) if prefix[:i] in masks), None
        )
        if mask is not None:
            done = done & align_mask(mask, done.shape, "_reset", reset_key_for(prefix), key)
        if any_true(done):
            raise RuntimeError(
                f"the env entry {key!r} is True after reset for elements that were reset; "
                "pass allow_done_after_reset=True to the env if this is expected"
            )
