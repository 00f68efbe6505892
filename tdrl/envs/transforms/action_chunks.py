"""ActionChunkTransform: the future actions of each step, for policies that predict action chunks."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key

from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["ActionChunkTransform"]


def _segment_ends(done: torch.Tensor) -> torch.Tensor:
    """For each step, the index of the first step at or after it where ``done`` is set.

    ``done`` has the time dim last; steps after the last done map to the last step.
    """
    length = done.shape[-1]
    steps = torch.arange(length, device=done.device).expand_as(done)
    ends = torch.where(done, steps, torch.full_like(steps, length - 1))
    return ends.flip(-1).cummin(-1).values.flip(-1)


class ActionChunkTransform(Transform):
    """Builds, for each step of a trajectory, the chunk of the next ``chunk_size`` actions.

    On trajectories (``transform(td)``, replay-buffer samples), the action of shape
    ``(*batch, T, A)`` gives a chunk of shape ``(*batch, T, chunk_size, A)``: the chunk
    of step ``t`` holds the actions of steps ``t, t + 1, ...``. Steps beyond the end
    of the data, or beyond the end of the episode (a ``done_key`` flag), repeat the
    last valid action and are flagged in a boolean ``pad_key`` entry of shape
    ``(*batch, T, chunk_size)``. The time dim is the one before the action's last
    dim. Data written to a buffer and env steps are left unchanged: chunks are
    built on the sample path only (running chunks in an env is the job of
    :class:`MultiAction`).

    Args:
        chunk_size: the number of actions per chunk (>= 1).
        action_key: the action entry.
        chunk_key: where the chunks are written.
        pad_key: where the padding flags are written.
        time_dim: the time dim of the action tensor; it must be the dim just before
            the action's last dim (the default, -2, always is).
        done_key: the episode-end flags (``None``: ignore episode ends); absent flags
            are ignored too.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import ActionChunkTransform
        >>> data = TensorDict({"action": torch.arange(4.0).view(1, 4, 1)}, [1, 4])
        >>> out = ActionChunkTransform(chunk_size=3)(data)
        >>> out["action_chunk"][0, :, :, 0]
        tensor([[0., 1., 2.],
                [1., 2., 3.],
                [2., 3., 3.],
                [3., 3., 3.]])
        >>> out["action_is_pad"][0].int()
        tensor([[0, 0, 0],
                [0, 0, 0],
                [0, 0, 1],
                [0, 1, 1]], dtype=torch.int32)
    """

    def __init__(
        self,
        chunk_size: int,
        action_key: NestedKey = "action",
        chunk_key: NestedKey = "action_chunk",
        pad_key: NestedKey = "action_is_pad",
        time_dim: int = -2,
        done_key: NestedKey | None = ("next", "done"),
    ) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(
                f"ActionChunkTransform chunk_size: expected a positive int, got {chunk_size!r}"
            )
        super().__init__(in_keys=[action_key], out_keys=[chunk_key, pad_key])
        self.chunk_size = chunk_size
        self.action_key = self.in_keys[0]
        self.chunk_key = self.out_keys[0]
        self.pad_key = self.out_keys[1]
        self.time_dim = time_dim
        self.done_key = None if done_key is None else unravel_key(done_key)

    def _time_dim(self, action: torch.Tensor) -> int:
        if action.ndim < 2:
            raise ValueError(
                f"ActionChunkTransform: expected an action with a time dim and an action dim, "
                f"got shape {tuple(action.shape)} at {self.action_key!r}"
            )
        dim = self.time_dim + action.ndim if self.time_dim < 0 else self.time_dim
        if dim != action.ndim - 2:
            raise ValueError(
                f"ActionChunkTransform: the action dim must immediately follow the time dim; "
                f"time_dim={self.time_dim} is dim {dim} of an action of shape "
                f"{tuple(action.shape)}, expected dim {action.ndim - 2}"
            )
        return dim

    def _ends(self, tensordict: TensorDictBase, action: torch.Tensor, dim: int) -> torch.Tensor:
        """The last valid step of the chunk starting at each step, shape ``(*batch, T)``."""
        lead = action.shape[: dim + 1]
        done = None if self.done_key is None else tensordict.get(self.done_key, None)
        if done is None:
            length = action.shape[dim]
            return torch.full(lead, length - 1, dtype=torch.long, device=action.device)
        if tuple(done.shape[: dim + 1]) != tuple(lead):
            raise ValueError(
                f"ActionChunkTransform: the shape {tuple(done.shape)} of the done flags "
                f"{self.done_key!r} does not line up with the action of shape "
                f"{tuple(action.shape)} (expected leading dims {tuple(lead)})"
            )
        done = done.reshape(*lead, -1).any(-1).to(action.device)
        return _segment_ends(done)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        action = next_tensordict.get(self.action_key, None)
        if action is None:
            raise KeyError(
                f"ActionChunkTransform: expected the action {self.action_key!r} in the data, got "
                f"keys {list(next_tensordict.keys(True, True))}"
            )
        dim = self._time_dim(action)
        ends = self._ends(next_tensordict, action, dim)
        length = action.shape[dim]
        offsets = torch.arange(self.chunk_size, device=action.device)
        wanted = torch.arange(length, device=action.device).unsqueeze(-1) + offsets
        index = torch.minimum(wanted, ends.unsqueeze(-1))
        is_pad = wanted > ends.unsqueeze(-1)
        flat = index.reshape(*index.shape[:-2], -1, 1).expand(
            *index.shape[:-2], length * self.chunk_size, action.shape[-1]
        )
        chunk = action.gather(dim, flat).unflatten(dim, (length, self.chunk_size))
        next_tensordict.set(self.chunk_key, chunk)
        next_tensordict.set(self.pad_key, is_pad)
        return next_tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def transform_output_spec(self, output_spec: Any) -> Any:
        """The env's specs are unchanged: chunks only exist on the sample path."""
        return output_spec

    def __repr__(self) -> str:
        return (
            f"ActionChunkTransform(chunk_size={self.chunk_size}, action_key={self.action_key!r}, "
            f"chunk_key={self.chunk_key!r}, done_key={self.done_key!r})"
        )
