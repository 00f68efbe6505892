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
    """Base class of storages, and the contract every storage fulfils.

    A storage holds at most ``max_size`` items. The replay buffer, its writer, its sampler
    and the checkpointers talk to a storage only through the public names below, so a new
    storage implements these and works with all of them.

    What a subclass implements:

    - :meth:`set` (writers write items) and :meth:`get` (the buffer reads by index);
    - ``__len__``: how many items are stored (samplers draw among them);
    - :meth:`empty`: forget every item (the reference API's ``_empty`` is accepted instead);
    - :meth:`state_dict` / :meth:`load_state_dict`: the content, for ``torch.save``.

    What it may override, with the defaults of a flat storage of ``len(self)`` items:

    - :meth:`gather`: read the items a sampler drew (indices trusted, no bounds check);
    - :meth:`random_index`: draw uniform indices of stored items (used by
      :class:`RandomSampler`);
    - :meth:`unravel_index` / :meth:`ravel_index`: between flat item numbers in
      ``[0, len(self))`` and the indices :meth:`get` takes (they differ when ``ndim > 1``);
    - :meth:`max_rows`, :meth:`rows_to_flat` and :attr:`len_along_dim0`: rows of the first
      dimension, for writers that cycle over them;
    - :meth:`mark_written`: told after an in-place write that bypassed :meth:`set`;
    - :meth:`advance_generations` and :attr:`slot_generations`: per-row write counts, for
      writers with ``track_generations``;
    - :meth:`item_index`: the item index a multi-dimensional index tensor stands for;
    - :attr:`mutation_revision` and :attr:`last_cursor_index`: what changed and where the
      newest item is, for samplers that cache what they derive from the content.

    Checkpointers read :attr:`save_hooks` and :attr:`load_hooks`. Tensor storages add a
    public layout (:attr:`TensorStorage.content`, ``kind``, ``treespec``, ...) for theirs.

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

    @property
    def save_hooks(self) -> tuple[Callable[[Any], Any], ...]:
        """The save hooks, in the order they run (see :meth:`register_save_hook`)."""
        return tuple(getattr(self, "_save_hooks", ()))

    @property
    def load_hooks(self) -> tuple[Callable[[Any], Any], ...]:
        """The load hooks, in the order they run (see :meth:`register_load_hook`)."""
        return tuple(getattr(self, "_load_hooks", ()))

    # -- what every storage implements -------------------------------------------------------
    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Write ``data`` at ``cursor`` (an int for one item, a slice or index tensor for many).

        ``set_cursor=False`` writes over stored items only (``storage[i] = x``); with
        ``True`` (writers) the write may append items and grow ``len(self)``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement set()")

    def get(self, index: Any) -> Any:
        """Read the items at ``index`` (int, slice, index tensor or list of ints)."""
        raise NotImplementedError(f"{type(self).__name__} must implement get()")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must implement __len__()")

    def empty(self) -> None:
        """Forget every stored item (``len(self)`` becomes 0; the capacity stays)."""
        if type(self)._empty is Storage._empty:
            raise NotImplementedError(f"{type(self).__name__} must implement empty()")
        self._empty()

    def _empty(self) -> None:
        # the reference API's name: subclasses may implement either this or empty()
        if type(self).empty is Storage.empty:
            raise NotImplementedError(f"{type(self).__name__} must implement empty()")
        self.empty()

    def state_dict(self) -> dict[str, Any]:
        """The storage's content and length, for ``torch.save``."""
        raise NotImplementedError(f"{type(self).__name__} must implement state_dict()")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        raise NotImplementedError(f"{type(self).__name__} must implement load_state_dict()")

    # -- what a storage may override ---------------------------------------------------------
    def gather(self, index: Any) -> Any:
        """Read sampled items; indices come from a sampler and are trusted (no bounds check)."""
        return self.get(index)

    def random_index(self, batch_size: int, generator: torch.Generator | None = None) -> Any:
        """``batch_size`` uniformly drawn indices of stored items, as :meth:`get` takes them.

        Raises:
            RuntimeError: when the storage is empty.
        """
        length = len(self)
        if length == 0:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        return self.unravel_index(torch.randint(length, (batch_size,), generator=generator))

    def _rand_given_ndim(self, batch_size: int, generator: torch.Generator | None = None) -> Any:
        # the reference API's name of random_index
        return self.random_index(batch_size, generator)

    def unravel_index(self, flat_index: torch.Tensor) -> Any:
        """Map flat item numbers in ``[0, len(self))`` to the index type :meth:`get` expects."""
        return flat_index

    def ravel_index(self, index: Any) -> torch.Tensor:
        """Inverse of :meth:`unravel_index`: a 1-d long tensor of flat item numbers."""
        return torch.as_tensor(index, dtype=torch.long).reshape(-1)

    def item_index(self, index: torch.Tensor) -> Any:
        """The item index that a multi-dimensional index tensor stands for, or ``None``.

        ``None`` means ``index`` is read as it is; storages whose items have batch dims of
        their own map an index expanded over them back to one per item.
        """
        return None

    def max_rows(self, data: Any = None, batched: bool = True) -> int:
        """Capacity along the first dimension (``data`` helps a lazy storage infer it)."""
        return self.max_size

    def rows_to_flat(self, rows: torch.Tensor) -> torch.Tensor:
        """Flat item numbers covered by the given rows of the first dimension."""
        return rows

    @property
    def len_along_dim0(self) -> int:
        """How many rows of the first dimension are filled (``len(self)`` when ``ndim == 1``)."""
        return len(self)

    def mark_written(self) -> None:
        """Note a write made in place, not through :meth:`set` (no-op by default)."""

    def advance_generations(self, rows: torch.Tensor) -> None:
        """Count one write per entry of ``rows``, when :attr:`slot_generations` are kept."""

    @property
    def slot_generations(self) -> torch.Tensor | None:
        """Per-row write counts (``-1``: never written), or ``None`` when not kept."""
        return None

    @property
    def mutation_revision(self) -> int | None:
        """A count of writes and empties, or ``None`` when the storage keeps none.

        Samplers that cache what they derive from the content (trajectories, groups)
        compare it to tell whether the content changed.
        """
        return getattr(self, "_mutation_revision", None)

    @property
    def last_cursor_index(self) -> int | None:
        """The last row written (the newest item), ``-1`` before any write, ``None`` if unknown."""
        return getattr(self, "_last_cursor_index", None)

    @property
    def attached_entities(self) -> tuple[Any, ...]:
        """What :meth:`attach` registered (the buffers using this storage)."""
        return tuple(self._attached_entities)

    # -- saving ------------------------------------------------------------------------------
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
