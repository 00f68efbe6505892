"""The storage interface: what replay buffers, writers and samplers expect of a storage."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Storage", "range_index"]

_EMPTY_MSG = "Cannot read from an empty storage: extend the replay buffer first"
EMPTY_SAMPLE_MSG = "Cannot sample from an empty storage: extend the replay buffer first"


def _out_of_range(index: Any, length: int) -> IndexError:
    return IndexError(
        f"index out of range: expected indices in [-{length}, {length}) for a storage holding "
        f"{length} items, got {index}"
    )


def range_index(index: range) -> slice | torch.Tensor:
    """A ``range`` index as a slice (a view) when it walks forward from >= 0, else a tensor.

    Examples:
        >>> range_index(range(2, 8, 2)), range_index(range(3, -1, -1))
        (slice(2, 8, 2), tensor([3, 2, 1, 0]))
    """
    if index.step > 0 and index.start >= 0:
        return slice(index.start, index.stop, index.step)
    return torch.tensor(index, dtype=torch.long)


class Storage:
    """Base class of storages: a container of at most ``max_size`` items.

    Subclasses implement :meth:`set`, :meth:`get`, ``__len__``, :meth:`_empty`,
    :meth:`state_dict` and :meth:`load_state_dict`. Writers call :meth:`set`, samplers read
    ``len(storage)`` and the buffer gathers sampled items with :meth:`_gather`.

    Args:
        max_size: the largest number of items the storage holds.
        checkpointer: an optional object with ``dumps(storage, path)`` / ``loads(storage, path)``
            used by :meth:`dumps` / :meth:`loads`.
        compilable: accepted for API compatibility; it has no effect.

    Save hooks (:meth:`register_save_hook`) turn the content into what :meth:`dumps` writes;
    load hooks (:meth:`register_load_hook`) turn what :meth:`loads` reads back into content.

    Examples:
        >>> from tdrl.data.replay_buffers import ListStorage
        >>> storage = ListStorage(3)
        >>> storage.set(0, "a")
        >>> storage[0], len(storage), storage.max_size
        ('a', 1, 3)
    """

    ndim: int = 1

    def __init__(
        self, max_size: int | None, checkpointer: Any = None, compilable: bool = False
    ) -> None:
        if max_size is not None and int(max_size) < 1:
            raise ValueError(f"max_size must be a positive integer, got {max_size}")
        self.max_size = int(max_size) if max_size is not None else None
        self.checkpointer = checkpointer
        self._attached_entities: list[Any] = []
        self._save_hooks: list[Callable[[Any], Any]] = []
        self._load_hooks: list[Callable[[Any], Any]] = []

    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Add a callable applied to the content before :meth:`dumps` writes it.

        Hooks run in registration order, each on the previous one's output; a hook that
        declares a ``path`` parameter also gets the folder being written. A tensor storage
        passes a copy of its items in chronological order (the oldest first), time being the
        last batch dim: ``[length, *item dims]``, or ``[streams, length, *item dims]`` when
        ``ndim > 1``. A :class:`ListStorage` passes the list of its items. E.g.
        :class:`~tdrl.data.TED2Flat` writes TED data without its duplicated ``"next"`` entries.
        Hooks are not saved: register them again on the storage that loads the checkpoint.

        Examples:
            >>> import torch
            >>> from tdrl.data.replay_buffers import LazyTensorStorage
            >>> storage = LazyTensorStorage(10)
            >>> storage.register_save_hook(lambda content: content.half())
            >>> storage.register_load_hook(lambda content: content.float())
        """
        if not callable(hook):
            raise TypeError(f"a save hook must be callable, got {type(hook).__name__}")
        self._save_hooks.append(hook)

    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Add a callable applied to what :meth:`loads` read, before it fills the storage.

        Load hooks undo the save hooks (e.g. :class:`~tdrl.data.Flat2TED` after
        :class:`~tdrl.data.TED2Flat`); the last one must return the content in the layout
        the save hooks received (see :meth:`register_save_hook`). A hook that declares an
        ``out`` parameter gets ``out=None``.
        """
        if not callable(hook):
            raise TypeError(f"a load hook must be callable, got {type(hook).__name__}")
        self._load_hooks.append(hook)

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Write ``data`` at ``cursor`` (an int for one item, a slice or index tensor for many)."""
        raise NotImplementedError

    def get(self, index: Any) -> Any:
        """Read the items at ``index`` (int, slice, index tensor or list of ints)."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def _empty(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The storage's content and length, for ``torch.save``."""
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        raise NotImplementedError

    def dumps(self, path: str | os.PathLike) -> None:
        """Save the storage under ``path`` through its checkpointer (the default one by type)."""
        from tdrl.data.replay_buffers.checkpointers import default_checkpointer

        default_checkpointer(self).dumps(self, path)

    def loads(self, path: str | os.PathLike) -> None:
        """Load the storage from ``path`` through its checkpointer (the default one by type)."""
        from tdrl.data.replay_buffers.checkpointers import default_checkpointer

        default_checkpointer(self).loads(self, path)

    def attach(self, buffer: Any) -> None:
        """Register an object (e.g. a sampler) that depends on this storage."""
        self._attached_entities.append(buffer)

    def __getitem__(self, index: Any) -> Any:
        return self.get(index)

    def __setitem__(self, index: Any, data: Any) -> None:
        self.set(index, data, set_cursor=False)

    def __iter__(self):
        for i in range(len(self)):
            yield self.get(i)

    def _gather(self, index: Any) -> Any:
        """Read sampled items; indices come from a sampler and are trusted."""
        return self.get(index)

    def _unravel(self, flat_index: torch.Tensor) -> Any:
        """Map flat indices in ``[0, len(self))`` to the index type :meth:`get` expects."""
        return flat_index

    def _ravel(self, index: Any) -> torch.Tensor:
        """Inverse of :meth:`_unravel`: flat long indices."""
        return torch.as_tensor(index, dtype=torch.long).reshape(-1)

    def _max_rows(self, data: Any = None, batched: bool = True) -> int:
        """Capacity along the first dimension (``data`` helps lazy storages infer it)."""
        return self.max_size

    def _rows_to_flat(self, rows: torch.Tensor) -> torch.Tensor:
        """Flat item indices covered by the given rows of the first dimension."""
        return rows

    def _rand_given_ndim(self, batch_size: int, generator: torch.Generator | None = None) -> Any:
        """``batch_size`` uniformly drawn indices of stored items."""
        length = len(self)
        if length == 0:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        return self._unravel(torch.randint(length, (batch_size,), generator=generator))
