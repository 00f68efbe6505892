"""Slice samplers: draw sub-trajectories (slices) of consecutive steps from stored trajectories.

Trajectories are found once per storage state from trajectory ids (``traj_key``) or end
flags (``end_key``) with a few tensor operations, in the storage's chronological order (see
:mod:`tdrl.data.replay_buffers.trajectories`), where every trajectory is one contiguous run
of positions: a batch of slices is one ``randint`` for the trajectories, one draw for the
start offsets and one broadcast ``arange`` for the indices.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.errors import DataTypeError, DataValueError
from tdrl.data.replay_buffers.samplers import Sampler, SamplerWithoutReplacement
from tdrl.data.replay_buffers.storage_base import EMPTY_SAMPLE_MSG
from tdrl.data.replay_buffers.trajectories import (
    Segments,
    Timeline,
    per_stream,
    replace_last,
    segments_from_ends,
    storage_timeline,
)

__all__ = ["SliceSampler", "SliceSamplerWithoutReplacement"]

#: Trajectory-id entries looked for, in order, when no key is given.
AUTO_TRAJ_KEYS = (("collector", "traj_ids"), "episode")
#: The entry marking the first step of each trajectory (a recurrent policy's reset flag).
IS_INIT_KEY = "is_init"
#: Where the mask of real (not padded) steps goes with ``pad_output``.
MASK_KEY = ("collector", "mask")

NO_TRAJ_MSG = (
    "no trajectory of at least {need} steps in the storage (longest: {longest}); "
    "use strict_length=False to allow shorter slices"
)


def _key_in(td: TensorDictBase, key: Any) -> bool:
    return key in td.keys(include_nested=True)


def _stored_td(storage: Any) -> TensorDictBase | None:
    td = getattr(storage, "content", None)
    if td is None or getattr(storage, "kind", None) != "tensordict":
        return None
    return td


class FixedPlan(NamedTuple):
    """Where whole slices may be drawn: one int64 array per field, one entry per trajectory.

    ``begin``: the flat storage index of each trajectory's first step; ``offsets``: how many
    first steps a slice may have in it; ``terminal_first``: the first step at which a slice
    ends on the trajectory's termination (``-1`` when it was not terminated). ``count`` is
    the number of trajectories, ``wrap`` the number of rows when a trajectory wraps around
    the end of a full circular storage, else 0.
    """

    begin: np.ndarray
    offsets: np.ndarray
    terminal_first: np.ndarray
    count: int
    wrap: int


class SliceSampler(Sampler):
    """Samples slices of consecutive steps from trajectories stored one after the other.

    Trajectories are told apart by a trajectory-id entry (``traj_key``), by end flags
    (``end_key``, e.g. ``("next", "done")``, or the union of several ``end_keys``), or by
    ``trajectories`` / ``ends`` tensors given directly. With both ``traj_key`` and
    ``end_key``, the ids are used when stored, else the flags. When no key is given, the ids
    at ``("collector", "traj_ids")`` or ``"episode"`` are used if stored (:attr:`traj_key`
    then names the one found), else the ``("next", "done")`` flags. An end flag must be one
    value per stored item. Multi-dimensional storages (``ndim > 1``) hold one stream per
    element of the non-time dims; a full circular buffer is read from its oldest row.

    A batch of ``batch_size`` items holds ``num_slices`` slices of ``slice_len`` steps
    (give one of the two), laid out slice after slice: reshape it with
    ``sample.reshape(num_slices, -1)``. When ``truncated_key`` is set, the sampler returns
    flags for it and its ``"done"`` / ``"terminated"`` siblings: the last step of a slice is
    truncated unless the slice ends where its trajectory terminated (as a stored
    ``"terminated"`` entry next to ``truncated_key`` says). When the stored data has
    an ``"is_init"`` entry (the reset flag recurrent policies split sequences on), the first
    step of every slice is marked in it, so that a recurrent policy reading the flat batch
    restarts its hidden state at each slice and not only at each trajectory start.

    Args:
        num_slices: number of slices per batch.
        slice_len: number of steps per slice.
        end_key: the end-of-trajectory flag entry.
        traj_key: the trajectory-id entry.
        end_keys: several end-flag entries whose union ends trajectories (e.g. ``("next",
            key)`` for each of :data:`~tdrl.data.DEFAULT_DONE_KEYS`); those not stored are
            ignored, and when none is, trajectory ids are looked for as without keys.
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
        pad_output: pad shorter slices to ``slice_len`` by repeating their last step, so
            batches keep ``batch_size`` items; when a slice is padded, a boolean
            ``("collector", "mask")`` of the real steps is returned. Needs
            ``strict_length=False``.
        replacement: ``False`` builds a :class:`SliceSamplerWithoutReplacement` instead (with
            the other keyword arguments given).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
        >>> episode = torch.arange(3).repeat_interleave(10)  # 3 trajectories of 10 steps
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(30),
        ...     sampler=SliceSampler(num_slices=2, traj_key="episode"), batch_size=8)
        >>> _ = rb.extend(TensorDict({"episode": episode, "step": torch.arange(30) % 10}, [30]))
        >>> sample = rb.sample().reshape(2, -1)
        >>> bool((sample["step"].diff(dim=1) == 1).all()), sample["next", "done"][:, -1].all()
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
        end_keys: list | tuple | None = None,
        replacement: bool = True,
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
            end_key is not None or traj_key is not None or end_keys is not None
        ):
            raise ValueError(
                "ends / trajectories cannot be combined with end_key / end_keys / traj_key"
            )
        if end_key is not None and end_keys is not None:
            raise DataValueError(
                f"end_key and end_keys are exclusive: give one, got end_key={end_key!r}, "
                f"end_keys={end_keys!r}"
            )
        if pad_output and strict_length:
            raise ValueError(
                "pad_output=True is incompatible with strict_length=True: padding completes "
                "slices shorter than slice_len, which strict_length=True never draws; pass "
                "strict_length=False"
            )
        self.num_slices = None if num_slices is None else int(num_slices)
        self.slice_len = None if slice_len is None else int(slice_len)
        # the keys read, in order of preference (the first stored one is used)
        self._traj_keys = (traj_key,) if traj_key is not None else ()
        self._end_keys: tuple = ()
        if end_keys is not None:
            self._end_keys = tuple(end_keys)
        elif end_key is not None:
            self._end_keys = (end_key,)
        if traj_key is None and end_key is None:
            self._traj_keys = AUTO_TRAJ_KEYS
            if end_keys is None:
                self._end_keys = (("next", "done"),)
        self.end_key = self._end_keys[0] if self._end_keys else ("next", "done")
        self.end_keys = None if end_keys is None else list(end_keys)
        self.traj_key = traj_key
        self._traj_key_given = traj_key is not None
        self._static_ends = None if ends is None else torch.as_tensor(ends, dtype=torch.bool)
        self._static_traj = None if trajectories is None else torch.as_tensor(trajectories)
        self.cache_values = bool(cache_values)
        self.truncated_key = truncated_key
        self.strict_length = bool(strict_length)
        self.span = self._parse_span(span)
        self.pad_output = bool(pad_output)
        self._flag_keys = (
            truncated_key,
            replace_last(truncated_key, "terminated"),
            replace_last(truncated_key, "done"),
        )
        self._cache: dict[Any, Any] = {}
        self._arange_cache: dict[int, torch.Tensor] = {}
        # trailing shape of the stored "is_init" entry (None when it is not stored)
        self._is_init_shape: tuple | None = None

    @classmethod
    def _without_replacement_variant(cls) -> type | None:
        return SliceSamplerWithoutReplacement if cls is SliceSampler else None

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

    def storage_replaced(self, max_size: int) -> None:
        """Forget the cached trajectories (and resize per-slot state, see :class:`Sampler`)."""
        super().storage_replaced(max_size)
        self._cache.clear()

    def _segments(self, storage: Any) -> Segments:
        static = self._static_ends is not None or self._static_traj is not None
        revision = getattr(storage, "mutation_revision", None)
        if (self.cache_values or static) and "segments" in self._cache:
            # a write through another buffer sharing the storage changes its revision too
            if static or revision is None or self._cache.get("revision") == revision:
                return self._cache["segments"]
        segments = self._find_segments(storage)
        if self.cache_values or static:
            self._cache["segments"] = segments
            self._cache["revision"] = revision
        return segments

    def _resolve_keys(self, td: TensorDictBase) -> tuple[str, list]:
        """``("traj", [key])`` or ``("end", keys)``: what trajectories are read from."""
        stored_ends = [key for key in self._end_keys if _key_in(td, key)]
        stored_traj = [key for key in self._traj_keys if _key_in(td, key)]
        ids_first = self._traj_key_given or self.end_keys is None
        if stored_traj and (ids_first or not stored_ends):
            return "traj", stored_traj[:1]
        if stored_ends:
            # one end key, or the union of the end_keys stored
            return "end", stored_ends if self.end_keys is not None else stored_ends[:1]
        tried = [*self._traj_keys, *self._end_keys]
        raise KeyError(
            f"{type(self).__name__}: expected one of the keys {tried} in the stored data to tell "
            f"trajectories apart, got keys "
            f"{sorted(map(str, td.keys(include_nested=True, leaves_only=True)))}"
        )

    @staticmethod
    def _per_item(td: TensorDictBase, key: Any, timeline: Timeline, ndim: int) -> torch.Tensor:
        """``[streams, length]`` values of a per-item entry (one value per stored item).

        Items with batch dims of their own (past ``ndim``) share one value: the first is read.
        """
        value = td.get(key)
        if math.prod(value.shape[td.batch_dims :]) != 1:
            raise DataValueError(
                f"Expected the end-of-trajectory signal to be 1-dimensional (one value per "
                f"stored item): the entry {key!r} has shape {tuple(value.shape)} for items of "
                f"batch shape {tuple(td.shape[:ndim])}"
            )
        return per_stream(value, timeline)[..., 0]

    def _find_segments(self, storage: Any) -> Segments:
        if len(storage) == 0:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        timeline = storage_timeline(storage)
        if self._static_ends is not None or self._static_traj is not None:
            return self._static_segments(timeline)
        td = _stored_td(storage)
        if td is None:
            raise DataTypeError(
                "Could not get a tensordict out of the storage, which is required for "
                f"{type(self).__name__} to compute the trajectories. It reads trajectory ids "
                f"or end flags from a TensorStorage holding TensorDicts, got "
                f"{type(storage).__name__}; pass ends= or trajectories= instead"
            )
        ndim = getattr(storage, "ndim", 1)
        mode, keys = self._resolve_keys(td)
        if mode == "traj":
            self.traj_key = keys[0]
            ids = self._per_item(td, keys[0], timeline, ndim)
            ends = torch.zeros(ids.shape, dtype=torch.bool)
            ends[:, :-1] = ids[:, :-1] != ids[:, 1:]
        else:
            ends = None
            for key in keys:
                flags = self._per_item(td, key, timeline, ndim)
                flags = flags if flags.dtype == torch.bool else flags != 0
                ends = flags if ends is None else ends | flags
        # a slice ending with its trajectory is terminated only where the data says so (a
        # stored "terminated" flag); a boundary read from ids or done flags may be a truncation
        natural = torch.zeros_like(ends)
        term_key = replace_last(self.truncated_key or self.end_key, "terminated")
        if _key_in(td, term_key):
            stored = per_stream(td.get(term_key), timeline)
            natural = stored.any(-1) if stored.dtype == torch.bool else (stored != 0).any(-1)
        self._is_init_shape = (
            tuple(td.get(IS_INIT_KEY).shape[ndim:]) if IS_INIT_KEY in td.keys() else None
        )
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
                raise RuntimeError(NO_TRAJ_MSG.format(need=need, longest=int(lengths.max())))
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

    def _draw(self, count: int, num_slices: int) -> torch.Tensor:
        """``num_slices`` picks among ``count`` trajectories (positions in the valid list)."""
        return torch.randint(count, (num_slices,), generator=self._rng)

    def _choose(self, segments: Segments, valid: torch.Tensor | None, num_slices: int) -> Any:
        count = segments.starts.numel() if valid is None else valid.numel()
        choice = self._draw(count, num_slices)
        return choice if valid is None else valid.index_select(0, choice)

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw ``batch_size // slice_len`` slices; returns their item indices and flags."""
        num_slices, slice_len = self._slice_shape(batch_size)
        segments = self._segments(storage)
        valid = self._valid(segments, slice_len)
        plan = self._fixed_plan(storage, segments, valid, slice_len)
        if plan is not None:
            return self._fixed_slices(plan, num_slices, slice_len)
        traj = self._choose(segments, valid, num_slices)
        return self._slices(storage, segments, traj, slice_len)

    # -- whole slices of a flat storage: a table per trajectory, built once per storage state ---
    def _fixed_plan(
        self, storage: Any, segments: Segments, valid: torch.Tensor | None, slice_len: int
    ) -> FixedPlan | None:
        """The per-trajectory table of :meth:`_fixed_slices`, or ``None`` where it does not apply.

        It applies to slices of exactly ``slice_len`` steps (``strict_length`` without
        ``span``) of a storage with one stream (``ndim == 1``).
        """
        timeline = segments.timeline
        if (
            not self.strict_length
            or self.span[0] not in (False, 0)
            or self.span[1] not in (False, 0)
            or timeline.streams != 1
            or getattr(storage, "ndim", 1) != 1
        ):
            return None
        key = ("fixed", slice_len)
        cached = self._cache.get(key)
        if cached is not None and cached[0] is segments:
            return cached[1]
        starts, lengths, terminated = segments.starts, segments.lengths, segments.terminated
        if valid is not None:
            starts = starts.index_select(0, valid)
            lengths = lengths.index_select(0, valid)
            terminated = terminated.index_select(0, valid)
        flat_starts = starts + timeline.offset
        # a slice ends on its trajectory's termination only from the last first step it may have
        terminal_first = torch.where(terminated, lengths - slice_len, -1)
        wraps = bool(timeline.offset) and bool((flat_starts + lengths > timeline.rows).any())
        plan = FixedPlan(
            flat_starts.numpy(),
            (lengths - slice_len + 1).numpy(),
            terminal_first.numpy(),
            starts.numel(),
            timeline.rows if wraps else 0,
        )
        self._cache[key] = (segments, plan)
        return plan

    def _fixed_slices(self, plan: FixedPlan, num_slices: int, slice_len: int) -> tuple[Any, dict]:
        """Indices and flags of whole slices, drawn as :meth:`_slices` draws them.

        The same random draws give the same slices; the arithmetic on a few dozen numbers is
        done in numpy, whose calls cost a fraction of torch's at this size.
        """
        choice = self._draw(plan.count, num_slices).numpy()
        num_slices = choice.size  # the last batch of an epoch may hold fewer
        draw = torch.rand(num_slices, dtype=torch.float64, generator=self._rng).numpy()
        first = (draw * plan.offsets.take(choice)).astype(np.int64)
        begin = plan.begin.take(choice)
        begin += first
        position = begin[:, None] + self._arange_np(slice_len)
        if plan.wrap:
            np.remainder(position, plan.wrap, out=position)
        info: dict[Any, Any] = {}
        if self._is_init_shape is not None:
            marks = self._first_step_template(num_slices, slice_len).reshape(-1)
            shape = self._is_init_shape
            info[IS_INIT_KEY] = marks.reshape(-1, *([1] * len(shape))).expand(-1, *shape)
        if self.truncated_key is not None:
            # 1 where the slice ends on its trajectory's termination
            ends_terminated = (first == plan.terminal_first.take(choice)).view(np.int8)
            flags = self._flag_table(slice_len).take(ends_terminated, axis=1).reshape(3, -1, 1)
            truncated_key, terminated_key, done_key = self._flag_keys
            info[truncated_key] = torch.from_numpy(flags[0])
            info[terminated_key] = torch.from_numpy(flags[1])
            info[done_key] = torch.from_numpy(flags[2])
        return torch.from_numpy(position.reshape(-1)), info

    def _arange_np(self, n: int) -> np.ndarray:
        key = ("arange_np", n)
        out = self._arange_cache.get(key)
        if out is None:
            out = self._arange_cache[key] = np.arange(n, dtype=np.int64)
        return out

    def _flag_table(self, slice_len: int) -> np.ndarray:
        """``[3, 2, slice_len]`` truncated / terminated / done flags of a slice by how it ends.

        Index 0 along dim 1: the slice is cut short of a termination; 1: it ends on one.
        """
        key = ("flags", slice_len)
        table = self._arange_cache.get(key)
        if table is None:
            table = np.zeros((3, 2, slice_len), dtype=bool)
            table[0, 0, -1] = True  # truncated
            table[1, 1, -1] = True  # terminated
            table[2, :, -1] = True  # done
            self._arange_cache[key] = table
        return table

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
        is_init = self._is_init_shape is not None
        if seq is None:
            position = (begin.unsqueeze(1) + self._arange(slice_len)).reshape(-1)
            seq_len = slice_len
            if is_init:
                info[IS_INIT_KEY] = self._first_step_template(num_slices, slice_len).view(-1)
        elif self.pad_output:
            steps = self._arange(slice_len).unsqueeze(0)
            last = (seq - 1).unsqueeze(1)
            position = (begin.unsqueeze(1) + torch.minimum(steps, last)).reshape(-1)
            if bool((seq < slice_len).any()):
                info[MASK_KEY] = (steps <= last).reshape(-1)
            ends_at = torch.arange(num_slices) * slice_len + seq - 1
            seq_len = seq
            if is_init:
                info[IS_INIT_KEY] = self._first_step_template(num_slices, slice_len).view(-1)
        else:
            total = int(seq.sum())
            slice_of = torch.repeat_interleave(torch.arange(num_slices), seq, output_size=total)
            ends_at = seq.cumsum(0) - 1
            slice_starts = ends_at + 1 - seq
            step = torch.arange(total) - slice_starts.index_select(0, slice_of)
            position = begin.index_select(0, slice_of) + step
            seq_len = seq
            if is_init:
                first_steps = torch.zeros(total, dtype=torch.bool)
                first_steps[slice_starts] = True
                info[IS_INIT_KEY] = first_steps
        if is_init:
            marks = info[IS_INIT_KEY]
            shape = self._is_init_shape
            info[IS_INIT_KEY] = marks.reshape(-1, *([1] * len(shape))).expand(-1, *shape)
        flat = segments.timeline.to_flat(position)
        index = storage.unravel_index(flat) if getattr(storage, "ndim", 1) > 1 else flat
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

    def _first_step_template(self, num_slices: int, slice_len: int) -> torch.Tensor:
        key = ("first_step", num_slices, slice_len)
        template = self._arange_cache.get(key)
        if template is None:
            template = torch.zeros(num_slices, slice_len, dtype=torch.bool)
            template[:, 0] = True
            self._arange_cache[key] = template
        return template

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


class SliceSamplerWithoutReplacement(SliceSampler, SamplerWithoutReplacement):
    """Samples one slice per trajectory, visiting every trajectory once per epoch.

    Each batch draws ``num_slices`` trajectories not yet visited in the current epoch and one
    random slice in each. Iterating over a buffer stops at the end of an epoch; a write to the
    storage starts a new one. The trajectories left in the epoch are kept in
    ``_sample_list`` (and in :meth:`state_dict`), so a restored sampler continues the epoch.

    Args:
        num_slices, slice_len, end_key, end_keys, traj_key, ends, trajectories,
            truncated_key, strict_length, compile, span, use_gpu, pad_output: as in
            :class:`SliceSampler`.
        drop_last: skip the last batch of an epoch when it has fewer than ``num_slices`` slices.
        shuffle: visit trajectories in random order (else in storage order).
        cache_values: as in :class:`SliceSampler`.
        replacement: accepted for symmetry with :class:`SliceSampler`; must be ``False``.

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

    _replacement = False

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
        end_keys: list | tuple | None = None,
        replacement: bool = False,
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
            end_keys=end_keys,
        )
        rng = self._rng
        SamplerWithoutReplacement.__init__(
            self, drop_last=bool(drop_last), shuffle=bool(shuffle), replacement=replacement
        )
        self._rng = rng

    def _draw(self, count: int, num_slices: int) -> torch.Tensor:
        if self.drop_last and count < num_slices:
            raise ValueError(
                f"cannot draw {num_slices} slices from {count} trajectories with drop_last=True"
            )
        return self._next_batch(count, num_slices)

    def _new_writes(self) -> None:
        self._cache.clear()
        self._sample_list = None

    def extend(self, index: torch.Tensor) -> None:
        """Forget the cached trajectories and start a new epoch (the storage changed)."""
        self._new_writes()

    def add(self, index: int) -> None:
        """Forget the cached trajectories and start a new epoch (the storage changed)."""
        self._new_writes()

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """Forget the cached trajectories and start a new epoch (items were overwritten)."""
        self._new_writes()

    def _empty(self) -> None:
        SliceSampler._empty(self)
        SamplerWithoutReplacement._empty(self)

    def state_dict(self) -> dict[str, Any]:
        """The trajectories left in the epoch (see :class:`SamplerWithoutReplacement`)."""
        return SamplerWithoutReplacement.state_dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the epoch (it continues while the number of trajectories is unchanged)."""
        SamplerWithoutReplacement.load_state_dict(self, state_dict)

    def __repr__(self) -> str:
        return SliceSampler.__repr__(self)
