"""Gymnasium / gym environments as tdrl envs: :class:`GymWrapper` and :class:`GymEnv`.

The wrapper converts the simulator's spaces to specs once, when it is built, and prepares
every conversion the step needs (observation readers, the action writer, reward and done
tensors), so a step is the simulator call plus a few tensor constructions. gymnasium (or gym)
is imported only when a wrapper is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.envs._columnar import Handover, policy_source
from tdrl.envs._slot_pool import SlotPool
from tdrl.envs._td_fast import all_true, fast_get
from tdrl.envs.gym_like import BaseInfoDictReader, GymLikeEnv, default_info_dict_reader
from tdrl.envs.libs import _gym_builders as builders
from tdrl.envs.libs._gym_backend import gym_backend, set_gym_backend
from tdrl.envs.libs._gym_plan import GymStepPlan, fast_path_blocker
from tdrl.envs.libs._gym_spaces import (
    SpaceCodec,
    gym_space_to_spec,
    is_dict_space,
    make_space_codec,
    spec_to_gym_space,
)
from tdrl.envs.libs._gym_vector import VecGymEnvTransform

__all__ = [
    "GymEnv",
    "GymWrapper",
    "VecGymEnvTransform",
    "default_info_dict_reader",
    "gym_backend",
    "gym_space_to_spec",
    "set_gym_backend",
    "spec_to_gym_space",
]

_DONE_KEYS = ("done", "terminated", "truncated")
_CPU = torch.device("cpu")


class _AvailableEnvs:
    """Class-level attribute listing the ids registered in the current gym backend."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        try:
            return list(gym_backend().registry.keys())
        except ModuleNotFoundError:
            return []


def _is_vector_env(env: Any) -> bool:
    return hasattr(env, "num_envs") and hasattr(env, "single_observation_space")


def _validate_frame_skip(frame_skip: int | None) -> int:
    if frame_skip is None:
        return 1
    if isinstance(frame_skip, bool) or not isinstance(frame_skip, (int, np.integer)):
        raise TypeError(f"frame_skip: expected a positive int, got {type(frame_skip).__name__}")
    if frame_skip < 1:
        raise ValueError(f"frame_skip: expected a positive int, got {frame_skip}")
    return int(frame_skip)


def _render_mode(env: Any) -> str | None:
    mode = getattr(env, "render_mode", None)
    if mode is None and hasattr(env, "get_wrapper_attr"):
        try:
            mode = env.get_wrapper_attr("render_mode")
        except AttributeError:
            mode = None
    return mode


class GymWrapper(GymLikeEnv):
    """Wraps an already-built gymnasium (or gym >= 0.26) environment.

    Spaces become specs (see :func:`gym_space_to_spec`): a dict observation space gives one entry
    per key, any other space an ``"observation"`` entry. The action is read from ``"action"``;
    ``"reward"`` (float32, shape ``(1,)``), ``"terminated"``, ``"truncated"`` and ``"done"``
    (their or) come from the five-value ``step`` API. Numpy data becomes tensors without a copy
    where the dtype allows it.

    A vector env (``gymnasium.vector.VectorEnv``) gives a batched env of batch size
    ``[num_envs]``; it is returned inside a :class:`~tdrl.envs.TransformedEnv` with a
    :class:`VecGymEnvTransform`, which keeps episode boundaries TED-correct: the last
    observation of an episode is under ``"next"`` and the reset observation at the root of the
    following step.

    Args:
        env: the environment to wrap.
        categorical_action_encoding: when True, discrete spaces give integer specs
            (:class:`Categorical`); by default they give one-hot specs.

    Keyword Args:
        from_pixels: add a ``"pixels"`` entry (uint8, ``(H, W, 3)``) rendered after each step;
            the env must have ``render_mode="rgb_array"``.
        pixels_only: with ``from_pixels``, drop the simulator's own observations.
        frame_skip: repeat each action this many times, summing the rewards (stops early
            when the episode ends).
        device: the device of the data; simulator data is moved there.
        batch_size: must match the env's own batch size (``[num_envs]`` for vector envs,
            ``[]`` otherwise) when given.
        allow_done_after_reset: do not raise if the simulator reports done right after reset.
        convert_actions_to_numpy: convert actions to numpy before calling ``step`` (set False
            for simulators that take tensors).
        missing_obs_value: value written in the final observation of a vector env episode
            when the simulator did not report it.
        auto_reset: the env resets done elements itself in ``_step`` (see "Auto-resetting
            Envs"); ``auto_reset_replace`` then masks the last observation of each episode.
        auto_reset_replace: see ``auto_reset``.
        run_type_checks: check actions and outputs against the specs at each step.
        spec_locked: lock the specs against in-place edits.

    Examples:
        >>> import gymnasium
        >>> from tdrl.envs.libs.gym import GymWrapper
        >>> env = GymWrapper(gymnasium.make("Pendulum-v1"))
        >>> env.action_spec.shape, env.observation_spec["observation"].shape
        (torch.Size([1]), torch.Size([3]))
        >>> rollout = env.rollout(5)
        >>> sorted(rollout["next"].keys())
        ['done', 'observation', 'reward', 'terminated', 'truncated']
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Builds the env; a vector env comes back inside a ``TransformedEnv``."""
        instance = super().__new__(cls)
        if not cls._wants_vector(args, kwargs):
            return instance
        from tdrl.envs.transforms.transformed_env import TransformedEnv

        instance.__init__(*args, **kwargs)
        return TransformedEnv(instance, VecGymEnvTransform())

    available_envs = _AvailableEnvs()

    @classmethod
    def _wants_vector(cls, args: tuple, kwargs: dict) -> bool:
        env = args[0] if args else kwargs.get("env")
        return env is not None and _is_vector_env(env)

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = False,
        *,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        allow_done_after_reset: bool = False,
        convert_actions_to_numpy: bool = True,
        missing_obs_value: Any = np.nan,
        auto_reset: bool = False,
        auto_reset_replace: bool = True,
        run_type_checks: bool = False,
        spec_locked: bool = True,
    ) -> None:
        if env is None:
            raise TypeError("GymWrapper: expected a gym environment as `env`, got None")
        if not hasattr(env, "step") or not hasattr(env, "reset"):
            raise TypeError(
                f"GymWrapper env: expected a gym-like env with reset() and step(), got "
                f"{type(env).__name__}"
            )
        vector = _is_vector_env(env)
        env_batch = torch.Size([env.num_envs] if vector else [])
        if batch_size is not None and torch.Size(batch_size) != env_batch:
            raise ValueError(
                f"GymWrapper batch_size: expected {tuple(env_batch)} (the env's own batch size), "
                f"got {tuple(torch.Size(batch_size))}"
            )
        config = self.__dict__
        config["categorical_action_encoding"] = categorical_action_encoding
        config["from_pixels"] = from_pixels
        config["pixels_only"] = pixels_only
        config["_missing_obs_value"] = missing_obs_value
        config["_is_batched"] = vector
        config["_autoreset"] = builders.autoreset_mode(env) if vector else None
        if from_pixels and _render_mode(env) != "rgb_array":
            raise ValueError(
                "GymWrapper from_pixels: expected an env made with render_mode='rgb_array', got "
                f"render_mode={_render_mode(env)!r}"
            )
        super().__init__(
            env=env,
            device=device,
            batch_size=env_batch,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            auto_reset=auto_reset,
            auto_reset_replace=auto_reset_replace,
            frame_skip=_validate_frame_skip(frame_skip),
            convert_actions_to_numpy=convert_actions_to_numpy,
        )

    # ------------------------------------------------------------------ construction
    def _check_kwargs(self, kwargs: dict) -> None:
        self._check_vector_mode(kwargs["env"])

    def _build_env(self, env: Any) -> Any:
        return env

    def _check_vector_mode(self, env: Any) -> None:
        if not self._is_batched:
            return
        mode = self._autoreset
        if mode == builders.AUTORESET_SAME_STEP:
            if self.from_pixels:
                raise ValueError(
                    "GymWrapper from_pixels: a vector env that auto-resets in the same step "
                    "renders the reset frame, not the episode's last one; expected "
                    "autoreset_mode NEXT_STEP, got SAME_STEP"
                )
            return
        if not builders.supports_reset_mask(env):
            raise ValueError(
                f"GymWrapper: the vector env {type(env).__name__} auto-resets in mode {mode!r} "
                "but cannot reset a subset of its envs (options['reset_mask']); expected a "
                "gymnasium SyncVectorEnv / AsyncVectorEnv, or autoreset_mode SAME_STEP"
            )

    def _make_specs(self, env: Any) -> None:
        batch = tuple(self.batch_size)
        device = self.device
        obs_space = env.single_observation_space if self._is_batched else env.observation_space
        action_space = env.single_action_space if self._is_batched else env.action_space
        categorical = self.categorical_action_encoding
        self._action_codec: SpaceCodec = make_space_codec(action_space, batch, categorical, device)
        self._obs_is_dict = is_dict_space(obs_space)
        if self._obs_is_dict:
            codecs = {
                str(key): make_space_codec(sub, batch, categorical, device)
                for key, sub in obs_space.spaces.items()
            }
        else:
            codecs = {"observation": make_space_codec(obs_space, batch, categorical, device)}
        if self._is_batched:
            self._single_obs_codec = make_space_codec(obs_space, (), categorical, device)
        obs_entries: dict[str, Any] = {}
        self._obs_readers: list[tuple[str, Callable[[Any], Any]]] = []
        if not (self.from_pixels and self.pixels_only):
            for key, codec in codecs.items():
                obs_entries[key] = codec.spec
                self._obs_readers.append((key, codec.read))
        self._obs_codecs: dict[str, SpaceCodec] = {key: codecs[key] for key, _ in self._obs_readers}
        if self.from_pixels:
            env.reset()
            frame = self._render()
            obs_entries["pixels"] = Bounded(
                0, 255, shape=frame.shape, dtype=torch.uint8, device=device
            )
        if self._autoreset == builders.AUTORESET_SAME_STEP:
            state_keys = [key for key in obs_entries if key != "pixels"]
            obs_entries["final"] = Composite(
                {key: obs_entries[key].clone() for key in state_keys}, shape=batch, device=device
            )
        self.observation_spec = Composite(obs_entries, shape=batch, device=device)
        self.full_action_spec = Composite(
            action=self._action_codec.spec, shape=batch, device=device
        )
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device)
        self.done_spec = Composite(
            {
                key: Categorical(2, shape=(*batch, 1), dtype=torch.bool, device=device)
                for key in _DONE_KEYS
            },
            shape=batch,
            device=device,
        )
        self._flag_shape = torch.Size((*batch, 1))
        if not batch:
            self.__dict__["_flag_pool"] = SlotPool(torch.bool)
            self.__dict__["_reward_pool"] = SlotPool(torch.float32)
        self.__dict__["_last_obs"] = None
        self.__dict__["_step_plan"] = self._make_step_plan()

    def _make_step_plan(self) -> GymStepPlan:
        """The step plan of this env (a subclass with other conversions returns its own)."""
        return GymStepPlan(self)

    # ------------------------------------------------------------------ data conversion
    def _render(self) -> np.ndarray:
        frames = self._env.render()
        if self._is_batched:
            return np.stack(frames)
        return frames

    def _make_td(self, source: dict[str, Any], nested: bool = False) -> TensorDictBase:
        """Builds a tensordict of the env's batch size from simulator data (on the CPU).

        On an accelerator env the top-level tensordict is built on the CPU and moved at once;
        ``nested`` ones are left for their parent to move.
        """
        device = self.device
        if device is None or device.type == "cpu":
            return TensorDict._new_unsafe(source, batch_size=self.batch_size, device=device)
        data = TensorDict._new_unsafe(source, batch_size=self.batch_size, device=_CPU)
        return data if nested else data.to(device, non_blocking=True)

    def _read_info(self, info: Any, out: TensorDictBase) -> None:
        for reader in self._info_dict_reader:
            reader(info, out)

    # ------------------------------------------------------------------ env protocol
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = fast_get(tensordict, "action")
        if action is None:
            action = tensordict.get("action", None)
            if action is None:
                raise KeyError(
                    f"{type(self).__name__} step: expected an 'action' entry in the input, got "
                    f"the keys {sorted(map(str, tensordict.keys()))}"
                )
        plan = self._step_plan
        source, reward, terminated, truncated, info = plan.step(action)
        if self._is_batched:
            self.__dict__["_last_obs"] = source
            if self._autoreset == builders.AUTORESET_SAME_STEP:
                source = dict(source)
                source["final"] = self._final_obs(source, terminated, truncated, info)
        source["reward"] = plan.reward(reward)
        source.update(plan.flags(terminated, truncated))
        out = self._make_td(source)
        if self._info_dict_reader:
            self._read_info(info, out)
        return out

    @property
    def step_path(self) -> str:
        """Which path a step of this env takes now: ``"fast"`` or ``"generic (<reason>)"``.

        ``"fast"``: a rollout without a policy, or with a plain ``TensorDictModule`` policy
        reading observations (so a :class:`~tdrl.collectors.SyncDataCollector` batch too),
        keeps its steps in columns, and a batched env steps this env in place in its buffers,
        all through the same step plan as ``_step`` and with the same data; other policies
        run the generic loop. Any configuration or method override that changes a step
        makes every caller run the generic path (and the overriding method).
        """
        blocker = fast_path_blocker(self, GymWrapper)
        return "fast" if blocker is None else f"generic ({blocker})"

    def _random_rollout(
        self, max_steps: int, break_when_any_done: bool, set_truncated: bool
    ) -> TensorDictBase | None:
        """Random-action rollouts on the fast path of the step plan (see :attr:`step_path`)."""
        if fast_path_blocker(self, GymWrapper) is not None:
            return None
        return self._step_plan.columnar_rollout(max_steps, break_when_any_done, set_truncated)

    def _policy_rollout(
        self,
        call: Callable[[TensorDictBase], TensorDictBase],
        tensordict: TensorDictBase,
        max_steps: int,
        break_when_any_done: bool,
        set_truncated: bool,
    ) -> TensorDictBase | Handover | None:
        """Policy rollouts on the fast path of the step plan, for a plain ``TensorDictModule``.

        None unless the env is on the fast path (see :attr:`step_path`), the policy call is
        the direct call of a plain module reading only observations, and ``tensordict``
        holds exactly a step's root entries.
        """
        if fast_path_blocker(self, GymWrapper) is not None:
            return None
        plan = self._step_plan
        source = policy_source(
            call, "action", plan.observation_keys, ("next", "reward", *_DONE_KEYS)
        )
        if source is None or not plan.accepts(tensordict, source.out_keys):
            return None
        return plan.columnar_rollout(
            max_steps, break_when_any_done, set_truncated, source, tensordict
        )

    def _direct_stepper(
        self, action: torch.Tensor, outputs: dict[Any, torch.Tensor]
    ) -> Callable[[], bool] | None:
        """A step that reads ``action`` and writes its results into ``outputs``, or None.

        Batched envs call it with their buffer views (``outputs`` maps each key of the step
        output to its buffer); the returned callable steps the simulator through the step
        plan, writes every entry in place and returns the done flag. None when the env is not
        on the fast path (see :attr:`step_path`) or the keys differ from this env's.
        """
        if fast_path_blocker(self, GymWrapper) is not None:
            return None
        return self._step_plan.stepper_into(action, outputs)

    def _direct_resetter(self, outputs: dict[Any, torch.Tensor]) -> Callable[[], None] | None:
        """A full reset writing its data into ``outputs`` (see :meth:`_direct_stepper`)."""
        if fast_path_blocker(self, GymWrapper) is not None:
            return None
        return self._step_plan.resetter_into(outputs)

    def _final_obs(
        self, source: dict[str, Any], terminated: Any, truncated: Any, info: Any
    ) -> TensorDictBase:
        final = {key: value for key, value in source.items() if key != "pixels"}
        done = np.logical_or(terminated, truncated)
        if not done.any():
            return self._make_td(final, nested=True)
        final = {key: value.clone() for key, value in final.items()}
        finals, mask = None, done
        for final_key, mask_key in builders.FINAL_OBS_KEYS:
            if final_key in info:
                finals, mask = info[final_key], info.get(mask_key, done)
                break
        read = self._single_obs_codec.read
        for index in np.flatnonzero(done):
            if finals is None or not mask[index] or finals[index] is None:
                for value in final.values():
                    if value.dtype.is_floating_point:
                        value[index] = self._missing_obs_value
                continue
            single = read(finals[index])
            if self._obs_is_dict:
                for key in final:
                    final[key][index] = single[key]
            else:
                final["observation"][index] = single
        return self._make_td(final, nested=True)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if self._is_batched and tensordict is not None:
            mask = tensordict.get("_reset", None)
            if mask is not None and not all_true(mask) and self._can_reset_part():
                return self._partial_reset(mask, **kwargs)
        observation, info = self._env.reset(**kwargs)
        source = self._step_plan.read_observation(observation)
        if self._is_batched:
            self.__dict__["_last_obs"] = source
            if self._autoreset == builders.AUTORESET_SAME_STEP:
                source = dict(source)
                source["final"] = self._make_td(
                    {key: value for key, value in source.items() if key != "pixels"}, nested=True
                )
        source.update(self._reset_flags())
        out = self._make_td(source)
        if self._info_dict_reader:
            self._read_info(info, out)
        return out

    def _reset_flags(self) -> dict[str, torch.Tensor]:
        if not self._is_batched:
            take = self._flag_pool.take
            return {key: take(False) for key in _DONE_KEYS}
        shape = self._flag_shape
        return {key: torch.zeros(shape, dtype=torch.bool) for key in _DONE_KEYS}

    def _can_reset_part(self) -> bool:
        # In SameStep mode a partial reset reuses the observations of the last step, which
        # do not exist before the first step after a full reset (or after seeding).
        return self._autoreset != builders.AUTORESET_SAME_STEP or self._last_obs is not None

    def _partial_reset(self, mask: torch.Tensor, **kwargs: Any) -> TensorDictBase:
        """Resets the masked envs of a vector env; the others keep their data."""
        info: Any = {}
        if self._autoreset == builders.AUTORESET_SAME_STEP:
            # The simulator already reset them during the last step: reuse what it returned.
            source = dict(self._last_obs)
        else:
            options = dict(kwargs.pop("options", None) or {})
            options["reset_mask"] = mask.reshape(self.batch_size).cpu().numpy().astype(np.bool_)
            observation, info = self._env.reset(options=options, **kwargs)
            source = self._step_plan.read_observation(observation)
            self.__dict__["_last_obs"] = source
        if self._autoreset == builders.AUTORESET_SAME_STEP:
            source["final"] = self._make_td(
                {key: value for key, value in source.items() if key != "pixels"}, nested=True
            )
        source.update(self._reset_flags())
        out = self._make_td(source)
        if self._info_dict_reader and info:
            self._read_info(info, out)
        return out

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        self._env.reset(seed=int(seed))
        self.__dict__["_last_obs"] = None

    # ------------------------------------------------------------------ info readers
    def set_info_dict_reader(
        self,
        info_dict_reader: BaseInfoDictReader | Callable | None = None,
        ignore_private: bool = True,
    ) -> GymWrapper:
        """Adds a reader that copies entries of the ``info`` dicts into the data.

        The reader's entries join the observation spec. A reader that does not know its specs
        yet (a :class:`default_info_dict_reader` without ``spec``, or None for every key) learns
        them from one reset and one random step, after which the env is reset.

        Args:
            info_dict_reader: the reader; None for every key of the info dicts.
            ignore_private: with no reader, skip keys that start with an underscore.

        Returns:
            the env itself.

        Examples:
            >>> from tdrl.envs.libs.gym import GymEnv, default_info_dict_reader
            >>> env = GymEnv("CartPole-v1").set_info_dict_reader(
            ...     default_info_dict_reader(["elapsed"]))
            >>> "elapsed" in env.observation_spec.keys()
            False
        """
        if info_dict_reader is None:
            info_dict_reader = default_info_dict_reader(ignore_private=ignore_private)
        if isinstance(info_dict_reader, BaseInfoDictReader) and not info_dict_reader.info_spec:
            return self.auto_register_info_dict(info_dict_reader=info_dict_reader)
        return super().set_info_dict_reader(info_dict_reader, ignore_private=ignore_private)

    # ------------------------------------------------------------------ misc
    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.__dict__.get('_env')}, "
            f"batch_size={self.batch_size}, step_path={self.step_path!r})"
        )

    @property
    def lib(self) -> Any:
        """The gym library in use."""
        return gym_backend()

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            env = self.__dict__.get("_env")
            if env is None or name.startswith("__"):
                raise
        try:
            return getattr(env, name)
        except AttributeError:
            pass
        if hasattr(env, "get_wrapper_attr"):
            try:
                return env.get_wrapper_attr(name)
            except AttributeError:
                pass
        unwrapped = getattr(env, "unwrapped", env)
        try:
            return getattr(unwrapped, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r}, and neither has the wrapped "
                f"env {type(unwrapped).__name__}"
            ) from None


class GymEnv(GymWrapper):
    """Builds a gymnasium (or gym) environment by id and wraps it.

    Keyword arguments that are not the wrapper's own are passed to ``gymnasium.make``
    (``GymEnv("Pendulum-v1", g=9.81)``); attributes not found on the wrapper come from the
    simulator (``env.g``). With ``num_envs=N`` a gymnasium vector env of ``N`` copies is built
    (``gymnasium.make_vec``, asynchronous by default; pass ``vectorization_mode="sync"`` to keep
    them in this process) and returned inside a ``TransformedEnv`` with a
    :class:`VecGymEnvTransform`, with batch size ``[N]``.

    Args:
        env_name: the registered id, e.g. ``"CartPole-v1"``.
        categorical_action_encoding: discrete spaces as integers instead of one-hot.

    Keyword Args:
        num_envs: build a vector env of this many copies (0: a single env).
        from_pixels, pixels_only, frame_skip, device, batch_size, allow_done_after_reset,
            convert_actions_to_numpy, missing_obs_value, auto_reset, auto_reset_replace,
            run_type_checks, spec_locked: as in :class:`GymWrapper`.
        **kwargs: passed to ``gymnasium.make`` (``render_mode`` is set to ``"rgb_array"``
            with ``from_pixels``).

    Examples:
        >>> from tdrl.envs.libs.gym import GymEnv
        >>> env = GymEnv("Pendulum-v1", g=9.81)
        >>> env.g
        9.81
        >>> _ = env.set_seed(0)
        >>> env.rollout(3)["next", "reward"].shape
        torch.Size([3, 1])
        >>> vec = GymEnv("CartPole-v1", num_envs=2, vectorization_mode="sync")
        >>> vec.batch_size
        torch.Size([2])
    """

    @classmethod
    def _wants_vector(cls, args: tuple, kwargs: dict) -> bool:
        return bool(kwargs.get("num_envs", 0))

    def __init__(
        self,
        env_name: str,
        categorical_action_encoding: bool = False,
        *,
        num_envs: int = 0,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        allow_done_after_reset: bool = False,
        convert_actions_to_numpy: bool = True,
        missing_obs_value: Any = np.nan,
        auto_reset: bool = False,
        auto_reset_replace: bool = True,
        run_type_checks: bool = False,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if not isinstance(env_name, str):
            raise TypeError(f"GymEnv env_name: expected a str id, got {type(env_name).__name__}")
        if (
            isinstance(num_envs, bool)
            or not isinstance(num_envs, (int, np.integer))
            or num_envs < 0
        ):
            raise ValueError(f"GymEnv num_envs: expected an int >= 0, got {num_envs!r}")
        if from_pixels:
            render_mode = kwargs.setdefault("render_mode", "rgb_array")
            if render_mode != "rgb_array":
                raise ValueError(
                    "GymEnv from_pixels: expected render_mode='rgb_array', got "
                    f"render_mode={render_mode!r}"
                )
        if num_envs:
            env = builders.make_vector_env(
                env_name, int(num_envs), same_step=not from_pixels, **kwargs
            )
        else:
            env = builders.make_single_env(env_name, **kwargs)
        self.__dict__["env_name"] = env_name
        self.__dict__["_make_kwargs"] = dict(kwargs)
        super().__init__(
            env,
            categorical_action_encoding,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            convert_actions_to_numpy=convert_actions_to_numpy,
            missing_obs_value=missing_obs_value,
            auto_reset=auto_reset,
            auto_reset_replace=auto_reset_replace,
            run_type_checks=run_type_checks,
            spec_locked=spec_locked,
        )
