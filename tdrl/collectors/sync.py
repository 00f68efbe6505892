"""SyncDataCollector: runs a policy in an env and yields fixed-size batches of steps."""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from tdrl.collectors.base import (
    DataCollectorBase,
    Policy,
    as_weights,
    check_frames,
    make_env,
    make_policy,
)
from tdrl.collectors.policy import (
    DeviceCastPolicy,
    RandomPhasePolicy,
    register_policy_transforms,
    unwrap_policy,
)
from tdrl.collectors.utils import _replace_last
from tdrl.envs._policy_call import policy_caller
from tdrl.envs.common import EnvBase
from tdrl.envs.utils import ExplorationType, RandomPolicy, set_exploration_type, step_mdp

__all__ = ["DataCollectorBase", "SyncDataCollector"]

TRAJ_IDS_KEY = ("collector", "traj_ids")


def _last(key: Any) -> str:
    return key if isinstance(key, str) else key[-1]


def _device(value: Any) -> torch.device | None:
    return None if value is None else torch.device(value)


def _has_dynamic_specs(env: EnvBase) -> bool:
    """Whether a leaf spec of the env has a dim of varying size (-1)."""
    for spec in (env.output_spec, env.input_spec):
        for key in spec.keys(include_nested=True, leaves_only=True):
            if -1 in tuple(spec[key].shape):
                return True
    return False


class SyncDataCollector(DataCollectorBase):
    """Collect batches of ``frames_per_batch`` steps from an env, in the calling process.

    Each batch has batch size ``[*env.batch_size, T]`` with ``T = frames_per_batch /
    env.batch_size.numel()`` and its trailing dim named ``"time"``. Steps follow the env's
    rollout layout (root data, action, and the step output under ``"next"``) plus a
    ``("collector", "traj_ids")`` entry numbering trajectories: ids are unique over the whole
    collection, a new one is drawn each time an element of the env starts a new trajectory,
    and a trajectory cut by the end of a batch keeps its id in the next batch. Done elements
    are reset as the collection goes on; the env state is carried over from one batch to the
    next. Entries whose key has a part starting with ``"_"`` are left out of the batches.

    Args:
        create_env_fn: an env, or a callable returning one (called with ``create_env_kwargs``).
        policy: a callable reading a tensordict and writing the action in it (a
            ``tensordict.nn.TensorDictModule`` for instance). Defaults to a
            :class:`~tdrl.envs.utils.RandomPolicy` of the env's full action spec.
        policy_factory: a callable building the policy (instead of ``policy``).
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
            random actions instead of the policy. Their steps carry the same entries as the
            policy's steps (zeros where the policy would have written its outputs), so both
            kinds of batches fit in one replay buffer; to learn those entries the policy is
            called once, on the first random batch's first step.
        reset_at_each_iter: reset the env at the start of every batch.
        postproc: a callable applied to each batch before it is yielded.
        split_trajs: yield :func:`~tdrl.collectors.split_trajectories` of each batch
            (``[n_traj, max_len]`` with a ``("collector", "mask")`` entry).
        exploration_type: the exploration type set while the policy runs.
        return_same_td: yield the same (overwritten) tensordict at every iteration instead
            of a new one; cheaper, but a kept batch changes at the next iteration.
        reset_when_done: reset the elements that are done; with False they are stepped on.
        set_truncated: mark the last step of each batch as truncated (and done).
        use_buffers: accepted for compatibility; this collector stacks each batch once
            (there is no separate preallocated-buffer mode in a single process).
        replay_buffer: a replay buffer the collector extends with every batch (or every
            group of ``trajs_per_batch`` trajectories, concatenated); iterating then
            yields None once per collected batch, and :meth:`start` collects in the
            background.
        trajs_per_batch: yield batches of this many whole trajectories instead of
            fixed-size batches (unfinished trajectories are kept until they end).
        traj_format: the layout of those batches: ``"padded"`` (default; ``[N, T_max]``
            with a ``("collector", "mask")`` entry) or ``"cat"`` (``[sum of lengths]``).
        compact_obs: leave the observation and state entries out of ``"next"`` (the root
            entries of step ``t + 1`` hold them within a trajectory); halves the memory of
            observations.
        track_traj_ids: write the ``("collector", "traj_ids")`` entry.
        trust_policy: accepted for compatibility; the policy is always called as given.
        auto_register_policy_transforms: when True, a policy whose modules describe the
            recurrent state they need (a ``make_tensordict_primer()`` method) gets the env
            transforms that provide it: an :class:`~tdrl.envs.InitTracker` (unless the env
            already writes ``"is_init"``) and those primers (unless their entries exist).

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
        policy_factory: Callable[[], Policy] | None = None,
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
        use_buffers: bool | None = None,
        replay_buffer: Any = None,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
        compact_obs: bool = False,
        track_traj_ids: bool = True,
        trust_policy: bool | None = None,
        auto_register_policy_transforms: bool | None = None,
    ) -> None:
        env = make_env(create_env_fn, create_env_kwargs)
        policy = make_policy(policy, policy_factory)
        self.env_device = _device(env_device if env_device is not None else device)
        self.policy_device = _device(policy_device if policy_device is not None else device)
        self.storing_device = _device(storing_device if storing_device is not None else device)
        if self.env_device is not None and env.device != self.env_device:
            env = env.to(self.env_device)
        if max_frames_per_traj:
            env = self._add_step_counter(env, max_frames_per_traj)
        if auto_register_policy_transforms:
            env = register_policy_transforms(env, policy)
        self.env = env
        self.max_frames_per_traj = max_frames_per_traj
        self.policy = self._make_policy(policy)
        self.frames_per_batch = self._check_frames_per_batch(frames_per_batch)
        self.total_frames = self._check_total_frames(total_frames)
        self.requested_frames_per_batch = frames_per_batch
        self.init_random_frames = int(init_random_frames or 0)
        self.reset_at_each_iter = reset_at_each_iter
        self.exploration_type = exploration_type
        self.return_same_td = return_same_td
        self.reset_when_done = reset_when_done
        self.use_buffers = use_buffers
        self.trust_policy = trust_policy
        self.compact_obs = bool(compact_obs)
        self.track_traj_ids = bool(track_traj_ids)
        if set_truncated and not any(_last(key) == "truncated" for key in env.done_keys):
            raise ValueError(
                "set_truncated=True: expected a 'truncated' entry in the env done spec, got "
                f"done keys {env.done_keys}"
            )
        self.set_truncated = set_truncated
        self._set_pipeline(
            split_trajs=split_trajs,
            postproc=postproc,
            replay_buffer=replay_buffer,
            trajs_per_batch=trajs_per_batch,
            traj_format=traj_format,
        )
        n_envs = max(env.batch_size.numel(), 1)
        self._n_envs = n_envs
        self._time_steps = self.frames_per_batch // n_envs
        self._end_keys = self._end_of_traj_keys(env)
        self._compact_keys = self._next_observation_keys(env) if self.compact_obs else []
        # envs whose entries change shape from step to step give lazily stacked batches
        self._contiguous = not _has_dynamic_specs(env)
        self._random_policy: RandomPhasePolicy | None = None
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
        if isinstance(policy, RandomPolicy):
            policy.set_action_spec_from_env(self.env)
        env_device = self.env.device
        if self.policy_device is not None and env_device is not None:
            if isinstance(policy, torch.nn.Module):
                policy = policy.to(self.policy_device)
            if self.policy_device != env_device:
                return DeviceCastPolicy(policy, self.policy_device, env_device)
        return policy

    def _check_frames_per_batch(self, frames_per_batch: int) -> int:
        frames_per_batch, _ = check_frames(frames_per_batch, None)
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
        _, total_frames = check_frames(self.frames_per_batch, total_frames)
        if not math.isinf(total_frames) and total_frames % self.frames_per_batch:
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

    @staticmethod
    def _next_observation_keys(env: EnvBase) -> list:
        """The ``("next", ...)`` keys that ``compact_obs`` leaves out."""
        keys = [*env.full_observation_spec.keys(True, True), *env.full_state_spec.keys(True, True)]
        return [("next", *(key if isinstance(key, tuple) else (key,))) for key in keys]

    # -------------------------------------------------------------- iteration
    def _raw_batches(self) -> Iterator[TensorDictBase]:
        """Yield collected batches until ``total_frames`` frames have been collected."""
        while self._frames < self.total_frames:
            self._iter += 1
            data = self.rollout()
            self._frames += self.frames_per_batch
            yield data

    @torch.no_grad()
    def rollout(self) -> TensorDictBase:
        """Collect one batch of ``frames_per_batch`` steps and return it."""
        return self._collect(random=self._frames < self.init_random_frames)

    def _collect(self, random: bool) -> TensorDictBase:
        """One batch, with random actions (``random=True``) or the policy."""
        env = self.env
        if self._shuttle is None or self.reset_at_each_iter:
            if self._shuttle is not None:
                self._traj_starts.fill_(True)
            self._shuttle = env.reset()
        if random:
            if self._random_policy is None:
                with set_exploration_type(self.exploration_type):
                    self._random_policy = RandomPhasePolicy(env, self.policy, self._shuttle)
            policy = self._random_policy
        else:
            policy = self.policy
        with set_exploration_type(self.exploration_type):
            if self.reset_when_done:
                data = self._rollout_resetting(policy)
            else:
                data = self._rollout_without_reset(policy)
        if self._compact_keys:
            data = data.exclude(*self._compact_keys)
        if self.track_traj_ids:
            data.set(TRAJ_IDS_KEY, self._number_trajectories(data))
        if self.storing_device is not None and data.device != self.storing_device:
            data = data.to(self.storing_device)
        return data

    def _rollout_resetting(self, policy: Policy) -> TensorDictBase:
        out = self._buffer if self.return_same_td and self._contiguous else None
        hooks = self.env._post_step_hooks()
        kept: list = []
        callback = self._keep_last_input(hooks, kept) if hooks else None
        data = self.env.rollout(
            self._time_steps,
            policy,
            callback=callback,
            auto_reset=False,
            break_when_any_done=False,
            tensordict=self._shuttle,
            set_truncated=self.set_truncated,
            out=out,
            return_contiguous=self._contiguous,
        )
        if self.return_same_td:
            self._buffer = data
        # the root of the next batch; the env's rollout resets its done elements first
        self._shuttle = kept[0] if kept else self._next_root(data)
        return data

    def _keep_last_input(self, hooks: tuple, kept: list) -> Callable[..., None]:
        """A rollout callback building the next batch's root from the last step.

        The env's post-step hooks may drop next observations from the stepped data once
        the loop stops, so the root is built (and the hooks run on it) before they do.
        """
        left = [self._time_steps]

        def callback(env: Any, tensordict: TensorDictBase) -> None:
            left[0] -= 1
            if left[0] == 0:
                next_input = self._step_mdp(tensordict)
                for hook in hooks:
                    hook(tensordict, next_input)
                kept.append(next_input)

        return callback

    def _rollout_without_reset(self, policy: Policy) -> TensorDictBase:
        env = self.env
        shuttle = self._shuttle
        steps = []
        hooks = env._post_step_hooks()
        call = policy_caller(policy)
        for _ in range(self._time_steps):
            shuttle = call(shuttle)
            stepped = env.step(shuttle)
            steps.append(stepped)
            shuttle = self._step_mdp(stepped)
            for hook in hooks:
                hook(stepped, shuttle)
        if self.set_truncated:
            self._mark_truncated(steps[-1].get("next"))
        time_dim = len(env.batch_size)
        if not self._contiguous:
            data = LazyStackedTensorDict(*steps, stack_dim=time_dim, stack_dim_name="time")
        elif self.return_same_td and self._buffer is not None:
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

        Unfinished and queued trajectories of ``trajs_per_batch`` are dropped.

        Args:
            index: an index of the env batch dims (an int, a slice, a boolean mask...).
        """
        self._clear_pipeline()
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

    @torch.no_grad()
    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled batch with the keys, batch size and dim names of a real one.

        The policy is called once, on the env's zero-filled step data, to learn its outputs.

        Examples:
            >>> from tdrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(), frames_per_batch=10)
            >>> fake = collector.fake_tensordict()
            >>> fake.batch_size, fake.names
            (torch.Size([10]), ['time'])
        """
        step = self.env.fake_tensordict()
        root = step.exclude("next")
        with set_exploration_type(self.exploration_type):
            out = self.policy(root)
        if out is not root:
            root.update(out)
        next_data = root.get("next", None)
        if next_data is None:
            root.set("next", step.get("next"))
        else:
            next_data.update(step.get("next"))
        step = root
        time_dim = len(self.env.batch_size)
        data = step.unsqueeze(time_dim).expand(*self.env.batch_size, self._time_steps).clone()
        data = data.apply(torch.zeros_like)
        data.refine_names(*([None] * time_dim), "time")
        if self._compact_keys:
            data = data.exclude(*self._compact_keys)
        if self.track_traj_ids:
            data.set(TRAJ_IDS_KEY, torch.zeros(data.batch_size, dtype=torch.int64))
        if self._exclude_private_keys:
            from tdrl.collectors.base import _drop_private_keys

            data = _drop_private_keys(data)
        if self.storing_device is not None:
            data = data.to(self.storing_device)
        return data

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the env (before the first batch for reproducible data) and return the next seed.

        Examples:
            >>> from tdrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(), frames_per_batch=10, total_frames=10)
            >>> isinstance(collector.set_seed(0), int)
            True
        """
        return self.env.set_seed(seed, static_seed=static_seed)

    def update_policy_weights_(self, policy_weights: Any = None, **kwargs: Any) -> None:
        """Load new weights into the collection policy.

        Args:
            policy_weights: a ``TensorDict`` of parameters (as built by
                ``TensorDict.from_module``), a module holding them, or a state dict; None is
                a no-op, since this collector runs the policy object it was given.
            **kwargs: ``weights=`` is accepted as another name of ``policy_weights``.
        """
        if policy_weights is None:
            policy_weights = kwargs.pop("weights", None)
        if kwargs:
            raise TypeError(
                f"update_policy_weights_: unexpected keyword arguments {sorted(kwargs)}"
            )
        if policy_weights is None:
            return
        policy = unwrap_policy(self.policy)
        if not isinstance(policy, torch.nn.Module):
            raise TypeError(
                "update_policy_weights_: expected the collector's policy to be a torch.nn.Module "
                f"to receive weights, got {type(policy).__name__}"
            )
        if isinstance(policy_weights, Mapping) and not isinstance(policy_weights, TensorDictBase):
            policy.load_state_dict(policy_weights)
            return
        TensorDict.from_module(policy).data.update_(as_weights(policy_weights))

    def state_dict(self) -> OrderedDict:
        """The env and policy states with the frame and iteration counters.

        Examples:
            >>> from tdrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(), frames_per_batch=10, total_frames=10)
            >>> sorted(collector.state_dict())
            ['env_state_dict', 'frames', 'iter', 'policy_state_dict']
        """
        policy = unwrap_policy(self.policy)
        state = OrderedDict(
            env_state_dict=self.env.state_dict(),
            policy_state_dict=policy.state_dict() if hasattr(policy, "state_dict") else {},
        )
        state["frames"] = self._frames
        state["iter"] = self._iter
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict`."""
        policy = unwrap_policy(self.policy)
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
