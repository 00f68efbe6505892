"""Array-level helpers shared by the dataset converters: episode ids, next-step shifts, copies."""

from __future__ import annotations

import os
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


def raw_offset(source: Any, dtype: torch.dtype) -> int | None:
    """The byte offset of an HDF5 dataset's data in its file, when usable as ``dtype`` in place.

    That is when the dataset is stored contiguously, uncompressed, little-endian and with the
    element type of ``dtype``; None otherwise (or when ``source`` is not an h5py dataset).
    """
    if not hasattr(source, "id") or not hasattr(source, "compression"):
        return None
    import h5py

    stored = np.dtype(source.dtype)
    if (
        source.compression is not None
        or source.id.get_create_plist().get_layout() != h5py.h5d.CONTIGUOUS
        or stored.byteorder == ">"
        or stored != torch.empty(0, dtype=dtype).numpy().dtype
    ):
        return None
    return source.id.get_offset()  # None when no data was ever written


def _copy_file_bytes(dest: torch.Tensor, source: Any) -> bool:
    """Copy a contiguous, uncompressed HDF5 dataset's bytes into the file behind ``dest``.

    The kernel copies between the two files (``copy_file_range``): no page of ``dest`` is
    touched from Python, which makes filling a memory-mapped file about as fast as reading
    the dataset into memory. Returns False (and copies nothing) when the layouts do not allow it.
    """
    filename = getattr(dest, "filename", None)
    if filename is None or not hasattr(os, "copy_file_range"):
        return False
    offset = raw_offset(source, dest.dtype)
    if (
        offset is None
        or not dest.is_contiguous()
        or dest.storage_offset() != 0
        or dest.numel() != source.size
    ):
        return False
    total = source.size * np.dtype(source.dtype).itemsize
    src = os.open(source.file.filename, os.O_RDONLY)
    try:
        dst = os.open(filename, os.O_WRONLY)
        try:
            done = 0
            while done < total:
                copied = os.copy_file_range(src, dst, total - done, offset + done, done)
                if copied == 0:
                    raise OSError(f"{source.file.filename} ends before {source.name}'s data does")
                done += copied
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return True


def fill(dest: torch.Tensor, source: Any, rows: np.ndarray | None = None) -> None:
    """Copy ``source`` (an h5py dataset or an array) into the tensor ``dest``.

    ``rows`` (a boolean mask) keeps only some of the source's rows. An h5py dataset read
    whole goes straight into ``dest``'s file (see :func:`_copy_file_bytes`) or memory, with
    no intermediate copy.
    """
    if rows is None and hasattr(source, "read_direct") and _copy_file_bytes(dest, source):
        return
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
