"""SyncDataCollector: runs a policy in an env and yields fixed-size batches of steps."""

from __future__ import annotations

import abc
import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.collectors.utils import _replace_last, split_trajectories
from tdrl.envs.common import EnvBase
from tdrl.envs.utils import ExplorationType, RandomPolicy, set_exploration_type, step_mdp

__all__ = ["DataCollectorBase", "SyncDataCollector"]

TRAJ_IDS_KEY = ("collector", "traj_ids")

Policy = Callable[[TensorDictBase], TensorDictBase]


class DataCollectorBase(abc.ABC):
    """Base of the data collectors: iteration protocol, length and the common interface.

    Subclasses implement :meth:`iterator`, :meth:`shutdown`, :meth:`set_seed`,
    :meth:`state_dict`, :meth:`load_state_dict` and :meth:`update_policy_weights_`.

    Examples:
        >>> from tdrl.collectors import DataCollectorBase, SyncDataCollector
        >>> issubclass(SyncDataCollector, DataCollectorBase)
        True
    """

    frames_per_batch: int
    total_frames: float

    def __iter__(self) -> Iterator[TensorDictBase]:
        return self.iterator()

    @abc.abstractmethod
    def iterator(self) -> Iterator[TensorDictBase]:
        """Yield the batches of collected data."""

    def next(self) -> TensorDictBase:
        """Collect and return the next batch (an iterator is kept between calls)."""
        iterator = self.__dict__.get("_iterator")
        if iterator is None:
            iterator = self._iterator = iter(self)
        try:
            return next(iterator)
        except StopIteration:
            self._iterator = None
            raise

    def __len__(self) -> int:
        if math.isinf(self.total_frames):
            raise RuntimeError(
                "a collector with total_frames=-1 runs forever and has no length; "
                "pass a positive total_frames to get one"
            )
        return -(-int(self.total_frames) // self.frames_per_batch)

    @abc.abstractmethod
    def shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Release the collector's resources."""

    @abc.abstractmethod
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the collector's env(s) and return the next seed."""

    @abc.abstractmethod
    def state_dict(self) -> OrderedDict:
        """Return the collector's state."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""

    @abc.abstractmethod
    def update_policy_weights_(self, policy_weights: Any = None) -> None:
        """Refresh the weights of the policy used for collection."""


def _make_env(create_env_fn: Any, create_env_kwargs: Mapping[str, Any] | None) -> EnvBase:
    if isinstance(create_env_fn, EnvBase):
        if create_env_kwargs:
            raise ValueError(
                "create_env_kwargs: expected None when an env instance is passed, got "
                f"{dict(create_env_kwargs)!r}"
            )
        return create_env_fn
    if not callable(create_env_fn):
        raise TypeError(
            "create_env_fn: expected an EnvBase or a callable returning one, got "
            f"{type(create_env_fn).__name__}"
        )
    env = create_env_fn(**(create_env_kwargs or {}))
    if not isinstance(env, EnvBase):
        raise TypeError(
            f"create_env_fn: expected the callable to return an EnvBase, got {type(env).__name__}"
        )
    return env


def _last(key: Any) -> str:
    return key if isinstance(key, str) else key[-1]


def _device(value: Any) -> torch.device | None:
    return None if value is None else torch.device(value)


class _DeviceCastPolicy:
    """Run a policy on its own device: move the data there and the result back."""

    def __init__(self, policy: Policy, policy_device: torch.device, env_device: Any) -> None:
        self.policy = policy
        self.policy_device = policy_device
        self.env_device = env_device

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.policy(tensordict.to(self.policy_device))
        return out.to(self.env_device)


class SyncDataCollector(DataCollectorBase):
    """Collect batches of ``frames_per_batch`` steps from an env, in the calling process.

    Each batch has batch size ``[*env.batch_size, T]`` with ``T = frames_per_batch /
    env.batch_size.numel()`` and its trailing dim named ``"time"``. Steps follow the env's
    rollout layout (root data, action, and the step output under ``"next"``) plus a
    ``("collector", "traj_ids")`` entry numbering trajectories: ids are unique over the whole
    collection, a new one is drawn each time an element of the env starts a new trajectory,
    and a trajectory cut by the end of a batch keeps its id in the next batch. Done elements
    are reset as the collection goes on; the env state is carried over from one batch to the
    next.

    Args:
        create_env_fn: an env, or a callable returning one (called with ``create_env_kwargs``).
        policy: a callable reading a tensordict and writing the action in it (a
            ``tensordict.nn.TensorDictModule`` for instance). Defaults to a
            :class:`~tdrl.envs.utils.RandomPolicy` of the env's full action spec.
        frames_per_batch: frames in each batch; rounded up (with a warning) to a multiple of
            the env's batch numel.
        total_frames: frames to collect before the iteration stops; ``-1`` never stops.
            When it is not a multiple of ``frames_per_batch`` the last batch ends past it.
        device: default of ``env_device``, ``policy_device`` and ``storing_device``.
        storing_device: where the yielded batches live.
        policy_device: where the policy runs; the data is moved there and back.
        env_device: where the env runs (the env is moved there).
        create_env_kwargs: keyword arguments of ``create_env_fn``.
        max_frames_per_traj: truncate trajectories longer than this (a ``StepCounter`` is
            appended to the env); ``None`` or ``0`` leaves them alone.
        init_random_frames: the batches started before this many frames are collected use
            random actions instead of the policy.
        reset_at_each_iter: reset the env at the start of every batch.
        postproc: a callable applied to each batch before it is yielded.
        split_trajs: yield :func:`~tdrl.collectors.split_trajectories` of each batch
            (``[n_traj, max_len]`` with a ``("collector", "mask")`` entry).
        exploration_type: the exploration type set while the policy runs.
        return_same_td: yield the same (overwritten) tensordict at every iteration instead
            of a new one; cheaper, but a kept batch changes at the next iteration.
        reset_when_done: reset the elements that are done; with False they are stepped on.
        set_truncated: mark the last step of each batch as truncated (and done).

    Examples:
        >>> from tdrl.collectors import SyncDataCollector
        >>> from tdrl.envs import PendulumEnv
        >>> collector = SyncDataCollector(PendulumEnv(), frames_per_batch=50, total_frames=200)
        >>> len(collector)
        4
        >>> for data in collector:
        ...     pass
        >>> data.batch_size, data.names
        (torch.Size([50]), ['time'])
        >>> data["collector", "traj_ids"].dtype
        torch.int64
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: EnvBase | Callable[..., EnvBase],
        policy: Policy | None = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Any = None,
        storing_device: Any = None,
        policy_device: Any = None,
        env_device: Any = None,
        create_env_kwargs: Mapping[str, Any] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        return_same_td: bool = False,
        reset_when_done: bool = True,
        set_truncated: bool = False,
    ) -> None:
        env = _make_env(create_env_fn, create_env_kwargs)
        self.env_device = _device(env_device if env_device is not None else device)
        self.policy_device = _device(policy_device if policy_device is not None else device)
        self.storing_device = _device(storing_device if storing_device is not None else device)
        if self.env_device is not None and env.device != self.env_device:
            env = env.to(self.env_device)
        if max_frames_per_traj:
            env = self._add_step_counter(env, max_frames_per_traj)
        self.env = env
        self.max_frames_per_traj = max_frames_per_traj
        self.policy = self._make_policy(policy)
        self.frames_per_batch = self._check_frames_per_batch(frames_per_batch)
        self.total_frames = self._check_total_frames(total_frames)
        self.requested_frames_per_batch = frames_per_batch
        self.init_random_frames = int(init_random_frames or 0)
        self.reset_at_each_iter = reset_at_each_iter
        self.postproc = postproc
        self.split_trajs = bool(split_trajs)
        self.exploration_type = exploration_type
        self.return_same_td = return_same_td
        self.reset_when_done = reset_when_done
        if set_truncated and not any(_last(key) == "truncated" for key in env.done_keys):
            raise ValueError(
                "set_truncated=True: expected a 'truncated' entry in the env done spec, got "
                f"done keys {env.done_keys}"
            )
        self.set_truncated = set_truncated
        n_envs = max(env.batch_size.numel(), 1)
        self._n_envs = n_envs
        self._time_steps = self.frames_per_batch // n_envs
        self._end_keys = self._end_of_traj_keys(env)
        self._shuttle: TensorDictBase | None = None
        self._buffer: TensorDictBase | None = None
        self._traj_ids = torch.arange(n_envs)
        self._next_traj_id = n_envs
        self._traj_starts = torch.zeros(n_envs, dtype=torch.bool)
        self._frames = 0
        self._iter = -1
        self._iterator: Iterator[TensorDictBase] | None = None
        self.closed = False

    # ----------------------------------------------------------------- set-up
    @staticmethod
    def _add_step_counter(env: EnvBase, max_frames_per_traj: int) -> EnvBase:
        from tdrl.envs.transforms import StepCounter, TransformedEnv

        for key in env.output_spec.keys(include_nested=True, leaves_only=True):
            if "step_count" in (key if isinstance(key, tuple) else (key,)):
                raise ValueError(
                    f"max_frames_per_traj={max_frames_per_traj}: expected an env without a "
                    f"'step_count' entry, got one at {key!r}; pass max_frames_per_traj=None "
                    "or drop the env's own StepCounter"
                )
        return TransformedEnv(env, StepCounter(max_steps=max_frames_per_traj))

    def _make_policy(self, policy: Policy | None) -> Policy:
        if policy is None:
            return RandomPolicy(self.env.full_action_spec)
        if not callable(policy):
            raise TypeError(
                "policy: expected a callable on tensordicts (e.g. a TensorDictModule), got "
                f"{type(policy).__name__}"
            )
        env_device = self.env.device
        if self.policy_device is not None and env_device is not None:
            if isinstance(policy, torch.nn.Module):
                policy = policy.to(self.policy_device)
            if self.policy_device != env_device:
                return _DeviceCastPolicy(policy, self.policy_device, env_device)
        return policy

    def _check_frames_per_batch(self, frames_per_batch: int) -> int:
        if not isinstance(frames_per_batch, int) or isinstance(frames_per_batch, bool):
            raise TypeError(
                f"frames_per_batch: expected an int, got {type(frames_per_batch).__name__}"
            )
        if frames_per_batch < 1:
            raise ValueError(f"frames_per_batch: expected a positive int, got {frames_per_batch}")
        n_envs = max(self.env.batch_size.numel(), 1)
        if frames_per_batch % n_envs:
            rounded = -(-frames_per_batch // n_envs) * n_envs
            warnings.warn(
                f"frames_per_batch={frames_per_batch} is not a multiple of the {n_envs} "
                f"elements of the env batch; each batch will hold {rounded} frames",
                stacklevel=3,
            )
            return rounded
        return frames_per_batch

    def _check_total_frames(self, total_frames: int | None) -> float:
        if total_frames is None or total_frames == -1:
            return math.inf
        if not isinstance(total_frames, int) or isinstance(total_frames, bool):
            raise TypeError(f"total_frames: expected an int, got {type(total_frames).__name__}")
        if total_frames < 1:
            raise ValueError(
                f"total_frames: expected a positive int or -1 (endless), got {total_frames}"
            )
        if total_frames % self.frames_per_batch:
            warnings.warn(
                f"total_frames={total_frames} is not a multiple of frames_per_batch="
                f"{self.frames_per_batch}; the last batch ends after "
                f"{-(-total_frames // self.frames_per_batch) * self.frames_per_batch} frames",
                stacklevel=3,
            )
        return total_frames

    @staticmethod
    def _end_of_traj_keys(env: EnvBase) -> list:
        keys = [key for key in env.done_keys if _last(key) == "done"]
        return keys or list(env.done_keys)

    # -------------------------------------------------------------- iteration
    def iterator(self) -> Iterator[TensorDictBase]:
        """Yield batches until ``total_frames`` frames have been collected."""
        while self._frames < self.total_frames:
            self._iter += 1
            data = self.rollout()
            self._frames += self.frames_per_batch
            if self.split_trajs:
                data = split_trajectories(data, prefix="collector")
            if self.postproc is not None:
                data = self.postproc(data)
            yield data

    @torch.no_grad()
    def rollout(self) -> TensorDictBase:
        """Collect one batch of ``frames_per_batch`` steps and return it."""
        env = self.env
        if self._shuttle is None or self.reset_at_each_iter:
            if self._shuttle is not None:
                self._traj_starts.fill_(True)
            self._shuttle = env.reset()
        if self._frames < self.init_random_frames:
            policy = env.rand_action
        else:
            policy = self.policy
        with set_exploration_type(self.exploration_type):
            if self.reset_when_done:
                data = self._rollout_resetting(policy)
            else:
                data = self._rollout_without_reset(policy)
        data.set(TRAJ_IDS_KEY, self._number_trajectories(data))
        if self.storing_device is not None and data.device != self.storing_device:
            data = data.to(self.storing_device)
        return data

    def _rollout_resetting(self, policy: Policy) -> TensorDictBase:
        out = self._buffer if self.return_same_td else None
        data = self.env.rollout(
            self._time_steps,
            policy,
            auto_reset=False,
            break_when_any_done=False,
            tensordict=self._shuttle,
            set_truncated=self.set_truncated,
            out=out,
        )
        if self.return_same_td:
            self._buffer = data
        # the root of the next batch; the env's rollout resets its done elements first
        self._shuttle = self._next_root(data)
        return data

    def _rollout_without_reset(self, policy: Policy) -> TensorDictBase:
        env = self.env
        shuttle = self._shuttle
        steps = []
        for _ in range(self._time_steps):
            shuttle = policy(shuttle)
            steps.append(env.step(shuttle))
            shuttle = self._step_mdp(shuttle)
        if self.set_truncated:
            self._mark_truncated(steps[-1].get("next"))
        time_dim = len(env.batch_size)
        if self.return_same_td and self._buffer is not None:
            data = torch.stack(steps, time_dim, out=self._buffer)
        else:
            data = torch.stack(steps, time_dim)
            data.refine_names(*([None] * time_dim), "time")
            if self.return_same_td:
                self._buffer = data
        self._shuttle = shuttle
        return data

    def _mark_truncated(self, next_data: TensorDictBase) -> None:
        for key in self.env.done_keys:
            if _last(key) in ("truncated", "done"):
                next_data.set(key, torch.ones_like(next_data.get(key)))

    def _step_mdp(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self.env
        return step_mdp(
            tensordict,
            reward_keys=env.reward_keys,
            done_keys=env.done_keys,
            action_keys=env.action_keys,
        )

    def _next_root(self, data: TensorDictBase) -> TensorDictBase:
        # a copy: the next batch must not read views of a buffer it overwrites
        return self._step_mdp(data[..., -1].clone())

    def _end_of_traj(self, next_data: TensorDictBase, batch: torch.Size) -> torch.Tensor:
        done = None
        for key in self._end_keys:
            value = next_data.get(key).reshape(*batch, -1).any(-1)
            done = value if done is None else done | value
        return done

    def _number_trajectories(self, data: TensorDictBase) -> torch.Tensor:
        """Trajectory ids of a batch ``[*B, T]``, continuing the numbering of the previous one.

        A trajectory starts after each done step (and at the first step of a batch following
        a reset); new ids are handed out in time order, then in env order within a step.
        """
        batch = data.batch_size
        steps = batch[-1]
        done = self._end_of_traj(data.get("next"), batch).reshape(self._n_envs, steps)
        starts = torch.empty_like(done)
        starts[:, 0] = self._traj_starts
        starts[:, 1:] = done[:, :-1]
        order = starts.t().reshape(-1)
        ranks = order.long().cumsum(0) - 1 + self._next_traj_id
        new_ids = ranks.reshape(steps, self._n_envs).t()
        time_index = torch.arange(steps).expand(self._n_envs, steps)
        last_start = torch.where(starts, time_index, -1).cummax(dim=1).values
        ids = torch.where(
            last_start >= 0,
            new_ids.gather(1, last_start.clamp(min=0)),
            self._traj_ids.unsqueeze(1),
        )
        self._next_traj_id += int(order.sum())
        self._traj_ids = ids[:, -1].clone()
        self._traj_starts = done[:, -1].clone()
        return ids.reshape(batch)

    # ------------------------------------------------------------- interface
    def reset(self, index: Any = None) -> None:
        """Reset the env before the next batch: all elements, or those selected by ``index``.

        Args:
            index: an index of the env batch dims (an int, a slice, a boolean mask...).
        """
        if index is None or self._shuttle is None:
            if self._shuttle is not None:
                self._traj_starts.fill_(True)
            self._shuttle = None
            return
        mask = torch.zeros(self.env.batch_size, dtype=torch.bool)
        mask[index] = True
        shuttle = self._shuttle
        for reset_key in self.env.reset_keys:
            shape = shuttle.get(_replace_last(reset_key, "done")).shape
            shuttle.set(reset_key, mask.reshape(*mask.shape, *([1] * (len(shape) - mask.ndim))))
        self._shuttle = self.env.reset(shuttle)
        self._traj_starts |= mask.reshape(-1)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the env (before the first batch for reproducible data) and return the next seed.

        Examples:
            >>> from tdrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(), frames_per_batch=10, total_frames=10)
            >>> isinstance(collector.set_seed(0), int)
            True
        """
        return self.env.set_seed(seed, static_seed=static_seed)

    def update_policy_weights_(self, policy_weights: Any = None) -> None:
        """Load new weights into the collection policy.

        Args:
            policy_weights: a ``TensorDict`` of parameters (as built by
                ``TensorDict.from_module``) or a state dict; None is a no-op, since this
                collector runs the policy object it was given.
        """
        if policy_weights is None:
            return
        policy = self.policy.policy if isinstance(self.policy, _DeviceCastPolicy) else self.policy
        if not isinstance(policy, torch.nn.Module):
            raise TypeError(
                "update_policy_weights_: expected the collector's policy to be a torch.nn.Module "
                f"to receive weights, got {type(policy).__name__}"
            )
        if isinstance(policy_weights, TensorDictBase):
            TensorDict.from_module(policy).data.update_(policy_weights)
        elif isinstance(policy_weights, Mapping):
            policy.load_state_dict(policy_weights)
        else:
            raise TypeError(
                "policy_weights: expected a TensorDict or a state dict, got "
                f"{type(policy_weights).__name__}"
            )

    def state_dict(self) -> OrderedDict:
        """The env and policy states with the frame and iteration counters.

        Examples:
            >>> from tdrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(), frames_per_batch=10, total_frames=10)
            >>> sorted(collector.state_dict())
            ['env_state_dict', 'frames', 'iter', 'policy_state_dict']
        """
        policy = self.policy.policy if isinstance(self.policy, _DeviceCastPolicy) else self.policy
        state = OrderedDict(
            env_state_dict=self.env.state_dict(),
            policy_state_dict=policy.state_dict() if hasattr(policy, "state_dict") else {},
        )
        state["frames"] = self._frames
        state["iter"] = self._iter
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict`."""
        policy = self.policy.policy if isinstance(self.policy, _DeviceCastPolicy) else self.policy
        if "env_state_dict" in state_dict:
            self.env.load_state_dict(state_dict["env_state_dict"])
        if state_dict.get("policy_state_dict") and hasattr(policy, "load_state_dict"):
            policy.load_state_dict(state_dict["policy_state_dict"])
        self._frames = state_dict.get("frames", self._frames)
        self._iter = state_dict.get("iter", self._iter)

    def shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop collecting and close the env (unless ``close_env=False``)."""
        self._iterator = None
        if close_env and not self.closed and not self.env.is_closed:
            self.env.close()
        self.closed = True

    def __repr__(self) -> str:
        total = "endless" if math.isinf(self.total_frames) else int(self.total_frames)
        return (
            f"{type(self).__name__}(env={type(self.env).__name__}, "
            f"batch_size={list(self.env.batch_size)}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={total}, frames={self._frames})"
        )
