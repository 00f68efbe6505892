"""Base classes of simulator wrappers: ``_EnvWrapper`` and the gym-style ``GymLikeEnv``."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import Unbounded
from tdrl.envs.common import EnvBase

__all__ = ["BaseInfoDictReader", "GymLikeEnv", "default_info_dict_reader"]


class BaseInfoDictReader:
    """Base class of the callables that copy entries of an ``info`` dict into the step data.

    A reader is called as ``reader(info_dict, tensordict)`` and returns the
    tensordict; its :attr:`info_spec` tells the env which specs to declare.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import BaseInfoDictReader
        >>> class LivesReader(BaseInfoDictReader):
        ...     def __call__(self, info_dict, tensordict):
        ...         tensordict.set("lives", torch.as_tensor(info_dict["lives"]))
        ...         return tensordict
        >>> LivesReader()({"lives": 3}, TensorDict())["lives"]
        tensor(3)
    """

    def __call__(self, info_dict: dict, tensordict: TensorDictBase) -> TensorDictBase:
        """Copy entries of ``info_dict`` into ``tensordict``."""
        raise NotImplementedError

    @property
    def info_spec(self) -> dict:
        """Key -> spec of the entries this reader writes."""
        raise NotImplementedError


class default_info_dict_reader(BaseInfoDictReader):  # noqa: N801
    """Read the given keys (or all numeric keys) of a gym ``info`` dict into the step data.

    Args:
        keys: the info keys to read; None reads every key whose value converts
            to a tensor (the first info dict seen fixes the keys).
        spec: specs of the entries (a list matching ``keys``, a dict or a
            Composite); unbounded float64-free specs are inferred when missing.
        ignore_private: skip keys starting with ``"_"`` (gymnasium's masks).

    Examples:
        >>> from tensordict import TensorDict
        >>> reader = default_info_dict_reader(["x_position"])
        >>> td = reader({"x_position": 0.5, "other": 1}, TensorDict())
        >>> td["x_position"]
        tensor(0.5000)
    """

    def __init__(
        self,
        keys: list[str] | None = None,
        spec: Any = None,
        ignore_private: bool = True,
    ) -> None:
        self.ignore_private = ignore_private
        self._lazy = keys is None
        self.keys = list(keys) if keys is not None else []
        if spec is None:
            self._info_spec: dict = {}
        elif isinstance(spec, (list, tuple)):
            if len(spec) != len(self.keys):
                raise ValueError(
                    f"default_info_dict_reader got {len(spec)} specs for {len(self.keys)} keys"
                )
            self._info_spec = dict(zip(self.keys, spec))
        else:
            self._info_spec = {k: spec[k] for k in spec.keys()}

    @staticmethod
    def _as_tensor(value: Any) -> torch.Tensor | None:
        try:
            tensor = torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError, RuntimeError):
            return None
        if tensor.dtype == torch.float64:
            tensor = tensor.to(torch.float32)
        return tensor

    def __call__(self, info_dict: dict, tensordict: TensorDictBase) -> TensorDictBase:
        """Copy the selected info entries into ``tensordict`` (missing keys are zero-filled)."""
        if not isinstance(info_dict, Mapping):
            warnings.warn(
                f"info dict reader expected a dict, got {type(info_dict).__name__}", stacklevel=2
            )
            return tensordict
        if self._lazy and not self.keys:
            self.keys = [
                k
                for k, v in info_dict.items()
                if not (self.ignore_private and k.startswith("_"))
                and self._as_tensor(v) is not None
            ]
        for key in self.keys:
            value = info_dict.get(key, None)
            spec = self._info_spec.get(key)
            if value is None:
                if spec is None:
                    continue
                tensor = spec.zero(tensordict.batch_size)
            else:
                tensor = self._as_tensor(value)
                if tensor is None:
                    continue
                if spec is not None:
                    tensor = tensor.to(spec.dtype)
                else:
                    self._info_spec[key] = Unbounded(
                        tensor.shape[tensordict.batch_dims :], dtype=tensor.dtype
                    )
            tensordict.set(key, tensor)
        return tensordict

    def reset(self) -> None:
        """Forget keys and specs inferred from a previous info dict."""
        if self._lazy:
            self.keys = []
            self._info_spec = {}

    @property
    def info_spec(self) -> dict:
        """Key -> spec of the entries this reader writes (inferred lazily when not given)."""
        return dict(self._info_spec)


class _EnvWrapper(EnvBase):
    """Base of wrappers around a simulator object held in ``self._env``.

    Subclasses implement ``_check_kwargs``, ``_build_env``, ``_make_specs``,
    ``_init_env`` (and the protocol methods). Attribute lookups that fail on the
    wrapper are forwarded to the wrapped env.
    """

    git_url: str = ""
    available_envs: dict | list = {}
    libname: str = ""

    def __init__(
        self,
        *args: Any,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        auto_reset: bool = False,
        auto_reset_replace: bool = True,
        **kwargs: Any,
    ) -> None:
        if args:
            raise ValueError(
                f"{type(self).__name__} takes keyword arguments only when calling "
                f"_EnvWrapper.__init__, got {len(args)} positional argument(s)"
            )
        super().__init__(
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            auto_reset=auto_reset,
            auto_reset_replace=auto_reset_replace,
        )
        frame_skip = kwargs.pop("frame_skip", 1)
        self.frame_skip = frame_skip
        self.wrapper_frame_skip = frame_skip
        self._convert_actions_to_numpy = kwargs.pop("convert_actions_to_numpy", True)
        self._constructor_kwargs = kwargs
        self._check_kwargs(kwargs)
        self._env = self._build_env(**kwargs)
        self._make_specs(self._env)
        self.is_closed = False
        self._init_env()

    def _check_kwargs(self, kwargs: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _check_kwargs")

    def _build_env(self, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _build_env")

    def _make_specs(self, env: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _make_specs")

    def _init_env(self) -> None:
        """Hook run once the specs are built (e.g. a first reset); no-op by default."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("__") or name == "_env":
                raise
        env = self.__dict__.get("_env")
        if env is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        try:
            return getattr(env, name)
        except AttributeError as err:
            raise AttributeError(
                f"neither {type(self).__name__} nor its wrapped env has an attribute {name!r}"
            ) from err

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the wrapped simulator."""
        self.is_closed = True
        env = self.__dict__.get("_env")
        if env is not None and hasattr(env, "close"):
            env.close()


class GymLikeEnv(_EnvWrapper):
    """Base of wrappers around simulators with a gym-style ``reset`` / ``step`` API.

    ``_step`` converts the action with :meth:`read_action`, calls
    ``self._env.step`` (``frame_skip`` times, summing rewards), converts the
    results with :meth:`read_obs`, :meth:`read_reward` and :meth:`read_done`,
    runs the info dict readers and builds the output TensorDict in one go.
    Subclasses adapt the simulator's return values in :meth:`_output_transform`
    and :meth:`_reset_output_transform` (the defaults follow gymnasium's
    5-tuple ``(obs, reward, terminated, truncated, info)`` and ``(obs, info)``).

    Examples:
        >>> import gymnasium
        >>> from tdrl.data import Bounded, Composite, Unbounded
        >>> class PendulumWrapper(GymLikeEnv):
        ...     def _check_kwargs(self, kwargs):
        ...         pass
        ...     def _build_env(self, **kwargs):
        ...         return gymnasium.make("Pendulum-v1")
        ...     def _make_specs(self, env):
        ...         self.observation_spec = Composite(observation=Unbounded((3,)))
        ...         self.action_spec = Bounded(-2.0, 2.0, (1,))
        ...         self.reward_spec = Unbounded((1,))
        ...         self.full_done_spec = Composite(
        ...             done=Unbounded((1,), dtype=torch.bool),
        ...             terminated=Unbounded((1,), dtype=torch.bool),
        ...             truncated=Unbounded((1,), dtype=torch.bool))
        ...     def _set_seed(self, seed):
        ...         self._env.reset(seed=seed)
        >>> env = PendulumWrapper()
        >>> env.rollout(3)["next", "observation"].shape
        torch.Size([3, 3])
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__["_info_dict_reader"] = []
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------- conversion
    def read_action(self, action: torch.Tensor) -> Any:
        """Convert an action tensor to what the simulator expects (numpy by default)."""
        return self.action_spec.to_numpy(action)

    def read_obs(self, observations: Any) -> dict:
        """Convert the simulator's observation(s) to a dict of tensors keyed by observation key."""
        if isinstance(observations, Mapping):
            observations = dict(observations)
            if "state" in observations and "observation" not in observations:
                observations["observation"] = observations.pop("state")
            spec = self.full_observation_spec
            out = {}
            for key, value in observations.items():
                if key in spec.keys():
                    out[key] = spec[key].encode(value, ignore_device=True)
                else:
                    out[key] = torch.as_tensor(value)
            return out
        keys = [k for k in self.observation_keys if k not in self._info_keys()]
        key = keys[0] if keys else "observation"
        return {key: self.full_observation_spec[key].encode(observations, ignore_device=True)}

    def _info_keys(self) -> set:
        keys = set()
        for reader in self._info_dict_reader:
            try:
                keys.update(reader.info_spec.keys())
            except NotImplementedError:
                continue
        return keys

    def read_reward(self, reward: Any) -> torch.Tensor:
        """Convert the simulator's reward to a tensor of the reward spec."""
        return self.reward_spec.encode(reward, ignore_device=True)

    def read_done(
        self,
        terminated: Any = None,
        truncated: Any = None,
        done: Any = None,
    ) -> tuple[Any, Any, Any, bool]:
        """Normalise the end-of-episode signals.

        Returns:
            ``(terminated, truncated, done, do_break)``: ``done`` is
            ``terminated or truncated`` when not given; ``do_break`` tells the
            frame-skip loop to stop.
        """
        if done is None:
            if terminated is None and truncated is None:
                raise ValueError("read_done needs at least one of terminated, truncated or done")
            if terminated is None:
                done = truncated
            elif truncated is None:
                done = terminated
            else:
                done = np.logical_or(terminated, truncated)
        do_break = bool(np.any(done))
        return terminated, truncated, done, do_break

    def _output_transform(self, step_outputs: tuple) -> tuple:
        """Map ``env.step`` outputs to ``(obs, reward, terminated, truncated, done, info)``."""
        if len(step_outputs) == 5:
            obs, reward, terminated, truncated, info = step_outputs
            return obs, reward, terminated, truncated, None, info
        if len(step_outputs) == 4:
            obs, reward, done, info = step_outputs
            return obs, reward, None, None, done, info
        raise ValueError(f"expected env.step to return 4 or 5 values, got {len(step_outputs)}")

    def _reset_output_transform(self, reset_outputs: Any) -> tuple:
        """Map ``env.reset`` outputs to ``(obs, info)``."""
        if isinstance(reset_outputs, tuple) and len(reset_outputs) == 2:
            return reset_outputs
        return reset_outputs, None

    # ---------------------------------------------------------------- protocol
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(self.action_key)
        if self._convert_actions_to_numpy:
            action = self.read_action(action)
        reward = None
        terminated = truncated = done = None
        info = None
        obs = None
        for _ in range(self.wrapper_frame_skip):
            obs, step_reward, terminated, truncated, done, info = self._output_transform(
                self._env.step(action)
            )
            if step_reward is not None:
                reward = step_reward if reward is None else reward + step_reward
            terminated, truncated, done, do_break = self.read_done(
                terminated=terminated, truncated=truncated, done=done
            )
            if do_break:
                break
        source = self.read_obs(obs)
        source[self.reward_key] = self.read_reward(0.0 if reward is None else reward)
        done_spec = self.full_done_spec
        if terminated is None:
            terminated = done
        source["done"] = done_spec["done"].encode(done, ignore_device=True)
        source["terminated"] = done_spec["terminated"].encode(terminated, ignore_device=True)
        if truncated is not None and "truncated" in done_spec.keys():
            source["truncated"] = done_spec["truncated"].encode(truncated, ignore_device=True)
        out = TensorDict(source, batch_size=tensordict.batch_size, device=self.device)
        if info is not None and self._info_dict_reader:
            out = self._read_info(info, out)
        return out

    def _read_info(self, info: Any, tensordict: TensorDictBase) -> TensorDictBase:
        for reader in self._info_dict_reader:
            result = reader(info, tensordict)
            if result is not None:
                tensordict = result
        return tensordict

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        obs, info = self._reset_output_transform(self._env.reset(**kwargs))
        source = self.read_obs(obs)
        out = TensorDict(source, batch_size=self.batch_size, device=self.device)
        if self._info_dict_reader:
            if info is not None:
                out = self._read_info(info, out)
            spec = self.full_observation_spec
            for key in self.observation_keys:
                if out.get(key, None) is None:
                    out.set(key, spec[key].zero())
        return out

    # ----------------------------------------------------------- info readers
    @property
    def info_dict_reader(self) -> list:
        """The list of info dict readers run after each step and reset."""
        return self._info_dict_reader

    @info_dict_reader.setter
    def info_dict_reader(self, value: Callable | list) -> None:
        self.__dict__["_info_dict_reader"] = list(value) if isinstance(value, list) else [value]

    def set_info_dict_reader(
        self, info_dict_reader: Callable | None = None, ignore_private: bool = True
    ) -> GymLikeEnv:
        """Add an info dict reader (a :class:`default_info_dict_reader` when None).

        When the reader declares its specs (a :class:`BaseInfoDictReader` with
        known keys), they are added to the observation spec.
        """
        if info_dict_reader is None:
            info_dict_reader = default_info_dict_reader(ignore_private=ignore_private)
        self._info_dict_reader.append(info_dict_reader)
        if isinstance(info_dict_reader, BaseInfoDictReader):
            self._register_info_specs(info_dict_reader)
        return self

    def _register_info_specs(self, reader: BaseInfoDictReader) -> None:
        info_spec = reader.info_spec
        if not info_spec:
            return
        spec = self.full_observation_spec.clone()
        for key, leaf in info_spec.items():
            spec[key] = leaf.expand(*self.batch_size, *leaf.shape).to(self.device or leaf.device)
        self.full_observation_spec = spec

    def auto_register_info_dict(
        self, ignore_private: bool = True, *, info_dict_reader: BaseInfoDictReader | None = None
    ) -> GymLikeEnv:
        """Discover the info keys with a reset and a random step, then register their specs."""
        reader = info_dict_reader or default_info_dict_reader(ignore_private=ignore_private)
        self._info_dict_reader.append(reader)
        self.rand_step(self.reset())
        self._register_info_specs(reader)
        self.reset()
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.__dict__.get('_env')}, batch_size={self.batch_size})"
        )
