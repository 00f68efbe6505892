"""Transforms meant for replay buffers: :class:`MultiStepTransform`."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.postprocs import MultiStep
from tdrl.envs.transforms.transform import Transform

__all__ = ["MultiStepTransform"]


class MultiStepTransform(Transform):
    """Writes n-step transitions into a replay buffer, across the batches it is extended with.

    Used as a buffer transform, it runs on the data given to ``extend`` (the inverse path):
    batches of ``[*B, T]`` TED data (time last) are joined to the last ``n_steps`` steps of
    the previous batch, :class:`~tdrl.data.MultiStep` computes the n-step rewards and next
    observations, and every step whose window is complete is written. The last ``n_steps``
    steps are held back until the next batch completes them, so the first batch writes
    ``T - n_steps`` steps. Sampling is unchanged.

    Args:
        n_steps: the largest window.
        gamma: the discount factor.
        reward_keys, done_key, done_keys, mask_key: as in :class:`~tdrl.data.MultiStep`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(20),
        ...     transform=MultiStepTransform(n_steps=3, gamma=0.9))
        >>> def batch(start):
        ...     t = torch.arange(start, start + 5.0)
        ...     return TensorDict({"obs": t, "next": {"obs": t + 1, "reward": torch.ones(5, 1),
        ...         "done": torch.zeros(5, 1, dtype=torch.bool)}}, [5])
        >>> _ = rb.extend(batch(0))
        >>> _ = rb.extend(batch(5))
        >>> len(rb), rb[3]["next", "obs"].item(), round(rb[3]["next", "reward"].item(), 2)
        (7, 6.0, 2.71)
    """

    def __init__(
        self,
        n_steps: int,
        gamma: float,
        *,
        reward_keys: list | None = None,
        done_key: Any = None,
        done_keys: list | None = None,
        mask_key: Any = None,
    ) -> None:
        super().__init__()
        self.n_steps = int(n_steps)
        self.gamma = float(gamma)
        self.multi_step = MultiStep(
            gamma,
            n_steps,
            reward_keys=reward_keys,
            done_key=done_key,
            done_keys=done_keys,
            mask_key=mask_key,
        )
        self.__dict__["_held"] = None

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sampled data passes unchanged."""
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        held = self.__dict__["_held"]
        if held is not None:
            if held.shape[:-1] != tensordict.shape[:-1]:
                raise ValueError(
                    f"MultiStepTransform: batch shape mismatch: expected data of shape "
                    f"({', '.join(map(str, held.shape[:-1]))}, T), got {tuple(tensordict.shape)}"
                )
            tensordict = torch.cat([held, tensordict], dim=tensordict.batch_dims - 1)
        time = tensordict.shape[-1]
        keep = max(time - self.n_steps, 0)
        self.__dict__["_held"] = tensordict[..., keep:].clone()
        out = self.multi_step(tensordict.clone())
        return out[..., :keep]

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Turn a batch into the n-step transitions that are complete so far."""
        return self._inv_call(tensordict)

    def empty_cache(self) -> None:
        """Forget the steps held back from the previous batch."""
        self.__dict__["_held"] = None
        super().empty_cache()

    def __repr__(self) -> str:
        return f"MultiStepTransform(n_steps={self.n_steps}, gamma={self.gamma})"
