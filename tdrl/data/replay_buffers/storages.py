"""Storages: where a replay buffer keeps its items (a list, or contiguous tensors in RAM, on a device or in memory-mapped files).

This module holds the tensor storages; :class:`Storage` (the interface) and
:class:`ListStorage` live in their own modules and are importable from here too.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils import _pytree

from tdrl.data.replay_buffers.gather_program import GatherProgram
from tdrl.data.replay_buffers.list_storage import LazyStackStorage, ListStorage
from tdrl.data.replay_buffers.shared_init import SharedInit
from tdrl.data.replay_buffers.storage_base import _EMPTY_MSG, Storage, _out_of_range, range_index
from tdrl.data.replay_buffers.storage_state import from_plain_state, full_batch_size, plain_state
from tdrl.data.replay_buffers.tensor_layout import TensorLayout, as_key_tuple
from tdrl.data.replay_buffers.utils import expand_to_items, retyped

__all__ = [
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "Storage",
    "TensorStorage",
]


class TensorStorage(SharedInit, TensorLayout, Storage):
    """A storage over contiguous tensors: a tensor, a TensorDict or a pytree of tensors.

    All items share one structure; reading a batch is one gather per leaf. ``len`` counts
    items over the first ``ndim`` dimensions (e.g. ``[B, T]`` frames with ``ndim=2``).
    A storage built on a container holds all its rows: its length is the container's
    leading size (pre-filled data, e.g. a dataset read through an
    :class:`ImmutableDatasetWriter`); a writer then overwrites it from row 0. Tensorclasses
    are stored as their TensorDicts and read back as tensorclasses.
    A stored TensorDict keeps its whole batch size: the batch dims after the first ``ndim``
    belong to each item (``[N, T]`` trajectories in a ``ndim=1`` storage sample as
    ``[batch, T]``).

    Args:
        storage: the preallocated container (a tensor, TensorDict, tensorclass or pytree of
            tensors); its leading dimension is the capacity.
        max_size: capacity along the first dimension (defaults to the storage's).
        device: the device of the storage (taken from ``storage`` when given).
        ndim: how many leading dimensions index items.
        compilable: accepted for API compatibility; it has no effect.

    Examples:
        >>> import torch
        >>> storage = TensorStorage(torch.zeros(10, 3))
        >>> storage.set(range(2), torch.ones(2, 3))
        >>> len(storage), storage.get(1), storage.get(9)
        (10, tensor([1., 1., 1.]), tensor([0., 0., 0.]))
    """

    def __init__(
        self,
        storage: Any,
        max_size: int | None = None,
        *,
        device: torch.device | str | None = "cpu",
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        if int(ndim) < 1:
            raise ValueError(f"ndim must be >= 1, got {ndim}")
        self.ndim = int(ndim)
        # length along dim 0, mutation revision, last row written (-1: none); shared with the
        # processes a shared storage is sent to
        self._counters = torch.tensor([0, 0, -1], dtype=torch.int64)
        self._bind_counters()
        self._kind: str | None = None
        self._td: TensorDictBase | None = None
        self._treespec = None
        self._tc_types: dict[tuple, type] | None = None
        # per-row write generations (-1: never written), kept once a writer asks for them
        self._slot_generations: torch.Tensor | None = None
        self._tracks_generations = False
        if storage is not None:
            self._adopt(storage)
            self._len_np[()] = self._td.shape[0]
            if max_size is None:
                max_size = self._td.shape[0]
            elif int(max_size) != self._td.shape[0]:
                raise ValueError(
                    f"max_size mismatch: the storage given has {self._td.shape[0]} rows, got max_size={max_size}"
                )
            device = self._td.device
        elif max_size is None:
            raise ValueError("max_size is required when no storage is given")
        super().__init__(max_size, compilable=compilable)
        self.device = torch.device(device) if device is not None else None
        if self._td is not None and (self._td.is_memmap() or self._td.is_shared()):
            self._share_len()

    # -- structure ---------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        """Whether the storage has been allocated (by any process, when it is shared)."""
        return self._attached()

    def share_memory_(self) -> TensorStorage:
        """Keep the content and the length where processes started later see them.

        An allocated storage moves its tensors to shared memory; a lazy one still empty
        allocates there (in files every process maps) on its first write, in any process.
        """
        self._shared_init = True
        self._share_len()
        if self.initialized:
            self._td.share_memory_()
        else:
            self._enable_shared_init()
        return self

    def _bind_counters(self) -> None:
        counters = self._counters.numpy()
        self._counters_np = counters
        self._len_np = counters[0:1].reshape(())

    def _share_len(self) -> None:
        """Move the length and counters to shared memory so other processes see them."""
        self._counters.share_memory_()
        self._bind_counters()
        if self._slot_generations is not None and self._slot_generations.is_cpu:
            self._slot_generations.share_memory_()

    # -- write generations -------------------------------------------------------------------------
    @property
    def tracks_generations(self) -> bool:
        """Whether a write generation is kept per row (see :meth:`enable_generations`)."""
        return self._tracks_generations

    def enable_generations(self) -> None:
        """Keep a write generation per row (asked for by writers with ``track_generations``)."""
        self._tracks_generations = True
        if self._td is not None and self._slot_generations is None:
            self._allocate_generations()

    def _allocate_generations(self) -> None:
        rows = self._td.shape[0]
        generations = torch.full((rows,), -1, dtype=torch.int64, device=self._td.device)
        if self._counters.is_shared() and generations.is_cpu:
            generations.share_memory_()
        self._slot_generations = generations

    @property
    def slot_generations(self) -> torch.Tensor | None:
        """Per-row write counts (``-1``: never written), or ``None`` when no writer asked for them."""
        return self._slot_generations

    def advance_generations(self, rows: torch.Tensor) -> None:
        """Count one write per entry of ``rows`` (repeated rows were written several times)."""
        generations = self._slot_generations
        if generations is not None:
            rows = rows.reshape(-1).to(generations.device, torch.long)
            generations.index_add_(0, rows, torch.ones_like(rows))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in (
            "_plan",
            "_leaves",
            "_flat_plan",
            "_flat_leaves",
            "_gather_programs",
            "_write_shapes",
            "_len_np",
            "_counters_np",
        ):
            state.pop(key, None)
        return self._shared_state(state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_counters()
        if self._td is not None:
            self._build_plans()

    @property
    def _mutation_revision(self) -> int:
        """How many writes (and empties) the storage has seen, in every process sharing it.

        Samplers caching what they derived from the content (trajectories, groups) compare
        it to tell whether the content changed, whoever wrote it.
        """
        return int(self._counters_np[1])

    @property
    def _last_cursor_index(self) -> int:
        """The last row a writer wrote (the newest item), or -1 before any write."""
        return int(self._counters_np[2])

    @property
    def _storage(self) -> Any:
        """The container in the form it was given or inferred (tensor, TensorDict or pytree)."""
        if not self._attached():
            return None
        return self._wrap(self._td)

    # -- writing -------------------------------------------------------------------------------
    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Write ``data`` at ``cursor``.

        Args:
            cursor: an int (one item), a slice, a ``range`` or an index tensor along the first
                dimension; with ``ndim > 1``, also the multi-dimensional indices sampling
                returns: a tuple of index tensors (one per dim) or an index tensor of shape
                ``[n, ndim]``, as :meth:`get` takes them.
            data: one item (int cursor) or items stacked along a leading dimension.
            set_cursor: whether the write may grow ``len(self)``.
        """
        if type(cursor) is slice and self._td is not None:
            # the writers' case, first: rows start:stop of an allocated storage
            self._write_slice(cursor, self._data_leaves(data))
            self._counters_np[1] += 1
            if set_cursor:
                self._grow(cursor)
            return
        if isinstance(cursor, range):
            cursor = range_index(cursor)
        single = isinstance(cursor, (int, np.integer))
        if self._td is None:
            self._first_write(data, not single)
        leaves = self._data_leaves(data)
        if isinstance(cursor, slice):
            self._write_slice(cursor, leaves)
        elif isinstance(cursor, tuple):
            cursor = self.multi_index(cursor)
            self._write_multi(cursor, leaves)
        elif not single and (item := self.item_index(torch.as_tensor(cursor))) is not None:
            # computed once: multi_index of the cursor would derive the same item again
            cursor = self.multi_index(item if isinstance(item, tuple) else (item,))
            self._write_multi(cursor, leaves)
        else:
            if isinstance(cursor, (list, np.ndarray)):
                cursor = torch.as_tensor(cursor, dtype=torch.long)
            for key, dst, src in zip(self._keys, self._leaves, leaves):
                expected = dst.shape[1:] if single else (cursor.shape[0], *dst.shape[1:])
                if src.shape != expected and not (not single and cursor.ndim == 0):
                    raise self._shape_error(key, torch.Size(expected), src.shape)
                dst[cursor] = src
        self._counters_np[1] += 1
        if set_cursor:
            self._grow(cursor)

    def _write_slice(self, cursor: slice, leaves: list[torch.Tensor]) -> None:
        """Copy ``leaves`` into the rows ``cursor`` of the stored leaves.

        A writer's slice (``start:stop``, within the rows) is checked with one comparison
        of the leaves' shapes to those expected for its length (cached per layout and
        length); any other slice, or leaves of other shapes, take the leaf-by-leaf path,
        which names the first leaf whose shape differs.
        """
        start, stop = cursor.start, cursor.stop
        if (
            cursor.step is None
            and type(start) is int
            and type(stop) is int
            and 0 <= start <= stop <= self._slice_rows
        ):
            shapes = self._write_shapes.get(stop - start)
            if shapes is None:
                shapes = self._slice_shapes(stop - start)
            if [src.shape for src in leaves] == shapes:
                for dst, src in zip(self._leaves, leaves):
                    dst[cursor] = src
                return
        for key, dst, src in zip(self._keys, self._leaves, leaves):
            view = dst[cursor]
            if view.shape != src.shape:
                raise self._shape_error(key, view.shape, src.shape)
            view.copy_(src)

    def _slice_shapes(self, count: int) -> list[torch.Size]:
        """The shapes of the stored leaves' views of ``count`` consecutive rows (cached)."""
        cache = self._write_shapes
        if len(cache) >= 16:  # writes of many lengths: keep the latest ones
            cache.clear()
        shapes = cache[count] = [torch.Size((count, *dst.shape[1:])) for dst in self._leaves]
        return shapes

    def item_index(self, index: torch.Tensor) -> Any:
        """The item index an index tensor of more than one dim stands for, else ``None``.

        With ``ndim > 1``, a ``[..., ndim]`` integer tensor holds coordinates (the ``"index"``
        of a sample): it becomes a tuple of index tensors. When items have batch dims of
        their own, a per-item index expanded over them (``[n, *item dims]``, plus the
        trailing ``ndim`` for coordinates) is read at its first position along those dims.
        """
        if index.ndim < 2 or index.dtype == torch.bool or index.is_floating_point():
            return None
        trailing = self._trailing if self._td is not None else ()
        if self.ndim > 1:
            if index.shape[-1] != self.ndim:
                return None
            if trailing and tuple(index.shape[1:-1]) == trailing:
                index = index[(slice(None),) + (0,) * len(trailing)]
            return tuple(index.unbind(-1))
        if trailing and tuple(index.shape[1:]) == trailing:
            return index[(slice(None),) + (0,) * len(trailing)]
        return None

    def multi_index(self, index: Any) -> tuple:
        """A tuple index with ints, lists and arrays turned into long tensors."""
        if not isinstance(index, tuple):
            item = self.item_index(torch.as_tensor(index))
            return item if isinstance(item, tuple) else (item,)
        return tuple(
            torch.as_tensor(part, dtype=torch.long)
            if isinstance(part, (int, np.integer, list, np.ndarray))
            else part
            for part in index
        )

    def _write_multi(self, index: tuple, leaves: list[torch.Tensor]) -> None:
        tensors = all(isinstance(part, torch.Tensor) and part.dtype != torch.bool for part in index)
        lead = torch.broadcast_shapes(*(part.shape for part in index)) if tensors else None
        for key, dst, src in zip(self._keys, self._leaves, leaves):
            if lead is not None:
                expected = torch.Size((*lead, *dst.shape[len(index) :]))
                if src.shape != expected:
                    raise self._shape_error(key, expected, src.shape)
                dst[index] = src
                continue
            try:
                dst[index] = src
            except RuntimeError as err:
                raise ValueError(
                    f"data shape mismatch at key {key}: cannot write shape {tuple(src.shape)} at "
                    f"index {index}: {err}"
                ) from err

    @staticmethod
    def _shape_error(key: tuple, expected: torch.Size, got: torch.Size) -> ValueError:
        return ValueError(
            f"data shape mismatch at key {key}: expected shape {tuple(expected)}, got {tuple(got)}"
        )

    def _grow(self, cursor: Any) -> None:
        if isinstance(cursor, tuple):
            cursor = cursor[0]
        if isinstance(cursor, slice):
            end = cursor.stop
            last = end - 1
        elif isinstance(cursor, (int, np.integer)):
            end = int(cursor) + 1
            last = int(cursor)
        elif cursor.numel():
            end = int(cursor.max()) + 1
            last = int(cursor.reshape(-1)[-1])
        else:
            return
        rows = self._td.shape[0]
        self._counters_np[2] = last % rows
        if end > int(self._len_np):
            self._len_np[()] = min(end, rows)

    def max_rows(self, data: Any = None, batched: bool = True) -> int:
        """Rows of the first dimension: allocated, or inferred from ``data`` while lazy."""
        if self._td is not None:
            return self._td.shape[0]
        if self.ndim == 1 or data is None:
            return self.max_size
        shape = (
            data.batch_size
            if isinstance(data, TensorDictBase)
            else _pytree.tree_leaves(data)[0].shape
        )
        other = shape[1 : self.ndim] if batched else shape[: self.ndim - 1]
        return -(-self.max_size // max(math.prod(other), 1))

    def rows_to_flat(self, rows: torch.Tensor) -> torch.Tensor:
        """Flat item numbers of every item in the given rows of the first dimension."""
        if self.ndim == 1:
            return rows
        per_row = math.prod(self._td.shape[1 : self.ndim])
        return (rows.unsqueeze(-1) * per_row + torch.arange(per_row)).reshape(-1)

    def leaf(self, key: Any) -> torch.Tensor:
        """The stored tensor of entry ``key`` (all rows), for writes in place."""
        value = None
        if self._td is not None and self._kind == "tensordict":
            value = self._td.get(key, None)
        if not isinstance(value, torch.Tensor):
            keys = [] if self._td is None else list(self._td.keys(True, True))
            raise KeyError(f"no entry {key!r} in the stored data (stored keys: {keys})")
        return value

    def mark_written(self) -> None:
        """Count a write made through a view of the content (not through :meth:`set`)."""
        self._counters_np[1] += 1

    def set_len_along_dim0(self, length: int) -> None:
        """Set the filled length (after content was written directly, e.g. by a checkpointer)."""
        counters = self._counters_np
        counters[0] = length
        counters[1] += 1
        if self._td is not None and length < self._td.shape[0]:
            counters[2] = length - 1

    # -- reading -------------------------------------------------------------------------------
    @property
    def len_along_dim0(self) -> int:
        """How many rows of the first dimension are filled."""
        return int(self._len_np)

    def __len__(self) -> int:
        if self._td is None and not self._attached():
            return 0
        return int(self._len_np) * math.prod(self._item_shape[: self.ndim - 1])

    @property
    def total_shape(self) -> torch.Size | None:
        """The shape of :attr:`content`, all rows (``None`` before allocation)."""
        return self._td.shape if self._attached() else None

    @property
    def shape(self) -> torch.Size | None:
        """The shape of the stored items: leading dimension truncated to the filled length."""
        if not self._attached():
            return None
        return torch.Size((int(self._len_np), *self._td.shape[1:]))

    def _valid(self) -> TensorDictBase:
        return self._td[: int(self._len_np)]

    def get(self, index: Any) -> Any:
        """Read items: an int, a slice, a range, an index tensor / list along dim 0, or a tuple.

        With ``ndim > 1`` an integer tensor of shape ``[n, ndim]`` holds coordinates (as the
        ``"index"`` entry of samples does) and reads ``n`` items.
        """
        if self._td is None and not self._attached():
            raise RuntimeError(_EMPTY_MSG)
        length = int(self._len_np)
        if isinstance(index, range):
            index = range_index(index)
        if isinstance(index, (int, np.integer)):
            if not -length <= index < length:
                raise _out_of_range(int(index), length)
            return self._wrap(self._td[int(index) % length])
        if isinstance(index, slice):
            return self._wrap(self._td[:length][index])
        if isinstance(index, tuple):
            return self._wrap(self._valid()[index])
        indices = torch.as_tensor(index)
        if indices.dtype == torch.bool:
            return self._wrap(self._valid()[indices])
        if indices.ndim > 1:
            item = self.item_index(indices)
            if isinstance(item, tuple):
                return self._wrap(self._valid()[item])
            if item is not None:
                indices = item
        indices = indices.to(torch.long).reshape(-1)
        if indices.numel():
            low, high = (int(v) for v in torch.aminmax(indices))
            if low < -length or high >= length:
                raise _out_of_range(index, length)
            if low < 0:
                indices = indices.remainder(length)
        return self._gather_rows(indices)

    def _gather_rows(
        self, indices: torch.Tensor, extra: dict | None = None, given: dict | None = None
    ) -> Any:
        batch = (indices.shape[0], *self._item_shape)
        return self._gather_with(self._plan, self._leaves, indices, batch, extra, given)

    def _gather_with(
        self,
        plan: list,
        leaves: list,
        indices: torch.Tensor,
        batch: tuple,
        extra: dict | None,
        given: dict | None = None,
    ) -> Any:
        kind = self._kind
        if kind == "tensor":
            return leaves[0].index_select(0, indices)
        if kind == "pytree":
            gathered = [leaf.index_select(0, indices) for leaf in leaves]
            return _pytree.tree_unflatten(gathered, self._treespec)
        device = self._out_device
        batch = torch.Size(batch)
        names = ()
        if given:
            if self._trailing:
                given = {key: expand_to_items(value, batch) for key, value in given.items()}
            names = tuple(given)
            size = len(batch)
            if any(
                not isinstance(value, torch.Tensor) or value.shape[:size] != batch
                for value in given.values()
            ):
                names = ()  # not of the batch's shape: set below, where the error is raised
        program = self._gather_program(plan, names)
        source = program.source(indices, given, batch, device)
        if extra:
            if self._trailing:
                extra = {key: expand_to_items(value, batch) for key, value in extra.items()}
            source.update(extra)
        out = TensorDict._new_unsafe(source=source, batch_size=batch, device=device, nested=False)
        if given:
            for name in program.leftover if names else given:
                out.set(name, given[name])
        return out if self._tc_types is None else retyped(out, self._tc_types)

    def _gather_program(self, plan: list, names: tuple) -> GatherProgram:
        """The compiled gathers of ``plan`` with the given entries ``names`` (cached per layout)."""
        programs = self._gather_programs
        key = (id(plan), names)
        program = programs.get(key)
        if program is None or program.plan is not plan:
            if len(programs) >= 64:  # names vary with the samplers used: keep the last ones
                programs.clear()
            program = programs[key] = GatherProgram(plan, names)
        return program

    def gather(self, index: Any, extra: dict | None = None, given: dict | None = None) -> Any:
        """Read sampled items with one gather per leaf (indices are trusted).

        Args:
            index: item indices from a sampler.
            extra: entries added at the root of the result (a tensordict storage).
            given: tensors by entry key (nested keys as tuples) set in the result, of the
                batch's leading shape (a sampler's flags): the stored leaves they replace
                are not gathered, and entries not stored are added.
        """
        if self.ndim == 1:
            return self._gather_rows(index, extra, given)
        flat = self.ravel_index(index)
        batch = (flat.shape[0], *self._trailing)
        return self._gather_with(self._flat_plan, self._flat_leaves, flat, batch, extra, given)

    def unravel_index(self, flat_index: torch.Tensor) -> Any:
        """Flat item numbers as indices: themselves, or a tuple of coordinates when ``ndim > 1``."""
        if self.ndim == 1:
            return flat_index
        return torch.unravel_index(flat_index, tuple(self._td.shape[: self.ndim]))

    def ravel_index(self, index: Any) -> torch.Tensor:
        """Flat item numbers of an index (coordinates, a ``[n, ndim]`` tensor or slices)."""
        if self.ndim == 1:
            if isinstance(index, tuple):
                index = index[0]
            return torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if isinstance(index, tuple):
            if len(index) < self.ndim or not all(
                isinstance(part, (torch.Tensor, list, int, np.integer, np.ndarray))
                for part in index[: self.ndim]
            ):
                # slices or ellipses: the flat ids of the items the index selects
                grid = torch.arange(len(self)).reshape(
                    int(self._len_np), *self._td.shape[1 : self.ndim]
                )
                return grid[index[: self.ndim]].reshape(-1)
            parts = [torch.as_tensor(part, dtype=torch.long) for part in index[: self.ndim]]
            if any(part.shape != parts[0].shape for part in parts[1:]):
                parts = torch.broadcast_tensors(*parts)
            index = torch.stack(parts, -1)
        index = torch.as_tensor(index, dtype=torch.long)
        if index.ndim == 1:
            return index
        return (index * self._strides).sum(-1)

    # -- state ---------------------------------------------------------------------------------
    def empty(self) -> None:
        """Forget every item (the allocated tensors stay; write generations move on)."""
        counters = self._counters_np
        counters[0] = 0
        counters[1] += 1
        counters[2] = -1
        generations = self._slot_generations
        if generations is not None:
            # handles on emptied rows go stale; rows never written stay at -1
            generations.add_((generations >= 0).long())

    def state_dict(self) -> dict[str, Any]:
        """Content (nested dicts of tensors), length and layout, for ``torch.save``.

        Only tensors, lists, strings and numbers: ``torch.load(..., weights_only=True)``
        reads it back whatever the installed tensordict version.
        """
        self._attached()
        return {
            "_storage": None if self._td is None else plain_state(self._td.to_tensordict()),
            "full_batch_size": True,
            "initialized": self._td is not None,
            "_len": int(self._len_np),
            "_last_cursor": self._last_cursor_index,
            "kind": self._kind,
            "treespec": None if self._treespec is None else _pytree.treespec_dumps(self._treespec),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore content and length; allocates the storage first when it is still lazy."""
        content = state_dict["_storage"]
        if content is not None:
            content = from_plain_state(content)
            kind = state_dict.get("kind", "tensordict")
            if kind == "tensordict" and not state_dict.get("full_batch_size"):
                content = full_batch_size(content, self.ndim)
            if self._td is None:
                self._kind = kind
                if state_dict.get("treespec") is not None:
                    self._treespec = _pytree.treespec_loads(state_dict["treespec"])
                self.max_size = content.shape[0] * math.prod(content.shape[1 : self.ndim])
                template = [
                    (as_key_tuple(key), tuple(content.get(key).shape), content.get(key).dtype)
                    for key in content.keys(include_nested=True, leaves_only=True)
                ]
                tensors = self._allocate(template)
                td = content.empty(recurse=True)
                for (key, _, _), tensor in zip(template, tensors):
                    td.set(key, tensor)
                if self.device is not None:
                    td = td.to(self.device)
                self._td = td
                self._build_plans()
            elif content.shape[: self.ndim] != self._td.shape[: self.ndim]:
                raise ValueError(
                    f"state shape mismatch: expected storage shape {tuple(self._td.shape)}, got {tuple(content.shape)}"
                )
            self._td.update_(content)
        counters = self._counters_np
        counters[0] = int(state_dict["_len"])
        counters[1] += 1
        counters[2] = int(state_dict.get("_last_cursor", -1))

    def __repr__(self) -> str:
        shape = None if self._td is None else tuple(self._td.shape)
        return f"{type(self).__name__}(items={len(self)}, max_size={self.max_size}, shape={shape}, device={self.device})"


class LazyTensorStorage(TensorStorage):
    """A tensor storage allocated on the first write, from the structure of the data.

    Args:
        max_size: the number of items to hold (with ``ndim > 1``, the number of elements
            over the first ``ndim`` dimensions, rounded up to whole rows).
        device: where to allocate (``"cpu"``, ``"cuda"``...).
        ndim: how many leading dimensions index items.
        compilable: accepted for API compatibility; it has no effect.
        shared_init: allocate in shared memory, so that a buffer passed to other processes
            (before or after its first write) writes to the same tensors. Shared memory is
            CPU memory: another ``device`` is replaced by ``"cpu"``, with a warning.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> storage = LazyTensorStorage(100)
        >>> storage.set(slice(0, 4), TensorDict({"obs": torch.ones(4, 3)}, [4]))
        >>> len(storage), storage.get(0)["obs"].shape
        (4, torch.Size([3]))
    """

    def __init__(
        self,
        max_size: int,
        *,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        compilable: bool = False,
        shared_init: bool = False,
    ) -> None:
        super().__init__(
            storage=None, max_size=max_size, device=device, ndim=ndim, compilable=compilable
        )
        self._shared_init = bool(shared_init)
        if self._shared_init:
            self._share_len()
            self._enable_shared_init()

    def _allocate(self, template: list, first: int = 0) -> list[torch.Tensor]:
        if self._shared_init and self.device is not None and self.device.type != "cpu":
            warnings.warn(
                f"{type(self).__name__}: shared_init allocates in shared (CPU) memory; the "
                f"device {self.device} cannot be honored, the storage is on cpu",
                stacklevel=4,
            )
            self.device = torch.device("cpu")
        if self._shared_dir is not None:
            tensors = self._allocate_shared(template, first)
            self._share_len()
            return tensors
        tensors = [
            torch.empty(shape, dtype=dtype, device=self.device) for _, shape, dtype in template
        ]
        if self._shared_init:
            tensors = [tensor.share_memory_() for tensor in tensors]
            self._share_len()
        return tensors


# Kept importable from here, where the reference API's users look for it.
from tdrl.data.replay_buffers.memmap_storage import LazyMemmapStorage  # noqa: E402
