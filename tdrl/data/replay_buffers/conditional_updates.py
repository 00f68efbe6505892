"""Conditional updates: patch stored items only if they are still there (and newer, optionally).

An item's handle is ``(index, generation)``: the row it was written to and the row's write
generation at that time (see ``track_generations`` in :class:`~tdrl.data.replay_buffers.Writer`).
A learner that computed something from sampled items (a value target, a label, a new
priority-like statistic) writes it back with :meth:`ReplayBuffer.update_if_present`; rows
rewritten since the handle was taken are skipped, so a slow consumer never overwrites newer
data. With a version entry, concurrent producers of such patches are ordered too: a patch
applies only if its version is newer than (or as new as) the stored one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.errors import DataTypeError

__all__ = ["UpdateResult", "update_if_present"]


@dataclass
class UpdateResult:
    """What :meth:`ReplayBuffer.update_if_present` did, record by record (input order).

    Attributes:
        updated: ``[n]`` bool, the records patched.
        updated_count: how many were patched.
        stale_count: how many were skipped because their row was rewritten or emptied.
        version_rejected: ``[n]`` bool, the live records skipped by the version check
            (``None`` when no version was given).
        version_rejected_count: how many those were (``None`` when no version was given).
    """

    updated: torch.Tensor
    updated_count: int
    stale_count: int
    version_rejected: torch.Tensor | None = None
    version_rejected_count: int | None = None


def _as_key(key: Any, name: str) -> Any:
    if isinstance(key, tuple):
        return key[0] if len(key) == 1 else key
    if isinstance(key, str):
        return key
    raise TypeError(f"{name} keys must be strings or tuples of strings, got {key!r}")


def _patch_items(patch: Any) -> list[tuple[Any, torch.Tensor]]:
    if isinstance(patch, TensorDictBase):
        return [(key, value) for key, value in patch.items(True, True)]
    if not isinstance(patch, dict):
        raise TypeError(f"patch must be a dict or a TensorDict, got {type(patch).__name__}")
    return [(_as_key(key, "patch"), value) for key, value in patch.items()]


def _per_item(
    value: Any, item_shape: tuple, count: int, key: Any, dtype: torch.dtype
) -> torch.Tensor:
    """``value`` as ``[count, *item_shape]``; its leading dims must hold ``count`` records."""
    value = torch.as_tensor(value)
    if value.dtype != dtype:
        raise ValueError(
            f"patch dtype mismatch at key {key!r}: the storage holds {dtype}, got {value.dtype}"
        )
    split = value.ndim - len(item_shape)
    if (
        split < 0
        or tuple(value.shape[split:]) != item_shape
        or math.prod(value.shape[:split]) != count
    ):
        raise ValueError(
            f"patch shape mismatch at key {key!r}: expected {count} records of shape "
            f"{item_shape}, got shape {tuple(value.shape)}"
        )
    return value.reshape(count, *item_shape)


def _versions(version: Any, count: int, dtype: torch.dtype) -> torch.Tensor:
    version = torch.as_tensor(version)
    if version.numel() == 1:
        return version.reshape(1).to(dtype).expand(count)
    if version.numel() != count:
        raise ValueError(
            f"version must be one number or one per record ({count}), got shape "
            f"{tuple(version.shape)}"
        )
    return version.reshape(count).to(dtype)


def _highest_version_per_row(
    candidate: torch.Tensor, flat: torch.Tensor, version: torch.Tensor
) -> torch.Tensor:
    """Among candidate records aiming at the same row, the one with the highest version."""
    chosen = candidate.nonzero().squeeze(-1)
    winners = torch.zeros_like(candidate)
    if not chosen.numel():
        return winners
    by_version = chosen[torch.argsort(version[chosen], stable=True)]
    order = by_version[torch.argsort(flat[by_version], stable=True)]
    rows = flat[order]
    last = torch.ones_like(rows, dtype=torch.bool)
    last[:-1] = rows[:-1] != rows[1:]
    winners[order[last]] = True
    return winners


def update_if_present(
    buffer: Any,
    *,
    index: Any,
    generation: Any,
    patch: Any,
    version_key: Any = None,
    version: Any = None,
    require_newer: bool = False,
) -> UpdateResult:
    """See :meth:`ReplayBuffer.update_if_present`."""
    storage, writer = buffer.storage, buffer.writer
    if getattr(storage, "slot_generations", None) is None and not getattr(
        storage, "tracks_generations", False
    ):
        raise DataTypeError(
            "update_if_present makes conditional writes, which need a tensor storage keeping "
            f"write generations; got {type(storage).__name__}"
            + ("" if writer.tracks_generations else " and a writer without track_generations")
        )
    if not writer.tracks_generations:
        raise RuntimeError(
            "update_if_present makes conditional writes: build the writer with "
            "track_generations=True so that the storage keeps write generations"
        )
    ndim = storage.ndim
    if isinstance(index, tuple):
        index = torch.stack([torch.as_tensor(part) for part in index], -1) if ndim > 1 else index[0]
    index = torch.as_tensor(index, dtype=torch.long)
    index = index.reshape(-1) if ndim == 1 else index.reshape(-1, ndim)
    count = index.shape[0]
    generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
    if generation.numel() != count:
        raise ValueError(
            f"generation must hold one value per record ({count}), got {generation.numel()}"
        )
    versioned = version_key is not None or version is not None
    if versioned and (version_key is None or version is None):
        raise ValueError("give both version_key and version, or neither")
    if isinstance(version_key, str) and "." in version_key:
        raise ValueError(
            f"Dotted-string version keys are ambiguous: give the nested key as a tuple, e.g. "
            f"{tuple(version_key.split('.'))}, got {version_key!r}"
        )
    # validate the whole patch before writing anything
    entries = []
    for key, value in _patch_items(patch):
        stored = storage.leaf(key)
        entries.append(
            (key, stored, _per_item(value, tuple(stored.shape[ndim:]), count, key, stored.dtype))
        )
    if versioned:
        version_key = _as_key(version_key, "version")
        if any(key == version_key for key, _, _ in entries):
            raise ValueError(
                f"version_key {version_key!r} may not appear in patch: the version given is "
                "written there"
            )
        stored_version = storage.leaf(version_key)
        if math.prod(stored_version.shape[ndim:]) != 1:
            raise ValueError(
                f"the version entry {version_key!r} must hold one number per item, got shape "
                f"{tuple(stored_version.shape)}"
            )
        version = _versions(version, count, stored_version.dtype)
    generations = storage.slot_generations
    if generations is None:  # nothing was ever written: every handle is stale
        stale = torch.zeros(count, dtype=torch.bool)
        rejected = stale.clone() if versioned else None
        return UpdateResult(stale, 0, count, rejected, 0 if versioned else None)
    with buffer._replay_lock:
        rows = index if ndim == 1 else index[:, 0]
        in_range = (rows >= 0) & (rows < storage.len_along_dim0)
        if ndim > 1:
            for dim, size in enumerate(storage.shape[1:ndim], start=1):
                in_range &= (index[:, dim] >= 0) & (index[:, dim] < size)
        safe = torch.where(in_range.unsqueeze(-1) if ndim > 1 else in_range, index, 0)
        coords = (safe,) if ndim == 1 else tuple(safe.unbind(-1))
        current = generations[coords[0].to(generations.device)].to(rows.device)
        live = in_range & (generation >= 0) & (current == generation)
        rejected = None
        updated = live
        if versioned:
            stored = stored_version[coords].reshape(count)
            newer = version > stored if require_newer else version >= stored
            updated = _highest_version_per_row(live & newer, storage.ravel_index(safe), version)
            rejected = live & ~updated
        chosen = updated.nonzero().squeeze(-1)
        if chosen.numel():
            target = tuple(part[chosen] for part in coords)
            for _, stored, value in entries:
                stored[target] = value[chosen].to(stored.device)
            if versioned:
                item_shape = tuple(stored_version.shape[ndim:])
                stored_version[target] = (
                    version[chosen].reshape(-1, *item_shape).to(stored_version.device)
                )
            storage.mark_written()
    return UpdateResult(
        updated=updated,
        updated_count=int(updated.sum()),
        stale_count=int((~live).sum()),
        version_rejected=rejected,
        version_rejected_count=None if rejected is None else int(rejected.sum()),
    )
