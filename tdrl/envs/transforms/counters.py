"""Transforms that count steps and trajectories or mark their first step."""

from __future__ import annotations

import threading
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Bounded, Categorical, Unbounded
from tdrl.envs._partial import all_true
from tdrl.envs._step_mdp import fast_get, fast_set
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["InitTracker", "StepCounter", "TrajCounter"]

# a 0-dim CPU tensor adds to tensors on any device, without wrapping a python int per step
_ONE = torch.ones((), dtype=torch.int64)


def _as_tuple(key: NestedKey) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _join(prefix: tuple, name: NestedKey) -> NestedKey:
    full = (*prefix, *_as_tuple(name))
    return full[0] if len(full) == 1 else full


def _done_levels(done_spec: Any) -> list[tuple[tuple, NestedKey, Any]]:
    """``(prefix, done_key, done_leaf_spec)`` for each nesting level holding done entries."""
    levels: dict = {}
    for key in done_spec.keys(True, True):
        key_t = _as_tuple(key)
        prefix, name = key_t[:-1], key_t[-1]
        if name not in ("done", "terminated", "truncated"):
            continue
        if prefix not in levels or name == "done":
            levels[prefix] = (key, done_spec[key])
    return [
        (prefix, key, spec)
        for prefix, (key, spec) in sorted(levels.items(), key=lambda i: len(i[0]))
    ]


class StepCounter(Transform):
    """Counts the steps since the last reset; optionally truncates episodes.

    Writes ``step_count`` (int64, shaped like the ``done`` entry) at each done
    level. With ``max_steps``, the ``truncated`` entry (added to the done spec when
    the env has none) becomes True once ``step_count >= max_steps``, and so does
    ``done`` when ``update_done`` is set. The count is part of the state spec too,
    so batched envs ship it to their workers.

    Args:
        max_steps: the episode length limit (None: count only).
        truncated_key: the name of the truncation entry.
        step_count_key: the name of the counter entry.
        update_done: also set ``done`` when the limit is reached.

    Examples:
        >>> from tdrl.envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=3))
        >>> rollout = env.rollout(10)
        >>> rollout["next", "step_count"].squeeze(-1)
        tensor([1, 2, 3])
        >>> rollout["next", "truncated"].squeeze(-1)
        tensor([False, False,  True])
    """

    def __init__(
        self,
        max_steps: int | None = None,
        truncated_key: NestedKey | None = "truncated",
        step_count_key: NestedKey | None = "step_count",
        update_done: bool = True,
    ) -> None:
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(
                f"StepCounter max_steps: expected a positive int or None, got {max_steps!r}"
            )
        super().__init__()
        self.max_steps = max_steps
        self.truncated_key = "truncated" if truncated_key is None else truncated_key
        self.step_count_key = "step_count" if step_count_key is None else step_count_key
        self.update_done = update_done
        # (count_key, truncated_key, done_key, terminated_key) per done level, set with the specs
        self._levels: list[tuple] = [
            (self.step_count_key, self.truncated_key, "done", "terminated")
        ]
        self._state_entries: dict = {}

    def _zeros_like_done(self, data: TensorDictBase, level: tuple) -> torch.Tensor | None:
        _, truncated_key, done_key, terminated_key = level
        for key in (done_key, terminated_key, truncated_key):
            value = data.get(key, None)
            if value is not None:
                return torch.zeros(value.shape, dtype=torch.int64, device=value.device)
        return None

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for level in self._levels:
            count_key, truncated_key = level[0], level[1]
            count = self._zeros_like_done(tensordict_reset, level)
            if count is None:
                continue
            tensordict_reset.set(count_key, count)
            if self.max_steps is not None and tensordict_reset.get(truncated_key, None) is None:
                tensordict_reset.set(
                    truncated_key, torch.zeros(count.shape, dtype=torch.bool, device=count.device)
                )
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        max_steps = self.max_steps
        for count_key, truncated_key, done_key, terminated_key in self._levels:
            count = fast_get(tensordict, count_key)
            if count is None:
                count = self._zeros_like_done(
                    next_tensordict, (count_key, truncated_key, done_key, terminated_key)
                )
                if count is None:
                    continue
            count = count + _ONE
            fast_set(next_tensordict, count_key, count)
            if max_steps is None:
                continue
            truncated = count >= max_steps
            previous = fast_get(next_tensordict, truncated_key)
            if previous is not None:
                truncated = truncated | previous
            fast_set(next_tensordict, truncated_key, truncated)
            if self.update_done:
                done = fast_get(next_tensordict, done_key)
                fast_set(next_tensordict, done_key, truncated if done is None else done | truncated)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    def _count_spec(self, done_spec: Any) -> Any:
        high = torch.iinfo(torch.int64).max if self.max_steps is None else self.max_steps
        return Bounded(0, high, shape=done_spec.shape, dtype=torch.int64, device=done_spec.device)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the counter to the observations and, with ``max_steps``, truncation to the dones."""
        output_spec = super().transform_output_spec(output_spec)
        done_spec = output_spec["full_done_spec"]
        observation_spec = output_spec["full_observation_spec"]
        levels = []
        state_entries = {}
        for prefix, _, leaf in _done_levels(done_spec):
            count_key = _join(prefix, self.step_count_key)
            truncated_key = _join(prefix, self.truncated_key)
            levels.append(
                (count_key, truncated_key, _join(prefix, "done"), _join(prefix, "terminated"))
            )
            observation_spec[count_key] = self._count_spec(leaf)
            state_entries[count_key] = self._count_spec(leaf)
            if self.max_steps is not None and truncated_key not in done_spec.keys(True):
                done_spec[truncated_key] = Categorical(
                    2, shape=leaf.shape, dtype=torch.bool, device=leaf.device
                )
        self._levels = levels
        self._state_entries = state_entries
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Add the counter to the state spec (the next step reads it)."""
        input_spec = super().transform_input_spec(input_spec)
        state_spec = input_spec["full_state_spec"]
        for key, spec in self._state_entries.items():
            state_spec[key] = spec.clone()
        return input_spec

    def __repr__(self) -> str:
        return (
            f"StepCounter(max_steps={self.max_steps}, step_count_key={self.step_count_key!r}, "
            f"truncated_key={self.truncated_key!r})"
        )


class TrajCounter(Transform):
    """Gives each trajectory a distinct id (``traj_count``), counted across resets.

    The counter lives in shared memory and is shared by clones of the transform,
    so copies in several envs of a batch draw distinct ids.

    Args:
        out_key: the name of the id entry.

    Examples:
        >>> from tdrl.envs import PendulumEnv, StepCounter, TrajCounter, TransformedEnv
        >>> from tdrl.envs.transforms import Compose
        >>> env = TransformedEnv(PendulumEnv(), Compose(StepCounter(max_steps=2), TrajCounter()))
        >>> rollout = env.rollout(6, break_when_any_done=False)
        >>> rollout["traj_count"].squeeze(-1)
        tensor([0, 0, 1, 1, 2, 2])
    """

    def __init__(self, out_key: NestedKey = "traj_count") -> None:
        super().__init__(out_keys=[out_key])
        self.register_buffer("_traj_count", torch.zeros((), dtype=torch.int64).share_memory_())
        self.__dict__["_lock"] = threading.Lock()
        self._spec: Any = None

    @property
    def out_key(self) -> NestedKey:
        """The name of the id entry."""
        return self.out_keys[0]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        done = tensordict_reset.get("done", None)
        if done is None:
            done = tensordict_reset.get("terminated")
        shape = done.shape
        reset = tensordict.get("_reset", None)
        previous = tensordict.get(self.out_key, None)
        if reset is None or previous is None:
            reset = torch.ones(shape, dtype=torch.bool, device=done.device)
        else:
            reset = reset.reshape(shape)
        count = int(reset.sum())
        with self.__dict__["_lock"]:
            start = int(self._traj_count)
            self._traj_count.add_(count)
        ids = torch.zeros(shape, dtype=torch.int64, device=done.device)
        ids[reset] = torch.arange(start, start + count, device=done.device)
        if previous is not None and not all_true(reset):
            ids = torch.where(reset, ids, previous.reshape(shape))
        tensordict_reset.set(self.out_key, ids)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict.set(self.out_key, tensordict.get(self.out_key))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    def _id_spec(self, done_spec: Any) -> Any:
        return Unbounded(shape=done_spec.shape, dtype=torch.int64, device=done_spec.device)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the id entry, shaped like the root ``done`` entry."""
        output_spec = super().transform_output_spec(output_spec)
        done_spec = output_spec["full_done_spec"]
        done = done_spec.get("done", None)
        if done is None:
            done = done_spec["terminated"]
        self._spec = self._id_spec(done)
        output_spec["full_observation_spec"][self.out_key] = self._spec.clone()
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Add the id entry to the state spec (the next step reads it)."""
        input_spec = super().transform_input_spec(input_spec)
        if self._spec is not None:
            input_spec["full_state_spec"][self.out_key] = self._spec.clone()
        return input_spec

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.__dict__["_lock"] = threading.Lock()

    def __repr__(self) -> str:
        return f"TrajCounter(out_key={self.out_key!r})"


class InitTracker(Transform):
    """Marks the first step of each trajectory with ``is_init = True``.

    One entry per done level, shaped like its ``done`` entry; False on every step.

    Args:
        init_key: the name of the entry.

    Examples:
        >>> from tdrl.envs import InitTracker, PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), InitTracker())
        >>> rollout = env.rollout(3)
        >>> rollout["is_init"].squeeze(-1)
        tensor([ True, False, False])
    """

    def __init__(self, init_key: NestedKey = "is_init") -> None:
        if not isinstance(init_key, (str, tuple)):
            raise TypeError(f"InitTracker init_key: expected a str, got {type(init_key).__name__}")
        super().__init__(out_keys=[init_key])
        self.init_key = init_key
        self._levels: list[tuple] = [(init_key, "done")]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for init_key, done_key in self._levels:
            done = tensordict_reset.get(done_key, None)
            if done is not None:
                tensordict_reset.set(init_key, torch.ones_like(done, dtype=torch.bool))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for init_key, done_key in self._levels:
            done = fast_get(next_tensordict, done_key)
            if done is not None:
                not_init = (
                    torch.zeros_like(done)
                    if done.dtype is torch.bool
                    else torch.zeros_like(done, dtype=torch.bool)
                )
                fast_set(next_tensordict, init_key, not_init)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add a boolean ``init_key`` entry for each done level."""
        output_spec = super().transform_output_spec(output_spec)
        observation_spec = output_spec["full_observation_spec"]
        levels = []
        for prefix, done_key, leaf in _done_levels(output_spec["full_done_spec"]):
            init_key = _join(prefix, self.init_key)
            levels.append((init_key, done_key))
            observation_spec[init_key] = Categorical(
                2, shape=leaf.shape, dtype=torch.bool, device=leaf.device
            )
        self._levels = levels
        return output_spec

    def __repr__(self) -> str:
        return f"InitTracker(init_key={self.init_key!r})"
