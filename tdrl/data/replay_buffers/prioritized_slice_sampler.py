"""PrioritizedSliceSampler: slices whose first step is drawn in proportion to its priority."""

from __future__ import annotations

from typing import Any

import torch

from tdrl.data.replay_buffers.samplers import PrioritizedSampler
from tdrl.data.replay_buffers.slice_samplers import NO_TRAJ_MSG, SliceSampler
from tdrl.data.replay_buffers.trajectories import Segments

__all__ = ["PrioritizedSliceSampler"]


class PrioritizedSliceSampler(SliceSampler, PrioritizedSampler):
    """Samples slices whose first step is drawn in proportion to its priority.

    Every stored step has a priority (as in :class:`PrioritizedSampler`); the start of each
    slice is drawn from the steps that can start a slice (with ``strict_length=True``, those
    at least ``slice_len - 1`` steps before the end of their trajectory). Importance weights
    are returned for every step of the batch under ``"priority_weight"``.

    Args:
        max_capacity: the number of items the priority trees hold (the storage's size).
        alpha, beta, eps, dtype, reduction, max_priority_within_buffer: as in
            :class:`PrioritizedSampler`.
        num_slices, slice_len, end_key, traj_key, ends, trajectories, cache_values,
            truncated_key, strict_length, compile, span, use_gpu, pad_output: as in
            :class:`SliceSampler`; ``span`` may only overhang the end of trajectories
            (``(False, right)``), the start being the drawn step.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
        >>> sampler = PrioritizedSliceSampler(40, alpha=1.0, beta=1.0, slice_len=5,
        ...     traj_key="episode")
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(40), sampler=sampler,
        ...     batch_size=10)
        >>> _ = rb.extend(TensorDict({"episode": torch.arange(4).repeat_interleave(10)}, [40]))
        >>> rb.update_priority(torch.arange(40), (torch.arange(40) == 12).float() + 1e-6)
        >>> rb.sample()["index"].reshape(2, 5)[:, 0].tolist()
        [12, 12]
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: Any = None,
        traj_key: Any = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: Any = ("next", "truncated"),
        span: bool | int | tuple = False,
        strict_length: bool = True,
        compile: bool | dict = False,
        use_gpu: bool | torch.device = False,
        max_priority_within_buffer: bool = False,
        pad_output: bool = False,
    ) -> None:
        SliceSampler.__init__(
            self,
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=cache_values,
            truncated_key=truncated_key,
            strict_length=strict_length,
            compile=compile,
            span=span,
            use_gpu=use_gpu,
            pad_output=pad_output,
        )
        if self.span[0] not in (False, 0):
            raise ValueError(
                "PrioritizedSliceSampler draws the first step of each slice, so span can only "
                f"overhang the end of trajectories: use span=(False, right), got {span!r}"
            )
        PrioritizedSampler.__init__(
            self,
            max_capacity,
            alpha,
            beta,
            eps=eps,
            dtype=dtype,
            reduction=reduction,
            max_priority_within_buffer=max_priority_within_buffer,
        )

    def extend(self, index: torch.Tensor) -> None:
        """Give new items the default priority and forget the cached trajectories."""
        SliceSampler.extend(self, index)
        PrioritizedSampler.extend(self, index)

    def add(self, index: int) -> None:
        """Give the new item the default priority and forget the cached trajectories."""
        SliceSampler.add(self, index)
        PrioritizedSampler.add(self, index)

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """Overwritten items get the default priority; cached trajectories are dropped."""
        SliceSampler.mark_update(self, index, storage=storage)
        PrioritizedSampler.mark_update(self, index, storage=storage)

    def _empty(self) -> None:
        SliceSampler._empty(self)
        PrioritizedSampler._empty(self)

    def _blocked_starts(self, segments: Segments, slice_len: int) -> torch.Tensor:
        """Flat storage indices of steps that cannot start a slice."""
        key = ("blocked", slice_len)
        cached = self._cache.get(key)
        if cached is not None and cached[0] is segments:
            return cached[1]
        _, right = self._span_amounts(slice_len)
        need = slice_len - right if self.strict_length else 1
        lengths = segments.lengths
        owner = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        position = torch.arange(owner.numel())
        stop = (segments.starts + lengths - 1).index_select(0, owner)
        blocked = (stop - position) < (need - 1)
        flat = segments.timeline.to_flat(position[blocked])
        self._cache[key] = (segments, flat)
        return flat

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw slices whose first steps follow the priorities; returns indices, weights, flags."""
        num_slices, slice_len = self._slice_shape(batch_size)
        segments = self._segments(storage)
        timeline = segments.timeline
        if timeline.offset or timeline.streams > 1 or timeline.size != len(storage):
            flat_to_position = torch.empty(timeline.rows * timeline.streams, dtype=torch.long)
            flat_to_position[timeline.all_flat()] = torch.arange(timeline.size)
        else:
            flat_to_position = None
        blocked = self._blocked_starts(segments, slice_len)
        tree = self._tree
        saved = tree.leaves().index_select(0, blocked)
        tree.update(blocked, 0.0)
        try:
            total = float(tree.total())
            if total <= 0:
                raise RuntimeError(
                    NO_TRAJ_MSG.format(need=slice_len, longest=int(segments.lengths.max()))
                )
            mass = torch.rand(num_slices, dtype=torch.float64, generator=self._rng)
            first_flat, _ = tree.scan_lower_bound(mass.mul_(total))
        finally:
            tree.update(blocked, saved)
        position = first_flat if flat_to_position is None else flat_to_position[first_flat]
        traj = torch.searchsorted(segments.starts, position, right=True) - 1
        start = segments.starts.index_select(0, traj)
        length = segments.lengths.index_select(0, traj)
        first = position - start
        seq = None
        if not self.strict_length or self.span[1] not in (False, 0):
            seq = torch.minimum(length - first, torch.full_like(first, slice_len))
        index, info = self._indices(storage, segments, traj, start, length, first, seq, slice_len)
        flat = storage.ravel_index(index) if isinstance(index, tuple) else index
        lowest = tree.min()
        weight = tree.leaves().index_select(0, flat).clamp_(min=lowest)
        weight = weight.div_(lowest).pow_(-self._beta).to(self._dtype)
        info["priority_weight"] = weight
        return index, info

    def state_dict(self) -> dict[str, Any]:
        """The priority state (see :class:`PrioritizedSampler`)."""
        return PrioritizedSampler.state_dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the priority state."""
        PrioritizedSampler.load_state_dict(self, state_dict)
        self._cache.clear()

    def __repr__(self) -> str:
        return (
            f"PrioritizedSliceSampler(max_capacity={self._max_capacity}, alpha={self._alpha}, "
            f"beta={self._beta}, num_slices={self.num_slices}, slice_len={self.slice_len}, "
            f"strict_length={self.strict_length})"
        )
