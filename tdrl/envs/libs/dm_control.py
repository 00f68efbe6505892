"""DeepMind Control Suite envs as tdrl envs: :class:`DMControlWrapper` and :class:`DMControlEnv`.

Written against dm_control 1.0 (the ``dm_env`` API: ``reset()`` / ``step(action)`` return a
``TimeStep(step_type, reward, discount, observation)``; ``observation_spec()`` /
``action_spec()`` return ``dm_env.specs`` arrays) with ``mujoco==3.17.0``. dm_control is
imported only when an env is built. Pixels need an OpenGL backend: set ``MUJOCO_GL=egl`` on a
headless machine.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.envs._slot_pool import SlotPool
from tdrl.envs.common import EnvBase
from tdrl.envs.libs._workers import parallel_copies, pop_num_workers
from tdrl.envs.libs.backends import BackendModule

__all__ = ["DMControlEnv", "DMControlWrapper", "dm_spec_to_spec"]

_HAS_DMC = importlib.util.find_spec("dm_control") is not None
_FLAG = {"done", "terminated", "truncated"}
# the methods a random-action rollout runs; a subclass overriding one takes the generic loop
_STEPS = ("_step", "_reset", "reset", "step", "rand_action", "_read_observation", "_simulate")
_NUMPY_TO_TORCH = {
    np.dtype(name): getattr(torch, name)
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8")
}
_NUMPY_TO_TORCH[np.dtype(bool)] = torch.bool
MISSING_DMC = (
    "{name} needs the optional 'dm_control' package (pip install dm_control mujoco==3.17.0)"
)


def _torch_dtype(dtype: Any, where: str) -> torch.dtype:
    dtype = np.dtype(dtype)
    try:
        return _NUMPY_TO_TORCH[dtype]
    except KeyError:
        raise TypeError(f"dm_env spec {where}: unsupported dtype {dtype}") from None


def _shape(spec: Any) -> tuple[int, ...]:
    shape = tuple(int(n) for n in spec.shape)
    return shape or (1,)


def dm_spec_to_spec(spec: Any, device: Any = None, where: str = "spec") -> Any:
    """Convert a ``dm_env.specs`` array (or a dict of them) to a tdrl spec.

    ``DiscreteArray`` gives :class:`Categorical`, ``BoundedArray`` gives :class:`Bounded`,
    ``Array`` gives :class:`Unbounded` (uint8 arrays, i.e. images, are bounded to 0..255); a
    scalar becomes shape ``(1,)``; dtypes are kept.

    Examples:
        >>> from dm_env import specs
        >>> spec = dm_spec_to_spec(specs.BoundedArray((2,), float, -1.0, 1.0))
        >>> type(spec).__name__, spec.shape, spec.dtype
        ('Bounded', torch.Size([2]), torch.float64)
    """
    if isinstance(spec, Mapping):
        return Composite(
            {key: dm_spec_to_spec(sub, device, f"{where}[{key!r}]") for key, sub in spec.items()},
            device=device,
        )
    dtype = _torch_dtype(spec.dtype, where)
    shape = _shape(spec)
    if hasattr(spec, "num_values"):
        return Categorical(int(spec.num_values), shape=shape, dtype=dtype, device=device)
    if hasattr(spec, "minimum") and hasattr(spec, "maximum"):
        low = torch.tensor(np.broadcast_to(spec.minimum, spec.shape), dtype=dtype)
        high = torch.tensor(np.broadcast_to(spec.maximum, spec.shape), dtype=dtype)
        return Bounded(low.reshape(shape), high.reshape(shape), shape, dtype=dtype, device=device)
    if dtype == torch.uint8:
        return Bounded(0, 255, shape, dtype=dtype, device=device)
    return Unbounded(shape, dtype=dtype, device=device)


def _observation_readers(spec: Composite) -> list[tuple[str, tuple, np.dtype]]:
    """``(key, shape, numpy dtype)`` of each observation entry, to convert them in one pass."""
    readers = []
    for key in spec.keys():
        leaf = spec[key]
        numpy_dtype = np.dtype(str(leaf.dtype).replace("torch.", ""))
        readers.append((key, tuple(leaf.shape), numpy_dtype))
    return readers


class DMControlWrapper(EnvBase):
    """Wraps a built dm_control env (``suite.load(...)``, optionally ``pixels.Wrapper``).

    The specs come from the dm_env specs (see :func:`dm_spec_to_spec`): one observation
    entry per key of the observation dict, ``"action"``, a ``"reward"`` of shape ``(1,)``, and
    ``"done"`` / ``"terminated"`` / ``"truncated"``. The last step of an episode is
    ``terminated`` when its discount is 0 and ``truncated`` otherwise (the suite's time limit).
    Observations are copied out of the simulator, so a stored step never changes.

    Args:
        env: the dm_control env.
        from_pixels: add a ``"pixels"`` entry rendered from the physics after each step
            (with ``render_kwargs``); not needed when ``env`` is a ``pixels.Wrapper``.
        pixels_only: with ``from_pixels``, keep only the pixels.
        frame_skip: repeat each action this many times, summing the rewards (stops at the
            end of an episode).
        render_kwargs: keyword arguments of ``physics.render`` (default ``camera_id=0``).
        device: the device of the data.
        batch_size: must be empty (one simulator) when given.
        allow_done_after_reset: see :class:`~tdrl.envs.EnvBase`.

    Examples:
        >>> from dm_control import suite
        >>> env = DMControlWrapper(suite.load("cheetah", "run"))
        >>> env.rollout(3)["next", "velocity"].shape
        torch.Size([3, 9])
    """

    available_envs: dict[str, list[str]]

    def __init__(
        self,
        env: Any = None,
        *,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        render_kwargs: dict | None = None,
        device: Any = None,
        batch_size: Any = None,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
    ) -> None:
        if env is None or not (hasattr(env, "step") and hasattr(env, "observation_spec")):
            raise TypeError(
                "DMControlWrapper env: expected a dm_env environment (e.g. suite.load(...)), "
                f"got {type(env).__name__}"
            )
        if batch_size is not None and tuple(torch.Size(batch_size)) != ():
            raise ValueError(
                f"DMControlWrapper batch_size: expected () (one simulator), got {tuple(batch_size)}"
            )
        super().__init__(
            device=device, allow_done_after_reset=allow_done_after_reset, spec_locked=spec_locked
        )
        self._env = env
        self.from_pixels = bool(from_pixels)
        self.pixels_only = bool(pixels_only)
        self.frame_skip = _validate_frame_skip(frame_skip)
        self.render_kwargs = {"camera_id": 0, **(render_kwargs or {})}
        self._make_specs()

    # ------------------------------------------------------------------ construction
    def _make_specs(self) -> None:
        device = self.device
        observation = dm_spec_to_spec(self._env.observation_spec(), device, "observation_spec")
        if not isinstance(observation, Composite):
            observation = Composite(observation=observation, device=device)
        if self.from_pixels:
            self._env.reset()
            frame = self._render()
            pixels = Bounded(0, 255, frame.shape, dtype=torch.uint8, device=device)
            if self.pixels_only:
                observation = Composite(pixels=pixels, device=device)
            else:
                observation = observation.clone()
                observation["pixels"] = pixels
        clashes = _FLAG.intersection(observation.keys()) | {"reward", "action"}.intersection(
            observation.keys()
        )
        if clashes:
            raise ValueError(
                f"DMControlWrapper observation keys: expected no key named {sorted(clashes)}"
            )
        self.observation_spec = observation
        action = dm_spec_to_spec(self._env.action_spec(), device, "action_spec")
        self.action_spec = action
        reward_dtype = torch.float64
        if hasattr(self._env, "reward_spec"):
            reward_dtype = _torch_dtype(self._env.reward_spec().dtype, "reward_spec")
        self.reward_spec = Unbounded((1,), dtype=reward_dtype, device=device)
        flag = Categorical(2, (1,), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), device=device
        )
        readers = _observation_readers(self.observation_spec)
        self._readers = [item for item in readers if item[0] != "pixels" or not self.from_pixels]
        self._action_dtype = np.dtype(str(action.dtype).replace("torch.", ""))
        self._action_shape = tuple(self._env.action_spec().shape)
        self._rewards = SlotPool(reward_dtype)
        self._flags = SlotPool(torch.bool)

    # ------------------------------------------------------------------ conversion
    def _render(self) -> np.ndarray:
        return self._env.physics.render(**self.render_kwargs)

    def _read_observation(self, observation: Mapping) -> dict[str, torch.Tensor]:
        out = {}
        for key, shape, dtype in self._readers:
            value = np.array(observation[key], dtype=dtype, copy=True)
            out[key] = torch.from_numpy(value.reshape(shape))
        if self.from_pixels:
            out["pixels"] = torch.from_numpy(np.ascontiguousarray(self._render()))
        return out

    def _pack(self, source: dict) -> TensorDictBase:
        device = self.device
        if device is None or device.type == "cpu":
            return TensorDict._new_unsafe(source, batch_size=self.batch_size, device=device)
        return TensorDict(source, batch_size=self.batch_size, device=device)

    # ------------------------------------------------------------------ env protocol
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        step = self._env.reset()
        source = self._read_observation(step.observation)
        take = self._flags.take
        source.update(done=take(False), terminated=take(False), truncated=take(False))
        return self._pack(source)

    def _action_array(self, action: torch.Tensor) -> np.ndarray:
        array = action.detach().cpu().numpy()
        if array.dtype != self._action_dtype:
            array = array.astype(self._action_dtype)
        return array.reshape(self._action_shape)

    def _simulate(self, action: np.ndarray) -> tuple[dict, float, bool, bool]:
        """Step the simulator ``frame_skip`` times: observations, reward, terminated, truncated."""
        reward = 0.0
        for _ in range(self.frame_skip):
            step = self._env.step(action)
            if step.reward is not None:
                reward += step.reward
            if step.last():
                break
        last = step.last()
        terminated = last and step.discount is not None and float(step.discount) == 0.0
        return self._read_observation(step.observation), reward, terminated, last and not terminated

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        source, reward, terminated, truncated = self._simulate(
            self._action_array(tensordict.get("action"))
        )
        take = self._flags.take
        source["reward"] = self._rewards.take(reward)
        source["terminated"] = take(terminated)
        source["truncated"] = take(truncated)
        source["done"] = take(terminated or truncated)
        return self._pack(source)

    def _random_rollout(
        self, max_steps: int, break_when_any_done: bool, set_truncated: bool
    ) -> TensorDictBase | None:
        """Random-action rollouts keep the steps in columns and build each tensor once.

        The data is the generic loop's (same random actions, same resets); only the per-step
        tensordicts are skipped. Envs on an accelerator or with type checks take the generic
        loop, as do subclasses that change a step.
        """
        cls = type(self)
        if (
            self.run_type_checks
            or (self.device is not None and self.device.type != "cpu")
            or any(getattr(cls, name) is not getattr(DMControlWrapper, name) for name in _STEPS)
        ):
            return None
        sample, simulate, to_array = self.action_spec.rand, self._simulate, self._action_array
        roots, nexts, actions, rewards, terminateds, truncateds = [], [], [], [], [], []
        root = self._read_observation(self._env.reset().observation)
        for i in range(max_steps):
            action = sample()
            observation, reward, terminated, truncated = simulate(to_array(action))
            roots.append(root)
            actions.append(action)
            nexts.append(observation)
            rewards.append(reward)
            terminateds.append(terminated)
            truncateds.append(truncated)
            ended = terminated or truncated
            if i == max_steps - 1 or (ended and break_when_any_done):
                break
            root = self._read_observation(self._env.reset().observation) if ended else observation
        return self._columns(roots, nexts, actions, rewards, terminateds, truncateds, set_truncated)

    def _columns(
        self,
        roots: list,
        nexts: list,
        actions: list,
        rewards: list,
        terminateds: list,
        truncateds: list,
        set_truncated: bool,
    ) -> TensorDictBase:
        """The stacked rollout, laid out as the generic loop lays it out."""
        steps = torch.Size([len(actions)])
        flag_shape = (*steps, 1)
        terminated = torch.tensor(terminateds, dtype=torch.bool).reshape(flag_shape)
        truncated = torch.tensor(truncateds, dtype=torch.bool).reshape(flag_shape)
        if set_truncated:
            truncated[-1] = True
        keys = list(roots[0])
        next_source = {key: torch.stack([item[key] for item in nexts]) for key in keys}
        next_source.update(
            reward=torch.tensor(rewards, dtype=self.reward_spec.dtype).reshape(flag_shape),
            terminated=terminated,
            truncated=truncated,
            done=terminated | truncated,
        )
        source = {"next": TensorDict._new_unsafe(next_source, batch_size=steps)}
        source.update({key: torch.stack([item[key] for item in roots]) for key in keys})
        # a root is a reset or a step that did not end its episode: its flags are all False
        for flag in ("done", "terminated", "truncated"):
            source[flag] = torch.zeros(flag_shape, dtype=torch.bool)
        source["action"] = torch.stack(actions)
        result = TensorDict._new_unsafe(source, batch_size=steps, device=self.device)
        result.refine_names("time")
        return result

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        random = _random_state(self._env)
        random.seed(int(seed) % 2**32)

    #: The dm_control module (read on the class or an instance; imported when first read).
    lib = BackendModule("dm_control")

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the simulator."""
        self.is_closed = True
        close = getattr(self._env, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={type(self._env).__name__}, batch_size={self.batch_size})"
        )


def _random_state(env: Any) -> np.random.RandomState:
    """The random state a dm_control env draws its episodes from."""
    task = getattr(env, "task", None)
    random = getattr(task, "random", None)
    if random is None:
        random = getattr(env, "random_state", None)
    if not isinstance(random, np.random.RandomState):
        raise RuntimeError(
            f"DMControlWrapper set_seed: {type(env).__name__} exposes no random state "
            "(expected env.task.random or env.random_state, as dm_control envs have)"
        )
    return random


def _validate_frame_skip(frame_skip: Any) -> int:
    if frame_skip is None:
        return 1
    if isinstance(frame_skip, bool) or not isinstance(frame_skip, (int, np.integer)):
        raise TypeError(f"frame_skip: expected a positive int, got {type(frame_skip).__name__}")
    if frame_skip < 1:
        raise ValueError(f"frame_skip: expected a positive int, got {frame_skip}")
    return int(frame_skip)


class _AvailableEnvs:
    """Class attribute: the suite's tasks by domain (empty when dm_control is missing)."""

    def __get__(self, instance: Any, owner: type) -> dict[str, list[str]]:
        if not _HAS_DMC:
            return {}
        from dm_control import suite

        tasks: dict[str, list[str]] = {}
        for domain, task in suite.ALL_TASKS:
            tasks.setdefault(domain, []).append(task)
        return tasks


DMControlWrapper.available_envs = _AvailableEnvs()  # type: ignore[assignment]


class DMControlEnv(DMControlWrapper):
    """Builds a DeepMind Control Suite task (``suite.load(env_name, task_name)``) and wraps it.

    With ``num_workers=N``, returns a started :class:`~tdrl.envs.ParallelEnv` of ``N``
    copies instead (batch size ``[N]``; ``device`` may list one device per worker).

    Args:
        env_name: the domain, e.g. ``"cheetah"`` (see :attr:`available_envs`).
        task_name: the task, e.g. ``"run"``.

    Keyword Args:
        from_pixels, pixels_only, frame_skip, device, batch_size, allow_done_after_reset:
            as in :class:`DMControlWrapper`.
        camera_id, height, width: rendering options, stored in :attr:`render_kwargs`
            (default camera 0 at dm_control's default 240 x 320).
        render_kwargs: other keyword arguments of ``physics.render``.
        task_kwargs, environment_kwargs, visualize_reward: passed to ``suite.load``.
        num_workers: build this many copies in a ParallelEnv.

    Examples:
        >>> from tdrl.envs.libs.dm_control import DMControlEnv
        >>> env = DMControlEnv("cheetah", "run", frame_skip=2)
        >>> _ = env.set_seed(0)
        >>> env.rollout(4)["next", "reward"].shape
        torch.Size([4, 1])
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Build one env, or a ParallelEnv of copies with ``num_workers``."""
        num_workers = pop_num_workers(kwargs, cls.__name__)
        if num_workers is None:
            return super().__new__(cls)
        return parallel_copies(cls, num_workers, args, kwargs)

    def __init__(
        self,
        env_name: str,
        task_name: str,
        *,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        camera_id: int | str | None = None,
        height: int | None = None,
        width: int | None = None,
        render_kwargs: dict | None = None,
        task_kwargs: dict | None = None,
        environment_kwargs: dict | None = None,
        visualize_reward: bool = False,
        device: Any = None,
        batch_size: Any = None,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        num_workers: int | None = None,
    ) -> None:
        if not _HAS_DMC:
            raise ImportError(MISSING_DMC.format(name="DMControlEnv"))
        available = type(self).available_envs
        if env_name not in available:
            raise ValueError(
                f"DMControlEnv env_name: expected one of {sorted(available)}, got {env_name!r}"
            )
        if task_name not in available[env_name]:
            raise ValueError(
                f"DMControlEnv task_name: expected one of {available[env_name]} for "
                f"{env_name!r}, got {task_name!r}"
            )
        from dm_control import suite

        render = dict(render_kwargs or {})
        for key, value in (("camera_id", camera_id), ("height", height), ("width", width)):
            if value is not None:
                render[key] = value
        self.env_name = env_name
        self.task_name = task_name
        env = suite.load(
            env_name,
            task_name,
            task_kwargs=dict(task_kwargs or {}),
            environment_kwargs=environment_kwargs,
            visualize_reward=visualize_reward,
        )
        super().__init__(
            env,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            render_kwargs=render,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env_name={self.env_name!r}, task_name={self.task_name!r}, "
            f"from_pixels={self.from_pixels}, frame_skip={self.frame_skip})"
        )


def _make_from_id(env_id: str, **kwargs: Any) -> DMControlEnv:
    """``DMControlEnv`` from ``"domain/task"`` (``tdrl check-env --lib dm_control``)."""
    domain, sep, task = env_id.partition("/")
    if not sep:
        domain, sep, task = env_id.partition("-")
    if not sep or not domain or not task:
        raise ValueError(
            f"dm_control env id: expected 'DOMAIN/TASK' (e.g. cheetah/run), got {env_id!r}"
        )
    return DMControlEnv(domain, task, **kwargs)
