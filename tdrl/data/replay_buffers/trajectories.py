"""Trajectories in stored data: where they start and stop, read in chronological order.

A storage is read in *chronological* order (its :class:`Timeline`): a full circular buffer is
rotated so that its oldest row comes first, and each stream of a multi-dimensional storage
(``ndim > 1``, time along dim 0) is laid out after the previous one. In that order every
trajectory is one contiguous run of positions (:class:`Segments`). :func:`find_start_stop_traj`
gives the same boundaries in storage coordinates.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from tdrl.data.ted import DEFAULT_DONE_KEYS

__all__ = [
    "DEFAULT_DONE_KEYS",
    "Segments",
    "Timeline",
    "find_start_stop_traj",
    "per_stream",
    "replace_last",
    "segments_from_ends",
    "storage_timeline",
]


def replace_last(key: Any, name: str) -> Any:
    """``key`` with its last part replaced by ``name`` (``("next", "done")`` -> ``("next", name)``)."""
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
    for entity in getattr(storage, "attached_entities", ()):
        writer = getattr(entity, "writer", None)
        if writer is not None and getattr(writer, "cursor", None) is not None:
            return writer.cursor
    return None


def storage_timeline(storage: Any, cursor: int | None = None) -> Timeline:
    """The chronological layout of ``storage`` (see :class:`Timeline`).

    Args:
        storage: a storage; a full one is rotated at the cursor of the writer of the buffer it
            belongs to (or ``cursor`` when given, or after the last row the storage saw written).
        cursor: the next row the writer will write (the oldest row of a full buffer).
    """
    length = getattr(storage, "len_along_dim0", None)
    length = len(storage) if length is None else length
    shape = getattr(storage, "total_shape", None)
    rows = shape[0] if shape is not None else length
    streams = math.prod(shape[1 : storage.ndim]) if shape is not None else 1
    offset = 0
    if length == rows and length:
        if cursor is None:
            cursor = _writer_cursor(storage)
        if cursor is None:
            last = getattr(storage, "last_cursor_index", None)
            last = -1 if last is None else last
            cursor = last + 1 if last >= 0 else None
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


def _single_cursor(cursor: Any) -> int:
    """The last row written as an int: the last element of a tensor, range or sequence."""
    if isinstance(cursor, (range, list, tuple)):
        if not len(cursor):
            raise RuntimeError("the cursor must not be empty: give the last row written")
        return int(cursor[-1])
    if isinstance(cursor, torch.Tensor):
        if not cursor.numel():
            raise RuntimeError("the cursor must not be empty: give the last row written")
        return int(cursor.reshape(-1)[-1])
    return int(cursor)


def find_start_stop_traj(
    *,
    trajectory: torch.Tensor | None = None,
    end: torch.Tensor | None = None,
    at_capacity: bool,
    cursor: int | torch.Tensor | range | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first and last step of every trajectory in a storage's content, and their lengths.

    The content is ``[T]`` or time-first ``[T, *B]`` (one trajectory stream per element of
    ``B``), given as trajectory ids or as end-of-trajectory flags. A trajectory ends where
    the id changes or a flag is set. The write head is an implicit end: when the storage is
    not full (``at_capacity=False``) the last row ends a trajectory; when it is full, the last
    row written (``cursor``) does, and trajectories may wrap around the end of the storage (a
    trajectory can start at row 8 and stop at row 2 of 10). A full stream without any end is
    one trajectory ending at its last row.

    Args:
        trajectory: trajectory ids, ``[T, *B]``.
        end: end flags, ``[T, *B]`` (booleans, or numbers where non-zero ends).
        at_capacity: whether every row of the storage holds data (a full circular buffer).
        cursor: the last row written (an int, a 0-d tensor, or a tensor / range of the rows
            just written, whose last element is used); only read when ``at_capacity``.
        device: where to compute (the results come back on the input's device).

    Returns:
        ``(start, stop, lengths)``: ``start`` and ``stop`` are ``[n, 1 + len(B)]`` coordinates
        (time first), sorted by stream then by stop row; ``lengths`` is ``[n]``.

    Raises:
        TypeError: unless exactly one of ``trajectory`` and ``end`` is given.
        RuntimeError: when the input or the cursor is empty.

    Examples:
        >>> import torch
        >>> end = torch.zeros(10, dtype=torch.bool)
        >>> end[2] = end[7] = True
        >>> start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=4)
        >>> start.squeeze(-1).tolist(), stop.squeeze(-1).tolist(), lengths.tolist()
        ([8, 3, 5], [2, 4, 7], [5, 2, 3])
    """
    if (trajectory is None) == (end is None):
        raise TypeError("Exactly one of trajectory or end must be given to find_start_stop_traj")
    source = trajectory if trajectory is not None else end
    source = torch.as_tensor(source)
    if source.numel() == 0:
        raise RuntimeError(
            f"cannot find trajectories in an empty input (shape {tuple(source.shape)})"
        )
    out_device = source.device
    if device is not None:
        source = source.to(device)
    time = source.shape[0]
    batch = tuple(source.shape[1:])
    columns = source.reshape(time, -1).transpose(0, 1)  # [streams, T]
    if trajectory is not None:
        ends = torch.zeros(columns.shape, dtype=torch.bool, device=columns.device)
        ends[:, :-1] = columns[:, :-1] != columns[:, 1:]
        ends[:, -1] = (columns[:, -1] != columns[:, 0]) if at_capacity else True
    else:
        ends = columns.bool() if columns.dtype == torch.bool else columns != 0
        ends = ends.clone()
        if not at_capacity:
            ends[:, -1] = True
    if at_capacity and cursor is not None:
        ends[:, _single_cursor(cursor) % time] = True
    if at_capacity:
        # a full stream without any end is one trajectory stopping at its last row
        ends[:, -1] |= ~ends.any(-1)
    stream, stop_time = ends.nonzero(as_tuple=True)
    count = stop_time.numel()
    # each trajectory starts after the previous stop of its stream (the last one, wrapping)
    previous = torch.empty_like(stop_time)
    previous[1:] = stop_time[:-1]
    first_of_stream = torch.ones(count, dtype=torch.bool, device=stop_time.device)
    first_of_stream[1:] = stream[1:] != stream[:-1]
    is_last = torch.ones(count, dtype=torch.bool, device=stop_time.device)
    is_last[:-1] = stream[1:] != stream[:-1]
    last_of_stream = stop_time[is_last]
    stream_rank = first_of_stream.long().cumsum(0) - 1
    last_index = last_of_stream.index_select(0, stream_rank)
    previous = torch.where(first_of_stream, last_index, previous)
    start_time = (previous + 1).remainder(time)
    lengths = (stop_time - start_time).remainder(time) + 1
    if batch:
        coords = (
            torch.stack(torch.unravel_index(stream, batch), -1)
            if len(batch) > 1
            else stream.unsqueeze(-1)
        )
        start = torch.cat([start_time.unsqueeze(-1), coords], -1)
        stop = torch.cat([stop_time.unsqueeze(-1), coords], -1)
    else:
        start, stop = start_time.unsqueeze(-1), stop_time.unsqueeze(-1)
    return start.to(out_device), stop.to(out_device), lengths.to(out_device)
