"""Replay buffers: a storage, a writer and a sampler composed behind one small API."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl._utils import rl_warnings
from tdrl.data.replay_buffers.buffer_indexing import assign_data, checked_write_index, index_data
from tdrl.data.replay_buffers.buffer_transforms import Inverted, TransformSequence
from tdrl.data.replay_buffers.conditional_updates import UpdateResult, update_if_present
from tdrl.data.replay_buffers.errors import DataValueError
from tdrl.data.replay_buffers.in_place import InPlaceAccess
from tdrl.data.replay_buffers.memmap_storage import LazyMemmapStorage
from tdrl.data.replay_buffers.prefetch import PrefetchQueue
from tdrl.data.replay_buffers.samplers import RandomSampler, Sampler
from tdrl.data.replay_buffers.storages import (
    LazyStackStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from tdrl.data.replay_buffers.utils import (
    built_component,
    checked_batch_size,
    copied_views,
    item_list,
    move_extend_dim,
    pinned,
    stack_items,
)
from tdrl.data.replay_buffers.writers import RoundRobinWriter, Writer

__all__ = [
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
]


def _identity(data: Any) -> Any:
    return data


class ReplayBuffer(InPlaceAccess):
    """A replay buffer: writes go through a writer into a storage, reads through a sampler.

    The storage, sampler and writer may be given as instances or as factories (callables
    without arguments, e.g. ``functools.partial(LazyTensorStorage, 1000)``). With
    ``delayed_init``, they are built, wired and handed their transforms on first use (a write,
    a read, a sample...), so a buffer can be created cheaply and sent to another process
    first; :attr:`initialized` tells whether that happened.

    Args:
        storage: where items live (default ``ListStorage(1000)``).
        sampler: how batches are drawn (default :class:`RandomSampler`).
        writer: where new items go (default :class:`RoundRobinWriter`).
        collate_fn: turns gathered items into a batch (stacks lists for ``ListStorage``,
            identity for tensor storages).
        pin_memory: pin sampled batches (only when CUDA is available; otherwise ignored).
        prefetch: number of batches sampled ahead in a thread pool.
        transform: a callable (or transform, or a list of them) applied to sampled data; its
            ``inv`` method, if any, is applied to written data.
        transform_factory: a callable without arguments returning the transform, called when
            the buffer initializes (instead of ``transform``).
        batch_size: default batch size of :meth:`sample` and of iteration.
        dim_extend: the dimension of extended data that indexes new items (defaults to
            ``storage.ndim - 1``, the time dimension of ``[B, T]`` rollouts).
        checkpointer: stored for checkpointing helpers.
        generator: a ``torch.Generator`` making sampling reproducible.
        shared: allocate lazy tensor storages in shared memory.
        compilable: accepted for API compatibility; it has no effect.
        delayed_init: build the components on first use rather than now. Defaults to ``True``
            when a ``transform_factory`` is given, else ``False``.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import ReplayBuffer, LazyTensorStorage
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        >>> _ = rb.extend(torch.arange(10))
        >>> len(rb), rb[2], rb.sample().shape
        (10, tensor(2), torch.Size([4]))
        >>> lazy = ReplayBuffer(storage=LazyTensorStorage(100), delayed_init=True)
        >>> lazy.initialized, lazy.extend(torch.arange(3)).tolist(), lazy.initialized
        (False, [0, 1, 2], True)
    """

    _default_writer: type[Writer] = RoundRobinWriter

    def __init__(
        self,
        *,
        storage: Storage | Callable[[], Storage] | None = None,
        sampler: Sampler | Callable[[], Sampler] | None = None,
        writer: Writer | Callable[[], Writer] | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        transform_factory: Callable[[], Any] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        checkpointer: Any = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool | None = None,
        delayed_init: bool | None = None,
    ) -> None:
        if transform is not None and transform_factory is not None:
            raise ValueError("give at most one of transform and transform_factory")
        if transform_factory is not None and not callable(transform_factory):
            raise TypeError(
                f"transform_factory must be callable, got {type(transform_factory).__name__}"
            )
        if prefetch is not None and int(prefetch) < 0:
            raise ValueError(f"prefetch must be a non-negative integer, got {prefetch}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        if dim_extend is not None and int(dim_extend) < 0:
            raise ValueError(f"dim_extend must be >= 0, got {dim_extend}")
        if batch_size is None and getattr(sampler, "drop_last", False):
            raise ValueError(
                "Samplers with drop_last=True must work with a predictable batch-size: pass "
                "batch_size to the buffer (the incomplete last batch of an epoch is measured "
                "against it), got batch_size=None"
            )
        self._init_storage = storage
        self._init_sampler = sampler
        self._init_writer = writer
        self._init_transform = transform
        self._init_transform_factory = transform_factory
        self._init_collate_fn = collate_fn
        self._init_dim_extend = dim_extend
        self._pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self._prefetch_cap = int(prefetch or 0)
        self._replay_lock = threading.RLock()
        self._prefetch_queue = PrefetchQueue(self._prefetch_cap)
        self._batch_size = batch_size
        self.checkpointer = checkpointer
        self._rng = generator
        self._initialized = False
        self._shared = False
        if shared:
            self.share(True)
        if delayed_init is None:
            delayed_init = transform_factory is not None
        if not delayed_init:
            self._initialize()

    # -- initialization ---------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        """Whether the storage, sampler, writer and transforms have been built and wired."""
        return self._initialized

    def _initialize(self) -> None:
        """Build the components (from their factories when given) and wire them together."""
        storage = built_component(self._init_storage, Storage, "storage")
        if storage is None:
            storage = ListStorage(max_size=1000)
        sampler = built_component(self._init_sampler, Sampler, "sampler")
        writer = built_component(self._init_writer, Writer, "writer")
        self._storage = storage
        storage.attach(self)
        self._sampler = sampler if sampler is not None else RandomSampler()
        self._writer = writer if writer is not None else self._default_writer()
        self._writer.register_storage(storage)
        collate_fn = self._init_collate_fn
        if collate_fn is None:
            collates = isinstance(storage, ListStorage) and not isinstance(
                storage, LazyStackStorage
            )
            collate_fn = stack_items if collates else _identity
        self._collate_fn = collate_fn
        self._transform = TransformSequence()
        transform = self._init_transform
        if self._init_transform_factory is not None:
            transform = self._init_transform_factory()
        if transform is not None:
            for item in transform if isinstance(transform, (list, tuple)) else (transform,):
                self._transform.append(item)
        dim_extend = self._init_dim_extend
        ndim = getattr(storage, "ndim", 1)
        self.dim_extend = ndim - 1 if dim_extend is None else int(dim_extend)
        # a multi-dim storage extended along another dim is indexed in the data's own layout
        self._user_layout = 0 < self.dim_extend < ndim
        self._known_max_size = storage.max_size
        self._init_storage = self._init_sampler = self._init_writer = None
        self._init_transform = self._init_transform_factory = self._init_collate_fn = None
        self._initialized = True
        if self._rng is not None:
            self.set_rng(self._rng)
        if self._shared:
            self.share(True)
        elif isinstance(self._storage, LazyMemmapStorage):
            # memory-mapped buffers are shared with the processes they are passed to
            self._sampler.share()

    def _ensure_init(self) -> None:
        if not self._initialized:
            self._initialize()

    # -- plumbing -------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # the batches drawn ahead travel with the state they were drawn from
        queued = self._prefetch_queue.snapshot()
        state = self.__dict__.copy()
        state.pop("_replay_lock")
        state["_prefetch_queue"] = queued
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        queued = state.pop("_prefetch_queue", [])
        self.__dict__.update(state)
        self._replay_lock = threading.RLock()
        self._prefetch_queue = PrefetchQueue(self._prefetch_cap)
        self._prefetch_queue.restore(queued)

    def set_rng(self, generator: torch.Generator) -> None:
        """Use ``generator`` for every random draw of the sampler, storage and writer."""
        self._rng = generator
        if self._initialized:
            for component in (self._sampler, self._storage, self._writer):
                component._rng = generator

    def share(self, shared: bool = True) -> ReplayBuffer:
        """Prepare the buffer for processes started afterwards to write and sample it.

        A lazy storage still empty gets a folder now: the first write, in whichever process
        (forked or spawned children included), allocates its files there and the other
        processes map them on their next access, so no item is lost; a temporary folder goes
        away with this process's buffer. A prioritized sampler keeps its priorities in shared
        memory (see :meth:`PrioritizedSampler.share`).
        """
        if shared and self._prefetch_cap:
            raise ValueError(
                "Cannot share prefetched replay buffers: the prefetch threads and their queue "
                "live in one process; build the buffer with prefetch=0 to share it, or keep "
                "shared=False to prefetch"
            )
        self._shared = bool(shared)
        if not self._initialized:
            return self
        if shared and isinstance(self._storage, TensorStorage):
            # the first write, in whichever process, allocates where every process sees it
            self._storage.share_memory_()
        if shared:
            self._sampler.share()
        return self

    @property
    def storage(self) -> Storage:
        """The storage."""
        self._ensure_init()
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """The sampler."""
        self._ensure_init()
        return self._sampler

    @property
    def writer(self) -> Writer:
        """The writer."""
        self._ensure_init()
        return self._writer

    @property
    def transform(self) -> TransformSequence:
        """The transforms applied to sampled data."""
        self._ensure_init()
        return self._transform

    @property
    def batch_size(self) -> int | None:
        """The default batch size (settable; ``None`` means :meth:`sample` needs one)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        if value is not None:
            value = checked_batch_size(value)
            if value < 1:
                raise ValueError(f"batch_size must be a positive integer or None, got {value}")
        self._batch_size = value

    @property
    def generator(self) -> torch.Generator | None:
        """The generator of the buffer's random draws (``generator=``, :meth:`set_rng`), or None."""
        return self._rng

    def storage_replaced(self) -> None:
        """Bring the sampler in line with a storage whose whole content was replaced.

        Checkpoint loaders call it after loading into :attr:`storage`: the sampler is resized
        to the storage's capacity and forgets what it cached about the old content.
        """
        storage = self._storage
        self._known_max_size = storage.max_size
        self._sampler.storage_replaced(storage.max_size)

    @property
    def write_count(self) -> int:
        """How many items were written since creation (or the last :meth:`empty`)."""
        if not self._initialized:
            return 0
        return getattr(self._writer, "_write_count", 0)

    def stats(self) -> dict[str, Any]:
        """A JSON-serializable summary of the buffer; it does not initialize a delayed buffer.

        Returns:
            a dict with ``size`` (items stored), ``capacity`` (the storage's ``max_size``),
            ``utilization`` (size / capacity), ``write_count``, ``prefetch_queue_size`` and
            ``initialized``.
        """
        storage = self._storage if self._initialized else self._init_storage
        if not isinstance(storage, Storage):
            storage = None
        size = len(storage) if storage is not None else 0
        capacity = storage.max_size if storage is not None else None
        return {
            "size": size,
            "capacity": capacity,
            "utilization": size / capacity if capacity else 0.0,
            "write_count": self.write_count,
            "prefetch_queue_size": len(self._prefetch_queue),
            "initialized": self._initialized,
        }

    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Apply ``hook`` to the storage's content before :meth:`dumps` writes it.

        See :meth:`Storage.register_save_hook`; e.g. ``rb.register_save_hook(TED2Flat())``
        with ``rb.register_load_hook(Flat2TED())`` writes TED data without its duplicated
        ``"next"`` entries and reads it back as TED. Hooks are not saved with the buffer:
        register them on the buffer that loads the checkpoint too.
        """
        self._ensure_init()
        self._storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Apply ``hook`` to what :meth:`loads` read before it fills the storage.

        See :meth:`Storage.register_load_hook`.
        """
        self._ensure_init()
        self._storage.register_load_hook(hook)

    def append_transform(self, transform: Any, *, invert: bool = False) -> ReplayBuffer:
        """Add a transform at the end; ``invert=True`` swaps its forward and inverse."""
        self._ensure_init()
        self._transform.append(Inverted(transform) if invert else transform)
        return self

    def insert_transform(self, index: int, transform: Any, *, invert: bool = False) -> ReplayBuffer:
        """Insert a transform at ``index``; ``invert=True`` swaps its forward and inverse."""
        self._ensure_init()
        self._transform.insert(index, Inverted(transform) if invert else transform)
        return self

    # -- writing --------------------------------------------------------------------------------
    def _after_write(self, index: Any) -> None:
        storage = self._storage
        if storage.max_size != self._known_max_size:
            self._known_max_size = storage.max_size
            self._sampler.storage_resized(storage.max_size)
        if isinstance(index, int):
            if storage.ndim == 1:
                self._sampler.add(index)
                return
            index = torch.tensor([index])
        if index.numel():
            self._sampler.extend(storage.rows_to_flat(index) if storage.ndim > 1 else index)

    def add(self, data: Any) -> int:
        """Write one item; returns its index."""
        if not self._initialized:
            self._initialize()
        if (
            isinstance(data, TensorDictBase)
            and data.batch_dims
            and data.batch_size[0] == 1
            and rl_warnings()
        ):
            warnings.warn(
                f"Using `add()` with a TensorDict that has batch_size {list(data.batch_size)}: "
                "it is stored as one item of that shape. Use `extend()` to write its content "
                "as one item of shape [] (set RL_WARNINGS=0 to silence this warning).",
                UserWarning,
                stacklevel=2,
            )
        if self._transform.has_inv:
            data = self._transform.inv(data)
        with self._replay_lock:
            index = self._writer.add(data)
            self._after_write(index)
        return index

    def _prepare_extend(self, data: Any) -> Any:
        if isinstance(self._storage, ListStorage):
            items = item_list(data)
            if items is not None:
                data = items
        elif isinstance(data, list):
            data = stack_items(data, strict=True)
            if isinstance(data, list):
                raise TypeError(
                    f"{type(self._storage).__name__} can only be extended with tensors, TensorDicts "
                    "or pytrees of tensors; the list given holds items that cannot be stacked"
                )
        if self._transform.has_inv:
            data = self._transform.inv(data)
        if self.dim_extend:
            data = move_extend_dim(data, self.dim_extend)
        return data

    def extend(self, data: Any) -> torch.Tensor:
        """Write many items: a list (one item each), or tensors / TensorDicts / pytrees stacked on dim 0.

        With a :class:`ListStorage`, a ``range`` or a tuple of objects other than tensors is
        a sequence of items too (``rb.extend(range(10))`` writes ten ints). When more items
        than the capacity are given, the last ones are kept, as successive writes would.

        Returns:
            the indices written to: the rows of a one-dimensional storage; with ``ndim > 1``,
            the ``[n, ndim]`` coordinates of the ``n`` items written, in the order of the
            data given (as the ``"index"`` of samples, usable with :meth:`update_priority`,
            ``rb[index]`` and :meth:`update_if_present`).
        """
        if not self._initialized:
            self._initialize()
        data = self._prepare_extend(data)
        with self._replay_lock:
            index = self._writer.extend(data)
            self._after_write(index)
        if self._storage.ndim > 1 and isinstance(index, torch.Tensor):
            return self._item_coordinates(index)
        return index

    def _item_coordinates(self, rows: torch.Tensor) -> torch.Tensor:
        """``[n, ndim]`` coordinates of the items of the rows written, in the data's order."""
        storage = self._storage
        ndim = storage.ndim
        streams = [torch.arange(size) for size in storage.shape[1:ndim]]
        coords = torch.stack(torch.meshgrid(rows, *streams, indexing="ij"), -1)
        if 0 < self.dim_extend < ndim:
            coords = coords.transpose(0, self.dim_extend)
        return coords.reshape(-1, ndim)

    def __setitem__(self, index: Any, data: Any) -> None:
        """Overwrite stored items in place; the cursor and length do not move.

        ``index`` takes the forms :meth:`__getitem__` takes, including the ``"index"`` entry
        of a sample (``[n, ndim]`` coordinates, or a tuple of their columns, for storages
        with ``ndim > 1``), so sampled data can be modified and written back. In the data's
        layout (see :meth:`__getitem__`), ``data`` broadcasts to the selected region.
        """
        self._ensure_init()
        if self._transform.has_inv:
            data = self._transform.inv(data)
        with self._replay_lock:
            if self._in_data_layout(index):
                self._write_in_data_layout(index, data)
                return
            index = checked_write_index(self._storage, index)
            self._storage.set(index, data, set_cursor=False)
            if isinstance(index, slice):
                index = torch.arange(index.start, index.stop, index.step)
            self._sampler.mark_update(index, storage=self._storage)

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        if not self._initialized:
            storage = self._init_storage
            return len(storage) if isinstance(storage, Storage) else 0
        return len(self._storage)

    def __getitem__(self, index: Any) -> Any:
        """Stored items by int, slice or index tensor; a key (e.g. ``"obs"``) gives a column.

        With ``ndim > 1`` storages, a tuple of index tensors (one per dim) or an integer
        tensor of ``[n, ndim]`` coordinates (the ``"index"`` entry of samples) reads ``n``
        items. When such a storage is extended along ``dim_extend > 0`` (``[B, T]`` rollouts
        written along ``T``), other indices address the data in the layout it was given in:
        ``rb[:]`` is ``[B, T]`` and ``rb[0, 3:5]`` is steps 3 and 4 of stream 0.

        What is returned is a copy taken under the buffer's lock: a consistent snapshot even
        while another thread writes, and changing it does not change the buffer (write
        with ``rb[index] = data``).
        """
        self._ensure_init()
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and isinstance(index[0], str)
        ):
            key = index[1:] if isinstance(index, tuple) and index[0] == "_data" else index
            if key == "_data" or key == ():
                return self[:]
            key = key[0] if isinstance(key, tuple) and len(key) == 1 else key
            return self[:][key]
        with self._replay_lock:
            if self._in_data_layout(index):
                data = copied_views(index_data(self._data_layout_view(), index))
            else:
                data = self._storage.get(index)
                if isinstance(index, (int, np.integer, slice, range, tuple)):
                    data = copied_views(data)
        if not isinstance(index, (int, np.integer)):
            data = self._collate_fn(data)
        if len(self._transform):
            data = self._transform(data)
        return data

    def _gather(self, index: Any, info: dict) -> Any:
        return self._collate_fn(self._storage.gather(index))

    # -- the data's own layout (multi-dim storages extended along dim_extend > 0) ------------------
    def _in_data_layout(self, index: Any) -> bool:
        """Whether ``index`` addresses the data as extended (rather than storage coordinates)."""
        if not self._user_layout:
            return False
        if isinstance(index, tuple):
            # a tuple of index tensors holds coordinates, as sampling returns them
            return not all(isinstance(part, (torch.Tensor, np.ndarray)) for part in index)
        if isinstance(index, torch.Tensor) and index.ndim > 1 and index.dtype != torch.bool:
            return False
        return True

    def _data_layout_view(self) -> Any:
        """The stored items, in the layout :meth:`extend` received them (a view)."""
        return move_extend_dim(self._storage.get(slice(None)), self.dim_extend)

    def _write_in_data_layout(self, index: Any, data: Any) -> None:
        storage = self._storage
        if isinstance(storage, TensorStorage) and isinstance(data, TensorDictBase):
            storage.add_entries(data)  # keys the stored data lacks, before taking the view
        view = self._data_layout_view()
        try:
            assign_data(view, index, data)
        except (RuntimeError, ValueError) as err:
            raise ValueError(
                f"cannot write data of shape {tuple(getattr(data, 'shape', ()))} at {index!r} of "
                f"the stored data, of shape {tuple(view.shape)}: {err}"
            ) from err
        # the flat storage indices of the written items, for the sampler and the storage
        grid = torch.arange(len(storage)).reshape(storage.shape[: storage.ndim])
        written = move_extend_dim(grid, self.dim_extend)[index].reshape(-1)
        storage.mark_written()
        self._sampler.mark_update(storage.unravel_index(written), storage=storage)

    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        with self._replay_lock:
            index, info = self._sampler.sample(self._storage, batch_size)
            info["index"] = index
            if self._writer.tracks_generations:
                info["index_generation"] = self._writer.generations_of(index)
            data = self._gather(index, info)
        if self._transform._transforms:
            data = self._transform(data)
        if self._pin_memory:
            data = pinned(data)
        return data, info

    def _draw_ahead(self, batch_size: int) -> tuple[Any, dict, bool]:
        """A batch drawn for the prefetch queue, with whether it ended the sampler's epoch."""
        data, info = self._sample(batch_size)
        return data, info, self._sampler.ran_out

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Draw a batch through the sampler, then collate and transform it.

        Args:
            batch_size: the number of items (defaults to the constructor's ``batch_size``).
            return_info: also return a dict with ``"index"`` and sampler extras (e.g. weights).
        """
        if not self._initialized:
            self._initialize()
        if batch_size is None:
            batch_size = self._batch_size
            if batch_size is None:
                raise DataValueError(
                    "batch_size not specified: pass it to the constructor or to sample()"
                )
        elif type(batch_size) is not int or batch_size < 0:
            batch_size = checked_batch_size(batch_size)
        if self._prefetch_cap and batch_size == self._batch_size:
            data, info, _ = self._prefetch_queue.next(partial(self._draw_ahead, batch_size))
        else:
            data, info = self._sample(batch_size)
        return (data, info) if return_info else data

    def __iter__(self) -> Iterator[Any]:
        """Batches drawn through the sampler; finite for samplers without replacement."""
        self._ensure_init()
        if self._batch_size is None:
            raise DataValueError(
                "Cannot iterate over the replay buffer. Batch_size was not specified: pass "
                "batch_size to the constructor to iterate"
            )
        batch_size = self._batch_size
        draw = partial(self._draw_ahead, batch_size)
        while True:
            if self._prefetch_cap:
                # the batches drawn ahead come first; each knows whether it ended the epoch
                data, _, ran_out = self._prefetch_queue.next(draw)
            else:
                data, _, ran_out = draw()
            yield data
            if ran_out:
                return

    def empty(self, empty_write_count: bool = True) -> None:
        """Remove every item and reset the writer and sampler.

        Args:
            empty_write_count: also reset :attr:`write_count` to 0 (else it keeps counting).
        """
        self._ensure_init()
        # the queued draws need the lock: let them finish before taking it
        self._prefetch_queue.clear()
        with self._replay_lock:
            self._writer._empty(empty_write_count)
            self._sampler._empty()
            self._storage.empty()

    def update_if_present(
        self,
        *,
        index: Any,
        generation: Any,
        patch: Any,
        version_key: Any = None,
        version: Any = None,
        require_newer: bool = False,
    ) -> UpdateResult:
        """Patch stored items only where they are still there; returns what was written.

        Records are given by their handles: ``index`` (as :meth:`extend` or sampling returns
        it) and the ``generation`` of each row then (:meth:`Writer.generations_of`, or the
        ``"index_generation"`` of a sample). Rows rewritten or emptied since are skipped and
        left untouched. The writer must have been built with ``track_generations=True``.

        Args:
            index: the records' rows (or ``[n, ndim]`` coordinates).
            generation: the rows' generations when the handles were taken.
            patch: new values by key (a dict or TensorDict); each value holds the ``n``
                records (``[n, *item shape]``, or the shape of the data they came from).
            version_key: a stored entry holding each record's version. With ``version``, a
                live record is patched only if ``version`` is newer than the stored one
                (``require_newer``) or at least as new; the version is written too. Among
                records aiming at the same row, the highest version wins.
            version: an int, or one per record.
            require_newer: reject an equal version.

        Raises:
            KeyError: a patch key or the version key is not stored.
            ValueError: a patch value has the wrong shape or dtype, or the version arguments
                are inconsistent; nothing is written then.
            RuntimeError: the storage or writer cannot tell whether records are still there.
        """
        self._ensure_init()
        return update_if_present(
            self,
            index=index,
            generation=generation,
            patch=patch,
            version_key=version_key,
            version=version,
            require_newer=require_newer,
        )

    def update_priority(self, index: Any, priority: Any) -> None:
        """Set the priority of the items at ``index`` (see :class:`PrioritizedSampler`)."""
        self._ensure_init()
        with self._replay_lock:
            self._sampler.update_priority(index, priority, storage=self._storage)

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """States of the storage, sampler, writer and transforms, for ``torch.save``.

        With ``prefetch``, the batches already drawn ahead are saved too (as copies), so a
        buffer loading this state hands out the same batches as this one from here on.
        """
        self._ensure_init()
        queued = self._prefetch_queue.snapshot() if self._prefetch_cap else None
        state = {
            "_storage": self._storage.state_dict(),
            "_sampler": self._sampler.state_dict(),
            "_writer": self._writer.state_dict(),
            "_transforms": [
                t.state_dict() if hasattr(t, "state_dict") else None for t in self._transform
            ],
            "_batch_size": self._batch_size,
            "_rng": None if self._rng is None else self._rng.get_state(),
        }
        if queued is not None:
            state["_prefetch_state"] = {"capacity": self._prefetch_cap, "queue": queued}
        return state

    def dumps(self, path: str | os.PathLike) -> None:
        """Save the storage, sampler and writer (not the transforms) under the folder ``path``.

        Tensors are written as memory-mapped files and metadata as JSON; the folder is
        replaced atomically (see :mod:`tdrl.data.replay_buffers.checkpointers`). The
        storage's save hooks (:meth:`register_save_hook`) run on its content first.
        """
        self._ensure_init()
        from tdrl.data.replay_buffers.checkpointers import dump_buffer

        with self._replay_lock:
            dump_buffer(self, path)

    def loads(self, path: str | os.PathLike) -> None:
        """Restore the state saved by :meth:`dumps` (priority trees and writer state included)."""
        self._ensure_init()
        from tdrl.data.replay_buffers.checkpointers import load_buffer

        self._prefetch_queue.clear()
        with self._replay_lock:
            load_buffer(self, path)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        The batches the saved buffer had drawn ahead replace this buffer's queue; a state
        saved without them (or by a buffer without ``prefetch``) leaves the queue empty.

        Raises:
            RuntimeError: when the state holds a prefetch queue of another capacity than
                this buffer's ``prefetch`` (nothing is loaded then).
        """
        self._ensure_init()
        prefetched = state_dict.get("_prefetch_state")
        if prefetched is not None and prefetched["capacity"] != self._prefetch_cap:
            raise RuntimeError(
                f"cannot load a replay buffer state holding a prefetch queue with capacity "
                f"{prefetched['capacity']} into a buffer built with prefetch={self._prefetch_cap}"
            )
        # the queued draws need the lock and would change the state loaded below
        self._prefetch_queue.clear()
        with self._replay_lock:
            self._storage.load_state_dict(state_dict["_storage"])
            self._known_max_size = self._storage.max_size
            self._sampler.load_state_dict(state_dict["_sampler"])
            self._writer.load_state_dict(state_dict["_writer"])
            for transform, state in zip(self._transform, state_dict.get("_transforms", [])):
                if state is not None and hasattr(transform, "load_state_dict"):
                    transform.load_state_dict(state)
            self._batch_size = state_dict.get("_batch_size", self._batch_size)
            if state_dict.get("_rng") is not None and self._rng is not None:
                self._rng.set_state(state_dict["_rng"])
            if prefetched is not None:
                self._prefetch_queue.restore(prefetched["queue"])

    def __repr__(self) -> str:
        if not self._initialized:
            return f"{type(self).__name__}(not initialized, batch_size={self._batch_size})"
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={self._sampler!r}, "
            f"writer={self._writer!r}, batch_size={self._batch_size})"
        )


# Kept importable from here, the reference API's module for them.
from tdrl.data.replay_buffers.prioritized_buffer import PrioritizedReplayBuffer  # noqa: E402
from tdrl.data.replay_buffers.tensordict_buffers import (  # noqa: E402
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
