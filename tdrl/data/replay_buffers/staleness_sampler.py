"""StalenessAwareSampler: favour items written by recent policies, skip those too old."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.samplers import Sampler
from tdrl.data.replay_buffers.storage_base import EMPTY_SAMPLE_MSG

__all__ = ["StalenessAwareSampler"]


class StalenessAwareSampler(Sampler):
    """Samples items in proportion to their freshness, for asynchronous (off-policy) training.

    Each stored item records the version of the policy that produced it (``version_key``);
    the learner advances :attr:`consumer_version` as it updates the policy. An item's
    staleness is ``consumer_version - version``: items are drawn (with replacement) with a
    weight ``1 / max(staleness, 1)``, and never when their staleness exceeds
    ``max_staleness`` (``-1``: no limit). Sampled staleness values are returned in the info
    dict under ``"staleness"``.

    Args:
        max_staleness: the largest staleness drawn (``-1`` for no limit).
        version_key: the stored entry holding each item's policy version.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
        >>> sampler = StalenessAwareSampler(max_staleness=2)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler,
        ...     batch_size=4)
        >>> _ = rb.extend(TensorDict(policy_version=torch.tensor([0.0, 0.0, 4.0, 5.0]),
        ...     batch_size=[4]))
        >>> sampler.consumer_version = 5
        >>> sorted(set(rb.sample()["policy_version"].tolist())) in ([4.0], [5.0], [4.0, 5.0])
        True
    """

    def __init__(self, max_staleness: int = -1, version_key: Any = "policy_version") -> None:
        super().__init__()
        if int(max_staleness) < -1:
            raise ValueError(f"max_staleness must be -1 (no limit) or >= 0, got {max_staleness}")
        self.max_staleness = int(max_staleness)
        self.version_key = version_key
        self._consumer_version = 0

    @property
    def consumer_version(self) -> int:
        """The version of the policy being trained."""
        return self._consumer_version

    @consumer_version.setter
    def consumer_version(self, value: int) -> None:
        self._consumer_version = int(value)

    def increment_consumer_version(self) -> int:
        """Advance :attr:`consumer_version` by one (after a policy update); returns it."""
        self._consumer_version += 1
        return self._consumer_version

    def _versions(self, storage: Any, length: int) -> torch.Tensor:
        content = storage.get(slice(0, length))
        versions = (
            content.get(self.version_key, None) if isinstance(content, TensorDictBase) else None
        )
        if versions is None:
            raise KeyError(
                f"StalenessAwareSampler: the version key {self.version_key!r} is not in the "
                "stored data: write each item's policy version there"
            )
        return versions.reshape(length, -1)[:, 0].to(torch.float64).cpu()

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw ``batch_size`` items weighted by freshness; returns their staleness too."""
        length = len(storage)
        if length == 0:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        staleness = self._consumer_version - self._versions(storage, length)
        weight = staleness.clamp(min=1.0).reciprocal()
        if self.max_staleness >= 0:
            weight = weight.masked_fill(staleness > self.max_staleness, 0.0)
            if not bool((weight > 0).any()):
                raise RuntimeError(
                    f"every stored item is staler than max_staleness={self.max_staleness} "
                    f"(consumer_version={self._consumer_version}, smallest staleness "
                    f"{float(staleness.min())}): write fresher data or raise max_staleness"
                )
        index = torch.multinomial(weight, batch_size, replacement=True, generator=self._rng)
        return storage.unravel_index(index), {"staleness": staleness[index].to(torch.float32)}

    def state_dict(self) -> dict[str, Any]:
        """The consumer version and the staleness limit."""
        return {"consumer_version": self._consumer_version, "max_staleness": self.max_staleness}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the consumer version and the staleness limit."""
        self._consumer_version = int(state_dict.get("consumer_version", self._consumer_version))
        self.max_staleness = int(state_dict.get("max_staleness", self.max_staleness))

    def __repr__(self) -> str:
        return (
            f"StalenessAwareSampler(max_staleness={self.max_staleness}, "
            f"consumer_version={self._consumer_version})"
        )
