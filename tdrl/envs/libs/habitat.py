"""Habitat-lab tasks as tdrl envs: :class:`HabitatEnv`.

Written against habitat-lab 0.3: ``import habitat.gym`` registers its benchmark tasks in
``gym``'s registry (``"HabitatPick-v0"``, ``"HabitatRenderPick-v0"``, ...; built by
``gym.make(id, override_options=[...], use_render_mode=...)``), and the envs follow gym's API
(``reset() -> observation``, ``step(action) -> (observation, reward, done, info)``,
``render(mode="rgb_array")``). habitat-lab (and habitat-sim) are imported only when an env is
built; they cannot be installed on every machine.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from tdrl.data.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.envs.gym_like import GymLikeEnv
from tdrl.envs.libs._workers import parallel_copies, pop_num_workers
from tdrl.envs.libs.backends import BackendModule
from tdrl.envs.libs.gym import gym_space_to_spec

__all__ = ["HabitatEnv"]

_HAS_HABITAT = importlib.util.find_spec("habitat") is not None
MISSING_HABITAT = (
    "HabitatEnv needs habitat-lab and habitat-sim (pip install habitat-lab; habitat-sim from "
    "conda, see https://github.com/facebookresearch/habitat-sim)"
)


def _gym() -> Any:
    import gym
    import habitat.gym  # noqa: F401  (registers the tasks)

    return gym


def _gpu_index(device: Any) -> int | None:
    if device is None:
        return None
    device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    if device.type != "cuda":
        return None
    return device.index or 0


class _AvailableEnvs:
    """Class attribute: the habitat task ids registered in gym (empty without habitat)."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        if not _HAS_HABITAT:
            return []
        registry = _gym().envs.registration.registry
        ids = registry.env_specs if hasattr(registry, "env_specs") else registry
        return sorted(name for name in ids if name.startswith("Habitat"))


class HabitatEnv(GymLikeEnv):
    """Builds a registered habitat-lab task and wraps it.

    Observations are the task's (a dict space gives one entry per sensor); with
    ``from_pixels`` a ``"pixels"`` entry holds the third-person RGB view
    (``render(mode="rgb_array")``; the task is built with its render sensor). A CUDA
    ``device`` also selects the GPU habitat-sim renders on. With ``num_workers=N``, returns a
    started :class:`~tdrl.envs.ParallelEnv` of ``N`` copies (``device`` may list one device
    per worker).

    Args:
        env_name: a registered id, e.g. ``"HabitatPick-v0"`` (see :attr:`available_envs`).

    Keyword Args:
        from_pixels: add the ``"pixels"`` entry.
        pixels_only: with ``from_pixels``, keep only the pixels.
        frame_skip: repeat each action this many times, summing the rewards.
        device: the device of the data (and of the simulator when it is a GPU).
        num_workers: build this many copies in a ParallelEnv.
        **kwargs: passed to ``gym.make`` (e.g. ``override_options``).

    Examples:
        >>> env = HabitatEnv("HabitatRenderPick-v0", from_pixels=True)  # doctest: +SKIP
        >>> env.rollout(3)["next", "pixels"].dtype  # doctest: +SKIP
        torch.uint8
    """

    available_envs = _AvailableEnvs()

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Build one env, or a ParallelEnv of copies with ``num_workers``."""
        num_workers = pop_num_workers(kwargs, cls.__name__)
        if num_workers is None:
            return super().__new__(cls)
        return parallel_copies(cls, num_workers, args, kwargs)

    def __init__(
        self,
        env_name: str,
        *,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        allow_done_after_reset: bool = False,
        num_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not _HAS_HABITAT:
            raise ImportError(MISSING_HABITAT)
        self.__dict__["env_name"] = env_name
        self.__dict__["from_pixels"] = bool(from_pixels)
        self.__dict__["pixels_only"] = bool(pixels_only)
        self.__dict__["render_kwargs"] = {"mode": "rgb_array"} if from_pixels else None
        super().__init__(
            env_name=env_name,
            gpu=_gpu_index(device),
            make_kwargs=kwargs,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            frame_skip=frame_skip or 1,
        )

    def _check_kwargs(self, kwargs: dict) -> None:
        available = type(self).available_envs
        if kwargs["env_name"] not in available:
            raise ValueError(
                f"HabitatEnv env_name: expected one of {available}, got {kwargs['env_name']!r}"
            )

    def _build_env(self, env_name: str, gpu: int | None, make_kwargs: dict) -> Any:
        make_kwargs = dict(make_kwargs)
        if gpu is not None:
            overrides = list(make_kwargs.get("override_options") or [])
            overrides.append(f"habitat.simulator.habitat_sim_v0.gpu_device_id={gpu}")
            make_kwargs["override_options"] = overrides
        if self.from_pixels:
            make_kwargs.setdefault("use_render_mode", True)
        return _gym().make(env_name, **make_kwargs)

    def _make_specs(self, env: Any) -> None:
        device = self.device
        observation = gym_space_to_spec(env.observation_space, device=device)
        if not isinstance(observation, Composite):
            observation = Composite(observation=observation, device=device)
        if self.from_pixels:
            env.reset()
            frame = np.asarray(env.render(**self.render_kwargs))
            if self.pixels_only:
                observation = Composite(device=device)
            observation["pixels"] = Bounded(0, 255, frame.shape, dtype=torch.uint8, device=device)
        self.observation_spec = observation
        self.action_spec = gym_space_to_spec(env.action_space, device=device)
        self.reward_spec = Unbounded((1,), dtype=torch.float32, device=device)
        flag = Categorical(2, (1,), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), device=device
        )

    def read_obs(self, observations: Any) -> dict:
        """The simulator's observations as tensors, plus the rendered ``"pixels"``."""
        if self.from_pixels and self.pixels_only:
            out = {}
        elif isinstance(observations, Mapping):
            out = super().read_obs(observations)
        else:
            spec = self.full_observation_spec["observation"]
            out = {"observation": spec.encode(observations, ignore_device=True)}
        if self.from_pixels:
            frame = np.ascontiguousarray(self._env.render(**self.render_kwargs))
            out["pixels"] = torch.from_numpy(frame)
        return out

    def _output_transform(self, step_outputs: tuple) -> tuple:
        """Read gym's four values: an episode cut by gym's time limit is truncated."""
        if len(step_outputs) != 4:
            return super()._output_transform(step_outputs)
        observation, reward, done, info = step_outputs
        truncated = bool(done) and bool((info or {}).get("TimeLimit.truncated", False))
        return observation, reward, bool(done) and not truncated, truncated, None, info

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._env.reset(seed=int(seed))

    #: The habitat module (read on the class or an instance; imported when first read).
    lib = BackendModule("habitat")
