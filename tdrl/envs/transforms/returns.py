"""Transforms that track episode returns and return targets.

:class:`RewardSum` and :class:`TargetReturn` carry a per-episode quantity from step to
step and restart it on (partial) resets; on trajectories taken from a buffer they compute
the same values along the time dimension. :class:`Reward2GoTransform` needs whole
trajectories and works on buffers only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Unbounded
from tdrl.envs._keys import as_tuple, from_tuple
from tdrl.envs._partial import align_mask
from tdrl.envs._td_fast import all_true, any_true, fast_get, fast_set
from tdrl.envs.transforms.rewards import KEY_SPEC_ERROR, _keys_or
from tdrl.envs.transforms.transform import (
    NestedKey,
    Transform,
    locate_spec,
)

__all__ = ["Reward2GoTransform", "RewardSum", "TargetReturn"]

DONE_NAMES = ("done", "terminated", "truncated")


def _replace_last(key: NestedKey, name: str) -> NestedKey:
    return from_tuple((*as_tuple(key)[:-1], name))


def _done_prefixes(done_spec: Any) -> set:
    return {
        as_tuple(key)[:-1] for key in done_spec.keys(True, True) if as_tuple(key)[-1] in DONE_NAMES
    }


def _reset_candidates(key: NestedKey, done_prefixes: set) -> list:
    """The ``"_reset"`` keys that govern ``key``, shallowest level first."""
    prefix = as_tuple(key)[:-1]
    return [
        from_tuple((*prefix[:depth], "_reset"))
        for depth in range(len(prefix) + 1)
        if prefix[:depth] in done_prefixes
    ]


def _first_mask(tensordict: TensorDictBase, reset_keys: list) -> torch.Tensor | None:
    for reset_key in reset_keys:
        mask = fast_get(tensordict, reset_key)
        if mask is not None:
            return mask
    return None


def _time_dim(tensordict: TensorDictBase, owner: str) -> int:
    """The dim named ``"time"`` if any, else the last batch dim."""
    if tensordict.batch_dims == 0:
        raise ValueError(
            f"{owner}: At least one dimension of the tensordict must be a time dimension (the "
            f"dim named 'time', else the last batch dim); got batch size "
            f"{tuple(tensordict.batch_size)}"
        )
    names = tensordict.names
    if "time" in names:
        return names.index("time")
    return tensordict.batch_dims - 1


def _trajectory_done(
    tensordict: TensorDictBase,
    key: NestedKey,
    shape: torch.Size,
    names: Sequence[str],
    root: tuple = ("next",),
) -> torch.Tensor | None:
    """Episode ends (done flags under ``root``, at ``key``'s level or above) aligned to ``shape``."""
    prefix = as_tuple(key)[:-1]
    if prefix[:1] == ("next",):
        prefix = prefix[1:]
    for depth in range(len(prefix), -1, -1):
        done = None
        for name in names:
            flag = tensordict.get((*root, *prefix[:depth], name), None)
            if flag is not None:
                done = flag if done is None else done | flag
        if done is not None:
            return align_mask(done.bool(), shape, "done", (*root, *prefix[:depth]), key)
    return None


def _episode_cumsum(reward: torch.Tensor, done: torch.Tensor | None, dim: int) -> torch.Tensor:
    """Cumulative sum of ``reward`` along ``dim``, restarting after each ``done``."""
    exact = reward.dtype if not reward.is_floating_point() else torch.float64
    total = reward.to(exact).cumsum(dim)
    if done is None or not any_true(done):
        return total.to(reward.dtype)
    length = reward.shape[dim]
    view = [1] * reward.ndim
    view[dim] = length
    steps = torch.arange(length, device=reward.device).view(view)
    marker = torch.where(done, steps, -1)
    first = torch.full_like(marker.narrow(dim, 0, 1), -1)
    previous_end = torch.cat([first, marker.narrow(dim, 0, length - 1)], dim).cummax(dim).values
    offset = total.gather(dim, previous_end.clamp_min(0))
    offset = torch.where(previous_end >= 0, offset, torch.zeros_like(offset))
    return (total - offset).to(reward.dtype)


def _discounted_to_go(
    reward: torch.Tensor, done: torch.Tensor | None, gamma: Any, dim: int
) -> torch.Tensor:
    """Discounted sum of future rewards within each episode, along ``dim``.

    Solves ``g[t] = r[t] + gamma * (1 - done[t]) * g[t + 1]`` with a log-depth scan.
    """
    dtype = reward.dtype if reward.is_floating_point() else torch.get_default_dtype()
    value = reward.to(dtype).movedim(dim, 0).clone()
    decay = torch.as_tensor(gamma, dtype=dtype, device=reward.device).expand_as(value).clone()
    if done is not None:
        decay = decay.masked_fill(done.movedim(dim, 0), 0.0)
    length, stride = value.shape[0], 1
    while stride < length:
        value[:-stride] = value[:-stride] + decay[:-stride] * value[stride:]
        decay[:-stride] = decay[:-stride] * decay[stride:]
        stride *= 2
    return value.movedim(0, dim)


# --------------------------------------------------------- returns and targets
class Reward2GoTransform(Transform):
    """Computes the discounted reward-to-go of trajectories written to a replay buffer.

    ``g[t] = r[t] + gamma * g[t + 1]`` within each episode; an episode ends where
    ``("next", done_key)`` (or ``("next", "truncated")``) is True, or where the data
    ends. The time dim is the one named ``"time"``, else the last batch dim. The
    returns are computed on the way in (:meth:`inv`, which ``ReplayBuffer.extend``
    runs), where whole trajectories are available; ``forward`` leaves samples as they
    are. Future rewards are unknown while stepping an env, so the transform refuses
    to be part of one.

    Args:
        gamma: the discount factor.
        in_keys: the reward entries (default ``[("next", "reward")]``).
        out_keys: where to write the returns (default: ``in_keys``, overwriting the rewards).
        done_key: the name of the episode-end flag under ``"next"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> from tdrl.envs import Reward2GoTransform
        >>> rb = ReplayBuffer(
        ...     storage=LazyTensorStorage(10),
        ...     transform=Reward2GoTransform(gamma=0.5, out_keys=[("next", "reward_to_go")]),
        ... )
        >>> done = torch.tensor([False, True, False, False]).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"next": {"reward": torch.ones(4, 1), "done": done}}, [4]))
        >>> rb[:]["next", "reward_to_go"].squeeze(-1)
        tensor([1.5000, 1.0000, 1.5000, 1.0000])
    """

    #: the message of the error raised when the transform is added to an env
    ENV_ERR = (
        "Reward2GoTransform needs future rewards and cannot be part of an environment: use it "
        "on a replay buffer, where it runs when data is written"
    )

    def __init__(
        self,
        gamma: float | torch.Tensor = 1.0,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        done_key: NestedKey = "done",
    ) -> None:
        super().__init__(in_keys=_keys_or(in_keys, [("next", "reward")]), out_keys=out_keys)
        if isinstance(gamma, (int, float)) and not 0.0 <= gamma <= 1.0:
            raise ValueError(f"Reward2GoTransform gamma: expected a value in [0, 1], got {gamma}")
        self.gamma = gamma
        self.done_key = done_key

    def _reward_to_go(self, tensordict: TensorDictBase) -> TensorDictBase:
        dim = _time_dim(tensordict, "Reward2GoTransform")
        done_name = as_tuple(self.done_key)[-1]
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            reward = tensordict.get(in_key, None)
            if reward is None:
                raise KeyError(
                    f"Reward2GoTransform: Could not find the reward entry {in_key!r} in the "
                    f"data; got keys {list(tensordict.keys(True, True))}"
                )
            done = _trajectory_done(tensordict, in_key, reward.shape, (done_name, "truncated"))
            tensordict.set(out_key, _discounted_to_go(reward, done, self.gamma, dim))
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Samples are left unchanged: the returns were written when the data was stored."""
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._reward_to_go(tensordict)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(self.ENV_ERR)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Refuse to be part of an environment."""
        raise ValueError(self.ENV_ERR)

    def __repr__(self) -> str:
        return f"Reward2GoTransform(gamma={self.gamma}, in_keys={self.in_keys}, out_keys={self.out_keys})"


class _EpisodeTracker(Transform):
    """Shared plumbing of per-episode entries derived from reward entries.

    Subclasses define ``_default_out_key(in_key)``, ``_initial`` (the value at reset)
    and ``_update(previous, reward)`` (the value after a step).
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None,
        out_keys: Sequence[NestedKey] | NestedKey | None,
        reset_keys: Sequence[NestedKey] | NestedKey | None = None,
        shared_reset_key: NestedKey | None = None,
    ) -> None:
        # without in_keys, the env's reward keys are used (``"reward"`` until specs are known)
        self._given_in_keys = in_keys is not None
        self._given_out_keys = out_keys is not None
        super().__init__(in_keys=["reward"] if in_keys is None else in_keys, out_keys=out_keys)
        if not self._given_out_keys:
            self.out_keys = [self._default_out_key(key) for key in self.in_keys]
        self._check_keys()
        self._given_reset_keys = reset_keys is not None or shared_reset_key is not None
        self._shared_reset_key = shared_reset_key
        if shared_reset_key is not None:
            reset_keys = [shared_reset_key] * len(self.in_keys)
        #: one ``"_reset"`` key per in_key: given, or found in the env's specs
        self._reset_keys: list | None = None if reset_keys is None else self._as_keys(reset_keys)
        # (in_key, out_key, reset keys shallowest first, feature shape, dtype, device)
        self._entries: list[tuple] = []
        self._pairs: list[tuple] = list(zip(self.in_keys, self.out_keys))
        self._specs: dict = {}
        self._reset_error: str | None = None

    @staticmethod
    def _as_keys(keys: Any) -> list:
        return [keys] if isinstance(keys, (str, tuple)) else list(keys)

    def _check_keys(self) -> None:
        owner = type(self).__name__
        if len(self.in_keys) != len(self.out_keys):
            raise ValueError(
                f"{owner} expects the same number of input and output keys, got "
                f"{len(self.in_keys)} in_keys {self.in_keys} and {len(self.out_keys)} out_keys "
                f"{self.out_keys}"
            )
        if len(set(self.out_keys)) != len(self.out_keys):
            raise ValueError(f"{owner} out_keys: expected distinct keys, got {self.out_keys}")

    def _match_error(self, env_reset_keys: list | None) -> str:
        where = "" if env_reset_keys is None else f", each among the env's {env_reset_keys}"
        return (
            f"{type(self).__name__}: Could not match the env reset_keys {self._reset_keys} with "
            f"the in_keys {self.in_keys}: expected one reset key per in_key{where}"
        )

    @property
    def reset_keys(self) -> list:
        """The ``"_reset"`` key governing each in_key (given, or found in the env's specs)."""
        if self._reset_keys is None:
            raise TypeError(
                f"{type(self).__name__}: reset_keys not provided but parent env not found; give "
                "reset_keys or add the transform to an env"
            )
        return list(self._reset_keys)

    # ------------------------------------------------------------ env path
    def _standalone_entries(self) -> list[tuple]:
        """The entries of a transform used without env: keys only, shapes from the data."""
        reset_keys = self.reset_keys
        if len(reset_keys) != len(self.in_keys):
            raise ValueError(self._match_error(None))
        return [
            (in_key, out_key, [reset_key], None, None, None)
            for (in_key, out_key), reset_key in zip(self._pairs, reset_keys)
        ]

    def _data_template(self, tensordict: TensorDictBase, in_key: NestedKey, out_key: NestedKey):
        """Shape, dtype and device of an entry at reset, read from the data (no env)."""
        reward = tensordict.get(in_key, None)
        if reward is None:
            reward = tensordict.get(("next", *as_tuple(in_key)), None)
        previous = tensordict.get(out_key, None)
        for value in (previous, reward):
            if isinstance(value, torch.Tensor):
                dtype = value.dtype if value.is_floating_point() else None
                if dtype is None and isinstance(reward, torch.Tensor):
                    dtype = reward.dtype if reward.is_floating_point() else None
                return value.shape, dtype or torch.get_default_dtype(), value.device
        return None

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self._reset_error is not None:
            raise ValueError(self._reset_error)
        entries = self._entries or self._standalone_entries()
        batch = tensordict_reset.batch_size
        for in_key, out_key, reset_keys, shape, dtype, device in entries:
            if shape is None:
                found = self._data_template(tensordict, in_key, out_key)
                if found is None:
                    continue
                full_shape, dtype, device = found
            else:
                full_shape = (*batch, *shape)
            value = self._initial(full_shape, dtype, device)
            previous = fast_get(tensordict, out_key)
            if previous is not None and previous.shape == value.shape:
                mask = _first_mask(tensordict, reset_keys)
                if mask is not None and not all_true(mask):
                    mask = align_mask(mask, value.shape, "_reset", reset_keys[0], out_key)
                    value = torch.where(mask, value, previous)
            fast_set(tensordict_reset, out_key, value)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        update = self._update
        for in_key, out_key in self._pairs:
            reward = fast_get(next_tensordict, in_key)
            if reward is None:
                reward = next_tensordict.get(in_key)  # raises the usual KeyError
            previous = fast_get(tensordict, out_key)
            if previous is None:
                previous = self._initial(reward.shape, reward.dtype, reward.device)
            fast_set(next_tensordict, out_key, update(previous, reward))
        return next_tensordict

    # ------------------------------------------------------------ specs
    def _entry_spec(self, reward_spec: Any) -> Any:
        return Unbounded(
            shape=reward_spec.shape, device=reward_spec.device, dtype=reward_spec.dtype
        )

    def _resolve(self, output_spec: Any) -> None:
        """Fix the keys and per-entry data from the env's specs (done once per spec change)."""
        owner = type(self).__name__
        reward_spec = output_spec["full_reward_spec"]
        if not self._given_in_keys:
            self.in_keys = list(reward_spec.keys(True, True))
            if not self._given_out_keys:
                self.out_keys = [self._default_out_key(key) for key in self.in_keys]
            self._check_keys()
            if self._shared_reset_key is not None:
                self._reset_keys = [self._shared_reset_key] * len(self.in_keys)
        done_prefixes = _done_prefixes(output_spec["full_done_spec"])
        env_reset_keys = [from_tuple((*prefix, "_reset")) for prefix in sorted(done_prefixes)]
        given = self._reset_keys if self._given_reset_keys else None
        self._reset_error = None
        if given is not None and (
            len(given) != len(self.in_keys) or any(key not in env_reset_keys for key in given)
        ):
            self._reset_error = self._match_error(env_reset_keys)
        batch_dims = len(output_spec.shape)
        entries, specs, resolved_reset_keys = [], {}, []
        for index, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            sub = locate_spec(output_spec, ("full_reward_spec", "full_observation_spec"), in_key)
            if sub is None:
                raise KeyError(
                    KEY_SPEC_ERROR.format(
                        owner=owner,
                        kind="reward",
                        key=in_key,
                        keys=list(reward_spec.keys(True, True)),
                    )
                )
            leaf = sub[in_key]
            if given is not None and self._reset_error is None:
                reset_keys = [given[index]]
            else:
                reset_keys = _reset_candidates(in_key, done_prefixes) or ["_reset"]
            resolved_reset_keys.append(reset_keys[-1])
            entries.append(
                (in_key, out_key, reset_keys, leaf.shape[batch_dims:], leaf.dtype, leaf.device)
            )
            specs[out_key] = self._entry_spec(leaf)
        if given is None:
            self._reset_keys = resolved_reset_keys
        self._entries = entries
        self._pairs = [(entry[0], entry[1]) for entry in entries]
        self._specs = specs

    def _target_spec_entry(self) -> str:
        return "full_observation_spec"

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the tracked entries (shaped like their rewards) to the observation spec."""
        output_spec = super().transform_output_spec(output_spec)
        self._resolve(output_spec)
        target = output_spec[self._target_spec_entry()]
        for out_key, spec in self._specs.items():
            target[out_key] = spec.clone()
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Add the tracked entries to the state spec (the next step reads them)."""
        input_spec = super().transform_input_spec(input_spec)
        if "full_state_spec" in input_spec.keys():
            state_spec = input_spec["full_state_spec"]
            for out_key, spec in self._specs.items():
                state_spec[out_key] = spec.clone()
        return input_spec

    def __repr__(self) -> str:
        return f"{type(self).__name__}(in_keys={self.in_keys}, out_keys={self.out_keys})"


class RewardSum(_EpisodeTracker):
    """Tracks the return of the current episode (``episode_reward``) for each reward entry.

    At reset the sum restarts at zero (only where a ``"_reset"`` mask is True on a
    partial reset); each step adds the reward. By default every reward entry of
    the env is tracked, nested (multi-agent) ones included, each next to its
    reward (``("agents", "reward")`` -> ``("agents", "episode_reward")``). The sums
    are observations (and state, so batched envs carry them).

    Args:
        in_keys: the reward entries (default: all reward keys of the env, or
            ``["reward"]`` without env).
        out_keys: the sum entries (default: each in_key with its last element
            ``name`` replaced by ``"episode_<name>"``, e.g. ``"episode_reward"``).
        reset_keys: the ``"_reset"`` key governing each in_key (default: the one at
            the reward's level or the nearest level above it). Given keys must be reset
            keys of the env, one per in_key; a mismatch raises a ``ValueError`` at the
            first reset. Without env they are required by :meth:`_reset`.

    Keyword Args:
        reward_spec: list the sums in the reward spec rather than the observation spec.

    On trajectories that do not come from an env (``transform(td)``, buffer samples),
    the sums are computed along the time dim; rewards read under ``"next"`` restart
    after each ``("next", "done")``.

    Examples:
        >>> from tdrl.envs import GymEnv, RewardSum, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("CartPole-v1"), RewardSum())
        >>> check_env_specs(env)
        >>> rollout = env.rollout(3)
        >>> rollout["next", "episode_reward"].squeeze(-1)
        tensor([1., 2., 3.])
        >>> rollout["episode_reward"].squeeze(-1)
        tensor([0., 1., 2.])
    """

    @staticmethod
    def _default_out_key(in_key: NestedKey) -> NestedKey:
        return _replace_last(in_key, f"episode_{as_tuple(in_key)[-1]}")

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        reset_keys: Sequence[NestedKey] | NestedKey | None = None,
        *,
        reward_spec: bool = False,
    ) -> None:
        if in_keys is None and out_keys is not None:
            in_keys = ["reward"]
        super().__init__(in_keys, out_keys, reset_keys)
        self.reward_spec = bool(reward_spec)

    @staticmethod
    def _initial(shape: Any, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype, device=device)

    @staticmethod
    def _update(previous: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
        return previous + reward

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Compute the running sums along the time dim of trajectories (buffer samples, rollouts).

        Episodes restart after each done flag: ``("next", "done")`` for rewards read
        under ``"next"``, the root ``"done"`` for rewards read at the root. The sum
        including each step's reward is written at ``out_key``.
        """
        owner = type(self).__name__
        dim = _time_dim(tensordict, owner)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            reward = tensordict.get(in_key, None)
            if reward is None:
                raise KeyError(
                    f"{owner}: expected the reward entry {in_key!r} in the data, got keys "
                    f"{list(tensordict.keys(True, True))}"
                )
            root = ("next",) if as_tuple(in_key)[0] == "next" else ()
            done = _trajectory_done(tensordict, in_key, reward.shape, ("done",), root)
            tensordict.set(out_key, _episode_cumsum(reward, done, dim))
        return tensordict

    def _target_spec_entry(self) -> str:
        return "full_reward_spec" if self.reward_spec else "full_observation_spec"


class TargetReturn(_EpisodeTracker):
    """Gives the policy a return to achieve (``target_return``), e.g. for Decision Transformers.

    At reset the target is ``target_return`` (only where a ``"_reset"`` mask is True
    on a partial reset). With ``mode="reduce"`` each step subtracts the reward;
    with ``mode="constant"`` it stays the same.

    Args:
        target_return: the return to achieve.
        mode: ``"reduce"`` or ``"constant"``.
        in_keys: the reward entries (default: all reward keys of the env, or
            ``["reward"]`` without env).
        out_keys: the target entries (default: each in_key with its last element
            replaced by ``"target_return"``).
        reset_key: the ``"_reset"`` key to follow (default: the one at the reward's
            level or the nearest level above it).

    Examples:
        >>> from tdrl.envs import GymEnv, TargetReturn, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("CartPole-v1"), TargetReturn(10.0))
        >>> check_env_specs(env)
        >>> env.rollout(4)["target_return"].squeeze(-1)
        tensor([10.,  9.,  8.,  7.])
    """

    @staticmethod
    def _default_out_key(in_key: NestedKey) -> NestedKey:
        return _replace_last(in_key, "target_return")

    MODES = ("reduce", "constant")

    def __init__(
        self,
        target_return: float,
        mode: str = "reduce",
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        reset_key: NestedKey | None = None,
    ) -> None:
        if mode not in self.MODES:
            raise ValueError(f"TargetReturn mode: expected one of {self.MODES}, got {mode!r}")
        if not isinstance(target_return, (int, float)):
            raise TypeError(
                f"TargetReturn target_return: expected a number, got {type(target_return).__name__}"
            )
        if in_keys is None and out_keys is not None:
            in_keys = ["reward"]
        self.target_return = float(target_return)
        self.mode = mode
        super().__init__(in_keys, out_keys, shared_reset_key=reset_key)

    def _initial(self, shape: Any, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return torch.full(shape, self.target_return, dtype=dtype, device=device)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: targets are set at resets and updated at steps."""
        raise NotImplementedError(
            "TargetReturn cannot be executed without a parent env: the target is set at each "
            "reset and updated at each step of an env"
        )

    def _update(self, previous: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
        if self.mode == "constant":
            return previous.clone()
        return previous - reward

    def __repr__(self) -> str:
        return (
            f"TargetReturn(target_return={self.target_return}, mode={self.mode!r}, "
            f"in_keys={self.in_keys}, out_keys={self.out_keys})"
        )
