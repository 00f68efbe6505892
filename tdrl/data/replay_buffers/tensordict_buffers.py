"""Replay buffers for TensorDicts: samples carry their ``"index"`` and sampler extras."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.prioritized_buffer import prioritized_parts
from tdrl.data.replay_buffers.replay_buffers import ReplayBuffer
from tdrl.data.replay_buffers.storages import Storage, TensorStorage
from tdrl.data.replay_buffers.utils import expand_to_items
from tdrl.data.replay_buffers.writers import TensorDictRoundRobinWriter

__all__ = ["TensorDictPrioritizedReplayBuffer", "TensorDictReplayBuffer"]

_INFO_KEYS = ("index", "priority_weight")


class TensorDictReplayBuffer(ReplayBuffer):
    """A replay buffer for TensorDicts whose samples carry ``"index"`` and sampler extras.

    Sampler extras are entries such as ``"priority_weight"``.

    ``extend`` writes the indices of new items under ``"index"`` in the data given (when it
    has one batch dimension and is not locked), so priorities can be updated from it later
    with :meth:`update_tensordict_priority`. Entries named ``"index"`` or ``"priority_weight"``
    in written data are not stored.

    Args:
        priority_key: the entry read by :meth:`update_tensordict_priority` (``"td_error"``).
        **kwargs: as in :class:`ReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        >>> rb.extend(TensorDict({"obs": torch.randn(5, 3)}, [5]))
        tensor([0, 1, 2, 3, 4])
        >>> sorted(rb.sample().keys())
        ['index', 'obs']
    """

    _default_writer = TensorDictRoundRobinWriter

    def __init__(self, *, priority_key: Any = "td_error", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.priority_key = priority_key

    def _gather(self, index: Any, info: dict) -> Any:
        storage = self._storage
        stored_index = torch.stack(index, -1) if isinstance(index, tuple) else index
        if isinstance(storage, TensorStorage) and storage.kind == "tensordict":
            # "index" first, then the sampler's extras: flat keys at the root, nested ones
            # (flags) given to the storage, which does not gather the stored entries they replace
            extra = {"index": stored_index}
            given = None
            for key, value in info.items():
                if type(key) is str:
                    if key != "index":
                        extra[key] = value
                elif len(key) > 1:
                    if given is None:
                        given = {}
                    given[key] = value
                else:
                    extra[key[0]] = value
            return storage.gather(index, extra, given)
        data = self._collate_fn(storage.gather(index))
        if isinstance(data, TensorDictBase):
            batch = tuple(data.batch_size)
            data.set("index", expand_to_items(stored_index, batch))
            for key, value in info.items():
                if key != "index":
                    data.set(key, expand_to_items(value, batch))
        return data

    def _strip(self, data: Any) -> Any:
        if isinstance(data, TensorDictBase):
            keys = data.keys()
            if any(key in keys for key in _INFO_KEYS):
                return data.exclude(*_INFO_KEYS)
        return data

    def add(self, data: Any) -> int:
        """Write one TensorDict; returns its index."""
        return super().add(self._strip(data))

    def extend(self, data: Any) -> torch.Tensor:
        """Write TensorDicts stacked on dim 0; returns their indices (also set as ``"index"``).

        The ``"index"`` entry is expanded over the batch dims of each item, if any.
        """
        index = super().extend(self._strip(data))
        if (
            isinstance(data, TensorDictBase)
            and data.batch_dims >= 1
            and not data.is_locked
            and self._storage.ndim == 1
            and index.shape[0] == data.shape[0]
        ):
            data.set("index", expand_to_items(index, tuple(data.batch_size)))
        return index

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sampled TensorDict's ``"index"`` and ``priority_key`` entries."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"update_tensordict_priority expects a TensorDict, got {type(data).__name__}"
            )
        index = data.get("index", None)
        if index is None:
            raise ValueError(
                "the TensorDict has no 'index' entry: sample it from this buffer first"
            )
        priority = data.get(self.priority_key, None)
        if priority is None:
            raise ValueError(f"the TensorDict has no priority entry at key {self.priority_key!r}")
        storage = self._storage
        if index.ndim > 1 and isinstance(storage, TensorStorage) and storage.initialized:
            # an index expanded over the batch dims of each item: one per item (the
            # priorities of an item's steps are reduced by the sampler's ``reduction``)
            item = storage.item_index(index)
            if item is not None:
                index = item
        self.update_priority(index, priority)


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A TensorDict replay buffer with prioritized sampling.

    Samples carry ``"index"`` and ``"priority_weight"``; written data that holds
    ``priority_key`` sets the priorities of the new items.

    Args:
        alpha: priority exponent.
        beta: importance-sampling exponent.
        priority_key: the priority entry (``"td_error"``).
        eps: added to every priority (a priority of 0 is valid when ``eps > 0``).
        reduction: how multi-dimensional priorities are reduced per item.
        storage, collate_fn, pin_memory, prefetch, transform, batch_size, dim_extend,
            generator, shared, compilable: as in :class:`ReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.9,
        ...     storage=LazyTensorStorage(10), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.randn(6, 2)}, [6]))
        >>> sample = rb.sample()
        >>> sample["td_error"] = torch.rand(4) + 0.1
        >>> rb.update_tensordict_priority(sample)
        >>> sorted(sample.keys())
        ['index', 'obs', 'priority_weight', 'td_error']
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: Any = "td_error",
        eps: float = 1e-8,
        storage: Storage | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        reduction: str = "max",
        batch_size: int | None = None,
        dim_extend: int | None = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool | None = None,
    ) -> None:
        storage, sampler = prioritized_parts(storage, alpha, beta, eps, reduction=reduction)
        super().__init__(
            priority_key=priority_key,
            storage=storage,
            sampler=sampler,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            dim_extend=dim_extend,
            generator=generator,
            shared=shared,
            compilable=compilable,
        )

    def extend(self, data: Any) -> torch.Tensor:
        """Write TensorDicts; their ``priority_key`` entry, if present, sets the priorities."""
        index = super().extend(data)
        if isinstance(data, TensorDictBase) and index.numel():
            priority = data.get(self.priority_key, None)
            if priority is not None:
                self.update_priority(index, priority)
        return index
