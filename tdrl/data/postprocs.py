"""Post-processing of collected batches: n-step returns (:class:`MultiStep`)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["MultiStep"]


def _as_tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class MultiStep(nn.Module):
    """Turns one-step TED batches into n-step ones.

    For each step ``t`` of a ``[*B, T]`` batch (time last), the window covers the next
    ``n_steps`` steps, cut after the first done step and at the end of the batch. Then:

    * ``("next", reward)`` becomes the discounted sum ``sum_k gamma**k * r[t + k]`` over the
      window, and the one-step reward moves to ``("next", "original_reward")``;
    * every other ``"next"`` entry (observation, done flags...) is the one of the window's
      last step, so ``("next", "observation")`` is the observation to bootstrap from;
    * ``"steps_to_next_obs"`` holds the window length (``gamma ** steps_to_next_obs``
      discounts the bootstrap value).

    Args:
        gamma: the discount factor.
        n_steps: the largest window (1 leaves the data unchanged but for the new entries).
        reward_keys: reward entries under ``"next"`` (default ``["reward"]``).
        done_key: the flag that ends windows (default ``"done"``, under ``"next"``).
        done_keys: accepted for API compatibility (every ``"next"`` entry is shifted).
        mask_key: an optional boolean entry marking valid steps; windows stop before
            invalid ones.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([0, 0, 1, 0, 0], dtype=torch.bool).unsqueeze(-1)
        >>> data = TensorDict({"obs": torch.arange(5.0), "next": {"obs": torch.arange(1.0, 6.0),
        ...     "reward": torch.ones(5, 1), "done": done}}, [5])
        >>> out = MultiStep(gamma=0.5, n_steps=2)(data)
        >>> out["next", "reward"].squeeze(-1).tolist(), out["next", "obs"].tolist()
        ([1.5, 1.5, 1.0, 1.5, 1.0], [2.0, 3.0, 3.0, 5.0, 5.0])
        >>> out["steps_to_next_obs"].squeeze(-1).tolist()
        [2, 2, 1, 2, 1]
    """

    def __init__(
        self,
        gamma: float,
        n_steps: int,
        *,
        reward_keys: list | None = None,
        done_key: Any = None,
        done_keys: list | None = None,
        mask_key: Any = None,
    ) -> None:
        super().__init__()
        if int(n_steps) < 1:
            raise ValueError(f"n_steps must be a positive integer, got {n_steps}")
        if not 0 <= float(gamma) <= 1:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.gamma = float(gamma)
        self.n_steps = int(n_steps)
        self.reward_keys = [_as_tuple(key) for key in (reward_keys or ["reward"])]
        self.done_key = _as_tuple(done_key or "done")
        self.done_keys = done_keys or ["done", "terminated", "truncated"]
        self.mask_key = mask_key
        self.register_buffer(
            "gammas",
            torch.tensor([self.gamma**k for k in range(self.n_steps)], dtype=torch.float64),
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Compute n-step rewards and shifted ``"next"`` entries (in place; returns the input)."""
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(f"MultiStep expects a TensorDict, got {type(tensordict).__name__}")
        dims = tensordict.batch_dims
        if dims == 0:
            raise ValueError(
                "MultiStep needs data with a time dimension (batch_size=[..., T]), got []"
            )
        time = tensordict.shape[-1]
        done = tensordict.get(("next", *self.done_key), None)
        if done is None:
            raise KeyError(
                f"MultiStep: expected key {('next', *self.done_key)} in the data, got keys "
                f"{list(tensordict.keys(include_nested=True, leaves_only=True))}"
            )
        batch = tensordict.shape
        boundary = done.reshape(*batch, -1).ne(0).any(-1)
        if self.mask_key is not None:
            mask = tensordict.get(self.mask_key).reshape(*batch, -1).all(-1)
            following_invalid = torch.zeros_like(mask)
            following_invalid[..., :-1] = ~mask[..., 1:]
            boundary = boundary | following_invalid | ~mask
        boundary = boundary.clone()
        boundary[..., -1] = True
        steps_index = torch.arange(time).expand(batch)
        stop = torch.where(boundary, steps_index, time)
        stop = stop.flip(-1).cummin(-1).values.flip(-1)
        steps = torch.minimum(stop - steps_index + 1, torch.full_like(stop, self.n_steps))
        last = steps_index + steps - 1
        window = torch.arange(self.n_steps)
        in_window = window < steps.unsqueeze(-1)
        weights = self.gammas * in_window
        next_td = tensordict.get("next")
        shifted = {}
        for key in next_td.keys(include_nested=True, leaves_only=True):
            key = _as_tuple(key)
            value = next_td.get(key)
            if key in self.reward_keys:
                shifted[
                    ("original_reward",)
                    if len(self.reward_keys) == 1
                    else (*key[:-1], f"original_{key[-1]}")
                ] = value
                shifted[key] = self._discounted(value, weights, dims)
            elif self.n_steps > 1:
                shifted[key] = self._gather(value, last, dims)
        for key, value in shifted.items():
            next_td.set(key, value)
        tensordict.set("steps_to_next_obs", steps.unsqueeze(-1))
        return tensordict

    @staticmethod
    def _gather(value: torch.Tensor, last: torch.Tensor, dims: int) -> torch.Tensor:
        extra = value.ndim - dims
        index = last.reshape(*last.shape, *([1] * extra)).expand(value.shape)
        return torch.gather(value, dims - 1, index)

    def _discounted(self, reward: torch.Tensor, weights: torch.Tensor, dims: int) -> torch.Tensor:
        n = self.n_steps
        moved = reward.movedim(dims - 1, -1)
        padded = torch.nn.functional.pad(moved.to(torch.float64), (0, n - 1))
        windows = padded.unfold(-1, n, 1)
        weights = weights.reshape(
            *weights.shape[:-2], *([1] * (moved.ndim - dims)), weights.shape[-2], n
        )
        total = (windows * weights).sum(-1)
        return total.movedim(-1, dims - 1).to(reward.dtype)

    def __repr__(self) -> str:
        return f"MultiStep(gamma={self.gamma}, n_steps={self.n_steps})"
