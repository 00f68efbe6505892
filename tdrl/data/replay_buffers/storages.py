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
from tensordict import TensorDict, TensorDictBase, is_tensorclass
from torch.utils import _pytree

from tdrl.data.replay_buffers.list_storage import LazyStackStorage, ListStorage
from tdrl.data.replay_buffers.shared_init import SharedInit
from tdrl.data.replay_buffers.storage_base import _EMPTY_MSG, Storage, _out_of_range, range_index
from tdrl.data.replay_buffers.storage_state import from_plain_state, full_batch_size, plain_state
from tdrl.data.replay_buffers.utils import (
    collect_leaves,
    expand_to_items,
    gather_source,
    keys_of,
    retyped,
    tensordict_plan,
    untyped,
)

__all__ = [
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "Storage",
    "TensorStorage",
]

_TENSOR_KEY = "_tensor"


def _as_tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class TensorStorage(SharedInit, Storage):
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

    @property
    def content(self) -> TensorDictBase | None:
        """The stored TensorDict: every row of every leaf (``None`` before allocation).

        Tensors and pytrees are held as TensorDicts too (see :attr:`kind`). Rows past
        :attr:`len_along_dim0` hold stale or uninitialized values. Checkpointers read and
        fill it in place; after writing it directly, call :meth:`set_len_along_dim0`.
        """
        self._attached()
        return self._td

    @property
    def kind(self) -> str | None:
        """What the items are: ``"tensordict"``, ``"tensor"`` or ``"pytree"`` (``None`` before allocation)."""
        self._attached()
        return self._kind

    @property
    def treespec(self) -> Any:
        """The pytree structure of the items when :attr:`kind` is ``"pytree"``, else ``None``."""
        return self._treespec

    @property
    def stored_keys(self) -> list[tuple]:
        """The keys of the stored leaves in :attr:`content`, in storage order."""
        return list(self._keys) if self._td is not None else []

    def wrap_content(self, td: TensorDictBase) -> Any:
        """Turn rows of :attr:`content` into the stored form (TensorDict, tensor or pytree)."""
        return self._wrap(td)

    def allocate_leaves(self, template: list) -> list[torch.Tensor]:
        """New tensors, where this storage keeps its data, for ``(key, shape, dtype)`` entries.

        A memory-mapped storage makes files, a shared one shared memory. Fill a
        TensorDict with them and hand it to :meth:`adopt_content`.
        """
        return self._allocate(template)

    def adopt_content(self, td: TensorDictBase, *, kind: str, treespec: Any = None) -> None:
        """Make ``td`` (built from :meth:`allocate_leaves`) the storage's content.

        Args:
            td: the TensorDict of all rows; moved to the storage's device.
            kind: ``"tensordict"``, ``"tensor"`` or ``"pytree"`` (see :attr:`kind`).
            treespec: the pytree structure when ``kind`` is ``"pytree"``.
        """
        if kind not in ("tensordict", "tensor", "pytree"):
            raise ValueError(f"kind must be 'tensordict', 'tensor' or 'pytree', got {kind!r}")
        device = self._storage_device()
        if device is not None:
            td = td.to(device)
        self._kind = kind
        if treespec is not None:
            self._treespec = treespec
        self._td = td
        self._build_plans()

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

    def _adopt(self, storage: Any) -> None:
        """Wrap a container (tensor, TensorDict, tensorclass or pytree) as the internal TensorDict."""
        if isinstance(storage, TensorDictBase) or is_tensorclass(storage):
            self._kind = "tensordict"
            td, self._tc_types = untyped(storage)
        elif isinstance(storage, torch.Tensor):
            self._kind = "tensor"
            td = TensorDict({_TENSOR_KEY: storage}, batch_size=storage.shape[: self.ndim])
        else:
            leaves, self._treespec = _pytree.tree_flatten(storage)
            if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
                raise TypeError(
                    f"{type(self).__name__} stores tensors, TensorDicts or pytrees of tensors; "
                    f"got {type(storage).__name__}"
                )
            self._kind = "pytree"
            td = TensorDict(
                {str(i): leaf for i, leaf in enumerate(leaves)},
                batch_size=leaves[0].shape[: self.ndim],
            )
        if td.batch_dims < self.ndim:
            raise ValueError(
                f"storage shape mismatch: expected at least {self.ndim} batch dimensions, got {tuple(td.shape)}"
            )
        self._td = td
        self._build_plans()

    def _build_plans(self) -> None:
        td = self._td
        if self._tracks_generations and (
            self._slot_generations is None or self._slot_generations.numel() != td.shape[0]
        ):
            self._allocate_generations()
        self._plan = tensordict_plan(td, td.batch_dims)
        self._keys = keys_of(self._plan)
        self._leaves = [td.get(key) for key in self._keys]
        self._item_shape = tuple(td.shape[1:])
        # batch dims of each item beyond the ``ndim`` indexing dims ([N, T] items with ndim=1)
        self._trailing = tuple(td.shape[self.ndim :])
        flat = td if self.ndim == 1 else td.flatten(0, self.ndim - 1)
        self._flat_plan = tensordict_plan(flat, flat.batch_dims)
        self._flat_leaves = [flat.get(key) for key in self._keys]
        self._strides = torch.tensor(
            [math.prod(td.shape[d + 1 : self.ndim]) for d in range(self.ndim)], dtype=torch.long
        )
        self._out_device = self._td.device

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
        for key in ("_plan", "_leaves", "_flat_plan", "_flat_leaves", "_len_np", "_counters_np"):
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

    def _wrap(self, td: TensorDictBase) -> Any:
        if self._kind == "tensordict":
            return td if self._tc_types is None else retyped(td, self._tc_types)
        if self._kind == "tensor":
            return td.get(_TENSOR_KEY)
        return _pytree.tree_unflatten(
            [td.get(str(i)) for i in range(len(self._keys))], self._treespec
        )

    def _data_leaves(self, data: Any) -> list[torch.Tensor]:
        """The leaves of ``data`` in storage order; a clear error when the structure differs."""
        if self._kind == "tensordict":
            if not isinstance(data, TensorDictBase):
                if is_tensorclass(data):
                    data = data._tensordict
                else:
                    raise TypeError(
                        f"data type mismatch: this storage holds TensorDicts, got {type(data).__name__}"
                    )
            leaves: list[torch.Tensor] = []
            try:
                collect_leaves(data, self._plan, (), leaves)
            except ValueError:
                if not self.add_entries(data):
                    raise
                leaves = []
                collect_leaves(data, self._plan, (), leaves)
            return leaves
        if self._kind == "tensor":
            if not isinstance(data, torch.Tensor):
                if isinstance(data, TensorDictBase):
                    raise TypeError(
                        "data type mismatch: this storage holds tensors, got a TensorDict"
                    )
                data = torch.as_tensor(data)
            return [data]
        leaves, spec = _pytree.tree_flatten(data)
        if spec != self._treespec:
            raise ValueError(
                f"data structure mismatch: expected a pytree structured as {self._treespec}, got {spec}"
            )
        return leaves

    # -- lazy allocation -----------------------------------------------------------------------
    def _init(self, data: Any, batched: bool = False) -> None:
        """Allocate the storage from the structure of the first data written.

        ``data`` is one item, or items stacked along dim 0 when ``batched``.
        """
        tc_types = None
        if is_tensorclass(data):
            data, tc_types = untyped(data)
        if isinstance(data, TensorDictBase):
            kind = "tensordict"
            keys = [_as_tuple(key) for key in data.keys(include_nested=True, leaves_only=True)]
            leaves = [data.get(key) for key in keys]
        elif isinstance(data, torch.Tensor):
            kind, keys, leaves = "tensor", [(_TENSOR_KEY,)], [data]
        else:
            leaves, self._treespec = _pytree.tree_flatten(data)
            for position, leaf in enumerate(leaves):
                if not isinstance(leaf, (torch.Tensor, int, float, bool)):
                    raise TypeError(
                        f"{type(self).__name__} stores tensors only; got {type(leaf).__name__} "
                        f"at pytree leaf {position}"
                    )
            leaves = [torch.as_tensor(leaf) for leaf in leaves]
            kind, keys = "pytree", [(str(i),) for i in range(len(leaves))]
            if not leaves:
                raise ValueError("cannot allocate a storage from data with no tensor")
        for key, leaf in zip(keys, leaves):
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(
                    f"{type(self).__name__} stores tensors only; got {type(leaf).__name__} at key {key}"
                )
        if kind == "tensordict":
            batch = tuple(data.batch_size)
        else:
            batch = tuple(leaves[0].shape)
        # an item's batch dims: all of them for TensorDicts, the indexing ones otherwise
        item = batch[1:] if batched else batch
        other = item[: self.ndim - 1]
        if len(other) != self.ndim - 1:
            raise ValueError(
                f"data shape mismatch: a storage with ndim={self.ndim} needs data with at least "
                f"{self.ndim if batched else self.ndim - 1} batch dimensions, got batch shape {batch}"
            )
        per_row = math.prod(other)
        rows = -(-self.max_size // per_row)
        self.max_size = rows * per_row
        start = 1 if batched else 0
        template = []
        for key, leaf in zip(keys, leaves):
            template.append((key, (rows, *leaf.shape[start:]), leaf.dtype))
        tensors = self._allocate(template)
        source: dict = {}
        for (key, _, _), tensor in zip(template, tensors):
            node = source
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = tensor
        self._kind = kind
        self._tc_types = tc_types
        td_batch = (rows, *item) if kind == "tensordict" else (rows, *other)
        td = TensorDict(source, batch_size=td_batch, device=self._storage_device())
        if kind == "tensordict":
            self._restore_sub_batch(td, data, batched)
        self._td = td
        self._build_plans()

    @staticmethod
    def _restore_sub_batch(td: TensorDictBase, data: TensorDictBase, batched: bool) -> None:
        for key, value in data.items(include_nested=True):
            if isinstance(value, TensorDictBase):
                dims = value.batch_size[1:] if batched else value.batch_size
                td.get(key).batch_size = (td.shape[0], *dims)

    def _storage_device(self) -> torch.device | None:
        return self.device

    def _allocate(self, template: list, first: int = 0) -> list[torch.Tensor]:
        """Tensors for ``template`` entries ``(key, shape, dtype)``, the first being leaf ``first``."""
        if self._td is None:
            raise RuntimeError(
                f"{type(self).__name__} was not given a storage; use LazyTensorStorage to "
                "allocate lazily"
            )
        return [
            torch.empty(shape, dtype=dtype, device=self._td.device) for _, shape, dtype in template
        ]

    def add_entries(self, data: TensorDictBase) -> bool:
        """Allocate, zero-filled, the entries of ``data`` that the stored TensorDicts lack.

        A write may then bring keys the first data written did not have; the rows not
        written to hold zeros in them. The dims of ``data``'s entries past its batch dims
        are those of one stored value. In a storage shared with other processes, the new
        entries exist in this process only.

        Args:
            data: a TensorDict whose batch dims cover the stored items' batch dims.

        Returns:
            whether entries were added.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> storage = LazyTensorStorage(4)
            >>> storage.set(range(2), TensorDict({"a": torch.ones(2)}, [2]))
            >>> storage.set(range(2), TensorDict({"a": torch.ones(2), "b": torch.ones(2, 3)}, [2]))
            >>> storage.get(slice(None))["b"].shape
            torch.Size([2, 3])
        """
        if self._td is None or self._kind != "tensordict" or not isinstance(data, TensorDictBase):
            return False
        stored = set(self._keys)
        template = []
        for key in data.keys(include_nested=True, leaves_only=True):
            key = _as_tuple(key)
            if key in stored or any(key[:i] in stored for i in range(1, len(key))):
                continue
            value = data.get(key)
            if not isinstance(value, torch.Tensor) or value.ndim < data.batch_dims:
                continue
            shape = (*self._td.shape, *value.shape[data.batch_dims :])
            template.append((key, shape, value.dtype))
        if not template:
            return False
        for (key, _, _), tensor in zip(template, self._allocate(template, first=len(self._keys))):
            tensor.zero_()
            self._td.set(key, tensor)
        self._build_plans()
        return True

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
        if isinstance(cursor, range):
            cursor = range_index(cursor)
        single = isinstance(cursor, (int, np.integer))
        if self._td is None:
            self._first_write(data, not single)
        leaves = self._data_leaves(data)
        if isinstance(cursor, slice):
            for key, dst, src in zip(self._keys, self._leaves, leaves):
                view = dst[cursor]
                if view.shape != src.shape:
                    raise self._shape_error(key, view.shape, src.shape)
                view.copy_(src)
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

    def _gather_rows(self, indices: torch.Tensor, extra: dict | None = None) -> Any:
        batch = (indices.shape[0], *self._item_shape)
        return self._gather_with(self._plan, self._leaves, indices, batch, extra)

    def _gather_with(
        self, plan: list, leaves: list, indices: torch.Tensor, batch: tuple, extra: dict | None
    ) -> Any:
        kind = self._kind
        if kind == "tensor":
            return leaves[0].index_select(0, indices)
        if kind == "pytree":
            gathered = [leaf.index_select(0, indices) for leaf in leaves]
            return _pytree.tree_unflatten(gathered, self._treespec)
        device = self._out_device
        source = gather_source(plan, indices, batch, device)
        if extra:
            if self._trailing:
                extra = {key: expand_to_items(value, batch) for key, value in extra.items()}
            source.update(extra)
        out = TensorDict._new_unsafe(source=source, batch_size=torch.Size(batch), device=device)
        return out if self._tc_types is None else retyped(out, self._tc_types)

    def gather(self, index: Any, extra: dict | None = None) -> Any:
        """Read sampled items with one gather per leaf (indices are trusted)."""
        if self.ndim == 1:
            return self._gather_rows(index, extra)
        flat = self.ravel_index(index)
        batch = (flat.shape[0], *self._trailing)
        return self._gather_with(self._flat_plan, self._flat_leaves, flat, batch, extra)

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
                    (_as_tuple(key), tuple(content.get(key).shape), content.get(key).dtype)
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
