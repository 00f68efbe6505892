"""Transforms that end episodes: a user predicate, or a random truncation horizon."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Categorical
from tdrl.envs._partial import align_mask
from tdrl.envs._td_fast import all_true
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["RandomTruncationTransform", "TerminateTransform"]


def _flag_like(value: Any, like: torch.Tensor, owner: str) -> torch.Tensor:
    """A boolean tensor shaped like ``like`` from a predicate's result."""
    flag = torch.as_tensor(value, device=like.device)
    if flag.dtype != torch.bool:
        raise TypeError(f"{owner}: expected a boolean predicate result, got dtype {flag.dtype}")
    try:
        return align_mask(flag, like.shape, "stop", "predicate", "terminated")
    except ValueError as err:
        raise ValueError(
            f"{owner}: the predicate returned shape {tuple(flag.shape)}, which does not "
            f"broadcast to the terminated entry of shape {tuple(like.shape)}"
        ) from err


class TerminateTransform(Transform):
    """Terminates episodes where a predicate on the step output is True.

    After each step, ``stop(next_tensordict)`` is evaluated (a boolean tensor of the
    env batch shape, with or without the trailing dim of the done entries, or a
    Python bool); where it is True, ``terminated`` is set and, with ``write_done``,
    ``done`` too.

    Args:
        stop: the predicate, called with the data returned by the step.
        write_done: also set ``done`` (otherwise only ``terminated``).

    Examples:
        >>> from tdrl.envs import PendulumEnv, StepCounter, TerminateTransform, TransformedEnv
        >>> from tdrl.envs.transforms import Compose
        >>> env = TransformedEnv(
        ...     PendulumEnv(),
        ...     Compose(StepCounter(), TerminateTransform(lambda td: td["step_count"] >= 4)),
        ... )
        >>> rollout = env.rollout(10)
        >>> rollout.shape, bool(rollout["next", "terminated"][-1])
        (torch.Size([4]), True)
    """

    def __init__(
        self,
        stop: Callable[[TensorDictBase], torch.Tensor | bool],
        write_done: bool = True,
    ) -> None:
        if not callable(stop):
            raise ValueError(
                f"TerminateTransform stop: expected a callable predicate, got {stop!r}"
            )
        super().__init__()
        self.stop = stop
        self.write_done = write_done

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        terminated = next_tensordict.get("terminated", None)
        done = next_tensordict.get("done", None)
        like = terminated if terminated is not None else done
        if like is None:
            raise KeyError(
                "TerminateTransform: expected a 'terminated' or 'done' entry in the step output, "
                f"got keys {list(next_tensordict.keys(True, True))}"
            )
        stop = _flag_like(self.stop(next_tensordict), like, "TerminateTransform")
        next_tensordict.set("terminated", stop if terminated is None else terminated | stop)
        if self.write_done:
            next_tensordict.set("done", stop if done is None else done | stop)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: the predicate ends env episodes."""
        raise RuntimeError(
            "TerminateTransform cannot be called without a parent environment: it ends the "
            "episodes of the env it belongs to"
        )

    def __repr__(self) -> str:
        return f"TerminateTransform(stop={self.stop!r}, write_done={self.write_done})"


def _check_probability(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"RandomTruncationTransform {name}: expected a number, got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"RandomTruncationTransform: {name} must be in [0, 1], got {value}")
    return float(value)


class RandomTruncationTransform(Transform):
    """Truncates episodes at random horizons, read against a :class:`StepCounter`.

    Each env of the batch has a horizon; an episode is truncated (``truncated`` and
    ``done`` set) once its step count reaches it. At each reset of an env, the new
    horizon is drawn uniformly in ``[min_horizon, max_horizon]`` with probability
    ``prob``, else it is ``max_horizon``. At the very first reset, each env is given,
    with probability ``first_episode_prob``, a first episode of length uniform in
    ``[1, max_horizon]``: envs of a batch then end their episodes at different steps
    instead of all together. ``first_episode`` tells which envs are still in such a
    first episode. A :class:`StepCounter` must come before this transform.

    Args:
        min_horizon: the shortest random horizon (>= 1).
        max_horizon: the longest horizon, used when no random horizon is drawn.
        prob: the probability of a random horizon at each reset.
        first_episode_prob: the probability of a spread first episode.
        step_count_key: the counter entry written by the StepCounter.
        truncated_key: the truncation entry (added to the done spec when missing).
        done_key: the done entry, also set at truncation.

    Examples:
        >>> import torch
        >>> from tdrl.envs import PendulumEnv, RandomTruncationTransform, StepCounter
        >>> from tdrl.envs import TransformedEnv
        >>> from tdrl.envs.transforms import Compose
        >>> _ = torch.manual_seed(0)
        >>> truncation = RandomTruncationTransform(min_horizon=2, max_horizon=4, prob=1.0)
        >>> env = TransformedEnv(PendulumEnv(), Compose(StepCounter(), truncation))
        >>> rollout = env.rollout(10)
        >>> len(rollout) <= 4, bool(rollout["next", "truncated"][-1])
        (True, True)
    """

    def __init__(
        self,
        min_horizon: int = 1,
        max_horizon: int = 1000,
        prob: float = 0.0,
        first_episode_prob: float = 1.0,
        step_count_key: NestedKey = "step_count",
        truncated_key: NestedKey = "truncated",
        done_key: NestedKey = "done",
    ) -> None:
        for name, value in (("min_horizon", min_horizon), ("max_horizon", max_horizon)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"RandomTruncationTransform {name}: expected an int, got {value!r}")
            if value < 1:
                raise ValueError(f"RandomTruncationTransform: {name} must be >= 1, got {value}")
        if min_horizon > max_horizon:
            raise ValueError(
                f"RandomTruncationTransform: min_horizon ({min_horizon}) must be <= max_horizon "
                f"({max_horizon})"
            )
        super().__init__()
        self.prob = _check_probability("prob", prob)
        self.first_episode_prob = _check_probability("first_episode_prob", first_episode_prob)
        self.min_horizon = min_horizon
        self.max_horizon = max_horizon
        self.step_count_key = step_count_key
        self.truncated_key = truncated_key
        self.done_key = done_key
        self._horizons: torch.Tensor | None = None
        self._first_episode: torch.Tensor | None = None

    @property
    def horizons(self) -> torch.Tensor | None:
        """The current horizon of each env (None before the first reset)."""
        return self._horizons

    @property
    def first_episode(self) -> torch.Tensor | None:
        """Which envs are still in their spread first episode (None before the first reset)."""
        return self._first_episode

    @property
    def _initialized(self) -> bool:
        return self._horizons is not None

    def _draw(self, shape: torch.Size, device: Any) -> torch.Tensor:
        """Horizons of new episodes: random with probability ``prob``, else ``max_horizon``."""
        horizons = torch.full(shape, self.max_horizon, dtype=torch.int64, device=device)
        if self.prob > 0:
            drawn = torch.randint(
                self.min_horizon, self.max_horizon + 1, shape, dtype=torch.int64, device=device
            )
            horizons = torch.where(torch.rand(shape, device=device) < self.prob, drawn, horizons)
        return horizons

    def _first_draw(self, shape: torch.Size, device: Any) -> None:
        spread = torch.randint(1, self.max_horizon + 1, shape, dtype=torch.int64, device=device)
        first = torch.rand(shape, device=device) < self.first_episode_prob
        self._horizons = torch.where(first, spread, self._draw(shape, device))
        self._first_episode = first

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        count = tensordict_reset.get(self.step_count_key, None)
        if count is None:
            raise KeyError(
                f"RandomTruncationTransform: expected the step counter {self.step_count_key!r} in "
                "the reset output; put a StepCounter before this transform"
            )
        shape, device = count.shape, count.device
        horizons = self._horizons
        if horizons is None or horizons.shape != shape:
            self._first_draw(shape, device)
        else:
            reset = tensordict.get("_reset", None)
            mask = (
                torch.ones(shape, dtype=torch.bool, device=device)
                if reset is None
                else align_mask(reset, shape, "_reset", "_reset", self.step_count_key)
            )
            if all_true(mask):
                self._horizons = self._draw(shape, device)
                self._first_episode = torch.zeros(shape, dtype=torch.bool, device=device)
            else:
                self._horizons = torch.where(mask, self._draw(shape, device), horizons)
                self._first_episode = self._first_episode & ~mask
        if tensordict_reset.get(self.truncated_key, None) is None:
            tensordict_reset.set(
                self.truncated_key, torch.zeros(shape, dtype=torch.bool, device=device)
            )
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        horizons = self._horizons
        if horizons is None:
            return next_tensordict
        count = next_tensordict.get(self.step_count_key, None)
        if count is None or count.shape != horizons.shape:
            return next_tensordict
        truncated = count >= horizons
        previous = next_tensordict.get(self.truncated_key, None)
        next_tensordict.set(
            self.truncated_key, truncated if previous is None else previous | truncated
        )
        done = next_tensordict.get(self.done_key, None)
        next_tensordict.set(self.done_key, truncated if done is None else done | truncated)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: horizons are drawn at env resets."""
        raise NotImplementedError(
            "RandomTruncationTransform cannot be called independently: it truncates the "
            "episodes of its env at reset-drawn horizons"
        )

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Check that a step counter precedes; add the truncation entry to the done spec."""
        output_spec = super().transform_output_spec(output_spec)
        observation_spec = output_spec["full_observation_spec"]
        if self.step_count_key not in observation_spec.keys(True):
            raise RuntimeError(
                "RandomTruncationTransform requires a StepCounter before it in the transform "
                f"chain (to provide {self.step_count_key!r}); observation keys: "
                f"{list(observation_spec.keys(True, True))}"
            )
        done_spec = output_spec["full_done_spec"]
        if self.truncated_key not in done_spec.keys(True):
            count = observation_spec[self.step_count_key]
            done_spec[self.truncated_key] = Categorical(
                2, shape=count.shape, dtype=torch.bool, device=count.device
            )
        return output_spec

    def __repr__(self) -> str:
        return (
            f"RandomTruncationTransform(min_horizon={self.min_horizon}, "
            f"max_horizon={self.max_horizon}, prob={self.prob}, "
            f"first_episode_prob={self.first_episode_prob})"
        )
