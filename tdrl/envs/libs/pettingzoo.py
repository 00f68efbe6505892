"""PettingZoo environments as tdrl envs: :class:`PettingZooWrapper` and :class:`PettingZooEnv`.

Both of PettingZoo's APIs are wrapped: *parallel* envs, where every live agent acts at each
step, and *AEC* (agent-environment cycle) envs, where one agent acts at a time. Agents are
gathered into groups (``group_map``); a group is a nested entry whose batch size is the number
of its agents, holding ``"observation"`` (or the entries of a dict observation),
``"action_mask"`` when the env reports legal actions, ``"action"``, ``"reward"``, ``"done"``,
``"terminated"``, ``"truncated"`` and, with ``use_mask=True``, ``"mask"`` (which agents are
active). ``"done"`` / ``"terminated"`` / ``"truncated"`` at the root aggregate the agents' flags.

Follows the API of pettingzoo 1.27 (``AECEnv``, ``ParallelEnv``) and of mpe2 1.1 for the MPE
tasks. pettingzoo is imported only when an env is built.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Categorical, Composite, TensorSpec, Unbounded
from tdrl.envs.gym_like import _EnvWrapper
from tdrl.envs.libs._gym_spaces import make_space_codec
from tdrl.envs.libs._marl import (
    BackendModule,
    GroupedRandAction,
    check_wrapped_env,
    group_by_name_prefix,
    group_data,
    resolve_group_map,
)
from tdrl.envs.libs._pettingzoo_groups import Group, nest
from tdrl.envs.libs._pettingzoo_rollout import columnar_rollout, rollout_blocker

__all__ = ["PettingZooEnv", "PettingZooWrapper"]

_has_pettingzoo = importlib.util.find_spec("pettingzoo") is not None
_MISSING = (
    "{owner} needs the optional 'pettingzoo' package (pip install 'pettingzoo[classic]' mpe2)"
)
#: packages holding PettingZoo task modules (``<package>.<task>``), searched in this order
_TASK_PACKAGES = (
    "mpe2",
    "pettingzoo.classic",
    "pettingzoo.butterfly",
    "pettingzoo.sisl",
    "pettingzoo.atari",
)
_DEAD_AGENTS = (
    "{owner}: agent(s) {agents} left the env while the episode goes on; their data would be "
    "stale without a mask: build the env with use_mask=True"
)
_FLAGS = ("done", "terminated", "truncated")


def _task_names() -> list[str]:
    names = []
    for package in _TASK_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except ImportError:
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for module in pkgutil.iter_modules(spec.submodule_search_locations):
            if not module.ispkg and module.name.rsplit("_v", 1)[-1].isdigit():
                names.append(module.name)
    return sorted(set(names))


class _AvailableTasks:
    """Class-level attribute listing the PettingZoo task modules that are installed."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        return _task_names() if _has_pettingzoo else []


def _task_module(task: str, owner: str) -> Any:
    errors = []
    for package in _TASK_PACKAGES:
        name = f"{package}.{task}"
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError as err:
            errors.append(f"{package}: {err}")
            continue
        if found:
            return importlib.import_module(name)
    hint = f" ({'; '.join(errors)})" if errors else ""
    base = task.rpartition("_v")[0] or task
    versions = [name for name in _task_names() if name.rpartition("_v")[0] == base]
    if versions:
        hint += f"; installed versions of this task: {versions}"
    raise ValueError(
        f"{owner} task: expected one of {owner}.available_envs (a module of "
        f"{', '.join(_TASK_PACKAGES)}), got {task!r}{hint}"
    )


def _from_registry(task: str, parallel: bool, kwargs: dict) -> Any:
    """The env built by PettingZoo's registry (pettingzoo >= 1.27), or None if not registered.

    Registered ids read ``"<family>/<name>-v<version>"`` for the task ``"<name>_v<version>"``.
    """
    import pettingzoo

    api = "parallel" if parallel else "aec"
    registry = getattr(pettingzoo, f"{api}_registry", None)
    name, _, version = task.rpartition("_v")
    if registry is None or not name or not version.isdigit():
        return None
    suffix = f"{name}-v{version}"
    for env_id in registry:
        if env_id == suffix or env_id.endswith(f"/{suffix}"):
            return pettingzoo.make(api, env_id, **kwargs)
    return None


def default_pettingzoo_group_map(agent_names: list[str]) -> dict[str, list[str]]:
    """PettingZoo's default grouping: ``"<prefix>_<int>"`` agents by prefix, others alone.

    Examples:
        >>> default_pettingzoo_group_map(["adversary_0", "agent_0", "agent_1"])
        {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
    """
    return group_by_name_prefix(agent_names)


class PettingZooWrapper(GroupedRandAction, _EnvWrapper):
    """Wraps a PettingZoo env (parallel or AEC) as a multi-agent tdrl env (batch size ``[]``).

    Each group of ``group_map`` is a nested entry with batch size ``[n_agents_in_group]``:
    ``"observation"`` (a dict observation holding ``"observation"``, as in PettingZoo's classic
    games, gives its entries directly, e.g. ``"action_mask"``), ``"action"`` (integer actions
    for discrete spaces with ``categorical_actions``, one-hot otherwise), ``"reward"``,
    ``"done"``, ``"terminated"``, ``"truncated"`` (shape ``(n, 1)``) and, with ``use_mask``,
    ``"mask"``: which agents act next (AEC: the agent whose turn it is; parallel: the agents
    still in the env, so an agent that has just ended is masked).
    ``"action_mask"`` is boolean; in AEC envs the agents not to act get an all-True mask (their
    action is ignored). The root ``"done"`` is the ``any`` (``done_on_any=True``) or the ``all``
    of the agents' flags; with ``return_state`` the root also holds ``"state"`` (``env.state()``).

    In AEC envs a step applies the action of the agent whose turn it is, then steps the agents
    that are done with ``None`` (as PettingZoo requires) until a live agent is to act. In
    parallel envs, agents that leave the env before the episode ends need ``use_mask=True``
    (they are then masked, done, and keep their last observation); otherwise a ValueError is
    raised.

    On a parallel env, ``rollout(n)`` without a policy keeps its steps in columns (one array per
    group and entry) rather than one tensordict per step, with the same data as the step loop
    (same random actions, same resets); AEC envs, heterogeneous groups, ``done_on_any=False``
    and subclasses that change a step take the step loop.

    Args:
        env: the PettingZoo env (``AECEnv`` or ``ParallelEnv``).
        return_state: add the env's global ``"state"`` at the root.
        group_map: None (agents named ``"<prefix>_<int>"`` grouped by prefix), a
            :class:`~tdrl.envs.MarlGroupMapType` or a dict of group name -> agent names.
        use_mask: add each group's ``"mask"`` entry (needed for envs whose agents come and go).
        categorical_actions: discrete actions as integers instead of one-hot vectors.
        seed: seed the env (``reset(seed=...)``) when built.
        done_on_any: root flags as ``any`` (True) or ``all`` (False) of the agents'; default
            ``any`` for parallel envs and ``all`` for AEC envs.

    Keyword Args:
        device: the device of the data.
        run_type_checks, allow_done_after_reset, spec_locked: see :class:`~tdrl.envs.EnvBase`.

    Examples:
        >>> from mpe2 import simple_spread_v3
        >>> env = PettingZooWrapper(simple_spread_v3.parallel_env(N=2), seed=0)
        >>> env.group_map
        {'agent': ['agent_0', 'agent_1']}
        >>> td = env.rollout(3)
        >>> td["next", "agent", "observation"].shape, td["next", "agent", "reward"].shape
        (torch.Size([3, 2, 12]), torch.Size([3, 2, 1]))
    """

    git_url = "https://github.com/Farama-Foundation/PettingZoo"
    libname = "pettingzoo"
    lib = BackendModule("pettingzoo", "pettingzoo")
    available_envs = _AvailableTasks()

    def __init__(
        self,
        env: Any = None,
        return_state: bool = False,
        group_map: Any = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
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
                f"{type(self).__name__} batch_size: a PettingZoo env is not batched, expected "
                f"() (use SerialEnv / ParallelEnv for batches), got {tuple(batch_size)}"
            )
        config = self.__dict__
        config["return_state"] = bool(return_state)
        config["_requested_group_map"] = group_map
        config["use_mask"] = bool(use_mask)
        config["categorical_actions"] = bool(categorical_actions)
        config["_seed"] = seed
        config["_requested_done_on_any"] = done_on_any
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
            "a PettingZoo env",
            "a PettingZoo AECEnv or ParallelEnv",
            ("possible_agents", "observation_space", "action_space", "step", "reset"),
        )

    def _build_env(self, env: Any) -> Any:
        return env

    def _make_specs(self, env: Any) -> None:
        name = type(self).__name__
        self.parallel = not hasattr(env, "last")
        done_on_any = self._requested_done_on_any
        self.done_on_any = self.parallel if done_on_any is None else bool(done_on_any)
        self.possible_agents = list(env.possible_agents)
        self.group_map = resolve_group_map(
            self._requested_group_map,
            self.possible_agents,
            default_pettingzoo_group_map,
            name,
        )
        self._groups = [
            Group(group, agents, env, self.categorical_actions, name)
            for group, agents in self.group_map.items()
        ]
        self.has_action_mask = {group.name: group.has_action_mask for group in self._groups}
        self.het_specs_map = {group.name: group.heterogeneous for group in self._groups}
        self.het_specs = any(self.het_specs_map.values())
        action_specs, observation_specs, reward_specs, done_specs = {}, {}, {}, {}
        for group in self._groups:
            n = group.n
            action_specs[group.name] = group.action_spec
            observation = group.observation_spec
            if self.use_mask:
                observation = observation.clone()
                observation.unlock_()
                observation["mask"] = Categorical(2, (n,), dtype=torch.bool)
            observation_specs[group.name] = observation
            reward_specs[group.name] = Composite(reward=Unbounded((n, 1)), shape=(n,))
            flag = Categorical(2, (n, 1), dtype=torch.bool)
            done_specs[group.name] = Composite({key: flag.clone() for key in _FLAGS}, shape=(n,))
        if self.return_state:
            observation_specs["state"] = self._state_spec(env)
        flag = Categorical(2, (1,), dtype=torch.bool)
        done_specs.update({key: flag.clone() for key in _FLAGS})
        self.full_action_spec = Composite(action_specs)
        self.full_observation_spec = Composite(observation_specs)
        self.full_reward_spec = Composite(reward_specs)
        self.full_done_spec = Composite(done_specs)

    def _state_spec(self, env: Any) -> TensorSpec:
        space = getattr(env, "state_space", None)
        if space is not None:
            codec = make_space_codec(space, (), False)
        else:
            import gymnasium

            env.reset(seed=self._seed)
            value = np.asarray(env.state())
            dtype = np.float32 if value.dtype == np.float64 else value.dtype
            space = gymnasium.spaces.Box(-np.inf, np.inf, value.shape, dtype)
            codec = make_space_codec(space, (), False)
        self.__dict__["_state_reader"] = codec.read
        return codec.spec

    def _init_env(self) -> None:
        if self._seed is not None:
            self._env.reset(seed=self._seed)

    # ------------------------------------------------------------------ protocol
    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._env.reset(seed=int(seed))

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if tensordict is not None:
            root = tensordict.get("_reset", None)
            if root is not None and not root.any():
                # some agents are done but the episode goes on: nothing to reset
                return tensordict
        env = self._env
        result = env.reset(**kwargs)
        if self.parallel:
            observations = result[0] if isinstance(result, tuple) else result
            acting = None
            live = set(observations)
        else:
            acting = env.agent_selection
            live = set(env.agents)
            observations = {agent: env.observe(agent) for agent in live}
        self._last_flags = {}
        false = dict.fromkeys(live, False)
        return self._output(observations, acting, live, None, false, false)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.parallel:
            return self._step_parallel(tensordict)
        return self._step_aec(tensordict)

    def _agent_actions(self, tensordict: TensorDictBase, wanted: Any) -> dict:
        name = type(self).__name__
        actions = {}
        for group in self._groups:
            rows = None
            for j, agent in enumerate(group.agents):
                if agent in wanted:
                    if rows is None:
                        rows = group.actions(tensordict, name)
                    actions[agent] = group.writers[j](rows[j])
        return actions

    def _step_parallel(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self._env
        actions = self._agent_actions(tensordict, set(env.agents))
        observations, rewards, terminated, truncated, _ = env.step(actions)
        self._check_present(observations, terminated, truncated)
        # the agents that act at the next step (those that just ended are masked already)
        live = set(env.agents)
        return self._output(observations, None, live, rewards, terminated, truncated)

    def _check_present(
        self, observations: Mapping, terminated: Mapping, truncated: Mapping
    ) -> None:
        """Without ``use_mask``, agents may leave a parallel env only as the episode ends."""
        present = set(observations)
        if not self.use_mask and len(present) < len(self.possible_agents):
            if not all(terminated.get(a, False) or truncated.get(a, False) for a in present):
                dead = sorted(set(self.possible_agents) - present)
                raise ValueError(_DEAD_AGENTS.format(owner=type(self).__name__, agents=dead))

    def _random_rollout(
        self, max_steps: int, break_when_any_done: bool, set_truncated: bool
    ) -> TensorDictBase | None:
        """Random-action rollouts of parallel envs kept in columns (same data, fewer objects).

        None (the generic loop) for AEC envs and the other cases :func:`rollout_blocker`
        names.
        """
        if rollout_blocker(self, PettingZooWrapper) is not None:
            return None
        return columnar_rollout(self, max_steps, break_when_any_done, set_truncated)

    def _step_aec(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self._env
        agent = env.agent_selection
        if env.terminations.get(agent, False) or env.truncations.get(agent, False):
            env.step(None)
        else:
            env.step(self._agent_actions(tensordict, (agent,))[agent])
        rewards = dict(env.rewards)
        terminated = dict(env.terminations)
        truncated = dict(env.truncations)
        ended = all(terminated[a] or truncated[a] for a in terminated)
        while env.agents and not ended:
            selected = env.agent_selection
            if not (env.terminations[selected] or env.truncations[selected]):
                break
            env.step(None)
        live = set(env.agents)
        observations = {a: env.observe(a) for a in live}
        acting = env.agent_selection if env.agents else None
        return self._output(observations, acting, live, rewards, terminated, truncated)

    def _agent_flags(self, agent: str, terminated: Mapping, truncated: Mapping) -> tuple:
        """``(terminated, truncated)`` of an agent.

        An agent that left the env keeps its last flags (terminated if it left without
        reporting an end).
        """
        if agent in terminated or agent in truncated:
            flags = (bool(terminated.get(agent, False)), bool(truncated.get(agent, False)))
            self._last_flags[agent] = flags
            return flags
        term, trunc = self._last_flags.get(agent, (False, False))
        return (term or not trunc, trunc)

    def _output(
        self,
        observations: Mapping,
        acting: str | None,
        live: set,
        rewards: Mapping | None,
        terminated: Mapping,
        truncated: Mapping,
    ) -> TensorDictBase:
        """The step (or reset) data from PettingZoo's per-agent dicts.

        Agents without flags in ``terminated`` / ``truncated`` have left the env: they stay
        done with their last flags and keep their last observation.
        """
        out: dict = {}
        any_trunc = any_term = False
        all_done = True
        on_cpu = self.device is None or self.device.type == "cpu"
        for group in self._groups:
            if group.layout is not None:
                arrays = group.read_arrays(observations, acting)
                per_agent = None
            else:
                per_agent = group.read_observations(observations, acting)
            pairs = [self._agent_flags(agent, terminated, truncated) for agent in group.agents]
            for agent_term, agent_trunc in pairs:
                any_term = any_term or agent_term
                any_trunc = any_trunc or agent_trunc
                all_done = all_done and (agent_term or agent_trunc)
            flags = np.array(pairs, dtype=bool).reshape(group.n, 2, 1)
            done = flags[:, 0] | flags[:, 1]
            dense = {
                "terminated": torch.from_numpy(flags[:, 0]),
                "truncated": torch.from_numpy(flags[:, 1]),
                "done": torch.from_numpy(done),
            }
            if rewards is not None:
                reward = [[rewards.get(agent, 0.0)] for agent in group.agents]
                dense["reward"] = torch.from_numpy(np.array(reward, dtype=np.float32))
            if self.use_mask:
                if self.parallel:
                    mask = [agent in live for agent in group.agents]
                else:
                    mask = [agent == acting for agent in group.agents]
                dense["mask"] = torch.from_numpy(np.array(mask, dtype=bool))
            if per_agent is None:
                entries = {
                    key: torch.from_numpy(array)
                    for key, array in zip(group.observation_keys, arrays)
                }
                entries = nest(entries)
                entries.update(dense)
                if on_cpu:
                    data = TensorDict._new_unsafe(
                        entries, batch_size=(group.n,), device=self.device
                    )
                else:
                    data = TensorDict(entries, batch_size=(group.n,), device=self.device)
            else:
                data = group_data(
                    [nest(entries) for entries in per_agent],
                    torch.Size([]),
                    group.heterogeneous,
                    self.device,
                    dense,
                )
            if group.masks_actions:
                # random actions (rand_action) then pick legal moves only
                self.full_action_spec[group.action_key].update_mask(data.get("action_mask"))
            out[group.name] = data
        if self.done_on_any:
            done, terminated_root, truncated_root = any_term or any_trunc, any_term, any_trunc
        else:
            # the episode ends when every agent is done; it is cut short if any was truncated
            done = all_done
            truncated_root = all_done and any_trunc
            terminated_root = all_done and not any_trunc
        root = torch.from_numpy(np.array([done, terminated_root, truncated_root]))
        out["done"], out["terminated"], out["truncated"] = root[0:1], root[1:2], root[2:3]
        if self.return_state:
            out["state"] = self._state_reader(self._env.state())
        if on_cpu:
            return TensorDict._new_unsafe(out, batch_size=(), device=self.device)
        return TensorDict(out, batch_size=(), device=self.device)


class PettingZooEnv(PettingZooWrapper):
    """Builds a PettingZoo task by name and wraps it (see :class:`PettingZooWrapper`).

    A task registered in PettingZoo's registry (pettingzoo >= 1.27) is built with
    ``pettingzoo.make``; otherwise its module is looked up in mpe2 (MPE tasks), then in
    pettingzoo's ``classic``, ``butterfly``, ``sisl`` and ``atari`` families, and
    ``parallel=True`` builds ``module.parallel_env(**kwargs)``, ``parallel=False``
    ``module.env(**kwargs)``.
    Requires the optional ``pettingzoo`` package (and ``mpe2`` for MPE tasks).

    Args:
        task: the task module name, e.g. ``"tictactoe_v3"`` or ``"simple_spread_v3"``.
        parallel: build the parallel API of the task (else its AEC API).
        return_state, group_map, use_mask, categorical_actions, seed, done_on_any: see
            :class:`PettingZooWrapper`.
        **kwargs: arguments of the task's constructor (``N=...``, ``max_cycles=...``).

    Keyword Args:
        device, run_type_checks, allow_done_after_reset, spec_locked: see
            :class:`PettingZooWrapper`.

    Examples:
        >>> env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True, seed=0)
        >>> env.group_map
        {'player': ['player_1', 'player_2']}
        >>> td = env.reset()
        >>> td["player", "mask"], td["player", "action_mask"].shape
        (tensor([ True, False]), torch.Size([2, 9]))
    """

    def __init__(
        self,
        task: str,
        parallel: bool,
        return_state: bool = False,
        group_map: Any = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if not _has_pettingzoo:
            raise ImportError(_MISSING.format(owner=type(self).__name__))
        if not isinstance(task, str):
            raise TypeError(f"PettingZooEnv task: expected a task name, got {type(task).__name__}")
        self.__dict__["task"] = task
        super().__init__(
            None,
            return_state,
            group_map,
            use_mask,
            categorical_actions,
            seed,
            done_on_any,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            task=task,
            parallel=bool(parallel),
            **kwargs,
        )

    def _check_kwargs(self, kwargs: dict) -> None:
        pass

    def _build_env(self, task: str, parallel: bool, **kwargs: Any) -> Any:
        env = _from_registry(task, parallel, kwargs)
        if env is not None:
            return env
        module = _task_module(task, type(self).__name__)
        api = "parallel_env" if parallel else "env"
        build = getattr(module, api, None)
        if build is None:
            raise ValueError(
                f"PettingZooEnv parallel={parallel}: task {task!r} has no {api}() "
                f"(build it with parallel={not parallel})"
            )
        return build(**kwargs)
