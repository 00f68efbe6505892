"""Samplers: choose which stored items a batch is made of (uniform, without replacement, prioritized)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from multiprocessing import context as _mp_context
from typing import Any, TypeVar

import torch

from tdrl.data.replay_buffers.process_lock import ProcessLock
from tdrl.data.replay_buffers.storage_base import EMPTY_SAMPLE_MSG
from tdrl.data.replay_buffers.sum_tree import MaxSegmentTree, PriorityTree

__all__ = [
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
]

_INF = float("inf")
_PRIORITY_REDUCTIONS = ("max", "min", "sum", "mean", "median")
# seconds a shared prioritized sampler waits for another process's draw or update
_SHARED_LOCK_TIMEOUT = 120.0

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _across_processes(method: _Method) -> _Method:
    """Run a method of a shared :class:`PrioritizedSampler` under its process lock.

    The largest priority seen so far travels with the lock through shared memory.
    """

    @functools.wraps(method)
    def locked(self: PrioritizedSampler, *args: Any, **kwargs: Any) -> Any:
        lock = self._lock
        if lock is None:
            return method(self, *args, **kwargs)
        with lock:
            shared_max = self._shared_max
            self._max_priority = float(shared_max[0])
            try:
                return method(self, *args, **kwargs)
            finally:
                shared_max[0] = self._max_priority

    return locked  # type: ignore[return-value]


class Sampler:
    """Base class of samplers.

    A sampler returns ``(index, info)`` from :meth:`sample`, where ``index`` selects stored
    items and ``info`` is a dict of extra per-item values (e.g. importance weights). Writes are
    reported through :meth:`add` / :meth:`extend` so stateful samplers can follow them.

    Samplers drawing with replacement that have a without-replacement variant build it when
    given ``replacement=False``: ``RandomSampler(replacement=False)`` is a
    :class:`SamplerWithoutReplacement` (its keyword arguments, such as ``drop_last``, are
    passed on), ``SliceSampler(replacement=False)`` a ``SliceSamplerWithoutReplacement``.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(slice(0, 5), torch.arange(5))
        >>> index, info = RandomSampler().sample(storage, 3)
        >>> index.shape, info
        (torch.Size([3]), {})
    """

    #: Whether the sampler draws with replacement (``replacement=False`` picks the variant).
    _replacement: bool = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Sampler:
        """Build the without-replacement variant when ``replacement=False`` is asked for."""
        if kwargs.get("replacement", True) is False and cls._replacement:
            variant = cls._without_replacement_variant()
            if variant is None:
                raise TypeError(
                    f"{cls.__name__} has no without-replacement variant: replacement=False is "
                    "not supported"
                )
            sampler = object.__new__(variant)
            if not issubclass(variant, cls):
                # Python initializes only instances of ``cls``: initialize the variant here
                sampler.__init__(*args, **kwargs)
            return sampler
        return object.__new__(cls)

    @classmethod
    def _without_replacement_variant(cls) -> type | None:
        """The class drawing without replacement that ``replacement=False`` builds, if any."""
        return None

    def __init__(self) -> None:
        self._rng: torch.Generator | None = None

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw ``batch_size`` indices of items in ``storage``."""
        raise NotImplementedError

    def add(self, index: int) -> None:
        """Called after one item was written at ``index``."""

    def extend(self, index: torch.Tensor) -> None:
        """Called after items were written at ``index``."""

    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """Set the priority of the items at ``index`` (a no-op for samplers without priorities)."""

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """Called after items were overwritten in place (``buffer[index] = data``)."""

    @property
    def default_priority(self) -> float:
        """The priority new items get."""
        return 1.0

    @property
    def ran_out(self) -> bool:
        """Whether the last batch ended an epoch (iteration over the buffer stops there)."""
        return False

    def share(self, shared: bool = True) -> Sampler:
        """Make the sampler's state visible to processes started afterwards (no state: no-op)."""
        return self

    def _empty(self) -> None:
        """Forget everything (the buffer was emptied)."""

    def storage_resized(self, max_size: int) -> None:
        """The storage's capacity became ``max_size`` (a lazy storage's first write, a load)."""

    def storage_replaced(self, max_size: int) -> None:
        """The storage's whole content was replaced (a checkpoint was loaded into it).

        Resizes what the sampler keeps per slot to ``max_size`` and forgets anything it
        cached about the old content; its own state is loaded separately.
        """
        self.storage_resized(max_size)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state, for ``torch.save``."""
        return {}

    def dumps(self, path: str | os.PathLike) -> None:
        """Save :meth:`state_dict` under the folder ``path`` (memory-mapped tensors + JSON)."""
        from tdrl.data.replay_buffers.checkpoint_files import dump_state

        dump_state(self, path)

    def loads(self, path: str | os.PathLike) -> None:
        """Restore a state saved by :meth:`dumps`."""
        from tdrl.data.replay_buffers.checkpoint_files import load_state

        load_state(self, path)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class RandomSampler(Sampler):
    """Draws items uniformly at random, with replacement.

    Args:
        replacement: ``False`` builds a :class:`SamplerWithoutReplacement` instead (with the
            other keyword arguments given).

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import ReplayBuffer, LazyTensorStorage
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler())
        >>> _ = rb.extend(torch.arange(10))
        >>> rb.sample(4).shape
        torch.Size([4])
    """

    def __init__(self, replacement: bool = True) -> None:
        super().__init__()

    @classmethod
    def _without_replacement_variant(cls) -> type | None:
        return SamplerWithoutReplacement

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw ``batch_size`` indices uniformly among stored items."""
        return storage.random_index(batch_size, self._rng), {}


class SamplerWithoutReplacement(Sampler):
    """Draws each stored item once per epoch; :attr:`ran_out` turns true at the epoch's end.

    Items written during an epoch join it; when fewer items are stored than when the epoch
    began (the buffer was emptied), a new epoch starts. The items not drawn yet in the
    current epoch are kept in ``_sample_list`` (and in :meth:`state_dict`); once an epoch is
    used up, the next one is drawn at once.

    Args:
        drop_last: whether to drop the last, incomplete batch of an epoch.
        shuffle: whether to visit items in random order (else in storage order).
        replacement: accepted for symmetry with :class:`RandomSampler`; must be ``False``.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import ReplayBuffer, LazyTensorStorage
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10),
        ...     sampler=SamplerWithoutReplacement(shuffle=False), batch_size=4)
        >>> _ = rb.extend(torch.arange(10))
        >>> [batch.tolist() for batch in rb]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    _replacement = False

    def __init__(
        self, drop_last: bool = False, shuffle: bool = True, replacement: bool = False
    ) -> None:
        super().__init__()
        if replacement:
            raise ValueError(
                f"{type(self).__name__} draws without replacement: replacement must be False, "
                f"got {replacement!r}"
            )
        self.drop_last = drop_last
        self.shuffle = shuffle
        self._sample_list: torch.Tensor | None = None
        self.len_storage = 0
        self._ran_out = False

    def _new_epoch(self, length: int) -> None:
        if self.shuffle:
            self._sample_list = torch.randperm(length, generator=self._rng)
        else:
            self._sample_list = torch.arange(length)
        self.len_storage = length
        self._ran_out = False

    def _next_batch(self, count: int, batch_size: int) -> torch.Tensor:
        """The next ``batch_size`` of the ``count`` things to visit (indices in ``[0, count)``).

        Things added since the epoch began join it; fewer things than when it began start a
        new one. When an epoch is used up, the next one is drawn at once (``ran_out`` tells).
        """
        remaining = self._sample_list
        if remaining is None or count < self.len_storage:
            self._new_epoch(count)
        elif count > self.len_storage:
            remaining = torch.cat([remaining, torch.arange(self.len_storage, count)])
            if self.shuffle:
                remaining = remaining[torch.randperm(remaining.numel(), generator=self._rng)]
            self._sample_list = remaining
            self.len_storage = count
        remaining = self._sample_list
        if self.drop_last and remaining.numel() < batch_size:
            self._new_epoch(count)
            remaining = self._sample_list
        index = remaining[:batch_size]
        rest = remaining[batch_size:]
        ran_out = rest.numel() == 0 or (self.drop_last and rest.numel() < batch_size)
        if ran_out:
            self._new_epoch(count)
        else:
            self._sample_list = rest
        self._ran_out = ran_out
        return index

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """The next ``batch_size`` items of the current epoch."""
        length = len(storage)
        if length == 0:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        if self.drop_last and length < batch_size:
            raise ValueError(
                f"The batch size ({batch_size}) is greater than the storage capacity ({length} "
                "items stored): with drop_last=True no full batch can be drawn"
            )
        return storage.unravel_index(self._next_batch(length, batch_size)), {}

    @property
    def ran_out(self) -> bool:
        """Whether the last batch ended the epoch."""
        return self._ran_out

    def _empty(self) -> None:
        self._sample_list = None
        self.len_storage = 0
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        """The items left in the epoch, the epoch's item count and whether it ran out."""
        remaining = self._sample_list
        return {
            "_sample_list": None if remaining is None else remaining.clone(),
            "len_storage": self.len_storage,
            "_ran_out": self._ran_out,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the epoch (the tensors are copied, not shared with ``state_dict``)."""
        remaining = state_dict.get("_sample_list")
        self._sample_list = None if remaining is None else torch.as_tensor(remaining).clone()
        self.len_storage = int(state_dict.get("len_storage", 0))
        self._ran_out = bool(state_dict.get("_ran_out", False))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(drop_last={self.drop_last}, shuffle={self.shuffle})"


def _check_exponent(name: str, value: Any) -> None:
    """Raise unless ``value`` is a finite real number >= 0 (NaN fails every comparison)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if not (isinstance(value, torch.Tensor) and value.numel() == 1):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not 0 <= float(value) < float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")


class PrioritizedSampler(Sampler):
    """Prioritized experience replay (Schaul et al., 2015) on vectorised sum / min trees.

    Item ``i`` is drawn with probability ``p_i ** alpha / sum_j p_j ** alpha`` where
    ``p_i = priority_i + eps``; its importance weight ``(p_i / p_min) ** -beta`` is
    normalised by the largest possible weight and returned under ``"priority_weight"``.
    New items get the largest priority seen so far.

    Args:
        max_capacity: the number of items the trees can hold (the storage's ``max_size``).
        alpha: how strongly priorities shape sampling (0 is uniform).
        beta: importance-sampling correction exponent (1 fully corrects the bias).
        eps: added to every priority, so that a priority of 0 still gets drawn (must be
            > 0 for priorities of 0 to be accepted).
        dtype: dtype of the returned weights (tree sums always use float64).
        reduction: how multi-dimensional priorities are reduced to one per item:
            ``"max"``, ``"min"``, ``"sum"``, ``"mean"`` or ``"median"``.
        max_priority_within_buffer: if ``True`` new items get the largest priority currently
            in the buffer rather than the largest ever seen.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import ReplayBuffer, LazyTensorStorage
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4),
        ...     sampler=PrioritizedSampler(4, alpha=1.0, beta=1.0))
        >>> _ = rb.extend(torch.arange(4))
        >>> rb.update_priority(torch.arange(4), torch.tensor([1e-6, 1e-6, 1e-6, 10.0]))
        >>> data, info = rb.sample(8, return_info=True)
        >>> data.tolist()
        [3, 3, 3, 3, 3, 3, 3, 3]
        >>> sorted(info)
        ['index', 'priority_weight']
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
    ) -> None:
        super().__init__()
        if int(max_capacity) < 1:
            raise ValueError(f"max_capacity must be a positive integer, got {max_capacity}")
        _check_exponent("alpha", alpha)
        _check_exponent("beta", beta)
        _check_exponent("eps", eps)
        if reduction not in _PRIORITY_REDUCTIONS:
            raise ValueError(f"reduction must be one of {_PRIORITY_REDUCTIONS}, got {reduction!r}")
        self._max_capacity = int(max_capacity)
        self._alpha = float(alpha)
        self._beta = float(beta)
        self._eps = float(eps)
        self._dtype = dtype
        self.reduction = reduction
        self._max_priority_within_buffer = bool(max_priority_within_buffer)
        self._max_priority = 1.0
        # update_priority computes tree values in this float64 buffer (kept for batches of
        # up to 1024 items); a one-element eps tensor keeps the sum in float64
        self._values = torch.empty(0, dtype=torch.float64)
        self._eps_tensor = torch.tensor([self._eps], dtype=torch.float64)
        # set by share(): the process lock and the largest priority, in shared memory
        self._lock: ProcessLock | None = None
        self._shared_max: torch.Tensor | None = None
        self._build_trees()

    def _build_trees(self) -> None:
        self._tree = PriorityTree(self._max_capacity)
        self._max_tree = (
            MaxSegmentTree(self._max_capacity) if self._max_priority_within_buffer else None
        )
        if self._lock is not None:
            self._share_trees()

    def _share_trees(self) -> None:
        self._tree.share_memory_()
        if self._max_tree is not None:
            self._max_tree.share_memory_()

    def share(self, shared: bool = True) -> PrioritizedSampler:
        """Keep the priorities in shared memory, for a buffer written by several processes.

        Call it before the other processes start (``ReplayBuffer(..., shared=True)`` and
        :meth:`ReplayBuffer.share` do): forked and spawned children then draw from and update
        the same priorities, and every draw or update holds a process lock that the OS
        releases if its holder dies.

        Examples:
            >>> sampler = PrioritizedSampler(8, alpha=1.0, beta=1.0).share()
            >>> sampler.is_shared
            True
        """
        if shared and self._lock is None:
            self._share_trees()
            self._shared_max = torch.tensor([self._max_priority], dtype=torch.float64)
            self._shared_max.share_memory_()
            self._lock = ProcessLock("prioritized sampler lock", timeout=_SHARED_LOCK_TIMEOUT)
        return self

    @property
    def is_shared(self) -> bool:
        """Whether the priorities live in shared memory (see :meth:`share`)."""
        return self._lock is not None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if _mp_context.get_spawning_popen() is None:
            # a copy (deepcopy, torch.save) is a sampler of its own
            state["_lock"] = None
            state["_shared_max"] = None
        return state

    @property
    def alpha(self) -> float:
        """The priority exponent."""
        return self._alpha

    @property
    def beta(self) -> float:
        """The importance-sampling exponent."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        _check_exponent("beta", value)
        self._beta = float(value)

    @property
    def max_priority(self) -> float:
        """The priority new items get, before ``eps`` and ``alpha`` are applied."""
        if self._max_tree is not None:
            top = float(self._max_tree.max())
            if top == float("-inf"):
                return 1.0
            return top ** (1.0 / self._alpha) - self._eps if self._alpha else 1.0
        return self._max_priority

    @property
    def default_priority(self) -> float:
        """The tree value new items get: ``(max_priority + eps) ** alpha``."""
        if self._max_tree is not None:
            top = float(self._max_tree.max())
            if top != float("-inf"):
                return top
            return (1.0 + self._eps) ** self._alpha
        return (self._max_priority + self._eps) ** self._alpha

    @_across_processes
    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw ``batch_size`` items in proportion to their priority; returns importance weights."""
        length = len(storage)
        if not length:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        tree = self._tree
        # draws stay among stored items; ``value`` is the tree value of each drawn item
        index, value = tree.sample(batch_size, self._rng, length)
        lowest = tree.min_value()
        if length < tree.capacity:
            value.clamp_(min=lowest)
        # the ratio is >= 1, so weights never exceed 1
        weight = torch.div(value, lowest, out=torch.empty(batch_size, dtype=self._dtype))
        return storage.unravel_index(index), {"priority_weight": weight.pow_(-self._beta)}

    def _set(self, index: torch.Tensor, value: torch.Tensor | float) -> None:
        self._tree.update(index, value)
        if self._max_tree is not None:
            self._max_tree.update(index, value)

    def add(self, index: int) -> None:
        """Give the new item the default priority."""
        self.extend(torch.as_tensor([index]))

    @_across_processes
    def extend(self, index: torch.Tensor) -> None:
        """Give the new items the default priority."""
        index = torch.as_tensor(index).reshape(-1)
        if self._max_tree is not None:
            # the items being replaced no longer count towards the buffer's maximum
            self._max_tree.update(index, float("-inf"))
        self._set(index, self.default_priority)

    @_across_processes
    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """Overwritten items get the default priority."""
        flat = (
            storage.ravel_index(index)
            if storage is not None
            else torch.as_tensor(index).reshape(-1)
        )
        self._set(flat, self.default_priority)

    def _reduce(self, priority: torch.Tensor) -> torch.Tensor:
        if self.reduction == "median":
            return priority.median(-1).values
        if self.reduction in ("max", "min"):
            return getattr(priority, f"a{self.reduction}")(-1)
        return getattr(priority, self.reduction)(-1)

    @_across_processes
    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """Set new priorities (e.g. absolute TD errors) for the items at ``index``.

        Args:
            index: indices as returned by sampling (a tensor, or a tuple for ``ndim > 1``).
            priority: one value per item, a scalar for all, or per-item tensors with extra
                dimensions reduced with ``reduction``. Values must be finite and >= 0; as
                ``eps`` is added to each, a priority of 0 (e.g. a TD error of 0) is valid
                when ``eps > 0``.
            storage: the storage, needed to flatten multi-dimensional indices.

        Raises:
            ValueError: when a priority is negative, NaN or infinite, is 0 while ``eps`` is 0,
                or when shapes do not match.
        """
        if type(index) is not torch.Tensor or index.dtype != torch.long or index.ndim != 1:
            index = self._flat_index(index, storage)
        elif storage is not None and getattr(storage, "ndim", 1) > 1:
            index = storage.ravel_index(index)
        if type(priority) is not torch.Tensor:
            priority = torch.as_tensor(priority, dtype=torch.float64)
        elif priority.requires_grad or not priority.is_cpu:
            priority = priority.detach().cpu()
        count = index.shape[0]
        if priority.shape != index.shape:
            priority = self._one_per_index(priority, count)
        if not count:
            return
        low, high = torch.aminmax(priority)
        low, high = low.item(), high.item()
        if not (low > 0 and high < _INF):
            self._check_priority_range(low, high)
        # tree values: (priority + eps) ** alpha, in float64
        value = self._values
        if value.shape[0] != count:
            value = torch.empty(count, dtype=torch.float64)
            if count <= 1024:
                self._values = value
        torch.add(priority, self._eps_tensor, out=value)
        if self._alpha != 1.0:
            value.pow_(self._alpha)
        self._tree.write(index, value)
        if self._max_tree is not None:
            self._max_tree.update(index, value)
        if high > self._max_priority:
            self._max_priority = high

    def _check_priority_range(self, low: float, high: float) -> None:
        """Accept a smallest priority of 0 when ``eps > 0``; raise for anything else out of range."""
        if low != low or high != high:
            raise ValueError("priorities must be finite and >= 0, got NaN")
        if low < 0 or high == _INF:
            raise ValueError(f"priorities must be finite and >= 0, got {low if low < 0 else high}")
        if self._eps == 0:
            raise ValueError(
                "a priority of 0 needs eps > 0 (the tree value is (priority + eps) ** alpha and "
                "must be > 0), got priority 0 with eps=0"
            )
        if self._eps**self._alpha == 0:
            raise ValueError(
                f"a priority of 0 gives a tree value of 0: eps ** alpha underflows with "
                f"eps={self._eps}, alpha={self._alpha}; use a larger eps"
            )

    @staticmethod
    def _flat_index(index: Any, storage: Any) -> torch.Tensor:
        if isinstance(index, tuple) or (storage is not None and getattr(storage, "ndim", 1) > 1):
            if storage is None:
                raise ValueError("multi-dimensional indices need the storage to be flattened")
            return storage.ravel_index(index)
        index = torch.as_tensor(index)
        if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
            raise TypeError(
                f"priority index must hold integers, got a {index.dtype} tensor "
                f"{index.reshape(-1)[:4].tolist()}"
            )
        return index.reshape(-1).long()

    def _one_per_index(self, priority: torch.Tensor, count: int) -> torch.Tensor:
        if priority.numel() == 1:
            return priority.reshape(1).expand(count)
        if priority.ndim > 1 and priority.shape[0] == count:
            return self._reduce(priority.to(torch.float64).reshape(count, -1))
        if priority.numel() != count:
            raise ValueError(
                f"priority shape mismatch: expected {count} values (one per index), "
                f"got shape {tuple(priority.shape)}"
            )
        return priority.reshape(-1)

    @_across_processes
    def _empty(self) -> None:
        self._max_priority = 1.0
        self._tree.fill_()
        if self._max_tree is not None:
            self._max_tree.fill_()

    def storage_resized(self, max_size: int) -> None:
        """Resize the priority trees, keeping the priorities of the slots that remain."""
        if max_size == self._max_capacity:
            return
        old = self._tree.leaves().clone()
        keep = min(max_size, self._max_capacity)
        self._max_capacity = int(max_size)
        self._build_trees()
        leaves = torch.zeros(self._max_capacity, dtype=torch.float64)
        leaves[:keep] = old[:keep]
        self._load_leaves(leaves)

    def _load_leaves(self, leaves: torch.Tensor) -> None:
        self._tree.load_leaves(leaves)
        if self._max_tree is not None:
            self._max_tree.load_leaves(torch.where(leaves > 0, leaves, float("-inf")))

    @_across_processes
    def state_dict(self) -> dict[str, Any]:
        """Hyper-parameters, the largest priority and the tree leaves."""
        return {
            "_alpha": self._alpha,
            "_beta": self._beta,
            "_eps": self._eps,
            "_max_priority": self._max_priority,
            "_max_capacity": self._max_capacity,
            "_priorities": self._tree.leaves().clone(),
        }

    @_across_processes
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore hyper-parameters, the largest priority and the trees.

        Raises:
            ValueError: when a parameter is negative or not finite, or the priorities are not
                finite non-negative values, one per slot of ``_max_capacity``.
        """
        for name in ("_alpha", "_beta", "_eps", "_max_priority"):
            _check_exponent(f"sampler state {name}", state_dict[name])
        capacity = state_dict["_max_capacity"]
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(
                f"sampler state _max_capacity must be a positive integer, got {capacity!r}"
            )
        priorities = torch.as_tensor(state_dict["_priorities"])
        if priorities.shape != (capacity,):
            raise ValueError(
                f"sampler state _priorities: expected shape ({capacity},), "
                f"got {tuple(priorities.shape)}"
            )
        if not bool(torch.isfinite(priorities).all()) or bool((priorities < 0).any()):
            raise ValueError("sampler state _priorities must be finite and >= 0")
        self._alpha = state_dict["_alpha"]
        self._beta = state_dict["_beta"]
        self._eps = state_dict["_eps"]
        self._eps_tensor = torch.tensor([self._eps], dtype=torch.float64)
        self._max_priority = state_dict["_max_priority"]
        self._max_capacity = state_dict["_max_capacity"]
        self._build_trees()
        self._load_leaves(state_dict["_priorities"])

    def __repr__(self) -> str:
        return (
            f"PrioritizedSampler(max_capacity={self._max_capacity}, alpha={self._alpha}, "
            f"beta={self._beta}, eps={self._eps}, reduction={self.reduction!r})"
        )


# The other samplers live in their own modules; they are importable from here, where the
# reference API's users (and its documentation's cross-references) look for every sampler.
from tdrl.data.replay_buffers.group_sampler import PromptGroupSampler  # noqa: E402
from tdrl.data.replay_buffers.prioritized_slice_sampler import PrioritizedSliceSampler  # noqa: E402
from tdrl.data.replay_buffers.slice_samplers import (  # noqa: E402
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from tdrl.data.replay_buffers.staleness_sampler import StalenessAwareSampler  # noqa: E402
