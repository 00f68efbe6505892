"""tdrl envs seen as gym / gymnasium envs: what :meth:`EnvBase.register_gym` registers.

``register_gym`` adds an id to the registry of the gym library in use; ``make(id)`` then
builds the tdrl env (optionally wrapped in a transform) and returns it inside an adapter
that speaks the gym API: spaces built from the specs, ``reset`` / ``step`` returning
numpy arrays or torch tensors.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.data import OneHot
from tdrl.envs.libs._gym_backend import gym_backend, set_gym_backend
from tdrl.envs.libs._gym_spaces import spec_to_gym_space

NOT_RESET = "{cls}.step was called before reset(): call reset() first"


def _new_step_api(gym: Any) -> bool:
    """gymnasium and gym >= 0.26 reset to ``(obs, info)`` and step to five values."""
    if gym.__name__ == "gymnasium":
        return True
    version = tuple(int(part) for part in gym.__version__.split(".")[:2] if part.isdigit())
    return version >= (0, 26)


def _as_output(data: TensorDictBase, to_numpy: bool) -> dict:
    return data.numpy() if to_numpy else data.to_dict()


def _top_level(key: NestedKey) -> str:
    return key if isinstance(key, str) else key[0]


@functools.cache
def _adapter_class(gym: Any) -> type:
    """The adapter class for one gym library (it must subclass that library's ``Env``)."""

    class TdrlGymEnv(gym.Env):
        """A tdrl env behind the gym API (built by ``make`` for ids from ``register_gym``)."""

        metadata: dict = {"render_modes": []}

        def __init__(self, env: Any, info_keys: Sequence[NestedKey], to_numpy: bool) -> None:
            self.env = env
            self.to_numpy = to_numpy
            self.new_api = _new_step_api(gym)
            self.info_keys = list(info_keys)
            hidden = {_top_level(key) for key in self.info_keys}
            observations = env.full_observation_spec
            self.observation_keys = [key for key in observations.keys() if key not in hidden]
            spaces = gym_backend("spaces")
            self.observation_space = spec_to_gym_space(
                observations.select(*self.observation_keys), spaces
            )
            if len(env.action_keys) == 1:
                self.action_space = spec_to_gym_space(env.action_spec, spaces)
            else:
                self.action_space = spec_to_gym_space(env.full_action_spec, spaces)
            self._data: TensorDictBase | None = None

        def _split(self, data: TensorDictBase) -> tuple[dict, dict]:
            observation = data.select(*self.observation_keys, strict=False)
            info = data.select(*self.info_keys, strict=False)
            return _as_output(observation, self.to_numpy), _as_output(info, self.to_numpy)

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
            if seed is not None:
                self.env.set_seed(seed)
            self._data = self.env.reset()
            observation, info = self._split(self._data)
            return (observation, info) if self.new_api else observation

        def _write_action(self, data: TensorDictBase, action: Any) -> None:
            env = self.env
            if len(env.action_keys) == 1:
                spec = env.action_spec
                value = torch.as_tensor(action, device=spec.device)
                if isinstance(spec, OneHot) and value.shape != spec.shape:
                    # gym's Discrete gives the index of the one-hot action
                    value = torch.nn.functional.one_hot(value.long(), spec.shape[-1])
                data.set(env.action_keys[0], value.to(spec.dtype).reshape(spec.shape))
            else:
                data.update(env.full_action_spec.encode(action))

        def step(self, action: Any) -> tuple:
            data = self._data
            if data is None:
                raise RuntimeError(NOT_RESET.format(cls=type(self).__name__))
            self._write_action(data, action)
            data = self.env.step(data)
            next_data = data.get("next")
            observation, info = self._split(next_data)
            reward = next_data.get("reward", None)
            if reward is not None and reward.numel() == 1:
                reward = reward.item()
            elif reward is not None and self.to_numpy:
                reward = reward.cpu().numpy()
            terminated = bool(next_data.get("terminated", next_data.get("done")).any())
            truncated = next_data.get("truncated", None)
            truncated = bool(truncated.any()) if truncated is not None else False
            self._data = self.env.step_mdp(data)
            if self.new_api:
                return observation, reward, terminated, truncated, info
            return observation, reward, terminated or truncated, info

        def render(self) -> Any:
            return self.env.render() if hasattr(self.env, "render") else None

        def close(self) -> None:
            self.env.close()

    return TdrlGymEnv


def _make(
    *,
    _tdrl_entry_point: Any,
    _tdrl_backend: str | None,
    transform: Any = None,
    info_keys: Sequence[NestedKey] | None = None,
    to_numpy: bool = False,
    **kwargs: Any,
) -> Any:
    """The entry point gym calls: build the tdrl env and wrap it in the adapter."""
    context = set_gym_backend(_tdrl_backend) if _tdrl_backend else contextlib.nullcontext()
    with context:
        gym = gym_backend()
        env = _tdrl_entry_point(**kwargs)
        if transform is not None:
            from tdrl.envs.transforms import TransformedEnv

            env = TransformedEnv(env, transform.clone())
        if isinstance(info_keys, (str, tuple)):
            info_keys = [info_keys]
        return _adapter_class(gym)(env, info_keys or (), to_numpy)


def register_gym(
    cls: type,
    id: str,  # noqa: A002 - the name gym uses
    *,
    entry_point: Any = None,
    transform: Any = None,
    info_keys: Sequence[NestedKey] | None = None,
    backend: str | None = None,
    to_numpy: bool = False,
    reward_threshold: float | None = None,
    nondeterministic: bool = False,
    max_episode_steps: int | None = None,
    order_enforce: bool = True,
    disable_env_checker: bool = True,
    **kwargs: Any,
) -> None:
    """Register ``entry_point`` (default: ``cls``) under ``id`` in the gym registry.

    See :meth:`tdrl.envs.EnvBase.register_gym` for the arguments.
    """
    context = set_gym_backend(backend) if backend else contextlib.nullcontext()
    with context:
        gym = gym_backend()
        env_kwargs = dict(kwargs, to_numpy=to_numpy)
        if transform is not None:
            env_kwargs["transform"] = transform
        if info_keys is not None:
            env_kwargs["info_keys"] = info_keys
        gym.register(
            id=id,
            entry_point=functools.partial(
                _make,
                _tdrl_entry_point=cls if entry_point is None else entry_point,
                _tdrl_backend=backend,
            ),
            reward_threshold=reward_threshold,
            nondeterministic=nondeterministic,
            max_episode_steps=max_episode_steps,
            order_enforce=order_enforce,
            disable_env_checker=disable_env_checker,
            kwargs=env_kwargs,
        )
