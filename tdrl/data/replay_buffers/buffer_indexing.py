"""Indexing through a replay buffer: ``rb[index]`` reads and index checks for ``rb[index] = data``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase, is_tensorclass
from torch.utils import _pytree

from tdrl.data.replay_buffers.storages import TensorStorage

__all__ = ["assign_data", "checked_coordinates", "checked_write_index", "index_data"]


def checked_write_index(storage: Any, index: Any) -> Any:
    """``index`` for an in-place write: bounds-checked against the stored items, normalised.

    Ints and tensors are wrapped into ``[0, length)``, slices resolved, sampled index forms
    (coordinates, indices expanded over item dims) turned into what :meth:`Storage.set`
    takes.

    Raises:
        IndexError: an index is out of range, or the storage is empty.
    """
    length = storage.len_along_dim0 if hasattr(storage, "len_along_dim0") else len(storage)
    if isinstance(index, (int, np.integer)):
        if not -length <= index < length:
            raise IndexError(f"index out of range: expected [-{length}, {length}), got {index}")
        return int(index) % length
    if isinstance(index, slice):
        return slice(*index.indices(length))
    if not isinstance(index, tuple):
        index = torch.as_tensor(index)
        if index.ndim > 1 and isinstance(storage, TensorStorage) and storage.initialized:
            # indices as sampling returns them: coordinates ([n, ndim]) when ndim > 1,
            # expanded over the item dims when items have batch dims of their own
            item = storage.item_index(index)
            if item is not None:
                index = item
    if isinstance(index, tuple):
        if not isinstance(storage, TensorStorage):
            index = torch.as_tensor(index)
        elif not storage.initialized:
            raise IndexError(f"index out of range: the storage is empty, got {index}")
        else:
            return checked_coordinates(storage, storage.multi_index(index), length)
    if index.dtype == torch.bool:
        index = index.nonzero().squeeze(-1)
    index = index.to(torch.long).reshape(-1)
    if index.numel() and (int(index.max()) >= length or int(index.min()) < -length):
        raise IndexError(
            f"index out of range: expected [-{length}, {length}), got [{int(index.min())}, {int(index.max())}]"
        )
    return index.remainder(length) if length else index


def checked_coordinates(storage: Any, index: tuple, length: int) -> tuple:
    """Bounds-check the tensor parts of a tuple index (dim 0 against the filled rows)."""
    sizes = (length, *storage.content.shape[1:])
    out = []
    for dim, part in enumerate(index):
        if dim < len(sizes) and isinstance(part, torch.Tensor) and part.dtype != torch.bool:
            size = sizes[dim]
            if part.numel():
                low, high = int(part.min()), int(part.max())
                if low < -size or high >= size:
                    raise IndexError(
                        f"index out of range along dim {dim}: expected [-{size}, {size}), "
                        f"got [{low}, {high}]"
                    )
                part = part.remainder(size)
        elif dim == 0 and isinstance(part, slice):
            part = slice(*part.indices(length))
        out.append(part)
    return tuple(out)


def _is_collection(data: Any) -> bool:
    return isinstance(data, (torch.Tensor, TensorDictBase)) or is_tensorclass(data)


def index_data(data: Any, index: Any) -> Any:
    """``data[index]`` for tensors, TensorDicts and tensorclasses; leaf by leaf for pytrees."""
    if _is_collection(data):
        return data[index]
    return _pytree.tree_map(lambda leaf: leaf[index], data)


def assign_data(view: Any, index: Any, data: Any) -> None:
    """``view[index] = data``; leaf by leaf for pytrees, whose structures must match.

    Raises:
        ValueError: ``data`` is a pytree of another structure than ``view``.
    """
    if _is_collection(view):
        view[index] = data
        return
    leaves, spec = _pytree.tree_flatten(view)
    values, value_spec = _pytree.tree_flatten(data)
    if value_spec != spec:
        raise ValueError(
            f"data structure mismatch: expected a pytree like {spec}, got {value_spec}"
        )
    for leaf, value in zip(leaves, values):
        leaf[index] = value
