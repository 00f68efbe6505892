"""Argument normalisation and shape arithmetic shared by every spec.

Specs describe tensors without holding one, so indexing, expanding and reshaping a spec
means computing the shape that the same operation would give on a tensor. The helpers
here do that computation (on a zero-strided stand-in tensor), and normalise the
``shape`` / ``device`` / ``dtype`` arguments that every spec constructor takes.

A ``-1`` in a spec's shape marks a *dynamic* dim: any size is accepted there. Indexing
keeps such a dim only under a full slice (``:``); any other index on it has no defined
result and raises an IndexError.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["DEVICE_TYPING", "ShapeLike"]

DEVICE_TYPING = torch.device | str | int

ShapeLike = int | Sequence[int] | torch.Size

_NUMPY_TO_TORCH = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}


def _as_shape(shape: ShapeLike | None, name: str = "shape") -> torch.Size | None:
    """Normalise an int / sequence / Size to a ``torch.Size`` (``None`` stays ``None``)."""
    if shape is None:
        return None
    if isinstance(shape, torch.Size):
        dims = tuple(shape)
    elif isinstance(shape, (int, np.integer)):
        dims = (int(shape),)
    else:
        try:
            dims = tuple(int(d) for d in shape)
        except TypeError as err:
            raise TypeError(f"{name} must be an int or a sequence of ints, got {shape!r}") from err
    for dim in dims:
        if dim < -1:
            raise ValueError(f"{name} dims must be >= 0 or -1 (dynamic), got {tuple(dims)}")
    return torch.Size(dims)


def _as_device(device: DEVICE_TYPING | None) -> torch.device:
    """Normalise a device argument; ``None`` gives torch's default device.

    A bare accelerator type (``"cuda"``) gets the current device index, so that specs
    built with ``"cuda"`` and ``"cuda:0"`` compare equal.
    """
    if device is None:
        return torch.get_default_device()
    if isinstance(device, int):
        return torch.device("cuda", device)
    device = torch.device(device)
    if device.index is None and device.type == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _as_dtype(dtype: Any, default: torch.dtype) -> torch.dtype:
    """Accept a torch dtype, a numpy dtype / type or a dtype name."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and hasattr(torch, dtype.removeprefix("torch.")):
        candidate = getattr(torch, dtype.removeprefix("torch."))
        if isinstance(candidate, torch.dtype):
            return candidate
    try:
        return _NUMPY_TO_TORCH[np.dtype(dtype)]
    except (TypeError, KeyError) as err:
        raise TypeError(f"dtype must be a torch dtype, got {dtype!r}") from err


def _safe_shape(shape: torch.Size) -> torch.Size:
    """The shape with every dynamic ``-1`` dim replaced by 1."""
    if -1 not in shape:
        return shape
    return torch.Size(1 if d == -1 else d for d in shape)


def _shape_matches(got: Sequence[int], expected: Sequence[int]) -> bool:
    """Whether ``got`` equals ``expected`` where ``-1`` in ``expected`` matches any size."""
    if len(got) != len(expected):
        return False
    return all(e == g or e == -1 for g, e in zip(got, expected))


def _ends_with(got: Sequence[int], expected: Sequence[int]) -> bool:
    """Whether ``got`` ends with ``expected`` (``-1`` in ``expected`` matches any size)."""
    if len(got) < len(expected):
        return False
    return _shape_matches(got[len(got) - len(expected) :], expected)


def _normalize_index(index: Any, ndim: int) -> tuple:
    """Turn an index into a tuple with one ``...`` spelled out for ``ndim`` batch dims."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(item is Ellipsis for item in index):
        position = next(i for i, item in enumerate(index) if item is Ellipsis)
        used = sum(1 for item in index if item is not None and item is not Ellipsis)
        fill = (slice(None),) * max(ndim - used, 0)
        index = index[:position] + fill + index[position + 1 :]
    return index


def _consumed_dims(item: Any) -> int:
    """How many dims of the indexed tensor one index item consumes."""
    if item is None:
        return 0
    if isinstance(item, (torch.Tensor, np.ndarray)) and item.dtype in (torch.bool, np.bool_):
        return max(item.ndim, 1)
    return 1


def _is_full_slice(item: Any) -> bool:
    return isinstance(item, slice) and item == slice(None)


def _dims_of(index: tuple) -> list[tuple[int, Any]]:
    """``(first consumed dim, item)`` for each index item that consumes a dim."""
    out, dim = [], 0
    for item in index:
        consumed = _consumed_dims(item)
        if consumed:
            out.append((dim, item))
        dim += consumed
    return out


def _negative_step_free(index: tuple, shape: Sequence[int]) -> tuple[tuple, list[int]]:
    """The index with negative-step slices made positive, and the dims to flip first.

    torch slices only step forward; ``x[a:b:-s]`` equals ``x.flip(d)[a':b':s]`` with the
    bounds mirrored. Returns the rewritten index and the dims ``d`` to flip beforehand.
    """
    if not any(isinstance(item, slice) and (item.step or 1) < 0 for item in index):
        return index, []
    out, flips, dim = [], [], 0
    for item in index:
        if isinstance(item, slice) and (item.step or 1) < 0 and dim < len(shape):
            size = shape[dim]
            picked = range(size)[item]
            if len(picked):
                item = slice(size - 1 - picked[0], size - picked[-1], -item.step)
            else:
                item = slice(0, 0)
            flips.append(dim)
        out.append(item)
        dim += _consumed_dims(item)
    return tuple(out), flips


def _check_dynamic_index(shape: torch.Size, index: tuple) -> None:
    """Refuse any index other than ``:`` on a dynamic (``-1``) dim."""
    for dim, item in _dims_of(index):
        if dim < len(shape) and shape[dim] == -1 and not _is_full_slice(item):
            raise IndexError(
                f"cannot index dim {dim} of a spec with shape {tuple(shape)} by {item!r}: "
                "it is a dynamic (-1) dim, which only a full slice ':' keeps"
            )


def _probe(shape: Sequence[int], index: tuple) -> torch.Size:
    cpu_index = tuple(item.cpu() if isinstance(item, torch.Tensor) else item for item in index)
    return torch.empty(()).expand(tuple(shape))[cpu_index].shape


def _indexed_shape(shape: torch.Size, index: tuple) -> torch.Size:
    """Shape obtained by indexing a tensor of ``shape`` with ``index`` (dynamic dims kept)."""
    dynamic = -1 in shape
    if dynamic:
        _check_dynamic_index(shape, index)
    try:
        probe_index, _ = _negative_step_free(index, _safe_shape(shape))
        if not dynamic:
            return _probe(shape, probe_index)
        # dynamic dims only take full slices: probe with two stand-in sizes and mark the
        # output dims whose size follows the stand-in as dynamic
        small = _probe([2 if d == -1 else d for d in shape], probe_index)
        large = _probe([3 if d == -1 else d for d in shape], probe_index)
        return torch.Size(-1 if a != b else a for a, b in zip(small, large))
    except (IndexError, TypeError, ValueError, RuntimeError) as err:
        raise IndexError(
            f"cannot index a spec with batch shape {tuple(shape)} by {index!r}: {err}"
        ) from None


def _index_tensor(tensor: torch.Tensor, index: tuple) -> torch.Tensor:
    """``tensor[index]``, negative-step slices included."""
    index, flips = _negative_step_free(index, tensor.shape)
    if flips:
        tensor = tensor.flip(flips)
    return tensor[index]


def _expand_target(old: torch.Size, new: Sequence[int], event_ndim: int) -> torch.Size:
    """Validate an expand request and return the resulting shape.

    A ``-1`` keeps a dim, except on a singleton batch dim: a size-1 dim broadcasts to
    any size, so expanding it to ``-1`` makes it dynamic.
    """
    new = tuple(new)
    if len(new) < len(old):
        raise ValueError(
            f"cannot expand a spec of shape {tuple(old)} to {new}: "
            "the new shape must have at least as many dims"
        )
    lead = len(new) - len(old)
    result = list(new[:lead])
    for i, (old_dim, new_dim) in enumerate(zip(old, new[lead:])):
        is_event = i >= len(old) - event_ndim
        if new_dim == -1:
            result.append(-1 if old_dim == 1 and not is_event else old_dim)
        elif new_dim == old_dim:
            result.append(old_dim)
        elif old_dim == 1 and not is_event:
            result.append(new_dim)
        else:
            raise ValueError(
                f"cannot expand a spec of shape {tuple(old)} to {new}. The last {len(old)} "
                f"of the expanded shape dims must match the spec's shape, where only "
                f"singleton batch dims may grow: dim {lead + i} has size {old_dim}, "
                f"got {new_dim}"
            )
    if any(d < 0 for d in result[:lead]):
        raise ValueError(f"cannot expand to {new}: new leading dims must be >= 0")
    return torch.Size(result)


def _extra_shape(shape: ShapeLike | None) -> torch.Size:
    """The ``shape`` argument of rand/zero/one: extra leading dims."""
    if shape is None:
        return torch.Size()
    return _as_shape(shape)
