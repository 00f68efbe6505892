"""VMAS (vectorized multi-agent simulator) as tdrl envs: :class:`VmasWrapper` and :class:`VmasEnv`.

VMAS simulates ``num_envs`` worlds in one batch of torch tensors on the env's device; the
wrapper keeps that batch (batch size ``[num_envs]``) and gathers the agents into groups
(``group_map``). Each group is a nested entry holding ``"action"``, ``"observation"``,
``"reward"`` and, when the scenario reports any, ``"info"``, with batch size
``[num_envs, n_agents_in_group]``. ``"done"``, ``"terminated"`` and ``"truncated"`` are shared
by all agents and live at the root, as VMAS reports one done per world.

Follows the API of vmas 1.5 (``vmas.make_env``, ``Environment.step`` / ``reset`` /
``reset_at`` / ``get_from_scenario`` / ``seed``). vmas is imported only when an env is built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Categorical, Composite, TensorSpec, Unbounded
from tdrl.envs._td_fast import all_true
from tdrl.envs.gym_like import _EnvWrapper
from tdrl.envs.libs._gym_spaces import gym_space_to_spec
from tdrl.envs.libs._marl import (
    ACTION_ERROR,
    BackendModule,
    GroupedRandAction,
    check_action_shape,
    check_wrapped_env,
    group_by_name_prefix,
    group_data,
    group_spec,
    resolve_group_map,
)

__all__ = ["VmasEnv", "VmasWrapper"]

_has_vmas = importlib.util.find_spec("vmas") is not None
_AGENT_DIM = 1  # data is (num_envs, n_agents_in_group, ...)
_MISSING_VMAS = "{owner} needs the optional 'vmas' package (pip install vmas)"


class _AvailableScenarios:
    """Class-level attribute listing VMAS's scenarios (empty when vmas is not installed)."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        if not _has_vmas:
            return []
        vmas = owner.lib
        return [*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios]


def default_vmas_group_map(agent_names: list[str]) -> dict[str, list[str]]:
    """VMAS's default grouping: by ``"<prefix>_<int>"`` name, one ``"agents"`` group if one prefix.

    Examples:
        >>> default_vmas_group_map(["agent_0", "agent_1"])
        {'agents': ['agent_0', 'agent_1']}
        >>> default_vmas_group_map(["adversary_0", "agent_0"])
        {'adversary': ['adversary_0'], 'agent': ['agent_0']}
    """
    groups = group_by_name_prefix(agent_names)
    if len(groups) == 1:
        return {"agents": list(agent_names)}
    return groups


def _per_agent(values: Any, names: list[str]) -> list:
    """VMAS per-agent outputs (a list, or a dict keyed by agent name) as a list in agent order."""
    if isinstance(values, Mapping):
        return [values[name] for name in names]
    return list(values)


def _as_entry(value: Any) -> Any:
    """A VMAS per-agent value with a trailing feature dim (``(num_envs,)`` -> ``(num_envs, 1)``)."""
    if isinstance(value, torch.Tensor):
        return value.unsqueeze(-1) if value.ndim == 1 else value
    if isinstance(value, Mapping):
        return {str(key): _as_entry(item) for key, item in value.items()}
    raise TypeError(f"VMAS data: expected tensors or dicts of tensors, got {type(value).__name__}")


def _conform(value: Any, spec: Composite) -> dict:
    """An agent's info entries with the keys and dtypes of their spec.

    Scenarios may change an info entry's dtype between calls (a count that starts as a float);
    keys the spec lacks are dropped and missing ones are zeros.
    """
    out = {}
    for key in spec.keys():
        sub = spec[key]
        item = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(sub, Composite):
            out[key] = _conform(item if item is not None else {}, sub)
        elif item is None:
            out[key] = sub.zero()
        else:
            item = _as_entry(item)
            out[key] = item if item.dtype == sub.dtype else item.to(sub.dtype)
    return out


def _spec_of(value: Any, device: Any) -> TensorSpec:
    """An unbounded spec of the value's shape and dtype (a Composite for dicts)."""
    if isinstance(value, Mapping):
        entries = {key: _spec_of(item, device) for key, item in value.items()}
        batch = next(iter(entries.values())).shape[:1] if entries else ()
        return Composite(entries, shape=batch, device=device)
    return Unbounded(value.shape, dtype=value.dtype, device=device)


def _to_vmas_action(spec: TensorSpec) -> Callable[[torch.Tensor], torch.Tensor]:
    """How an agent's action tensor becomes what VMAS reads (indices for one-hot specs)."""
    to_categorical = getattr(spec, "to_categorical", None)
    if to_categorical is None:
        return lambda action: action
    return to_categorical


def _bounds(spec: TensorSpec) -> str:
    """The range of an action spec, as text."""
    space = getattr(spec, "space", None)
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is None or high is None:
        return f"the action spec ({type(spec).__name__})"
    return f"[{low.min().item()}, {high.max().item()}]"


@dataclass
class _Group:
    """The layout of one group: its agents, their positions in VMAS's list, their specs."""

    name: str
    agents: list[str]
    indices: list[int]
    heterogeneous: bool
    action_shape: torch.Size
    converters: list[Callable[[torch.Tensor], torch.Tensor]] = field(default_factory=list)
    #: per agent, the spec of its info entries (None for an agent without info)
    info_specs: list[Composite | None] = field(default_factory=list)


class VmasWrapper(GroupedRandAction, _EnvWrapper):
    """Wraps a VMAS environment (``vmas.make_env(...)``) as a batched multi-agent tdrl env.

    The batch size is ``[num_envs]``. Agents are gathered in groups (``group_map``); each
    group's entries have batch size ``[num_envs, n_agents_in_group]``: ``(group, "action")``,
    ``(group, "observation")``, ``(group, "reward")`` (shape ``(..., 1)``) and
    ``(group, "info")`` (one entry per key of the scenario's info dict). ``"done"``,
    ``"terminated"`` and ``"truncated"`` are shared at the root. Agents of a group whose entries
    differ in shape get stacked specs and lazily stacked data (:attr:`het_specs`).

    A ``"_reset"`` mask resets only the marked worlds. Seeding (:meth:`set_seed`) seeds VMAS's
    random state, so a seeded env replays the same episodes for the same actions.

    Args:
        env: the VMAS environment (``vmas.simulator.environment.Environment``).
        categorical_actions: discrete actions as integers (:class:`Categorical`) instead of
            one-hot vectors. Only used when the env has discrete actions.
        group_map: how agents are grouped: None (by ``"<prefix>_<int>"`` agent names, one
            ``"agents"`` group when all share a prefix), a :class:`~tdrl.envs.MarlGroupMapType`
            or a dict of group name -> agent names.

    Keyword Args:
        device: the device of the data; defaults to the simulator's device, which is moved
            there when it differs.
        batch_size: must be ``[num_envs]`` (or empty) when given.
        run_type_checks, allow_done_after_reset, spec_locked: see :class:`~tdrl.envs.EnvBase`.

    Examples:
        >>> import vmas
        >>> env = VmasWrapper(vmas.make_env("balance", num_envs=3, n_agents=5))
        >>> env.rand_step()["next", "agents", "observation"].shape
        torch.Size([3, 5, 16])
    """

    git_url = "https://github.com/proroklab/VectorizedMultiAgentSimulator"
    libname = "vmas"
    lib = BackendModule("vmas", "vmas")
    available_envs = _AvailableScenarios()

    def __init__(
        self,
        env: Any = None,
        categorical_actions: bool = True,
        group_map: Any = None,
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
            if device is None:
                device = getattr(env, "device", None)
        self.__dict__["categorical_actions"] = bool(categorical_actions)
        self.__dict__["_requested_group_map"] = group_map
        self.__dict__["_requested_batch_size"] = batch_size
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
            "a VMAS environment",
            "a VMAS Environment (vmas.make_env(...) with wrapper=None)",
            ("agents", "num_envs", "step", "reset", "reset_at", "get_from_scenario"),
        )

    def _build_env(self, env: Any) -> Any:
        if self._device is not None and torch.device(env.device) != self._device:
            env.to(self._device)
        return env

    def _check_batch_size(self, num_envs: int) -> None:
        requested = self._requested_batch_size
        if requested is None:
            return
        requested = torch.Size([requested] if isinstance(requested, int) else requested)
        if len(requested) > 1 or (len(requested) == 1 and requested[0] != num_envs):
            raise TypeError(
                f"{type(self).__name__} batch_size: VMAS simulates num_envs={num_envs} worlds "
                f"in one batch, so the batch size must be ({num_envs},) or empty, got "
                f"{tuple(requested)}"
            )

    def _make_specs(self, env: Any) -> None:
        num_envs = int(env.num_envs)
        self._check_batch_size(num_envs)
        self.batch_size = torch.Size([num_envs])
        names = [agent.name for agent in env.agents]
        self.agent_names = names
        self.agent_names_to_indices_map = {name: i for i, name in enumerate(names)}
        self.n_agents = len(names)
        self.group_map = resolve_group_map(
            self._requested_group_map, names, default_vmas_group_map, type(self).__name__
        )
        # rewards are not computed here: a scenario's reward() may update its shaping state
        observations, infos = env.get_from_scenario(
            get_observations=True,
            get_rewards=False,
            get_infos=True,
            get_dones=False,
            dict_agent_names=False,
        )
        action_spaces = _per_agent(env.action_space.spaces, names)
        batch = (num_envs,)
        device = self.device
        action_specs, observation_specs, reward_specs = {}, {}, {}
        self._groups: list[_Group] = []
        self.het_specs_map: dict[str, bool] = {}
        for group, agents in self.group_map.items():
            indices = [self.agent_names_to_indices_map[name] for name in agents]
            agent_actions = [
                Composite(
                    action=gym_space_to_spec(
                        action_spaces[i], self.categorical_actions, device, batch
                    ),
                    shape=batch,
                    device=device,
                )
                for i in indices
            ]
            agent_observations = []
            for i in indices:
                entries = {"observation": _spec_of(_as_entry(observations[i]), device)}
                info = _as_entry(infos[i])
                if info:
                    entries["info"] = _spec_of(info, device)
                agent_observations.append(Composite(entries, shape=batch, device=device))
            agent_rewards = [
                Composite(
                    reward=Unbounded((num_envs, 1), device=device), shape=batch, device=device
                )
                for _ in indices
            ]
            action_spec, het_action = group_spec(agent_actions, _AGENT_DIM)
            observation_spec, het_observation = group_spec(agent_observations, _AGENT_DIM)
            reward_spec, het_reward = group_spec(agent_rewards, _AGENT_DIM)
            heterogeneous = het_action or het_observation or het_reward
            self.het_specs_map[group] = heterogeneous
            action_specs[group] = action_spec
            observation_specs[group] = observation_spec
            reward_specs[group] = reward_spec
            self._groups.append(
                _Group(
                    name=group,
                    agents=list(agents),
                    indices=indices,
                    heterogeneous=heterogeneous,
                    action_shape=torch.Size(
                        [num_envs, len(agents), *action_spec["action"].shape[2:]]
                    )
                    if not het_action
                    else torch.Size([]),
                    converters=[_to_vmas_action(spec["action"]) for spec in agent_actions],
                    info_specs=[spec.get("info", None) for spec in agent_observations],
                )
            )
        self.het_specs = any(self.het_specs_map.values())
        shape = torch.Size(batch)
        self.full_action_spec = Composite(action_specs, shape=shape, device=device)
        self.full_observation_spec = Composite(observation_specs, shape=shape, device=device)
        self.full_reward_spec = Composite(reward_specs, shape=shape, device=device)
        flag = Categorical(2, (num_envs, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=shape, device=device
        )

    # ------------------------------------------------------------------ protocol
    def _agent_actions(self, tensordict: TensorDictBase) -> list:
        actions: list = [None] * self.n_agents
        name = type(self).__name__
        for group in self._groups:
            key = (group.name, "action")
            if group.heterogeneous:
                agents_td = tensordict.get(group.name).unbind(_AGENT_DIM)
                values = [agent_td.get("action") for agent_td in agents_td]
            else:
                action = check_action_shape(
                    name, key, tensordict.get(key, None), group.action_shape
                )
                values = action.unbind(_AGENT_DIM)
            for index, convert, value in zip(group.indices, group.converters, values):
                actions[index] = convert(value)
        return actions

    def _read(self, observations: Any, infos: Any = None, rewards: Any = None) -> dict:
        """The groups' data from VMAS's per-agent observations, infos and rewards.

        Without ``infos`` (a reset), the info entries are zeros.
        """
        names = self.agent_names
        observations = _per_agent(observations, names)
        if infos is not None:
            infos = _per_agent(infos, names)
        if rewards is not None:
            rewards = _per_agent(rewards, names)
        out = {}
        batch = self.batch_size
        for group in self._groups:
            per_agent = []
            for j, i in enumerate(group.indices):
                entries = {"observation": _as_entry(observations[i])}
                info_spec = group.info_specs[j]
                if info_spec is not None:
                    if infos is None:
                        entries["info"] = info_spec.zero().to_dict()
                    else:
                        entries["info"] = _conform(infos[i], info_spec)
                if rewards is not None:
                    entries["reward"] = _as_entry(rewards[i])
                per_agent.append(entries)
            out[group.name] = group_data(per_agent, batch, group.heterogeneous, self.device)
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = self._agent_actions(tensordict)
        try:
            result = self._env.step(actions)
        except AssertionError as err:
            raise self._action_error(tensordict, err) from err
        if len(result) == 5:
            observations, rewards, terminated, truncated, infos = result
        else:
            observations, rewards, done, infos = result
            truncated = self._truncated(done)
            terminated = done & ~truncated
        out = self._read(observations, infos, rewards)
        terminated = terminated.unsqueeze(-1)
        truncated = truncated.unsqueeze(-1)
        out["terminated"] = terminated
        out["truncated"] = truncated
        out["done"] = terminated | truncated
        return TensorDict(out, batch_size=self.batch_size, device=self.device)

    def _truncated(self, done: torch.Tensor) -> torch.Tensor:
        """Time-limit flags of an env built without ``terminated_truncated``."""
        max_steps = getattr(self._env, "max_steps", None)
        if max_steps is None:
            return torch.zeros_like(done)
        return self._env.steps >= max_steps

    def _action_error(self, tensordict: TensorDictBase, err: AssertionError) -> Exception:
        """A ValueError naming the group whose action VMAS rejected."""
        name = type(self).__name__
        for group in self._groups:
            key = (group.name, "action")
            spec = self.full_action_spec[key]
            value = tensordict.get(key, None)
            if value is not None and not spec.is_in(value):
                return ValueError(
                    ACTION_ERROR.format(
                        env=name,
                        key=key,
                        expected=f"values in {_bounds(spec)}",
                        got=f"values in [{value.min().item()}, {value.max().item()}]",
                    )
                    + f" (VMAS: {err})"
                )
        return ValueError(f"{name}: VMAS rejected the actions: {err}")

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        if mask is None or all_true(mask):
            self._env.reset(return_observations=False)
        else:
            for index in mask.reshape(-1).nonzero().reshape(-1).tolist():
                self._env.reset_at(index, return_observations=False)
        (observations,) = self._env.get_from_scenario(
            get_observations=True,
            get_rewards=False,
            get_infos=False,
            get_dones=False,
            dict_agent_names=False,
        )
        out = self._read(observations)
        false = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        out["done"] = false
        out["terminated"] = false.clone()
        out["truncated"] = false.clone()
        return TensorDict(out, batch_size=self.batch_size, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._env.seed(seed)

    def to(self, *args: Any, **kwargs: Any) -> VmasWrapper:
        """Move the env, and the VMAS simulator with it, to a device."""
        device, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None and torch.device(self._env.device) != torch.device(device):
            self._env.to(device)
        super().to(*args, **kwargs)
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.batch_size[0]}, n_agents={self.n_agents}, "
            f"batch_size={self.batch_size}, device={self.device})"
        )


class VmasEnv(VmasWrapper):
    """Builds a VMAS scenario (``vmas.make_env``) and wraps it (see :class:`VmasWrapper`).

    Requires the optional ``vmas`` package.

    Args:
        scenario: a scenario name (:attr:`available_envs`) or a ``vmas.simulator.scenario.
            BaseScenario`` instance.
        num_envs: the number of worlds simulated in one batch (the env's batch size).
        continuous_actions: continuous actions (the default) or discrete ones.
        max_steps: the episode horizon; reaching it sets ``"truncated"``. None: no limit.
        categorical_actions: discrete actions as integers instead of one-hot vectors.
        seed: seed of VMAS's random state.
        group_map: how agents are grouped (see :class:`VmasWrapper`).
        **kwargs: arguments of the scenario (``n_agents=...``).

    Keyword Args:
        device: where VMAS simulates (default: cpu).
        batch_size, run_type_checks, allow_done_after_reset, spec_locked: see
            :class:`VmasWrapper`.

    Examples:
        >>> env = VmasEnv("balance", num_envs=3, n_agents=5)
        >>> td = env.rand_step()
        >>> td["agents", "action"].shape, td["next", "agents", "info", "pos_rew"].shape
        (torch.Size([3, 5, 2]), torch.Size([3, 5, 1]))
        >>> td["next", "done"].shape
        torch.Size([3, 1])
    """

    def __init__(
        self,
        scenario: Any,
        num_envs: int,
        continuous_actions: bool = True,
        max_steps: int | None = None,
        categorical_actions: bool = True,
        seed: int | None = None,
        group_map: Any = None,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if not _has_vmas:
            raise ImportError(_MISSING_VMAS.format(owner=type(self).__name__))
        if isinstance(num_envs, bool) or not isinstance(num_envs, int):
            raise TypeError(f"VmasEnv num_envs: expected a positive int, got {num_envs!r}")
        if num_envs < 1:
            raise ValueError(f"VmasEnv num_envs: expected a positive int, got {num_envs}")
        self.__dict__["scenario_name"] = (
            scenario if isinstance(scenario, str) else type(scenario).__name__
        )
        super().__init__(
            None,
            categorical_actions,
            group_map,
            device=torch.device("cpu") if device is None else device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            scenario=scenario,
            num_envs=num_envs,
            continuous_actions=continuous_actions,
            max_steps=max_steps,
            seed=seed,
            **kwargs,
        )

    def _check_kwargs(self, kwargs: dict) -> None:
        scenario = kwargs["scenario"]
        if not isinstance(scenario, str) and not hasattr(scenario, "make_world"):
            raise TypeError(
                f"VmasEnv scenario: expected a scenario name or a vmas BaseScenario, "
                f"got {type(scenario).__name__}"
            )
        if isinstance(scenario, str) and scenario not in self.available_envs:
            raise ValueError(
                f"VmasEnv scenario: expected one of VmasEnv.available_envs, got {scenario!r}"
            )

    def _build_env(self, scenario: Any, num_envs: int, **kwargs: Any) -> Any:
        return self.lib.make_env(
            scenario=scenario,
            num_envs=num_envs,
            device=self._device,
            terminated_truncated=True,
            **kwargs,
        )

    def __repr__(self) -> str:
        return f"{super().__repr__()} (scenario={self.scenario_name})"
