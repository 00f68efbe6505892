"""Tensor-storage states: content as plain nested dicts, and repair of older batch sizes.

Plain nested dicts of tensors are what ``torch.load(weights_only=True)`` accepts.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["from_plain_state", "full_batch_size", "plain_state"]


def plain_state(td: TensorDictBase) -> dict | TensorDictBase:
    """``td`` as nested dicts of tensors, which ``torch.load(weights_only=True)`` accepts.

    Non-tensor leaves have no such form: the tensordict itself is returned then.
    """
    entries: dict = {}
    for key, value in td.items():
        if isinstance(value, TensorDictBase):
            value = plain_state(value)
            if isinstance(value, TensorDictBase):
                return td
        elif type(value) is not torch.Tensor:
            return td
        entries[key] = value
    device = None if td.device is None else str(td.device)
    return {"entries": entries, "batch_size": list(td.batch_size), "device": device}


def from_plain_state(state: dict | TensorDictBase) -> TensorDictBase:
    """Inverse of :func:`plain_state` (a tensordict passes through)."""
    if isinstance(state, TensorDictBase):
        return state
    source = {
        key: value if isinstance(value, torch.Tensor) else from_plain_state(value)
        for key, value in state["entries"].items()
    }
    return TensorDict(source, batch_size=state["batch_size"], device=state["device"])


def _common_prefix(shapes: list[torch.Size]) -> tuple[int, ...]:
    prefix = tuple(shapes[0])
    for shape in shapes[1:]:
        size = 0
        while size < min(len(prefix), len(shape)) and prefix[size] == shape[size]:
            size += 1
        prefix = prefix[:size]
    return prefix


def full_batch_size(td: TensorDictBase, ndim: int) -> TensorDictBase:
    """Restore the batch size of stored TensorDicts saved by versions that cut it to ``ndim`` dims.

    Those versions kept the batch sizes of nested TensorDicts whole, and every nested
    batch size and leaf shape starts with the root's: the root batch size is recovered as
    their longest common prefix. Without nested TensorDicts nothing tells the cut dims
    apart from feature dims, and ``td`` is returned unchanged.
    """
    if td.batch_dims != ndim:
        return td
    nodes, leaves = [], []
    for key in td.keys(include_nested=True):
        value = td.get(key)
        (nodes if isinstance(value, TensorDictBase) else leaves).append(
            value.batch_size if isinstance(value, TensorDictBase) else value.shape
        )
    if not nodes:
        return td
    prefix = _common_prefix(nodes + leaves)
    if len(prefix) > ndim:
        td.batch_size = prefix
    return td
