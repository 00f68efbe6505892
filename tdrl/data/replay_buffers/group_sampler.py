"""PromptGroupSampler: batches made of whole groups of items sharing a key (e.g. a prompt).

Group-relative methods (GRPO and the like) compare several answers to the same prompt:
a batch must hold a few prompts, each with several of its stored answers. The sampler
indexes the stored items by their group key once per storage state and draws the groups,
then the members of each group, with one of a few strategies.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.list_storage import LazyStackStorage, ListStorage
from tdrl.data.replay_buffers.samplers import Sampler
from tdrl.data.replay_buffers.storage_base import EMPTY_SAMPLE_MSG

__all__ = ["PromptGroupSampler"]

_STRATEGIES = ("random", "recency", "reward", "variance")


def _positive_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


class _GroupIndex:
    """Stored items grouped by key: members of each group, their age and reward."""

    def __init__(self, members: list[torch.Tensor], age: torch.Tensor, reward: Any) -> None:
        self.members = members
        self.age = age
        self.reward = reward


class PromptGroupSampler(Sampler):
    """Samples batches of ``num_groups`` groups of ``samples_per_group`` items sharing a key.

    Items are grouped by the value of ``group_key`` (a number, a tensor such as token ids,
    or a string). A batch of ``batch_size`` items is ``batch_size // samples_per_group``
    distinct groups drawn uniformly, each contributing ``samples_per_group`` of its items
    (give ``num_groups`` or ``samples_per_group``; ``batch_size`` must be divisible by it).
    Within a group, items are chosen by ``strategy``:

    * ``"random"``: uniformly, without replacement;
    * ``"recency"``: the most recently written ones;
    * ``"reward"``: those with the highest ``reward_key``;
    * ``"variance"``: a spread of rewards, alternating the highest and lowest remaining ones
      (the highest first), which keeps the group's reward variance large.

    A group with fewer items than needed is completed by drawing with replacement, with a
    warning. The storage is a :class:`~tdrl.data.replay_buffers.LazyStackStorage` (items of
    varying shapes, e.g. text) or a one-dimensional tensor storage; the group index is
    rebuilt only when the storage content changed (whoever wrote it).

    Args:
        num_groups: groups per batch.
        samples_per_group: items per group.
        group_key: the entry grouping items (e.g. ``"prompt"`` or ``("text", "prompt")``).
        strategy: ``"random"``, ``"recency"``, ``"reward"`` or ``"variance"``.
        reward_key: the reward entry read by the ``"reward"`` and ``"variance"`` strategies.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyStackStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyStackStorage(100), batch_size=4,
        ...     sampler=PromptGroupSampler(num_groups=2, group_key="prompt"))
        >>> _ = rb.extend(TensorDict(prompt=torch.tensor([0, 0, 1, 1, 2, 2]), batch_size=[6]))
        >>> _, counts = rb.sample()["prompt"].unique(return_counts=True)
        >>> counts.tolist()
        [2, 2]
    """

    def __init__(
        self,
        num_groups: int | None = None,
        samples_per_group: int | None = None,
        *,
        group_key: Any,
        strategy: str = "random",
        reward_key: Any = ("next", "reward"),
    ) -> None:
        super().__init__()
        num_groups = _positive_int("num_groups", num_groups)
        samples_per_group = _positive_int("samples_per_group", samples_per_group)
        if (num_groups is None) == (samples_per_group is None):
            raise ValueError(
                "give exactly one of num_groups and samples_per_group, got "
                f"num_groups={num_groups}, samples_per_group={samples_per_group}"
            )
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")
        self.num_groups = num_groups
        self.samples_per_group = samples_per_group
        self.group_key = group_key
        self.strategy = strategy
        self.reward_key = reward_key
        self._group_index: _GroupIndex | None = None
        self._index_of: tuple | None = None

    # -- the group index ---------------------------------------------------------------------------
    def _check_storage(self, storage: Any) -> None:
        if isinstance(storage, ListStorage) and not isinstance(storage, LazyStackStorage):
            raise TypeError(
                "Plain ListStorage is not supported by PromptGroupSampler: it reads the group "
                "key of every item; use a LazyStackStorage (items of any shape) or a tensor "
                "storage"
            )
        if getattr(storage, "ndim", 1) > 1:
            raise NotImplementedError(
                f"PromptGroupSampler groups items along one dim; got a storage with "
                f"ndim={storage.ndim}"
            )

    def _groups(self, storage: Any) -> _GroupIndex:
        stamp = (id(storage), getattr(storage, "mutation_revision", None))
        if self._group_index is not None and self._index_of == stamp and stamp[1] is not None:
            return self._group_index
        length = len(storage)
        content = storage.get(slice(0, length))
        if not isinstance(content, TensorDictBase):
            raise TypeError(
                f"PromptGroupSampler reads TensorDicts, got {type(content).__name__} from "
                f"{type(storage).__name__}"
            )
        keys = content.get(self.group_key, None)
        if keys is None:
            raise KeyError(
                f"PromptGroupSampler: the group key {self.group_key!r} is not in the stored "
                f"data (keys: {list(content.keys(include_nested=True, leaves_only=True))})"
            )
        members = self._members(keys, length)
        reward = None
        if self.strategy in ("reward", "variance"):
            reward = content.get(self.reward_key, None)
            numeric = isinstance(reward, torch.Tensor) and reward.dtype != torch.bool
            if not numeric or reward.is_complex():
                raise TypeError(
                    f"strategy={self.strategy!r} requires reward_key {self.reward_key!r} to hold "
                    f"a numeric tensor, got {type(reward).__name__}"
                )
            reward = reward.reshape(length, -1).sum(-1).to(torch.float64).cpu()
        last = getattr(storage, "last_cursor_index", None)
        last = length - 1 if last is None else last
        rows = length if length < storage.max_size else storage.max_size
        age = (last - torch.arange(length)).remainder(max(rows, 1))
        self._group_index = _GroupIndex(members, age, reward)
        self._index_of = stamp
        return self._group_index

    @staticmethod
    def _members(keys: Any, length: int) -> list[torch.Tensor]:
        """Indices of the items of each group, in order of first appearance."""
        if isinstance(keys, torch.Tensor):
            rows = keys.reshape(length, -1).cpu()
            _, inverse = torch.unique(rows, dim=0, return_inverse=True)
        else:
            values = keys.tolist() if hasattr(keys, "tolist") else list(keys)
            codes: dict[Any, int] = {}
            inverse = torch.tensor([codes.setdefault(value, len(codes)) for value in values])
        order = torch.argsort(inverse, stable=True)
        counts = torch.bincount(inverse)
        return [group for group in order.split(counts.tolist()) if group.numel()]

    # -- sampling ------------------------------------------------------------------------------------
    def _shape(self, batch_size: int) -> tuple[int, int]:
        given = self.num_groups if self.num_groups is not None else self.samples_per_group
        if batch_size % given:
            name = "num_groups" if self.num_groups is not None else "samples_per_group"
            raise ValueError(
                f"batch_size must be divisible by {name}={given}, got batch_size={batch_size}"
            )
        if self.num_groups is not None:
            return self.num_groups, batch_size // self.num_groups
        return batch_size // self.samples_per_group, self.samples_per_group

    def _pick(self, members: torch.Tensor, index: _GroupIndex, count: int) -> torch.Tensor:
        size = members.numel()
        if size < count:
            warnings.warn(
                f"PromptGroupSampler: a group holds {size} items, fewer than the {count} asked "
                "for: it is completed by sampling with replacement",
                UserWarning,
                stacklevel=4,
            )
            extra = members[torch.randint(size, (count - size,), generator=self._rng)]
            return torch.cat([members, extra])
        if self.strategy == "random":
            return members[torch.randperm(size, generator=self._rng)[:count]]
        if self.strategy == "recency":
            return members[torch.argsort(index.age[members], stable=True)[:count]]
        by_reward = members[torch.argsort(index.reward[members], descending=True, stable=True)]
        if self.strategy == "reward":
            return by_reward[:count]
        # variance: the highest, the lowest, the second highest, the second lowest...
        high = torch.arange(size)
        alternating = torch.stack([high, size - 1 - high], -1).reshape(-1)[:size]
        return by_reward[alternating[:count]]

    def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict]:
        """Draw whole groups; returns the indices of their chosen items, group after group."""
        self._check_storage(storage)
        if len(storage) == 0:
            raise RuntimeError(EMPTY_SAMPLE_MSG)
        num_groups, per_group = self._shape(batch_size)
        index = self._groups(storage)
        available = len(index.members)
        if available < num_groups:
            raise ValueError(
                f"PromptGroupSampler: {num_groups} groups per batch asked for, but the storage "
                f"holds {available} distinct values of {self.group_key!r}"
            )
        chosen = torch.randperm(available, generator=self._rng)[:num_groups].tolist()
        picks = [self._pick(index.members[group], index, per_group) for group in chosen]
        return torch.cat(picks), {}

    # -- state ---------------------------------------------------------------------------------------
    def _forget(self) -> None:
        self._group_index = None
        self._index_of = None

    def _empty(self) -> None:
        self._forget()

    def state_dict(self) -> dict[str, Any]:
        """Nothing: the group index is rebuilt from the storage."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Forget the group index (the storage is read again on the next sample)."""
        self._forget()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_group_index"] = None
        state["_index_of"] = None
        return state

    def __repr__(self) -> str:
        return (
            f"PromptGroupSampler(num_groups={self.num_groups}, "
            f"samples_per_group={self.samples_per_group}, group_key={self.group_key!r}, "
            f"strategy={self.strategy!r})"
        )
