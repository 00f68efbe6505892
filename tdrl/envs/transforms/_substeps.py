"""Helpers of the transforms that step their parent env themselves (MultiAction, ...).

These transforms run extra steps of the env made of the base env and the transforms
before them (their ``parent``), through its public ``step``: partial steps use the
``"_step"`` mask that every env understands.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs._partial import align_mask
from tdrl.envs._td_fast import all_true
from tdrl.envs.utils import step_mdp

__all__ = ["batch_mask", "done_mask", "keep_where", "next_root", "step_masked"]


def next_root(parent: Any, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> Any:
    """The input of the step that follows the transition ``tensordict`` -> ``next_tensordict``.

    The next data moves to the root (rewards dropped, actions removed); root entries
    that the step did not produce (e.g. data written by a policy) are kept.
    """
    data = tensordict.exclude("next", "_step").set("next", next_tensordict)
    return step_mdp(data, reward_keys=parent.reward_keys, action_keys=parent.action_keys)


def step_masked(parent: Any, root: TensorDictBase, mask: torch.Tensor | None) -> TensorDictBase:
    """Step ``parent`` from ``root`` (only where ``mask`` is True) and return the next data."""
    if mask is not None and not all_true(mask):
        root.set("_step", mask)
    return parent.step(root).get("next")


def done_mask(parent: Any, next_tensordict: TensorDictBase) -> torch.Tensor:
    """Where a root-level done flag of ``parent`` is set, with the data's batch shape."""
    batch = next_tensordict.batch_size
    done = torch.zeros(batch, dtype=torch.bool, device=next_tensordict.device)
    for key in parent.done_keys:
        if not isinstance(key, str):
            continue
        flag = next_tensordict.get(key, None)
        if flag is not None:
            done = done | flag.reshape(*batch, -1).any(-1).to(done.device)
    return done


def keep_where(mask: torch.Tensor, new: TensorDictBase, old: TensorDictBase) -> TensorDictBase:
    """``new`` where ``mask`` (batch-shaped) is True, ``old`` elsewhere, entry by entry.

    Entries that ``old`` lacks (or holds with another shape) are taken from ``new``.
    """
    if all_true(mask):
        return new
    for key, value in new.items(include_nested=True, leaves_only=True):
        previous = old.get(key, None)
        if not isinstance(previous, torch.Tensor) or previous.shape != value.shape:
            continue
        aligned = align_mask(mask, value.shape, "condition", "condition", key)
        new.set(key, torch.where(aligned, value, previous.to(value.dtype)))
    return new


def batch_mask(value: Any, batch: torch.Size, device: Any, owner: str) -> torch.Tensor:
    """A predicate's result as a boolean mask of shape ``batch``."""
    mask = torch.as_tensor(value, device=device)
    if mask.dtype != torch.bool:
        raise TypeError(f"{owner}: expected a boolean condition, got dtype {mask.dtype}")
    if mask.ndim == 0:
        return mask.expand(batch)
    if mask.numel() != batch.numel():
        raise ValueError(
            f"{owner}: the condition has shape {tuple(mask.shape)}, expected one value per "
            f"element of the batch {tuple(batch)}"
        )
    return mask.reshape(batch)
