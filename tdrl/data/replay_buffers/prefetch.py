"""The queue of batches a replay buffer samples ahead (``ReplayBuffer(prefetch=n)``).

Batches are drawn by one background thread, in the order they were asked for, so a buffer
with a seeded generator gives the same batches with or without prefetching, run after run.
The queue can be saved with the buffer (:meth:`PrefetchQueue.snapshot`) and put back
(:meth:`PrefetchQueue.restore`): a restored buffer then hands out the batches the saved one
had already drawn, followed by the same new draws.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["PrefetchQueue", "detached_copy"]


def detached_copy(value: Any) -> Any:
    """A copy of ``value`` sharing no memory with it: tensors become leaves of their own.

    A tensor that requires grad stays one that requires grad (a new leaf), so a saved batch
    can be pickled and behaves as a fresh sample once restored.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, TensorDictBase):
        return value.apply(detached_copy)
    if isinstance(value, dict):
        return {key: detached_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(detached_copy(item) for item in value)
    return value


class PrefetchQueue:
    """Up to ``capacity`` batches drawn ahead in one background thread, handed out in order.

    Args:
        capacity: how many batches to keep drawn ahead (0 disables prefetching).

    Examples:
        >>> from tdrl.data.replay_buffers.prefetch import PrefetchQueue
        >>> counter = iter(range(10))
        >>> queue = PrefetchQueue(2)
        >>> queue.next(lambda: next(counter)), len(queue)
        (0, 2)
        >>> queue.next(lambda: next(counter)), len(queue)
        (1, 2)
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._futures: collections.deque[Future] = collections.deque()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1) if self.capacity else None

    def __len__(self) -> int:
        return len(self._futures)

    def __iter__(self) -> Iterator[Future]:
        return iter(tuple(self._futures))

    def __getitem__(self, index: int) -> Future:
        return self._futures[index]

    def next(self, produce: Callable[[], Any]) -> Any:
        """The oldest queued batch; ``capacity`` calls of ``produce`` stay queued behind it."""
        with self._lock:
            futures = self._futures
            while len(futures) <= self.capacity:
                futures.append(self._executor.submit(produce))
            future = futures.popleft()
        return future.result()

    def settle(self) -> None:
        """Wait until every queued draw has run (their errors stay in their futures)."""
        wait(tuple(self._futures))

    def clear(self) -> None:
        """Drop the queued batches, once their draws have run (none runs after this returns)."""
        self.settle()
        with self._lock:
            self._futures.clear()

    def snapshot(self) -> list[Any]:
        """Copies of the queued batches, oldest first (their draws are waited for).

        Raises:
            RuntimeError: when a queued draw failed; its error is chained.
        """
        self.settle()
        with self._lock:
            futures = tuple(self._futures)
        saved = []
        for future in futures:
            error = future.exception()
            if error is not None:
                raise RuntimeError(
                    "cannot save the prefetch queue: a batch drawn ahead failed"
                ) from error
            saved.append(detached_copy(future.result()))
        return saved

    def restore(self, batches: list[Any]) -> None:
        """Replace the queue with ``batches`` (oldest first), e.g. from :meth:`snapshot`."""
        if len(batches) > self.capacity:
            raise RuntimeError(
                f"cannot restore a prefetch queue of {len(batches)} batches into a prefetch "
                f"queue with capacity {self.capacity}"
            )
        self.settle()
        restored = collections.deque()
        for batch in batches:
            future: Future = Future()
            future.set_result(detached_copy(batch))
            restored.append(future)
        with self._lock:
            self._futures = restored
