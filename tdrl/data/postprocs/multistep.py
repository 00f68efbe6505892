"""N-step returns over collected batches (:class:`MultiStep`)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["MultiStep", "next_boundary"]


_DEFAULT_MASK_KEYS = (("collector", "mask"),)


def _as_tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def next_boundary(boundary: torch.Tensor) -> torch.Tensor:
    """For each step (time last), the index of the first boundary step at or after it.

    The last step of the batch counts as a boundary, so every step gets an index.

    Examples:
        >>> import torch
        >>> next_boundary(torch.tensor([False, True, False, False]))
        tensor([1, 1, 3, 3])
    """
    time = boundary.shape[-1]
    boundary = boundary.clone()
    boundary[..., -1] = True
    steps_index = torch.arange(time, device=boundary.device).expand(boundary.shape)
    stop = torch.where(boundary, steps_index, time)
    return stop.flip(-1).cummin(-1).values.flip(-1)


class MultiStep(nn.Module):
    """Turns one-step TED batches into n-step ones.

    For each step ``t`` of a ``[*B, T]`` batch (time last), the window covers the next
    ``n_steps`` steps, cut after the first done step and at the end of the batch. Then:

    * ``("next", reward)`` becomes the discounted sum ``sum_k gamma**k * r[t + k]`` over the
      window, and the one-step reward moves to ``("next", "original_reward")``;
    * every other ``"next"`` entry (observation, done flags...) is the one of the window's
      last step, so ``("next", "observation")`` is the observation to bootstrap from;
    * ``"steps_to_next_obs"`` holds the window length and ``"gamma"`` the discount of the
      bootstrap value, ``gamma ** steps_to_next_obs``;
    * ``"nonterminal"`` (shaped as the batch) is ``False`` where the bootstrap value must be
      dropped: the window ends on a terminal step (``("next", "terminated")`` when stored,
      else the done flag) or the step itself is masked out.

    Args:
        gamma: the discount factor.
        n_steps: the largest window (1 leaves the data unchanged but for the new entries).
        reward_keys: reward entries under ``"next"`` (default ``["reward"]``).
        done_key: the flag that ends windows (default ``"done"``, under ``"next"``).
        done_keys: accepted for API compatibility (every ``"next"`` entry is shifted).
        mask_key: a boolean entry marking valid steps (e.g. the padding mask of
            ``split_trajectories``); windows stop before invalid ones. ``None`` uses
            ``("collector", "mask")`` when the data holds it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([0, 0, 1, 0, 0], dtype=torch.bool).unsqueeze(-1)
        >>> data = TensorDict({"obs": torch.arange(5.0), "next": {"obs": torch.arange(1.0, 6.0),
        ...     "reward": torch.ones(5, 1), "done": done}}, [5])
        >>> out = MultiStep(gamma=0.5, n_steps=2)(data)
        >>> out["next", "reward"].squeeze(-1).tolist(), out["next", "obs"].tolist()
        ([1.5, 1.5, 1.0, 1.5, 1.0], [2.0, 3.0, 3.0, 5.0, 5.0])
        >>> out["steps_to_next_obs"].squeeze(-1).tolist(), out["nonterminal"].tolist()
        ([2, 2, 1, 2, 1], [True, False, False, True, True])
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
        self._mask_keys = (_as_tuple(mask_key),) if mask_key is not None else _DEFAULT_MASK_KEYS
        self.register_buffer(
            "gammas",
            torch.tensor([self.gamma**k for k in range(self.n_steps)], dtype=torch.float64),
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Return a copy of ``tensordict`` with n-step rewards and shifted ``"next"`` entries.

        The copy is shallow: unchanged entries share their tensors with the input, and the
        input is left as it was.
        """
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
        mask = self._mask(tensordict)
        if mask is not None:
            following_invalid = torch.zeros_like(mask)
            following_invalid[..., :-1] = ~mask[..., 1:]
            boundary = boundary | following_invalid | ~mask
        stop = next_boundary(boundary)
        steps_index = torch.arange(time, device=done.device).expand(batch)
        steps = torch.minimum(stop - steps_index + 1, torch.full_like(stop, self.n_steps))
        last = steps_index + steps - 1
        window = torch.arange(self.n_steps, device=done.device)
        in_window = window < steps.unsqueeze(-1)
        weights = self.gammas * in_window
        terminated = tensordict.get(("next", "terminated"), None)
        terminal = done if terminated is None else terminated
        terminal = terminal.reshape(*batch, -1).ne(0).any(-1)
        nonterminal = ~terminal.gather(dims - 1, last)
        if mask is not None:
            nonterminal &= mask
        tensordict = tensordict.copy()
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
        steps = steps.unsqueeze(-1)
        tensordict.set("steps_to_next_obs", steps)
        tensordict.set("gamma", self.gamma**steps)
        tensordict.set("nonterminal", nonterminal)
        return tensordict

    def _mask(self, tensordict: TensorDictBase) -> torch.Tensor | None:
        """The valid-step mask, shaped as the batch (``None`` when there is none)."""
        for key in self._mask_keys:
            mask = tensordict.get(key, None)
            if mask is not None:
                return mask.reshape(*tensordict.shape, -1).all(-1)
        if self.mask_key is not None:
            raise KeyError(
                f"MultiStep: expected the mask key {self.mask_key!r} in the data, got keys "
                f"{list(tensordict.keys(include_nested=True, leaves_only=True))}"
            )
        return None

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
