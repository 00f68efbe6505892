"""RoboHive tasks as tdrl envs: :class:`RoboHiveEnv`.

Written against RoboHive 0.6: ``import robohive`` registers its tasks in gym's registry; the
envs follow gym's API (``reset() -> observation``, ``step(action) -> (observation, reward,
done, info)``), accept ``visual_keys`` when built (``"rgb:<camera>:<H>x<W>:2d"`` for colour
and ``"d:<camera>:<H>x<W>:2d"`` for depth) and return those images from
``get_exteroception()``. RoboHive (and MuJoCo) are imported only when an env is built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tdrl.data.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.envs.gym_like import GymLikeEnv
from tdrl.envs.libs.backends import BackendModule
from tdrl.envs.libs.gym import gym_space_to_spec

__all__ = ["RoboHiveEnv"]

_HAS_ROBOHIVE = importlib.util.find_spec("robohive") is not None
MISSING_ROBOHIVE = "RoboHiveEnv needs the optional 'robohive' package (pip install robohive)"


def _gym() -> Any:
    import gym
    import robohive  # noqa: F401  (registers the tasks)

    return gym


def _registered() -> list[str]:
    registry = _gym().envs.registration.registry
    specs = registry.env_specs if hasattr(registry, "env_specs") else registry
    return sorted(
        name
        for name, spec in specs.items()
        if str(getattr(spec, "entry_point", "")).startswith("robohive")
    )


def _camera_names(env: Any) -> list[str]:
    model = env.unwrapped.sim.model
    if hasattr(model, "id2name"):
        return [model.id2name(index, "camera") for index in range(model.ncam)]
    return [model.camera(index).name for index in range(model.ncam)]


class _AvailableEnvs:
    """Class attribute: the RoboHive task ids (empty without robohive)."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        return _registered() if _HAS_ROBOHIVE else []


class RoboHiveEnv(GymLikeEnv):
    """Builds a RoboHive task and wraps it, with camera images on demand.

    ``"observation"`` is the task's observation vector. ``from_pixels`` adds ``"pixels"``:
    the colour images of ``cameras`` stacked as ``(n_cameras, H, W, 3)`` uint8;
    ``from_depths`` adds ``"depths"``, their depth maps stacked the same way.

    Args:
        env_name: a registered RoboHive id (see :attr:`available_envs`).

    Keyword Args:
        from_pixels: add the colour images.
        from_depths: add the depth maps.
        pixels_only: with images, drop the observation vector.
        cameras: the camera names (default: every camera of the model, see
            :meth:`get_available_cams`).
        image_size: ``(height, width)`` of the images (default 224 x 224).
        frame_skip: repeat each action this many times, summing the rewards.
        device: the device of the data.
        **kwargs: passed to ``gym.make``.

    Examples:
        >>> env = RoboHiveEnv("FrankaReachRandom-v0", from_pixels=True)  # doctest: +SKIP
        >>> env.rollout(2)["next", "pixels"].dtype  # doctest: +SKIP
        torch.uint8
    """

    available_envs = _AvailableEnvs()

    def __init__(
        self,
        env_name: str,
        *,
        from_pixels: bool = False,
        from_depths: bool = False,
        pixels_only: bool = False,
        cameras: Sequence[str] | None = None,
        image_size: tuple[int, int] = (224, 224),
        frame_skip: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        allow_done_after_reset: bool = False,
        **kwargs: Any,
    ) -> None:
        if not _HAS_ROBOHIVE:
            raise ImportError(MISSING_ROBOHIVE)
        self.__dict__["env_name"] = env_name
        self.__dict__["from_pixels"] = bool(from_pixels)
        self.__dict__["from_depths"] = bool(from_depths)
        self.__dict__["pixels_only"] = bool(pixels_only)
        self.__dict__["image_size"] = tuple(int(n) for n in image_size)
        super().__init__(
            env_name=env_name,
            cameras=list(cameras) if cameras is not None else None,
            make_kwargs=kwargs,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            frame_skip=frame_skip or 1,
        )

    @classmethod
    def get_available_cams(cls, env_name: str) -> list[str]:
        """The camera names of the task's model."""
        env = _gym().make(env_name)
        try:
            return _camera_names(env)
        finally:
            env.close()

    # ------------------------------------------------------------------ construction
    def _check_kwargs(self, kwargs: dict) -> None:
        available = type(self).available_envs
        if kwargs["env_name"] not in available:
            raise ValueError(
                f"RoboHiveEnv env_name: expected one of {available}, got {kwargs['env_name']!r}"
            )

    def _visual_keys(self, cameras: list[str]) -> list[str]:
        height, width = self.image_size
        keys = []
        if self.from_pixels:
            keys += [f"rgb:{camera}:{height}x{width}:2d" for camera in cameras]
        if self.from_depths:
            keys += [f"d:{camera}:{height}x{width}:2d" for camera in cameras]
        return keys

    def _build_env(self, env_name: str, cameras: list[str] | None, make_kwargs: dict) -> Any:
        gym = _gym()
        if not (self.from_pixels or self.from_depths):
            self.__dict__["cameras"] = []
            return gym.make(env_name, **make_kwargs)
        if cameras is None:
            cameras = type(self).get_available_cams(env_name)
        if not cameras:
            raise ValueError(f"RoboHiveEnv {env_name!r}: the task has no camera to render")
        self.__dict__["cameras"] = cameras
        return gym.make(env_name, visual_keys=self._visual_keys(cameras), **make_kwargs)

    def _make_specs(self, env: Any) -> None:
        device = self.device
        observation = Composite(device=device)
        if not self.pixels_only:
            observation["observation"] = gym_space_to_spec(env.observation_space, device=device)
        if self.from_pixels or self.from_depths:
            env.reset()
            for key, value in self._images().items():
                observation[key] = (
                    Bounded(0, 255, value.shape, dtype=torch.uint8, device=device)
                    if value.dtype == torch.uint8
                    else Unbounded(value.shape, dtype=value.dtype, device=device)
                )
        self.observation_spec = observation
        self.action_spec = gym_space_to_spec(env.action_space, device=device)
        self.reward_spec = Unbounded((1,), dtype=torch.float32, device=device)
        flag = Categorical(2, (1,), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), device=device
        )

    # ------------------------------------------------------------------ conversion
    def _images(self) -> dict[str, torch.Tensor]:
        """The requested images of every camera, stacked by kind (``"pixels"``, ``"depths"``)."""
        visual = self._env.unwrapped.get_exteroception()
        height, width = self.image_size
        out = {}
        for kind, prefix, wanted in (
            ("pixels", "rgb", self.from_pixels),
            ("depths", "d", self.from_depths),
        ):
            if not wanted:
                continue
            frames = [
                np.asarray(visual[f"{prefix}:{camera}:{height}x{width}:2d"])
                for camera in self.cameras
            ]
            stacked = np.ascontiguousarray(np.stack(frames))
            if kind == "depths":
                stacked = stacked.astype(np.float32)
            out[kind] = torch.from_numpy(stacked)
        return out

    def read_obs(self, observations: Any) -> dict:
        """The observation vector and the requested camera images."""
        out = {}
        if not self.pixels_only:
            if isinstance(observations, Mapping):
                out.update(super().read_obs(observations))
            else:
                spec = self.full_observation_spec["observation"]
                out["observation"] = spec.encode(observations, ignore_device=True)
        if self.from_pixels or self.from_depths:
            out.update(self._images())
        return out

    def _output_transform(self, step_outputs: tuple) -> tuple:
        """Read gym's four values: an episode cut by gym's time limit is truncated."""
        if len(step_outputs) != 4:
            return super()._output_transform(step_outputs)
        observation, reward, done, info = step_outputs
        truncated = bool(done) and bool((info or {}).get("TimeLimit.truncated", False))
        return observation, reward, bool(done) and not truncated, truncated, None, info

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        seeder = getattr(self._env.unwrapped, "seed", None)
        if seeder is not None:
            seeder(int(seed))
        else:
            self._env.reset(seed=int(seed))

    #: The robohive module (read on the class or an instance; imported when first read).
    lib = BackendModule("robohive")
