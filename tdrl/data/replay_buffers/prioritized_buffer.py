"""The replay buffer with prioritized sampling built in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tdrl.data.replay_buffers.replay_buffers import ReplayBuffer
from tdrl.data.replay_buffers.samplers import PrioritizedSampler
from tdrl.data.replay_buffers.storages import ListStorage, Storage
from tdrl.data.replay_buffers.utils import built_component

__all__ = ["PrioritizedReplayBuffer"]


def prioritized_parts(
    storage: Any, alpha: float, beta: float, eps: float, **sampler_kwargs: Any
) -> tuple[Storage, PrioritizedSampler]:
    """The storage (built now, ``ListStorage(1000)`` by default) and its prioritized sampler.

    The priority trees are sized from the storage, so a storage factory is built first.
    """
    storage = built_component(storage, Storage, "storage")
    if storage is None:
        storage = ListStorage(max_size=1000)
    return storage, PrioritizedSampler(storage.max_size, alpha, beta, eps, **sampler_kwargs)


class PrioritizedReplayBuffer(ReplayBuffer):
    """A replay buffer with prioritized sampling (a :class:`PrioritizedSampler`).

    Args:
        alpha: priority exponent.
        beta: importance-sampling exponent.
        eps: added to every priority (a priority of 0 is valid when ``eps > 0``).
        dtype: dtype of the importance weights.
        storage, collate_fn, pin_memory, prefetch, transform, batch_size, dim_extend,
            generator, shared, compilable: as in :class:`ReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
        >>> _ = rb.extend(torch.arange(10))
        >>> data, info = rb.sample(4, return_info=True)
        >>> rb.update_priority(info["index"], torch.rand(4) + 0.1)
        >>> info["priority_weight"].shape
        torch.Size([4])
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool | None = None,
    ) -> None:
        storage, sampler = prioritized_parts(storage, alpha, beta, eps, dtype=dtype)
        super().__init__(
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
