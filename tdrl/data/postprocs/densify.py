"""Spread the reward of a trajectory's last step over all its steps (:class:`DensifyReward`)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.postprocs.multistep import next_boundary

__all__ = ["DensifyReward"]


def _as_tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class DensifyReward:
    """Give every step the reward of the step that ends its trajectory.

    Tasks with a sparse final reward (a game's outcome, a graded answer) can be turned into
    dense ones: in a ``[*B, T]`` batch (time last), each step takes the
    ``("next", reward_key)`` value of the first step at or after it whose
    ``("next", done_key)`` flag is set; steps after the batch's last done take the reward of
    the batch's last step. The data is modified in place and returned.

    Args:
        reward_key: the reward entry under ``"next"`` (``"reward"``).
        done_key: the end-of-trajectory flag under ``"next"`` (``"done"``).
        reward_key_out: where the dense reward is written under ``"next"`` (defaults to
            ``reward_key``, replacing the sparse reward).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, False, True, False, True]).unsqueeze(-1)
        >>> reward = torch.tensor([0.0, 0.0, 1.0, 0.0, -1.0]).unsqueeze(-1)
        >>> data = TensorDict({"next": {"reward": reward, "done": done}}, [5])
        >>> DensifyReward()(data)["next", "reward"].squeeze(-1).tolist()
        [1.0, 1.0, 1.0, -1.0, -1.0]
    """

    def __init__(
        self, reward_key: Any = "reward", done_key: Any = "done", reward_key_out: Any = None
    ) -> None:
        self.reward_key = ("next", *_as_tuple(reward_key))
        self.done_key = ("next", *_as_tuple(done_key))
        self.reward_key_out = (
            self.reward_key if reward_key_out is None else ("next", *_as_tuple(reward_key_out))
        )

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write the dense reward into ``tensordict`` and return it."""
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(f"DensifyReward expects a TensorDict, got {type(tensordict).__name__}")
        if not tensordict.batch_dims:
            raise ValueError(
                "DensifyReward needs data with a time dimension (batch_size=[..., T]), got []"
            )
        batch = tensordict.shape
        entries = []
        for key in (self.reward_key, self.done_key):
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(
                    f"DensifyReward: expected key {key} in the data, got keys "
                    f"{list(tensordict.keys(include_nested=True, leaves_only=True))}"
                )
            if value.shape[: len(batch)] != batch:
                raise ValueError(
                    f"DensifyReward: the entry {key} must start with the batch shape "
                    f"{tuple(batch)}, got shape {tuple(value.shape)}"
                )
            entries.append(value)
        reward, done = entries
        stop = next_boundary(done.reshape(*batch, -1).ne(0).any(-1))
        index = stop.reshape(*batch, *([1] * (reward.ndim - len(batch)))).expand(reward.shape)
        tensordict.set(self.reward_key_out, torch.gather(reward, len(batch) - 1, index))
        return tensordict

    def __repr__(self) -> str:
        return f"DensifyReward(reward_key={self.reward_key[1:]}, done_key={self.done_key[1:]})"
