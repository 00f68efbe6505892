"""Array-level helpers shared by the dataset converters: episode ids, next-step shifts, copies."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# TED done flags of every dataset: at the root (a step starts an episode only after a
# reset, which offline data does not record: zeros) and under "next".
DONE_NAMES = ("done", "terminated", "truncated")


def episode_ids(ends: np.ndarray) -> np.ndarray:
    """Trajectory ids (0, 1, ...) of steps whose trajectory ends where ``ends`` is True."""
    ids = np.zeros(ends.shape[0], dtype=np.int64)
    if ends.shape[0] > 1:
        np.cumsum(ends[:-1], out=ids[1:])
    return ids


def fill(dest: torch.Tensor, source: Any, rows: np.ndarray | None = None) -> None:
    """Copy ``source`` (an h5py dataset or an array) into the tensor ``dest``.

    ``rows`` (a boolean mask) keeps only some of the source's rows. An h5py dataset read
    whole goes straight into ``dest``'s memory, with no intermediate copy.
    """
    target = dest.numpy()
    if rows is None and hasattr(source, "read_direct") and source.shape[0] == target.shape[0]:
        view = target.reshape(source.shape) if target.shape != source.shape else target
        if view.flags.c_contiguous and source.size:
            source.read_direct(view)
            return
    values = np.asarray(source[()] if hasattr(source, "read_direct") else source)
    if rows is not None:
        values = values[rows]
    np.copyto(target, values.reshape(target.shape), casting="unsafe")


def shift_next(
    dest: torch.Tensor, source: torch.Tensor, ends: np.ndarray, *, zero_ends: bool = True
) -> None:
    """Write ``source[t + 1]`` into ``dest[t]``; at trajectory ends (``ends``) write zeros.

    With ``zero_ends=False`` an end step gets its own value instead.
    """
    length = source.shape[0]
    if length == 0:
        return
    dest[:-1] = source[1:]
    dest[-1] = 0 if zero_ends else source[-1]
    where = torch.from_numpy(np.flatnonzero(ends))
    if where.numel():
        dest[where] = 0 if zero_ends else source[where]


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (float64 becomes float32, as env data is)."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return torch.float32
    if dtype.kind == "b":
        return torch.bool
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
