"""MeltingPot substrates as tdrl envs: :class:`MeltingpotWrapper` and :class:`MeltingpotEnv`.

A substrate is a dm_env-style environment where every player acts at each step. Players are
named ``"player_<i>"`` and gathered into groups (``group_map``, one ``"agents"`` group by
default); each group holds its players' individual observations under ``"observation"``
(``"RGB"``, ``"READY_TO_SHOOT"``, ... one entry per name), their ``"action"`` and
``"reward"``. The substrate's global observations (``"WORLD.<name>"``) are shared at the root
without their prefix (``"RGB"`` for ``"WORLD.RGB"``), with ``"done"``, ``"terminated"`` and
``"truncated"``.

Follows the API of dm-meltingpot 2.4 (``meltingpot.substrate.get_config`` / ``build`` /
``build_from_config``; substrates with ``reset``, ``step``, ``observation``,
``observation_spec``, ``action_spec`` and dm_env time steps). MeltingPot (and its dmlab2d
engine) is not installed with tdrl: ``pip install dm-meltingpot`` where wheels exist.
meltingpot is imported only when an env is built.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Categorical, Composite, OneHot, TensorSpec, Unbounded
from tdrl.envs.gym_like import _EnvWrapper
from tdrl.envs.libs._marl import (
    BackendModule,
    GroupedRandAction,
    check_action_shape,
    check_wrapped_env,
    resolve_group_map,
)
from tdrl.envs.marl import MarlGroupMapType

__all__ = ["MeltingpotEnv", "MeltingpotWrapper"]


def _backend_found() -> bool:
    """Whether meltingpot can be imported (checked when an env is built)."""
    return importlib.util.find_spec("meltingpot") is not None


_MISSING = "{owner} needs the optional 'dm-meltingpot' package (pip install dm-meltingpot)"
_GLOBAL_PREFIX = "WORLD."
_NUMPY_TO_TORCH = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    # float64 observations become float32, as everywhere in tdrl
    np.dtype(np.float64): torch.float32,
}


def _torch_dtype(dtype: Any, name: str) -> torch.dtype:
    try:
        return _NUMPY_TO_TORCH[np.dtype(dtype)]
    except KeyError as err:
        raise TypeError(f"MeltingPot spec {name!r}: unsupported dtype {dtype}") from err


def dm_array_to_spec(spec: Any, leading: tuple = (), name: str = "") -> TensorSpec:
    """A tdrl spec of a dm_env array spec, with ``leading`` dims first.

    ``BoundedArray`` gives :class:`Bounded`, any other ``Array`` :class:`Unbounded`; float64
    becomes float32.

    Examples:
        >>> from types import SimpleNamespace
        >>> rgb = SimpleNamespace(shape=(8, 8, 3), dtype=np.uint8, minimum=0, maximum=255)
        >>> dm_array_to_spec(rgb, (2,)).shape
        torch.Size([2, 8, 8, 3])
    """
    dtype = _torch_dtype(spec.dtype, name)
    shape = (*leading, *tuple(spec.shape))
    minimum = getattr(spec, "minimum", None)
    maximum = getattr(spec, "maximum", None)
    if minimum is None or maximum is None or dtype is torch.bool:
        return Unbounded(shape, dtype=dtype)
    low = torch.as_tensor(np.array(np.broadcast_to(minimum, spec.shape)), dtype=dtype)
    high = torch.as_tensor(np.array(np.broadcast_to(maximum, spec.shape)), dtype=dtype)
    low, high = low.expand(shape), high.expand(shape)
    return Bounded(low.clone(), high.clone(), shape, dtype=dtype)


def _default_group_map(players: Sequence[str]) -> dict[str, list[str]]:
    return MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(players)


class _AvailableSubstrates:
    """Class-level attribute listing MeltingPot's substrates (empty when it is not installed)."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        if not _backend_found():
            return []
        from meltingpot import substrate

        return sorted(substrate.SUBSTRATES)


class MeltingpotWrapper(GroupedRandAction, _EnvWrapper):
    """Wraps a MeltingPot substrate as a multi-agent tdrl env (batch size ``[]``).

    Each group's entries have batch size ``[n_players_in_group]``:
    ``("observation", <name>)`` for each individual observation, ``"action"`` (integers, or
    one-hot vectors without ``categorical_actions``) and ``"reward"`` (shape ``(n, 1)``). The
    global observations (``"WORLD.<name>"``) are root entries ``<name>``. The episode ends when
    the substrate's time step is the last one (terminated, or truncated when its discount is
    not zero) or after ``max_steps`` steps (truncated).

    MeltingPot's API takes no seed: :meth:`set_seed` warns that the seed is not used.

    Args:
        env: the substrate (``meltingpot.substrate.build(...)``).
        categorical_actions: actions as integers instead of one-hot vectors.
        group_map: how players are grouped: one ``"agents"`` group by default, a
            :class:`~tdrl.envs.MarlGroupMapType` or a dict of group name -> player names.
        max_steps: end (truncate) episodes after this many steps; None: the substrate decides.

    Keyword Args:
        device: the device of the data.
        batch_size: must be empty when given.
        run_type_checks, allow_done_after_reset, spec_locked: see :class:`~tdrl.envs.EnvBase`.

    Examples:
        >>> from meltingpot import substrate  # doctest: +SKIP
        >>> config = substrate.get_config("commons_harvest__open")  # doctest: +SKIP
        >>> env = MeltingpotWrapper(
        ...     substrate.build_from_config(config, roles=config.default_player_roles)
        ... )  # doctest: +SKIP
        >>> env.rollout(5)["next", "agents", "observation", "RGB"].shape  # doctest: +SKIP
        torch.Size([5, 7, 88, 88, 3])
    """

    git_url = "https://github.com/google-deepmind/meltingpot"
    libname = "meltingpot"
    lib = BackendModule("meltingpot", "dm-meltingpot")
    available_envs = _AvailableSubstrates()

    def __init__(
        self,
        env: Any = None,
        categorical_actions: bool = True,
        group_map: Any = MarlGroupMapType.ALL_IN_ONE_GROUP,
        max_steps: int | None = None,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if env is not None:
            kwargs["env"] = env
        if batch_size is not None and torch.Size(batch_size) != torch.Size([]):
            raise ValueError(
                f"{type(self).__name__} batch_size: a substrate is not batched, expected () "
                f"(use SerialEnv / ParallelEnv for batches), got {tuple(batch_size)}"
            )
        if max_steps is not None and (
            isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
        ):
            raise ValueError(
                f"{type(self).__name__} max_steps: expected None or a positive int, "
                f"got {max_steps!r}"
            )
        config = self.__dict__
        config["categorical_actions"] = bool(categorical_actions)
        config["_requested_group_map"] = group_map
        config["max_steps"] = max_steps
        config["_steps"] = 0
        super().__init__(
            device=device,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            **kwargs,
        )

    # ------------------------------------------------------------------ building
    def _check_kwargs(self, kwargs: dict) -> None:
        check_wrapped_env(
            self,
            kwargs.get("env"),
            "a MeltingPot substrate",
            "a MeltingPot substrate (meltingpot.substrate.build(...))",
            ("reset", "step", "observation_spec", "action_spec"),
        )

    def _build_env(self, env: Any) -> Any:
        return env

    def _make_specs(self, env: Any) -> None:
        action_specs = list(env.action_spec())
        observation_specs = list(env.observation_spec())
        self.num_players = len(action_specs)
        self.player_names = [f"player_{i}" for i in range(self.num_players)]
        self.group_map = resolve_group_map(
            self._requested_group_map, self.player_names, _default_group_map, type(self).__name__
        )
        self._groups = [
            (group, [int(name.rsplit("_", 1)[1]) for name in players])
            for group, players in self.group_map.items()
        ]
        first = observation_specs[0]
        self._individual = [key for key in first if not key.startswith(_GLOBAL_PREFIX)]
        self._global = [key for key in first if key.startswith(_GLOBAL_PREFIX)]
        self._n_actions = int(action_specs[0].num_values)
        if any(int(spec.num_values) != self._n_actions for spec in action_specs):
            raise ValueError(
                f"{type(self).__name__}: expected the same number of actions for every player, "
                f"got {[int(spec.num_values) for spec in action_specs]}"
            )
        actions, observations, rewards = {}, {}, {}
        for group, players in self._groups:
            n = len(players)
            if self.categorical_actions:
                action = Categorical(self._n_actions, (n,))
            else:
                action = OneHot(self._n_actions, (n, self._n_actions))
            actions[group] = Composite(action=action, shape=(n,))
            entries = {key: dm_array_to_spec(first[key], (n,), key) for key in self._individual}
            observations[group] = Composite(observation=Composite(entries, shape=(n,)), shape=(n,))
            rewards[group] = Composite(reward=Unbounded((n, 1)), shape=(n,))
        for key in self._global:
            observations[key[len(_GLOBAL_PREFIX) :]] = dm_array_to_spec(first[key], (), key)
        flag = Categorical(2, (1,), dtype=torch.bool)
        self.full_action_spec = Composite(actions)
        self.full_observation_spec = Composite(observations)
        self.full_reward_spec = Composite(rewards)
        self.full_done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone())
        self._dtypes = dict(self._spec_dtypes())

    def _spec_dtypes(self) -> list[tuple[str, torch.dtype]]:
        spec = self.full_observation_spec
        out = []
        group = self._groups[0][0]
        for key in self._individual:
            out.append((key, spec[group, "observation", key].dtype))
        for key in self._global:
            out.append((key, spec[key[len(_GLOBAL_PREFIX) :]].dtype))
        return out

    # ------------------------------------------------------------------ protocol
    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            warnings.warn(
                f"{type(self).__name__}: MeltingPot substrates take no seed; seed {seed} is "
                "not used",
                UserWarning,
                stacklevel=3,
            )

    def _tensor(self, value: Any, key: str) -> torch.Tensor:
        return torch.as_tensor(np.asarray(value)).to(self._dtypes[key])

    def _output(
        self, timestep: Any, done: bool, truncated: bool, with_reward: bool
    ) -> TensorDictBase:
        observation = timestep.observation
        out: dict = {}
        for group, players in self._groups:
            entries = {
                key: torch.stack([self._tensor(observation[p][key], key) for p in players])
                for key in self._individual
            }
            data = {"observation": TensorDict(entries, batch_size=(len(players),))}
            if with_reward:
                rewards = [float(np.asarray(timestep.reward[p])) for p in players]
                data["reward"] = torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1)
            out[group] = TensorDict(data, batch_size=(len(players),))
        for key in self._global:
            out[key[len(_GLOBAL_PREFIX) :]] = self._tensor(observation[0][key], key)
        out["done"] = torch.tensor([done])
        out["terminated"] = torch.tensor([done and not truncated])
        out["truncated"] = torch.tensor([truncated])
        return TensorDict(out, batch_size=(), device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        self._steps = 0
        return self._output(self._env.reset(), False, False, with_reward=False)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        name = type(self).__name__
        actions = [0] * self.num_players
        for group, players in self._groups:
            key = (group, "action")
            n = len(players)
            shape = (n,) if self.categorical_actions else (n, self._n_actions)
            value = check_action_shape(name, key, tensordict.get(key, None), torch.Size(shape))
            if not self.categorical_actions:
                value = value.to(torch.float32).argmax(-1)
            for p, action in zip(players, value.tolist()):
                if not 0 <= action < self._n_actions:
                    raise ValueError(
                        f"{name}: action at key {key!r}: expected actions in "
                        f"[0, {self._n_actions}), got {action} for player_{p}"
                    )
                actions[p] = action
        timestep = self._env.step(actions)
        self._steps += 1
        last = bool(timestep.last())
        truncated = last and float(np.asarray(timestep.discount)) != 0.0
        if self.max_steps is not None and self._steps >= self.max_steps:
            truncated = truncated or not last
            last = True
        return self._output(timestep, last, truncated, with_reward=True)

    def get_rgb_image(self) -> torch.Tensor:
        """The substrate's current global view (``"WORLD.RGB"``), as a uint8 tensor."""
        observation = self._env.observation()
        return torch.as_tensor(np.asarray(observation[0][_GLOBAL_PREFIX + "RGB"]))


class MeltingpotEnv(MeltingpotWrapper):
    """Builds a MeltingPot substrate and wraps it (see :class:`MeltingpotWrapper`).

    Requires the optional ``dm-meltingpot`` package.

    Args:
        substrate: a substrate name (:attr:`available_envs`) or a substrate config
            (``meltingpot.substrate.get_config(name)``, possibly edited); it is built with the
            config's ``default_player_roles``.
        max_steps, categorical_actions, group_map: see :class:`MeltingpotWrapper`.

    Keyword Args:
        device, batch_size, run_type_checks, allow_done_after_reset, spec_locked: see
            :class:`MeltingpotWrapper`.

    Examples:
        >>> env = MeltingpotEnv("commons_harvest__open", max_steps=10)  # doctest: +SKIP
        >>> env.rollout(20).batch_size  # doctest: +SKIP
        torch.Size([10])
    """

    def __init__(
        self,
        substrate: Any,
        max_steps: int | None = None,
        categorical_actions: bool = True,
        group_map: Any = MarlGroupMapType.ALL_IN_ONE_GROUP,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
    ) -> None:
        if not _backend_found():
            raise ImportError(_MISSING.format(owner=type(self).__name__))
        super().__init__(
            None,
            categorical_actions,
            group_map,
            max_steps,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            substrate=substrate,
        )

    def _check_kwargs(self, kwargs: dict) -> None:
        substrate = kwargs["substrate"]
        if isinstance(substrate, str):
            if substrate not in self.available_envs:
                raise ValueError(
                    f"MeltingpotEnv substrate: expected one of MeltingpotEnv.available_envs, "
                    f"got {substrate!r}"
                )
        elif not hasattr(substrate, "default_player_roles"):
            raise TypeError(
                "MeltingpotEnv substrate: expected a substrate name or config "
                f"(meltingpot.substrate.get_config(name)), got {type(substrate).__name__}"
            )

    def _build_env(self, substrate: Any) -> Any:
        from meltingpot import substrate as substrates

        config = substrates.get_config(substrate) if isinstance(substrate, str) else substrate
        self.__dict__["substrate_config"] = config
        return substrates.build_from_config(config, roles=config.default_player_roles)
