"""Writers: decide where new items go in a storage (round robin, keep the best, or refuse)."""

from __future__ import annotations

import os
from multiprocessing import context as _mp_context
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase, is_tensor_collection

from tdrl.data.replay_buffers.errors import DataTypeError
from tdrl.data.replay_buffers.process_lock import ProcessLock
from tdrl.data.replay_buffers.utils import leading_dim, slice_data

__all__ = [
    "ImmutableDatasetWriter",
    "RoundRobinWriter",
    "TensorDictMaxValueWriter",
    "TensorDictRoundRobinWriter",
    "Writer",
]

_REDUCTIONS = ("sum", "mean", "max", "min", "median")


#: Seconds a write waits for another process's write to finish before raising.
DEFAULT_LOCK_TIMEOUT = 120.0


def _new_lock() -> ProcessLock:
    # Travels to forked, spawned and forkserver children, and a writer killed while holding it
    # (SIGKILL inside extend) releases it with its process: the other writers go on.
    return ProcessLock("replay buffer writer lock", timeout=DEFAULT_LOCK_TIMEOUT)


def _count(value: Any, name: str) -> int:
    """A non-negative integer read from a writer state; raises naming ``name`` otherwise."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"writer state: {name} must be a non-negative integer, got {value!r}")
    return value


class Writer:
    """Base class of writers: turns ``add`` / ``extend`` into storage writes and returns indices.

    The cursor and the write count live in a small shared-memory tensor and every write holds
    a process-safe lock, so several processes extending a shared storage lose no item. The OS
    releases that lock when its holder dies, so a writer killed mid-write does not block the
    others; a write that waits longer than :attr:`lock_timeout` seconds for another process
    raises :class:`~tdrl.data.replay_buffers.process_lock.LockTimeoutError` naming its pid.

    With ``track_generations=True`` the storage counts the writes of each row (its
    *generation*; -1 for a row never written, +1 per write and per :meth:`empty`), so a
    handle ``(index, generation)`` taken when an item was written or sampled tells later
    whether the row still holds that item (:meth:`generations_of`): samples then carry an
    ``"index_generation"`` entry, and :meth:`ReplayBuffer.update_if_present` writes only to
    the rows whose item is still there. The generations live on the storage: every writer
    sharing it advances them.

    Args:
        compilable: accepted for API compatibility; it has no effect.
        track_generations: keep write generations (off by default: it costs one int64 per
            row and a gather per sample).

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> writer = RoundRobinWriter()
        >>> writer.register_storage(LazyTensorStorage(4))
        >>> writer.extend(torch.zeros(3, 2))
        tensor([0, 1, 2])
        >>> writer.extend(torch.ones(2, 2))
        tensor([3, 0])
    """

    def __init__(self, compilable: bool = False, track_generations: bool = False) -> None:
        self._storage = None
        self._rng: torch.Generator | None = None
        self._state = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._state_np = self._state.numpy()
        self._lock = _new_lock()
        self._track_generations = bool(track_generations)
        self._own_generation: torch.Tensor | None = None

    @property
    def lock_timeout(self) -> float | None:
        """Seconds a write waits for a write of another process (``None``: no bound)."""
        return self._lock.timeout

    @lock_timeout.setter
    def lock_timeout(self, value: float | None) -> None:
        if value is not None and not value > 0:
            raise ValueError(
                f"lock_timeout must be a positive number of seconds or None, got {value!r}"
            )
        self._lock.timeout = value

    def register_storage(self, storage: Any) -> None:
        """Attach the storage this writer writes into."""
        self._storage = storage
        if self._track_generations:
            enable = getattr(storage, "enable_generations", None)
            if enable is None:
                raise TypeError(
                    f"track_generations needs a tensor storage, got {type(storage).__name__}"
                )
            enable()

    # -- write generations -------------------------------------------------------------------------
    @property
    def tracks_generations(self) -> bool:
        """Whether this writer was built with ``track_generations=True``."""
        return self._track_generations

    @property
    def _generation(self) -> torch.Tensor | None:
        """The generation of every row (the storage's once it is allocated)."""
        shared = getattr(self._storage, "slot_generations", None)
        return shared if shared is not None else self._own_generation

    @_generation.setter
    def _generation(self, value: Any) -> None:
        value = torch.as_tensor(value, dtype=torch.int64)
        shared = getattr(self._storage, "slot_generations", None)
        if shared is not None and shared.shape == value.shape:
            shared.copy_(value)
        else:
            self._own_generation = value.clone()

    def generations_of(self, index: Any) -> torch.Tensor:
        """The current generation of the rows ``index`` points at (-1: never written or unknown).

        ``index`` is a tensor of rows, ``[n, ndim]`` coordinates (as ``extend`` and sampling
        return them for multi-dim storages; their row is read), or a tuple of index tensors
        (the row is the first). Rows out of range give -1, as do writers that do not track
        generations.
        """
        if isinstance(index, tuple):
            rows = torch.as_tensor(index[0])
        else:
            rows = torch.as_tensor(index)
            ndim = getattr(self._storage, "ndim", 1)
            if ndim > 1 and rows.ndim >= 2 and rows.shape[-1] == ndim:
                rows = rows[..., 0]
        rows = rows.to(torch.long)
        out = torch.full(rows.shape, -1, dtype=torch.int64, device=rows.device)
        generations = self._generation if self._track_generations else None
        if generations is None:
            return out
        valid = (rows >= 0) & (rows < generations.numel())
        out[valid] = generations.to(rows.device)[rows[valid]]
        return out

    def _wrote(self, rows: Any) -> None:
        """Advance the generations of the rows written (every writer does, tracking or not)."""
        storage = self._storage
        if getattr(storage, "slot_generations", None) is not None:
            rows = torch.as_tensor(rows).reshape(-1)
            storage.advance_generations(rows)

    def write_at(self, index: Any, data: Any) -> torch.Tensor:
        """Write items at the rows ``index`` rather than at the cursor (which does not move).

        Args:
            index: the rows (a tensor, list or range), one per item of ``data``.
            data: items stacked along dim 0.

        Returns:
            the rows written, as a tensor.
        """
        rows = torch.as_tensor(list(index) if isinstance(index, range) else index, dtype=torch.long)
        with self._lock:
            self._storage.set(rows, data)
            self._wrote(rows)
            self._state_np[1] += rows.numel()
        return rows

    def add(self, data: Any) -> Any:
        """Write one item; returns its index."""
        raise NotImplementedError

    def extend(self, data: Any) -> torch.Tensor:
        """Write items stacked along the leading dimension; returns their indices."""
        raise NotImplementedError

    @property
    def cursor(self) -> int:
        """The next row this writer writes (the oldest one once the storage is full)."""
        return self._cursor

    @property
    def _cursor(self) -> int:
        return int(self._state_np[0])

    @_cursor.setter
    def _cursor(self, value: int) -> None:
        self._state_np[0] = int(value)

    @property
    def _write_count(self) -> int:
        return int(self._state_np[1])

    @_write_count.setter
    def _write_count(self, value: int) -> None:
        self._state_np[1] = int(value)

    def _empty(self, empty_write_count: bool = True) -> None:
        if empty_write_count:
            self._state.zero_()
        else:
            self._state_np[0] = 0

    def state_dict(self) -> dict[str, Any]:
        """Cursor, write count and (when tracked) the row generations."""
        cursor, count = self._state.tolist()
        state: dict[str, Any] = {"_cursor": cursor, "_write_count": count}
        generation = self._generation if self._track_generations else None
        if generation is not None:
            state["_generation"] = generation.clone()
        return state

    def dumps(self, path: str | os.PathLike) -> None:
        """Save :meth:`state_dict` under the folder ``path`` (memory-mapped tensors + JSON)."""
        from tdrl.data.replay_buffers.checkpoint_files import dump_state

        dump_state(self, path)

    def loads(self, path: str | os.PathLike) -> None:
        """Restore a state saved by :meth:`dumps`."""
        from tdrl.data.replay_buffers.checkpoint_files import load_state

        load_state(self, path)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore cursor, write count and row generations (when saved).

        Raises:
            ValueError: when the cursor is not an integer in ``[0, max_size]`` of the attached
                storage, or the write count is not a non-negative integer.
        """
        cursor = _count(state_dict.get("_cursor"), "_cursor")
        written = _count(state_dict.get("_write_count", 0), "_write_count")
        limit = getattr(self._storage, "max_size", None)
        if limit is not None and cursor > limit:
            raise ValueError(
                f"writer state: _cursor must be in [0, {limit}] (the storage's max_size), got {cursor}"
            )
        self._state.copy_(torch.tensor([cursor, written]))
        generation = state_dict.get("_generation")
        if generation is not None and self._track_generations:
            self._generation = generation

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_state_np")
        if _mp_context.get_spawning_popen() is None:
            # Outside process spawning (deepcopy, torch.save) the lock cannot travel.
            state["_lock"] = None
            state["_lock_timeout"] = self._lock.timeout
            state["_state"] = self._state.clone()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        timeout = state.pop("_lock_timeout", DEFAULT_LOCK_TIMEOUT)
        self.__dict__.update(state)
        if self._lock is None:
            self._lock = _new_lock()
            self._lock.timeout = timeout
            self._state = self._state.share_memory_()
        self._state_np = self._state.numpy()

    def __repr__(self) -> str:
        cursor, count = self._state.tolist()
        return f"{type(self).__name__}(cursor={cursor}, write_count={count})"


class RoundRobinWriter(Writer):
    """Writes items one after the other and wraps around, overwriting the oldest.

    Examples:
        >>> from tdrl.data.replay_buffers import ListStorage
        >>> writer = RoundRobinWriter()
        >>> writer.register_storage(ListStorage(2))
        >>> writer.add("a"), writer.add("b"), writer.add("c")
        (0, 1, 0)
    """

    def add(self, data: Any) -> int:
        """Write one item at the cursor and advance it."""
        storage = self._storage
        with self._lock:
            state = self._state_np
            cursor = int(state[0])
            storage.set(cursor, data)
            state[0] = (cursor + 1) % storage.max_rows(data, batched=False)
            state[1] += 1
            if getattr(storage, "slot_generations", None) is not None:
                storage.advance_generations(torch.tensor([cursor]))
        return cursor

    def extend(self, data: Any) -> torch.Tensor:
        """Write a batch of items from the cursor on, wrapping around; returns their indices."""
        storage = self._storage
        count_new = leading_dim(data)
        if count_new == 0:
            return torch.zeros(0, dtype=torch.long)
        with self._lock:
            state = self._state_np
            cursor = int(state[0])
            rows = storage.max_rows(data, batched=True)
            index = None
            if count_new > rows:
                data = slice_data(data, slice(count_new - rows, None))
                start = (cursor + count_new - rows) % rows
                index = (torch.arange(count_new) + cursor) % rows
                cursor, written = start, rows
            else:
                written = count_new
            if cursor + written <= rows:
                storage.set(slice(cursor, cursor + written), data)
                if index is None:
                    # numpy's arange costs half of torch's at this size
                    index = torch.from_numpy(np.arange(cursor, cursor + written, dtype=np.int64))
            else:
                positions = (torch.arange(written) + cursor) % rows
                storage.set(positions, data)
                if index is None:
                    index = positions
            state[0] = (cursor + written) % rows
            state[1] += count_new
            if getattr(storage, "slot_generations", None) is not None:
                # every item counts, also those overwritten within this very write
                storage.advance_generations(index)
        return index


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """The round-robin writer used by TensorDict buffers (same placement rule).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> writer = TensorDictRoundRobinWriter()
        >>> writer.register_storage(LazyTensorStorage(10))
        >>> writer.extend(TensorDict({"a": torch.zeros(3)}, [3]))
        tensor([0, 1, 2])
    """


class ImmutableDatasetWriter(Writer):
    """A writer for read-only datasets: every write raises.

    Examples:
        >>> writer = ImmutableDatasetWriter()
        >>> writer.add(1)
        Traceback (most recent call last):
        ...
        RuntimeError: this replay buffer is immutable (ImmutableDatasetWriter): it cannot be written to
    """

    _MSG = "this replay buffer is immutable (ImmutableDatasetWriter): it cannot be written to"

    def add(self, data: Any) -> int:
        """Refuse the write."""
        raise RuntimeError(self._MSG)

    def extend(self, data: Any) -> torch.Tensor:
        """Refuse the write."""
        raise RuntimeError(self._MSG)

    def write_at(self, index: Any, data: Any) -> torch.Tensor:
        """Refuse the write."""
        raise RuntimeError(self._MSG)


class TensorDictMaxValueWriter(Writer):
    """Keeps the items with the highest rank (e.g. episode return) once the storage is full.

    New items fill free slots first; afterwards an item is written only if its rank beats the
    lowest stored rank, which it replaces. Selection is one ``topk`` over stored and new ranks.

    Args:
        rank_key: the key of the rank in written TensorDicts (default ``("next", "reward")``).
        reduction: how to reduce a rank with extra dimensions to one number per item:
            ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``"median"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> writer = TensorDictMaxValueWriter(rank_key="score")
        >>> storage = LazyTensorStorage(2)
        >>> writer.register_storage(storage)
        >>> _ = writer.extend(TensorDict({"score": torch.tensor([1.0, 5.0, 3.0])}, [3]))
        >>> sorted(storage.get(slice(None))["score"].tolist())
        [3.0, 5.0]
    """

    def __init__(self, rank_key: Any = None, reduction: str = "sum", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self._rank_key = ("next", "reward") if rank_key is None else rank_key
        self._reduction = reduction
        self._ranks: torch.Tensor | None = None

    def register_storage(self, storage: Any) -> None:
        """Attach the storage; it must index items along one dim (``ndim == 1``)."""
        if getattr(storage, "ndim", 1) > 1:
            raise ValueError(
                "TensorDictMaxValueWriter is not compatible with storages with more than one "
                f"dimension: it ranks items along dim 0, got a storage with ndim={storage.ndim}"
            )
        super().register_storage(storage)

    def _rank_of(self, data: TensorDictBase) -> torch.Tensor:
        if not is_tensor_collection(data):
            raise DataTypeError(
                "TensorDictMaxValueWriter expects data to be a tensor collection (a TensorDict "
                f"or tensorclass holding the rank key {self._rank_key!r}), got {type(data).__name__}"
            )
        rank = data.get(self._rank_key, None)
        if rank is None:
            raise ValueError(
                f"rank key {self._rank_key!r} not found in the data written (keys: "
                f"{list(data.keys(include_nested=True, leaves_only=True))})"
            )
        rank = (
            rank.reshape(rank.shape[0], -1).to(torch.float64) if rank.ndim else rank.reshape(1, 1)
        )
        if self._reduction == "median":
            rank = rank.median(-1).values
        elif self._reduction in ("max", "min"):
            rank = getattr(rank, f"a{self._reduction}")(-1)
        else:
            rank = getattr(rank, self._reduction)(-1)
        if rank.is_floating_point() and bool(rank.isnan().any()):
            # NaN sorts above every number in topk: it would evict the best items
            position = int(rank.isnan().nonzero()[0, 0])
            raise ValueError(
                f"rank {self._rank_key!r} is NaN for item {position} of the data written: "
                "ranks must be numbers"
            )
        return rank

    def add(self, data: TensorDictBase) -> int | None:
        """Write one item if it ranks high enough; returns its index or ``None``."""
        self._rank_of(data)
        index = self.extend(data.unsqueeze(0))
        return int(index[0]) if index.numel() else None

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the items that rank high enough; returns the indices written to."""
        storage = self._storage
        ranks = self._rank_of(data)
        with self._lock:
            rows = storage.max_rows(data, batched=True)
            if self._ranks is None or self._ranks.numel() != rows:
                self._ranks = torch.full((rows,), float("-inf"), dtype=torch.float64)
            length = storage.len_along_dim0 if hasattr(storage, "len_along_dim0") else len(storage)
            candidates = torch.cat([self._ranks[:length], ranks])
            keep = candidates.topk(min(rows, candidates.numel())).indices
            new_items = keep[keep >= length] - length
            if new_items.numel() == 0:
                return new_items
            evicted = torch.ones(length, dtype=torch.bool)
            evicted[keep[keep < length]] = False
            slots = torch.cat([torch.arange(length, rows), evicted.nonzero().squeeze(-1)])
            slots = slots[: new_items.numel()]
            storage.set(slots, data[new_items])
            self._ranks[slots] = ranks[new_items]
            self._wrote(slots)
            # the next free slot, or 0 once the storage is full (every slot then holds a
            # ranked item and the lowest-ranked one is replaced)
            self._state_np[0] = (int(slots[-1]) + 1) % rows
            self._state_np[1] += new_items.numel()
        return slots

    def _empty(self, empty_write_count: bool = True) -> None:
        super()._empty(empty_write_count)
        if self._ranks is not None:
            self._ranks.fill_(float("-inf"))

    def state_dict(self) -> dict[str, Any]:
        """Cursor, write count and stored ranks."""
        return {
            **super().state_dict(),
            "_ranks": None if self._ranks is None else self._ranks.clone(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore cursor, write count and stored ranks."""
        super().load_state_dict(state_dict)
        ranks = state_dict.get("_ranks")
        self._ranks = None if ranks is None else ranks.clone()
