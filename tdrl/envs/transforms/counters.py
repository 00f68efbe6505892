"""Transforms that count steps and trajectories or mark their first step."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import weakref
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Bounded, Categorical, Unbounded
from tdrl.envs._keys import as_tuple, from_tuple
from tdrl.envs._partial import align_mask
from tdrl.envs._td_fast import all_true, fast_get, fast_set
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["InitTracker", "StepCounter", "TrajCounter"]

# a 0-dim CPU tensor adds to tensors on any device, without wrapping a python int per step
_ONE = torch.ones((), dtype=torch.int64)

#: the message of the transforms of this module that only work inside an env
NOT_STANDALONE_ERROR = (
    "{owner} cannot be called independently: only its step and reset methods are functional, "
    "inside a TransformedEnv (it has no meaning on data from a buffer or a module)"
)


def _join(prefix: tuple, name: NestedKey) -> NestedKey:
    return from_tuple((*prefix, *as_tuple(name)))


class _DoneLevel:
    """The done entries of one nesting level of an env, as a transform sees them."""

    __slots__ = ("done_key", "prefix", "shape")

    def __init__(self, prefix: tuple, done_key: NestedKey, shape: torch.Size) -> None:
        self.prefix = prefix
        self.done_key = done_key
        self.shape = shape


def _done_levels(done_spec: Any, batch_dims: int) -> list[_DoneLevel]:
    """One :class:`_DoneLevel` per nesting level holding done entries, shallowest first.

    The flag of a level is its ``done`` entry, else ``terminated``, else ``truncated``;
    ``shape`` is the flag's shape after the env batch dims.
    """
    levels: dict = {}
    rank = {"done": 0, "terminated": 1, "truncated": 2}
    for key in done_spec.keys(True, True):
        key_t = as_tuple(key)
        prefix, name = key_t[:-1], key_t[-1]
        if name not in rank:
            continue
        if prefix not in levels or rank[name] < rank[as_tuple(levels[prefix])[-1]]:
            levels[prefix] = key
    return [
        _DoneLevel(prefix, key, done_spec[key].shape[batch_dims:])
        for prefix, key in sorted(levels.items(), key=lambda item: len(item[0]))
    ]


def _top_levels(levels: list[_DoneLevel]) -> list[_DoneLevel]:
    """The levels that no other level encloses (a root done hides the nested ones)."""
    prefixes = [level.prefix for level in levels]
    return [
        level
        for level in levels
        if not any(len(p) < len(level.prefix) and level.prefix[: len(p)] == p for p in prefixes)
    ]


def _template(
    tensordict_reset: TensorDictBase,
    tensordict: TensorDictBase | None,
    keys: tuple,
    shape: torch.Size | None,
) -> tuple[torch.Size, Any] | None:
    """The shape and device of a per-level entry at reset.

    Taken from the level's feature shape when the specs are known, else from the first of
    ``keys`` found in the reset output or in the reset input.
    """
    if shape is not None:
        return torch.Size((*tensordict_reset.batch_size, *shape)), tensordict_reset.device
    for source in (tensordict_reset, tensordict):
        if source is None:
            continue
        for key in keys:
            value = fast_get(source, key)
            if isinstance(value, torch.Tensor):
                return value.shape, value.device
    return None


def _zeros(found: tuple[torch.Size, Any], dtype: torch.dtype, like: Any) -> torch.Tensor:
    """``torch.zeros(shape, dtype=dtype, device=device)`` for ``found = (shape, device)``.

    Made with ``zeros_like(like)`` (a cheaper call) when ``like`` already has that shape,
    dtype and device (``device=None`` is the default device).
    """
    shape, device = found
    if (
        type(like) is torch.Tensor
        and like.dtype is dtype
        and like.shape == shape
        and like.device == (torch.get_default_device() if device is None else device)
    ):
        return torch.zeros_like(like, memory_format=torch.contiguous_format)
    return torch.zeros(shape, dtype=dtype, device=device)


def _reset_mask(tensordict: TensorDictBase | None, reset_key: NestedKey) -> torch.Tensor | None:
    return None if tensordict is None else fast_get(tensordict, reset_key)


class StepCounter(Transform):
    """Counts the steps since the last reset; optionally truncates episodes.

    Writes ``step_count`` (int64, shaped like the ``done`` entry) at the top done
    level: the root when the env has a root ``done``, else each outermost nested
    level. With ``max_steps``, the ``truncated`` entry (added to the done spec when
    the env has none) becomes True once ``step_count >= max_steps``, and so does
    ``done`` when ``update_done`` is set; the truncation reaches the nested done
    levels too (``all_truncated_keys`` / ``all_done_keys``). On a partial reset only
    the elements whose ``"_reset"`` entry is True restart at zero. The count is part
    of the state spec too, so batched envs ship it to their workers.

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
        >>> env.transform.step_count_keys, env.transform.truncated_keys
        (['step_count'], ['truncated'])
    """

    def __init__(
        self,
        max_steps: int | None = None,
        truncated_key: NestedKey | None = "truncated",
        step_count_key: NestedKey | None = "step_count",
        update_done: bool = True,
    ) -> None:
        if max_steps is not None and (
            isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
        ):
            raise ValueError(
                f"StepCounter max_steps: expected a positive int or None, got {max_steps!r}"
            )
        super().__init__()
        self.max_steps = max_steps
        self.truncated_key = "truncated" if truncated_key is None else truncated_key
        self.step_count_key = "step_count" if step_count_key is None else step_count_key
        self.update_done = update_done
        # one entry per counted level, in the same order (root level until specs are known)
        self._step_count_keys: list = [self.step_count_key]
        self._done_keys: list = ["done"]
        self._terminated_keys: list = ["terminated"]
        self._truncated_keys: list = [self.truncated_key]
        self._reset_keys: list = ["_reset"]
        self._shapes: list = [None]
        # (done key, truncated key, truncated key of the counted level above) of the other levels
        self._nested_levels: list = []
        self._state_entries: dict = {}
        # the per-level keys of _step as tuples, built from the lists above on first use
        self._plan: list | None = None

    # ------------------------------------------------------------ keys
    @property
    def step_count_keys(self) -> list:
        """The counter entries, one per counted done level."""
        return list(self._step_count_keys)

    @property
    def done_keys(self) -> list:
        """The done entries of the counted levels."""
        return list(self._done_keys)

    @property
    def terminated_keys(self) -> list:
        """The terminated entries of the counted levels."""
        return list(self._terminated_keys)

    @property
    def truncated_keys(self) -> list:
        """The truncation entries of the counted levels."""
        return list(self._truncated_keys)

    @property
    def reset_keys(self) -> list:
        """The ``"_reset"`` entries of the counted levels."""
        return list(self._reset_keys)

    @property
    def all_done_keys(self) -> list:
        """The done entries of every level (a truncation sets all of them)."""
        return [*self._done_keys, *(level[0] for level in self._nested_levels)]

    @property
    def all_truncated_keys(self) -> list:
        """The truncation entries of every level."""
        return [*self._truncated_keys, *(level[1] for level in self._nested_levels)]

    # ------------------------------------------------------------ env path
    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        levels = zip(
            self._step_count_keys,
            self._done_keys,
            self._terminated_keys,
            self._truncated_keys,
            self._reset_keys,
            self._shapes,
        )
        for count_key, done_key, terminated_key, truncated_key, reset_key, shape in levels:
            reset = _reset_mask(tensordict, reset_key)
            found = _template(
                tensordict_reset,
                tensordict,
                (done_key, terminated_key, truncated_key, reset_key, count_key),
                shape,
            )
            if found is None:
                continue
            previous = None if tensordict is None else fast_get(tensordict, count_key)
            count = _zeros(found, torch.int64, previous)
            if reset is not None and previous is not None and previous.shape == count.shape:
                mask = align_mask(reset, count.shape, "_reset", reset_key, count_key)
                if not all_true(mask):
                    count = torch.where(mask, count.to(previous.dtype), previous)
            fast_set(tensordict_reset, count_key, count)
            if self.max_steps is not None and fast_get(tensordict_reset, truncated_key) is None:
                fast_set(tensordict_reset, truncated_key, torch.zeros_like(count, dtype=torch.bool))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        max_steps = self.max_steps
        plan = self._plan
        if plan is None:
            plan = self._build_plan()
        for count_key, done_key, terminated_key, truncated_key in plan:
            count = fast_get(tensordict, count_key)
            if count is None:
                found = _template(next_tensordict, None, (done_key, terminated_key), None)
                if found is None:
                    continue
                count = torch.zeros(found[0], dtype=torch.int64, device=found[1])
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
        if max_steps is not None and self._nested_levels:
            self._propagate(next_tensordict)
        return next_tensordict

    def _build_plan(self) -> list:
        """The per-level keys of ``_step``, as one list of tuples (rebuilt when the keys change)."""
        plan = list(
            zip(self._step_count_keys, self._done_keys, self._terminated_keys, self._truncated_keys)
        )
        self._plan = plan
        return plan

    def _propagate(self, next_tensordict: TensorDictBase) -> None:
        """Carry the truncation of each counted level to the done levels nested in it."""
        for done_key, truncated_key, top_truncated_key in self._nested_levels:
            done = next_tensordict.get(done_key, None)
            top = next_tensordict.get(top_truncated_key, None)
            if done is None or top is None:
                continue
            truncated = align_mask(top, done.shape, "truncated", top_truncated_key, done_key)
            previous = next_tensordict.get(truncated_key, None)
            next_tensordict.set(
                truncated_key, truncated if previous is None else previous | truncated
            )
            if self.update_done:
                next_tensordict.set(done_key, done | truncated)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: the counter lives in env steps and resets."""
        raise NotImplementedError(NOT_STANDALONE_ERROR.format(owner="StepCounter"))

    # ------------------------------------------------------------ specs
    def _count_spec(self, done_spec: Any) -> Any:
        high = torch.iinfo(torch.int64).max if self.max_steps is None else self.max_steps
        return Bounded(0, high, shape=done_spec.shape, dtype=torch.int64, device=done_spec.device)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the counter to the observations and, with ``max_steps``, truncation to the dones."""
        output_spec = super().transform_output_spec(output_spec)
        done_spec = output_spec["full_done_spec"]
        observation_spec = output_spec["full_observation_spec"]
        levels = _done_levels(done_spec, len(output_spec.shape))
        counted = _top_levels(levels)
        keys: dict = {name: [] for name in ("count", "done", "terminated", "truncated", "reset")}
        state_entries = {}
        for level in counted:
            count_key = _join(level.prefix, self.step_count_key)
            keys["count"].append(count_key)
            keys["done"].append(_join(level.prefix, "done"))
            keys["terminated"].append(_join(level.prefix, "terminated"))
            keys["truncated"].append(_join(level.prefix, self.truncated_key))
            keys["reset"].append(_join(level.prefix, "_reset"))
            observation_spec[count_key] = self._count_spec(done_spec[level.done_key])
            state_entries[count_key] = self._count_spec(done_spec[level.done_key])
        nested = []
        for level in levels:
            if level in counted:
                continue
            index = next(
                i for i, top in enumerate(counted) if level.prefix[: len(top.prefix)] == top.prefix
            )
            nested.append(
                (
                    _join(level.prefix, "done"),
                    _join(level.prefix, self.truncated_key),
                    keys["truncated"][index],
                )
            )
        if self.max_steps is not None:
            for level in levels:
                truncated_key = _join(level.prefix, self.truncated_key)
                if truncated_key not in done_spec.keys(True):
                    leaf = done_spec[level.done_key]
                    done_spec[truncated_key] = Categorical(
                        2, shape=leaf.shape, dtype=torch.bool, device=leaf.device
                    )
        self._step_count_keys = keys["count"]
        self._done_keys = keys["done"]
        self._terminated_keys = keys["terminated"]
        self._truncated_keys = keys["truncated"]
        self._reset_keys = keys["reset"]
        self._shapes = [level.shape for level in counted]
        self._nested_levels = nested
        self._state_entries = state_entries
        self._build_plan()
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


def _counter_dir() -> str:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


class _SharedCounter:
    """An int64 counter in a small file: every process holding a copy increments the same value.

    Pickling carries the file's path; the process that created the counter removes the
    file when the counter is garbage collected.
    """

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="tdrl-traj-count-", dir=_counter_dir())
        with os.fdopen(fd, "wb") as handle:
            handle.write((0).to_bytes(8, "little", signed=True))
        self.path = path
        self._lock = threading.Lock()
        weakref.finalize(self, _remove, path)

    def take(self, count: int) -> int:
        """Add ``count`` and return the value before the addition (atomic across processes)."""
        if not os.path.exists(self.path):
            # the creating process is gone (a copy loaded later): start a counter of our own
            self.__init__()
        with self._lock, open(self.path, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            start = int.from_bytes(handle.read(8), "little", signed=True)
            handle.seek(0)
            handle.write((start + count).to_bytes(8, "little", signed=True))
        return start

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]
        self._lock = threading.Lock()


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class TrajCounter(Transform):
    """Gives each trajectory a distinct id (``traj_count``), counted across resets.

    The counter is shared by clones and by pickled copies of the transform, in this
    process and in others (it lives in a small file that copies map again), so the
    copies in the sub-envs of a batched env, even in spawned workers, draw distinct
    ids. The id is written next
    to the done entries of its level: ``out_key=("agents", "traj_count")`` follows
    ``("agents", "done")`` and ``("agents", "_reset")`` when the env has them.

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
        self.__dict__["_counter"] = _SharedCounter()
        self._spec: Any = None
        prefix = as_tuple(self.out_keys[0])[:-1]
        self._done_key = _join(prefix, "done")
        self._reset_key = _join(prefix, "_reset")

    @property
    def out_key(self) -> NestedKey:
        """The name of the id entry."""
        return self.out_keys[0]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        found = _template(
            tensordict_reset, tensordict, (self._done_key, "done", "terminated"), None
        )
        if found is None:
            raise KeyError(
                f"TrajCounter: expected a done entry ({self._done_key!r}) in the reset output, "
                f"got keys {list(tensordict_reset.keys(True, True))}"
            )
        shape, device = found
        reset = tensordict.get(self._reset_key, None)
        previous = tensordict.get(self.out_key, None)
        if reset is None or previous is None:
            reset = torch.ones(shape, dtype=torch.bool, device=device)
        else:
            reset = align_mask(reset, shape, "_reset", self._reset_key, self.out_key)
        count = int(reset.sum())
        start = self.__dict__["_counter"].take(count)
        ids = torch.zeros(shape, dtype=torch.int64, device=device)
        ids[reset] = torch.arange(start, start + count, device=device)
        if previous is not None and not all_true(reset):
            ids = torch.where(reset, ids, previous.reshape(shape))
        tensordict_reset.set(self.out_key, ids)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict.set(self.out_key, tensordict.get(self.out_key))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: ids are drawn at env resets."""
        raise RuntimeError(
            "TrajCounter can only be called within an environment step or reset; it has no "
            "meaning on data from a buffer or a module"
        )

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the id entry, shaped like the done entry of its level."""
        output_spec = super().transform_output_spec(output_spec)
        done_spec = output_spec["full_done_spec"]
        prefix = as_tuple(self.out_key)[:-1]
        level = None
        for candidate in _done_levels(done_spec, len(output_spec.shape)):
            if prefix[: len(candidate.prefix)] == candidate.prefix:
                level = candidate
        if level is None:
            raise KeyError(
                f"TrajCounter: expected a done entry at the level of {self.out_key!r} or above, "
                f"got done keys {list(done_spec.keys(True, True))}"
            )
        self._done_key = level.done_key
        self._reset_key = _join(level.prefix, "_reset")
        done = done_spec[level.done_key]
        self._spec = Unbounded(shape=done.shape, dtype=torch.int64, device=done.device)
        output_spec["full_observation_spec"][self.out_key] = self._spec.clone()
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Add the id entry to the state spec (the next step reads it)."""
        input_spec = super().transform_input_spec(input_spec)
        if self._spec is not None:
            input_spec["full_state_spec"][self.out_key] = self._spec.clone()
        return input_spec

    def __repr__(self) -> str:
        return f"TrajCounter(out_key={self.out_key!r})"


class InitTracker(Transform):
    """Marks the first step of each trajectory with ``is_init = True``.

    The entry is written at the top done level (the root when the env has a root
    ``done``, else each outermost nested level), shaped like its ``done`` entry. At a
    reset it is True where the ``"_reset"`` entry is (everywhere on a full reset);
    False on every step.

    Args:
        init_key: the name of the entry (a single name: it is placed at each level).

    Examples:
        >>> from tdrl.envs import InitTracker, PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), InitTracker())
        >>> rollout = env.rollout(3)
        >>> rollout["is_init"].squeeze(-1)
        tensor([ True, False, False])
        >>> env.transform.init_keys
        ['is_init']
    """

    def __init__(self, init_key: str = "is_init") -> None:
        if isinstance(init_key, tuple):
            raise ValueError(
                "InitTracker init_key can only be of type str (the entry is placed next to each "
                f"done entry), got the nested key {init_key!r}"
            )
        if not isinstance(init_key, str):
            raise TypeError(f"InitTracker init_key: expected a str, got {type(init_key).__name__}")
        super().__init__(out_keys=[init_key])
        self.init_key = init_key
        # (init key, done key, reset key, feature shape) per tracked level
        self._levels: list[tuple] = [(init_key, "done", "_reset", None)]

    @property
    def init_keys(self) -> list:
        """The init entries, one per tracked done level."""
        return [level[0] for level in self._levels]

    @property
    def reset_keys(self) -> list:
        """The ``"_reset"`` entries of the tracked levels."""
        return [level[2] for level in self._levels]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for init_key, done_key, reset_key, shape in self._levels:
            found = _template(tensordict_reset, tensordict, (done_key, reset_key), shape)
            if found is None:
                continue
            reset = _reset_mask(tensordict, reset_key)
            if reset is None:
                value = torch.ones(found[0], dtype=torch.bool, device=found[1])
            else:
                value = align_mask(reset.bool(), found[0], "_reset", reset_key, init_key).clone()
            fast_set(tensordict_reset, init_key, value)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for init_key, done_key, _, _ in self._levels:
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
        """Not available outside an env: the flag is written at env resets."""
        raise NotImplementedError(
            "InitTracker cannot be executed without a parent env: it marks the steps that follow "
            "a reset, which only exist in env rollouts"
        )

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add a boolean ``init_key`` entry at each tracked done level."""
        output_spec = super().transform_output_spec(output_spec)
        observation_spec = output_spec["full_observation_spec"]
        done_spec = output_spec["full_done_spec"]
        levels = []
        for level in _top_levels(_done_levels(done_spec, len(output_spec.shape))):
            init_key = _join(level.prefix, self.init_key)
            levels.append((init_key, level.done_key, _join(level.prefix, "_reset"), level.shape))
            leaf = done_spec[level.done_key]
            observation_spec[init_key] = Categorical(
                2, shape=leaf.shape, dtype=torch.bool, device=leaf.device
            )
        self._levels = levels
        return output_spec

    def __repr__(self) -> str:
        return f"InitTracker(init_key={self.init_key!r})"
