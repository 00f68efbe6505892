"""TrajectoryAssembler: turn a stream of fixed-size batches into batches of whole trajectories.

Collectors cut trajectories at batch boundaries. With ``trajs_per_batch=N`` they feed each
batch to an assembler, which keeps the unfinished trajectories (by their
``("collector", "traj_ids")``) until they end, queues the finished ones in the order they
finish, and hands them out ``N`` at a time, either padded to the longest one (``"padded"``:
``[N, T_max]`` with a ``("collector", "mask")`` entry) or concatenated along time
(``"cat"``: ``[sum of lengths]``, no padding, no mask).
"""

from __future__ import annotations

from collections import deque

import torch
from tensordict import NestedKey, TensorDictBase

__all__ = ["TRAJ_FORMATS", "TrajectoryAssembler"]

TRAJ_FORMATS = ("padded", "cat")
#: the last part of the ``("next", ...)`` entries that end a trajectory
_END_NAMES = ("done", "terminated", "truncated")


class TrajectoryAssembler:
    """Assemble whole trajectories from consecutive collector batches.

    Args:
        trajs_per_batch: the number of trajectories in each output batch.
        traj_format: ``"padded"`` (``[N, T_max]`` with a mask) or ``"cat"`` (``[sum T_i]``).
        traj_key: the trajectory-id entry of the batches.
        mask_key: where ``"padded"`` batches get their validity mask.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> assembler = TrajectoryAssembler(2, "padded")
        >>> batch = TensorDict(
        ...     {
        ...         "obs": torch.arange(5.0),
        ...         ("collector", "traj_ids"): torch.tensor([0, 0, 0, 1, 1]),
        ...         ("next", "done"): torch.tensor([False, False, True, False, True]),
        ...     },
        ...     batch_size=[5],
        ... )
        >>> assembler.ingest(batch)
        >>> out = assembler.pop()
        >>> out.batch_size
        torch.Size([2, 3])
        >>> out["collector", "mask"]
        tensor([[ True,  True,  True],
                [ True,  True, False]])
    """

    def __init__(
        self,
        trajs_per_batch: int,
        traj_format: str = "padded",
        traj_key: NestedKey = ("collector", "traj_ids"),
        mask_key: NestedKey = ("collector", "mask"),
    ) -> None:
        if not isinstance(trajs_per_batch, int) or isinstance(trajs_per_batch, bool):
            raise TypeError(
                f"trajs_per_batch: expected an int, got {type(trajs_per_batch).__name__}"
            )
        if trajs_per_batch < 1:
            raise ValueError(f"trajs_per_batch: expected a positive int, got {trajs_per_batch}")
        if traj_format not in TRAJ_FORMATS:
            raise ValueError(f"traj_format must be 'padded' or 'cat', got {traj_format!r}")
        self.trajs_per_batch = trajs_per_batch
        self.traj_format = traj_format
        self.traj_key = traj_key
        self.mask_key = mask_key
        #: unfinished trajectories: id -> their chunks so far, in time order
        self.partial: dict[int, list[TensorDictBase]] = {}
        #: finished trajectories, in the order they finished
        self.complete: deque[TensorDictBase] = deque()

    def ingest(self, data: TensorDictBase) -> None:
        """Add the steps of a batch ``[*B, T]`` (time last) to the trajectories they belong to."""
        ids = data.get(self.traj_key, None)
        if ids is None:
            raise KeyError(
                f"trajectory assembly: expected trajectory ids at {self.traj_key!r}, got keys "
                f"{sorted(map(str, data.keys(include_nested=True, leaves_only=True)))}; "
                "collect with track_traj_ids=True"
            )
        flat = _time_major(data)
        ids = flat.get(self.traj_key).reshape(-1)
        ends = _ends(flat)
        # one gather groups the steps by trajectory (stable: each keeps its time order)
        order = torch.argsort(ids, stable=True)
        values, counts = torch.unique_consecutive(ids[order], return_counts=True)
        grouped = flat[order].split(counts.tolist(), 0)
        last_steps = order[counts.cumsum(0) - 1].tolist()
        finished = []
        for traj_id, chunk, last in zip(values.tolist(), grouped, last_steps):
            chunks = self.partial.pop(traj_id, [])
            chunks.append(chunk)
            if bool(ends[last]):
                # finished trajectories are queued by the step at which they end
                finished.append((last, chunks))
            else:
                self.partial[traj_id] = chunks
        for _, chunks in sorted(finished, key=lambda item: item[0]):
            self.complete.append(chunks[0] if len(chunks) == 1 else torch.cat(chunks, 0))

    def ready(self) -> bool:
        """True when at least ``trajs_per_batch`` finished trajectories are queued."""
        return len(self.complete) >= self.trajs_per_batch

    def pop(self) -> TensorDictBase:
        """Remove ``trajs_per_batch`` finished trajectories from the queue and batch them."""
        if not self.ready():
            raise RuntimeError(
                f"trajectory assembly: {self.trajs_per_batch} finished trajectories expected, "
                f"{len(self.complete)} queued"
            )
        trajs = [self.complete.popleft() for _ in range(self.trajs_per_batch)]
        if self.traj_format == "cat":
            return torch.cat(trajs, 0)
        return _pad_and_stack(trajs, self.mask_key)

    def clear(self) -> None:
        """Forget every queued and unfinished trajectory (after a collector reset)."""
        self.partial.clear()
        self.complete.clear()


def _time_major(data: TensorDictBase) -> TensorDictBase:
    """Flatten ``[*B, T]`` to ``[T * prod(B)]`` with the steps of a time index together."""
    if data.batch_dims <= 1:
        return data
    steps = data.batch_size[-1]
    rows = data.batch_size[:-1].numel()
    positions = torch.arange(rows * steps).reshape(rows, steps).t().reshape(-1)
    return data.reshape(-1)[positions]


def _ends(flat: TensorDictBase) -> torch.Tensor:
    """Whether each step of a flat batch ends its trajectory (any done-like flag set)."""
    count = flat.batch_size[0]
    ends = torch.zeros(count, dtype=torch.bool)
    next_data = flat.get("next", None)
    if next_data is None:
        return ends
    for key in next_data.keys(include_nested=True, leaves_only=True):
        name = key if isinstance(key, str) else key[-1]
        if name in _END_NAMES:
            ends |= next_data.get(key).reshape(count, -1).any(-1).cpu()
    return ends


def _pad_and_stack(trajs: list[TensorDictBase], mask_key: NestedKey) -> TensorDictBase:
    lengths = [traj.batch_size[0] for traj in trajs]
    longest = max(lengths)
    padded = []
    for traj, length in zip(trajs, lengths):
        if length < longest:
            # tensors are padded with zeros; non-tensor entries repeat their last value
            filler = traj[-1:].expand(longest - length).clone().apply(torch.zeros_like)
            traj = torch.cat([traj, filler], 0)
        padded.append(traj)
    out = torch.stack(padded, 0)
    mask = torch.arange(longest).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    out.set(mask_key, mask.to(out.device) if out.device is not None else mask)
    return out
