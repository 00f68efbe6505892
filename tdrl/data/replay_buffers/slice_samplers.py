"""Slice samplers: draw sub-trajectories (slices) of consecutive steps from stored trajectories.

Trajectories are found once per storage state from trajectory ids (``traj_key``) or end
flags (``end_key``) with a few tensor operations. The storage is read in *chronological*
order: a full circular buffer is rotated so that its oldest row comes first, and each
stream of a multi-dimensional storage (``ndim > 1``, time along dim 0) is laid out after
the previous one. In that "timeline" every trajectory is one contiguous run of positions,
so a batch of slices is one ``randint`` for the trajectories, one draw for the start
offsets and one broadcast ``arange`` for the indices.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.samplers import PrioritizedSampler, Sampler
from tdrl.data.replay_buffers.storage_base import EMPTY_SAMPLE_MSG

__all__ = ["PrioritizedSliceSampler", "SliceSampler", "SliceSamplerWithoutReplacement"]

_NO_TRAJ_MSG = (
    "no trajectory of at least {need} steps in the storage (longest: {longest}); "
    "use strict_length=False to allow shorter slices"
)


def _replace_last(key: Any, name: str) -> Any:
    if isinstance(key, tuple):
        return (*key[:-1], name)
    return name


class Timeline(NamedTuple):
    """How chronological positions map to storage items.

    ``length`` rows are filled out of ``rows``; chronological row ``t`` is storage row
    ``(t + offset) % rows``; ``streams`` items share each row (``ndim > 1``). Timeline
    position ``s * length + t`` is time ``t`` of stream ``s``.
    """

    length: int
    rows: int
    offset: int
    streams: int

    @property
    def size(self) -> int:
        """Number of positions."""
        return self.length * self.streams

    def to_flat(self, position: torch.Tensor) -> torch.Tensor:
        """Flat storage indices (over the first ``ndim`` dims) of timeline positions."""
        if self.streams == 1:
            if self.offset:
                return (position + self.offset).remainder_(self.rows)
            return position
        stream = position.div(self.length, rounding_mode="floor")
        time = position - stream * self.length
        if self.offset:
            time = (time + self.offset).remainder_(self.rows)
        return time * self.streams + stream

    def all_flat(self) -> torch.Tensor:
        """Flat storage index of every timeline position, in timeline order."""
        return self.to_flat(torch.arange(self.size))


def _writer_cursor(storage: Any) -> int | None:
    for entity in getattr(storage, "_attached_entities", ()):
        writer = getattr(entity, "_writer", None)
        if writer is not None and hasattr(writer, "_cursor"):
            return writer._cursor
    return None


def storage_timeline(storage: Any, cursor: int | None = None) -> Timeline:
    """The chronological layout of ``storage`` (see :class:`Timeline`).

    Args:
        storage: a storage; a full one is rotated at the cursor of the writer of the buffer it
            belongs to (or ``cursor`` when given).
        cursor: the next row the writer will write (the oldest row of a full buffer).
    """
    if hasattr(storage, "_len_along_dim0"):
        length = storage._len_along_dim0
        shape = storage._total_shape
        rows = shape[0] if shape is not None else length
        streams = math.prod(shape[1 : storage.ndim]) if shape is not None else 1
    else:
        length = rows = len(storage)
        streams = 1
    offset = 0
    if length == rows and length:
        if cursor is None:
            cursor = _writer_cursor(storage)
        if cursor:
            offset = int(cursor) % rows
    return Timeline(length, rows, offset, streams)


def per_stream(values: torch.Tensor, timeline: Timeline) -> torch.Tensor:
    """Reorder a per-item tensor ``[rows, *item dims, *trailing]`` to ``[streams, length, -1]`` (on CPU)."""
    values = values[: timeline.rows].cpu()
    if timeline.offset:
        values = torch.cat([values[timeline.offset :], values[: timeline.offset]])
    values = values[: timeline.length]
    values = values.reshape(timeline.length, timeline.streams, -1)
    return values.transpose(0, 1)


class Segments(NamedTuple):
    """Trajectories of a timeline: start position, length and whether each ended by termination."""

    starts: torch.Tensor
    lengths: torch.Tensor
    terminated: torch.Tensor
    timeline: Timeline


def segments_from_ends(ends: torch.Tensor, natural: torch.Tensor, timeline: Timeline) -> Segments:
    """Trajectories from ``[streams, length]`` end flags; ``natural`` flags true trajectory ends."""
    ends = ends.clone()
    ends[:, -1] = True
    stops = ends.reshape(-1).nonzero().squeeze(1)
    starts = torch.zeros_like(stops)
    starts[1:] = stops[:-1] + 1
    terminated = natural.reshape(-1).index_select(0, stops)
    return Segments(starts, stops - starts + 1, terminated, timeline)


def _key_in(td: TensorDictBase, key: Any) -> bool:
    return key in td.keys(include_nested=True)


def _stored_td(storage: Any) -> TensorDictBase | None:
    td = getattr(storage, "_td", None)
    if td is None or getattr(storage, "_kind", None) != "tensordict":
        return None
    return td


class SliceSampler(Sampler):
    """Samples slices of consecutive steps from trajectories stored one after the other.

    Trajectories are told apart by a trajectory-id entry (``traj_key``), by end flags
    (``end_key``, e.g. ``("next", "done")``), or by ``trajectories`` / ``ends`` tensors given
    directly. When neither key is given, ``"episode"`` is used if stored, else
    ``("next", "done")``. Multi-dimensional storages (``ndim > 1``) hold one stream per
    element of the non-time dims; a full circular buffer is read from its oldest row.

    A batch of ``batch_size`` items holds ``num_slices`` slices of ``slice_len`` steps
    (give one of the two), laid out slice after slice: reshape it with
    ``sample.reshape(num_slices, -1)``. When ``truncated_key`` is set, the sampler returns
    flags for it and its ``"done"`` / ``"terminated"`` siblings: the last step of a slice is
    truncated unless the slice ends where its trajectory terminated.

    Args:
        num_slices: number of slices per batch.
        slice_len: number of steps per slice.
        end_key: the end-of-trajectory flag entry.
        traj_key: the trajectory-id entry.
        ends: a boolean tensor marking the last step of each trajectory (static data).
        trajectories: a tensor of trajectory ids (static data).
        cache_values: keep the trajectories found until the next write (for data that is
            sampled many times between writes, e.g. offline datasets).
        truncated_key: where the truncation flags go in TensorDict samples (``None``: none).
        strict_length: if ``True`` only trajectories of at least ``slice_len`` steps are
            sampled; if ``False`` shorter trajectories give shorter slices.
        compile: accepted for API compatibility; it has no effect.
        span: let slices overhang the start and/or end of their trajectory and be cut there:
            ``True`` (at least one step is kept), an int ``i`` (at least ``slice_len - i``
            steps are kept) or a ``(left, right)`` pair of those.
        use_gpu: accepted for API compatibility; it has no effect.
        pad_output: pad shorter slices to ``slice_len`` by repeating their last step and
            return a boolean ``"mask"`` of the real steps, so batches keep ``batch_size`` items.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
        >>> episode = torch.arange(3).repeat_interleave(10)  # 3 trajectories of 10 steps
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(30),
        ...     sampler=SliceSampler(num_slices=2, traj_key="episode"), batch_size=8)
        >>> _ = rb.extend(TensorDict({"episode": episode, "step": torch.arange(30) % 10}, [30]))
        >>> sample = rb.sample().reshape(2, -1)
        >>> bool((sample["step"].diff(dim=1) == 1).all()), sample["next", "truncated"][:, -1].all()
        (True, tensor(True))
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: Any = None,
        traj_key: Any = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: Any = ("next", "truncated"),
        strict_length: bool = True,
        compile: bool | dict = False,
        span: bool | int | tuple = False,
        use_gpu: bool | torch.device = False,
        pad_output: bool = False,
    ) -> None:
        Sampler.__init__(self)
        if (num_slices is None) == (slice_len is None):
            raise ValueError(
                f"give exactly one of num_slices and slice_len, got num_slices={num_slices}, "
                f"slice_len={slice_len}"
            )
        for name, value in (("num_slices", num_slices), ("slice_len", slice_len)):
            if value is not None and int(value) < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if ends is not None and trajectories is not None:
            raise ValueError("give at most one of ends and trajectories")
        if (ends is not None or trajectories is not None) and (
            end_key is not None or traj_key is not None
        ):
            raise ValueError("ends / trajectories cannot be combined with end_key / traj_key")
        if end_key is not None and traj_key is not None:
            raise ValueError(
                f"give at most one of end_key and traj_key, got end_key={end_key!r}, traj_key={traj_key!r}"
            )
        self.num_slices = None if num_slices is None else int(num_slices)
        self.slice_len = None if slice_len is None else int(slice_len)
        self._explicit = "traj" if traj_key is not None else "end" if end_key is not None else None
        self.end_key = ("next", "done") if end_key is None else end_key
        self.traj_key = "episode" if traj_key is None else traj_key
        self._static_ends = None if ends is None else torch.as_tensor(ends, dtype=torch.bool)
        self._static_traj = None if trajectories is None else torch.as_tensor(trajectories)
        self.cache_values = bool(cache_values)
        self.truncated_key = truncated_key
        self.strict_length = bool(strict_length)
        self.span = self._parse_span(span)
        self.pad_output = bool(pad_output)
        self._flag_keys = (
            truncated_key,
            _replace_last(truncated_key, "terminated"),
            _replace_last(truncated_key, "done"),
        )
        self._cache: dict[Any, Any] = {}
        self._arange_cache: dict[int, torch.Tensor] = {}

    @staticmethod
    def _parse_span(span: Any) -> tuple[Any, Any]:
        pair = tuple(span) if isinstance(span, (tuple, list)) else (span, span)
        if len(pair) != 2:
            raise ValueError(f"span must be a bool, an int or a pair of those, got {span!r}")
        for side in pair:
            if not isinstance(side, (bool, int)) or (side is not True and int(side) < 0):
                raise ValueError(f"span values must be bools or non-negative ints, got {span!r}")
        return pair

    def _span_amounts(self, slice_len: int) -> tuple[int, int]:
        out = []
        for side in self.span:
            if side is True:
                out.append(slice_len - 1)
            elif side is False:
                out.append(0)
            else:
                out.append(min(int(side), slice_len - 1))
        return out[0], out[1]

    # -- trajectories --------------------------------------------------------------------------
    def _empty_cache(self) -> None:
        self._cache.clear()

    def extend(self, index: torch.Tensor) -> None:
        """Forget the cached trajectories (the storage changed)."""
        self._cache.clear()

    def add(self, index: int) -> None:
        """Forget the cached trajectories (the storage changed)."""
        self._cache.clear()

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """Forget the cached trajectories (stored items were overwritten)."""
        self._cache.clear()

    def _empty(self) -> None:
        self._cache.clear()

    def _segments(self, storage: Any) -> Segments:
        static = self._static_ends is not None or self._static_traj is not None
        if (self.cache_values or static) and "segments" in self._cache:
            return self._cache["segments"]
        segments = self._find_segments(storage)
        if self.cache_values or static:
            self._cache["segments"] = segments
        return segments

    def _find_segments(self, storage: Any) -> Segments:
        if len(storage) == 0:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        timeline = storage_timeline(storage)
        if self._static_ends is not None or self._static_traj is not None:
            return self._static_segments(timeline)
        td = _stored_td(storage)
        if td is None:
            raise TypeError(
                f"{type(self).__name__} reads trajectory ids or end flags from a TensorStorage holding "
                f"TensorDicts, got {type(storage).__name__}; pass ends= or trajectories= instead"
            )
        mode = self._explicit
        if mode is None:
            mode = "traj" if _key_in(td, self.traj_key) else "end"
        key = self.traj_key if mode == "traj" else self.end_key
        if not _key_in(td, key):
            tried = (
                f"{self.traj_key!r} or {self.end_key!r}" if self._explicit is None else repr(key)
            )
            raise KeyError(
                f"{type(self).__name__}: expected key {tried} in the stored data, got keys "
                f"{sorted(map(str, td.keys(include_nested=True, leaves_only=True)))}"
            )
        values = per_stream(td.get(key), timeline)
        if mode == "traj":
            ids = values[..., 0]
            ends = torch.zeros(ids.shape, dtype=torch.bool)
            ends[:, :-1] = ids[:, :-1] != ids[:, 1:]
            natural = ends.clone()
        else:
            ends = values.any(-1) if values.dtype == torch.bool else (values != 0).any(-1)
            natural = ends.clone()
        term_key = _replace_last(self.truncated_key or self.end_key, "terminated")
        if _key_in(td, term_key):
            stored = per_stream(td.get(term_key), timeline)
            natural = stored.any(-1) if stored.dtype == torch.bool else (stored != 0).any(-1)
        return segments_from_ends(ends, natural, timeline)

    def _static_segments(self, timeline: Timeline) -> Segments:
        if self._static_ends is not None:
            ends = self._static_ends.reshape(-1)
        else:
            ids = self._static_traj.reshape(-1)
            ends = torch.zeros(ids.shape, dtype=torch.bool)
            ends[:-1] = ids[:-1] != ids[1:]
        if ends.numel() < timeline.size:
            raise ValueError(
                f"{type(self).__name__}: the ends / trajectories tensor has {ends.numel()} elements, "
                f"expected at least {timeline.size} (one per stored item)"
            )
        ends = ends[: timeline.size].reshape(1, -1)
        flat_timeline = Timeline(timeline.size, timeline.size, 0, 1)
        return segments_from_ends(ends, ends.clone(), flat_timeline)

    def _valid(self, segments: Segments, slice_len: int) -> torch.Tensor | None:
        """Indices of the trajectories slices may come from (``None``: all of them)."""
        key = ("valid", slice_len)
        cached = self._cache.get(key)
        if cached is not None and cached[0] is segments:
            return cached[1]
        left, right = self._span_amounts(slice_len)
        need = max(slice_len - left - right, 1) if self.strict_length else 1
        lengths = segments.lengths
        if int(lengths.min()) >= need:
            valid = None
        else:
            valid = (lengths >= need).nonzero().squeeze(1)
            if valid.numel() == 0:
                raise RuntimeError(_NO_TRAJ_MSG.format(need=need, longest=int(lengths.max())))
        self._cache[key] = (segments, valid)
        return valid

    # -- sampling ------------------------------------------------------------------------------
    def _slice_shape(self, batch_size: int) -> tuple[int, int]:
        if self.num_slices is not None:
            if batch_size % self.num_slices:
                raise ValueError(
                    f"batch_size must be a multiple of num_slices={self.num_slices}, got {batch_size}"
                )
            return self.num_slices, batch_size // self.num_slices
        if batch_size % self.slice_len:
            raise ValueError(
                f"batch_size must be a multiple of slice_len={self.slice_len}, got {batch_size}"
            )
        return batch_size // self.slice_len, self.slice_len

    def _arange(self, n: int) -> torch.Tensor:
        out = self._arange_cache.get(n)
        if out is None:
            out = self._arange_cache[n] = torch.arange(n)
        return out

    def _choose(self, segments: Segments, valid: torch.Tensor | None, num_slices: int) -> Any:
        count = segments.starts.numel() if valid is None else valid.numel()
        choice = torch.randint(count, (num_slices,), generator=self._rng)
        return choice if valid is None else valid.index_select(0, choice)

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw ``batch_size // slice_len`` slices; returns their item indices and flags."""
        num_slices, slice_len = self._slice_shape(batch_size)
        segments = self._segments(storage)
        valid = self._valid(segments, slice_len)
        traj = self._choose(segments, valid, num_slices)
        return self._slices(storage, segments, traj, slice_len)

    def _slices(
        self, storage: Any, segments: Segments, traj: torch.Tensor, slice_len: int
    ) -> tuple[Any, dict]:
        num_slices = traj.numel()
        start = segments.starts.index_select(0, traj)
        length = segments.lengths.index_select(0, traj)
        left, right = self._span_amounts(slice_len)
        fixed = self.strict_length and not (left or right)
        draw = torch.rand(num_slices, dtype=torch.float64, generator=self._rng)
        if fixed:
            first = draw.mul_(length - slice_len + 1).long()
            seq = None
        else:
            high = (length - slice_len + right).clamp_(min=-left)
            rel = draw.mul_(high + left + 1).long().sub_(left)
            first = rel.clamp(min=0)
            seq = torch.minimum(rel + slice_len, length) - first
        return self._indices(storage, segments, traj, start, length, first, seq, slice_len)

    def _indices(
        self,
        storage: Any,
        segments: Segments,
        traj: torch.Tensor,
        start: torch.Tensor,
        length: torch.Tensor,
        first: torch.Tensor,
        seq: torch.Tensor | None,
        slice_len: int,
    ) -> tuple[Any, dict]:
        num_slices = traj.numel()
        begin = start.add_(first)
        info: dict[Any, Any] = {}
        ends_at = None
        if seq is None:
            position = (begin.unsqueeze(1) + self._arange(slice_len)).reshape(-1)
            seq_len = slice_len
        elif self.pad_output:
            steps = self._arange(slice_len).unsqueeze(0)
            last = (seq - 1).unsqueeze(1)
            position = (begin.unsqueeze(1) + torch.minimum(steps, last)).reshape(-1)
            info["mask"] = (steps <= last).reshape(-1)
            ends_at = torch.arange(num_slices) * slice_len + seq - 1
            seq_len = seq
        else:
            total = int(seq.sum())
            slice_of = torch.repeat_interleave(torch.arange(num_slices), seq, output_size=total)
            ends_at = seq.cumsum(0) - 1
            step = torch.arange(total) - (ends_at + 1 - seq).index_select(0, slice_of)
            position = begin.index_select(0, slice_of) + step
            seq_len = seq
        flat = segments.timeline.to_flat(position)
        index = storage._unravel(flat) if getattr(storage, "ndim", 1) > 1 else flat
        if self.truncated_key is not None:
            at_stop = (first + seq_len) == length
            terminated_end = at_stop.logical_and_(segments.terminated.index_select(0, traj))
            if ends_at is None:
                last_step = self._last_step_template(num_slices, slice_len)
                terminated = last_step & terminated_end.unsqueeze_(1)
                truncated = last_step ^ terminated
                done = last_step.clone()
                terminated, truncated, done = (
                    terminated.view(-1, 1),
                    truncated.view(-1, 1),
                    done.view(-1, 1),
                )
            else:
                size = position.numel()
                truncated = torch.zeros(size, 1, dtype=torch.bool)
                terminated = torch.zeros(size, 1, dtype=torch.bool)
                truncated[ends_at, 0] = ~terminated_end
                terminated[ends_at, 0] = terminated_end
                done = truncated | terminated
            truncated_key, terminated_key, done_key = self._flag_keys
            info[truncated_key] = truncated
            info[terminated_key] = terminated
            info[done_key] = done
        return index, info

    def _last_step_template(self, num_slices: int, slice_len: int) -> torch.Tensor:
        key = ("last_step", num_slices, slice_len)
        template = self._arange_cache.get(key)
        if template is None:
            template = torch.zeros(num_slices, slice_len, dtype=torch.bool)
            template[:, -1] = True
            self._arange_cache[key] = template
        return template

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_slices={self.num_slices}, slice_len={self.slice_len}, "
            f"end_key={self.end_key!r}, traj_key={self.traj_key!r}, "
            f"truncated_key={self.truncated_key!r}, strict_length={self.strict_length})"
        )


class SliceSamplerWithoutReplacement(SliceSampler):
    """Samples one slice per trajectory, visiting every trajectory once per epoch.

    Each batch draws ``num_slices`` trajectories not yet visited in the current epoch and one
    random slice in each. Iterating over a buffer stops at the end of an epoch; a write to the
    storage starts a new one.

    Args:
        num_slices, slice_len, end_key, traj_key, ends, trajectories, truncated_key,
            strict_length, compile, span, use_gpu, pad_output: as in :class:`SliceSampler`.
        drop_last: skip the last batch of an epoch when it has fewer than ``num_slices`` slices.
        shuffle: visit trajectories in random order (else in storage order).
        cache_values: as in :class:`SliceSampler`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(40), batch_size=10,
        ...     sampler=SliceSamplerWithoutReplacement(slice_len=5, traj_key="episode"))
        >>> _ = rb.extend(TensorDict({"episode": torch.arange(4).repeat_interleave(10)}, [40]))
        >>> sorted(e for batch in rb for e in batch["episode"].reshape(2, 5)[:, 0].tolist())
        [0, 1, 2, 3]
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        drop_last: bool = False,
        end_key: Any = None,
        traj_key: Any = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        truncated_key: Any = ("next", "truncated"),
        strict_length: bool = True,
        shuffle: bool = True,
        compile: bool | dict = False,
        span: bool | int | tuple = False,
        use_gpu: bool | torch.device = False,
        cache_values: bool = False,
        pad_output: bool = False,
    ) -> None:
        super().__init__(
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
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self._order: torch.Tensor | None = None
        self._position = 0
        self._ran_out = False
        self._epoch_key: tuple | None = None

    def _new_epoch(self, count: int) -> None:
        self._order = (
            torch.randperm(count, generator=self._rng) if self.shuffle else torch.arange(count)
        )
        self._position = 0

    def _choose(self, segments: Segments, valid: torch.Tensor | None, num_slices: int) -> Any:
        count = segments.starts.numel() if valid is None else valid.numel()
        if self.drop_last and count < num_slices:
            raise ValueError(
                f"cannot draw {num_slices} slices from {count} trajectories with drop_last=True"
            )
        epoch_key = (segments.timeline, count, int(segments.lengths.sum()))
        remaining = 0 if self._order is None else count - self._position
        if (
            self._order is None
            or epoch_key != self._epoch_key
            or remaining == 0
            or (self.drop_last and remaining < num_slices)
        ):
            self._epoch_key = epoch_key
            self._new_epoch(count)
        choice = self._order[self._position : self._position + num_slices]
        self._position += choice.numel()
        remaining = count - self._position
        self._ran_out = remaining == 0 or (self.drop_last and remaining < num_slices)
        return choice if valid is None else valid.index_select(0, choice)

    @property
    def ran_out(self) -> bool:
        """Whether the last batch ended the epoch."""
        return self._ran_out

    def _empty(self) -> None:
        super()._empty()
        self._order = None
        self._position = 0
        self._ran_out = False
        self._epoch_key = None

    def state_dict(self) -> dict[str, Any]:
        """Epoch order and position."""
        return {
            "_order": None if self._order is None else self._order.clone(),
            "_position": self._position,
            "_ran_out": self._ran_out,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore epoch order and position (the epoch continues if the storage is unchanged)."""
        self._order = state_dict["_order"]
        self._position = int(state_dict["_position"])
        self._ran_out = bool(state_dict["_ran_out"])
        self._epoch_key = None


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
                    _NO_TRAJ_MSG.format(need=slice_len, longest=int(segments.lengths.max()))
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
        flat = storage._ravel(index) if isinstance(index, tuple) else index
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
