"""Unity ML-Agents environments as tdrl envs: :class:`UnityMLAgentsWrapper`, :class:`UnityMLAgentsEnv`.

Written against the low-level Python API of ``mlagents_envs`` 1.x: ``UnityEnvironment`` with
``reset()``, ``step()``, ``behavior_specs`` (``BehaviorSpec(observation_specs, action_spec)``),
``get_steps(behavior) -> (DecisionSteps, TerminalSteps)`` (``obs``, ``reward``,
``agent_id``, ``interrupted`` for terminal steps), ``set_actions(behavior, ActionTuple)`` and
``mlagents_envs.registry.default_registry``. mlagents_envs is imported only when an env is
built (its 0.x wheels do not import under protobuf >= 4).
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Categorical, Composite, MultiCategorical, Unbounded
from tdrl.envs._td_fast import all_true
from tdrl.envs.common import EnvBase
from tdrl.envs.libs.backends import BackendModule
from tdrl.envs.marl import MarlGroupMapType, check_marl_grouping

__all__ = ["UnityMLAgentsEnv", "UnityMLAgentsWrapper"]

_HAS_MLAGENTS = importlib.util.find_spec("mlagents_envs") is not None
MISSING_MLAGENTS = "{name} needs the optional 'mlagents_envs' package (pip install mlagents-envs)"
_FLAGS = ("done", "terminated", "truncated")


def _behavior_label(behavior: str) -> str:
    """``"Walker?team=0"`` -> ``"Walker"`` (a valid tensordict key)."""
    return re.sub(r"\W+", "_", behavior.split("?")[0]).strip("_") or "behavior"


class UnityMLAgentsWrapper(EnvBase):
    """Wraps a Unity ML-Agents environment as a multi-agent tdrl env.

    The agents present after the first reset form the env's agents, named
    ``"<behavior>_<agent id>"``. They are gathered in groups (by default one group per
    behavior; see ``group_map``); each group holds, stacked over its agents, one entry per
    observation (``"observation_<i>"``), the actions (``"continuous_action"`` in ``[-1, 1]``
    and/or ``"discrete_action"``, one index per branch), ``"reward"`` and its done flags
    (``"truncated"`` when Unity interrupted the episode); agents end their episodes on their
    own, so there are no root done flags.

    An agent that does not request a decision in a step keeps its observations, gets a zero
    reward and is not done. Unity starts an agent's next episode in the step that ended the
    previous one: a partial reset (``"_reset"`` masks in the groups) hands out those first
    observations without resetting the scene; a reset of every agent resets the scene.

    Args:
        env: the ``UnityEnvironment``.

    Keyword Args:
        group_map: a :class:`~tdrl.envs.MarlGroupMapType` or a dict ``group -> agent names``
            (default: one group per behavior).
        categorical_actions: discrete actions as indices (the only encoding supported).
        device: the device of the data.

    Examples:
        >>> from mlagents_envs.registry import default_registry  # doctest: +SKIP
        >>> env = UnityMLAgentsWrapper(default_registry["3DBall"].make())  # doctest: +SKIP
        >>> env.rollout(3)["next", "Ball3DAgent", "reward"].shape  # doctest: +SKIP
        torch.Size([12, 3, 1])
    """

    def __init__(
        self,
        env: Any = None,
        *,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = None,
        device: Any = None,
        spec_locked: bool = True,
    ) -> None:
        if env is None or not (hasattr(env, "behavior_specs") and hasattr(env, "get_steps")):
            raise TypeError(
                f"UnityMLAgentsWrapper env: expected a UnityEnvironment, got {type(env).__name__}"
            )
        super().__init__(device=device, batch_size=(), spec_locked=spec_locked)
        self._env = env
        env.reset()
        self._agents: dict[str, tuple[str, int]] = {}  # name -> (behavior, agent id)
        self._behavior_specs = dict(env.behavior_specs)
        for behavior in self._behavior_specs:
            decisions, _ = env.get_steps(behavior)
            for agent_id in decisions.agent_id:
                self._agents[f"{_behavior_label(behavior)}_{int(agent_id)}"] = (
                    behavior,
                    int(agent_id),
                )
        if not self._agents:
            raise ValueError("UnityMLAgentsWrapper: no agent requested a decision after reset")
        self.group_map = self._group_map(group_map)
        self._make_specs()
        self._last: dict[str, dict] = {}
        self._next_episode: dict[str, list] = {}

    # ------------------------------------------------------------------ construction
    def _group_map(self, group_map: Any) -> dict[str, list[str]]:
        names = list(self._agents)
        if group_map is None:
            grouped: dict[str, list[str]] = {}
            for name, (behavior, _) in self._agents.items():
                grouped.setdefault(_behavior_label(behavior), []).append(name)
            return grouped
        if isinstance(group_map, MarlGroupMapType):
            group_map = group_map.get_group_map(names)
        if not isinstance(group_map, dict):
            raise TypeError(
                f"UnityMLAgentsWrapper group_map: expected a MarlGroupMapType or a dict, got "
                f"{type(group_map).__name__}"
            )
        check_marl_grouping(group_map, names)
        for group, members in group_map.items():
            behaviors = {self._agents[name][0] for name in members}
            if len({_describe(self._behavior_specs[b]) for b in behaviors}) > 1:
                raise ValueError(
                    f"UnityMLAgentsWrapper group {group!r}: expected agents with the same "
                    f"observation and action specs, got behaviors {sorted(behaviors)}"
                )
        return {group: list(members) for group, members in group_map.items()}

    def _make_specs(self) -> None:
        device = self.device
        observation, action, reward, done = (Composite(device=device) for _ in range(4))
        for group, members in self.group_map.items():
            spec = self._behavior_specs[self._agents[members[0]][0]]
            n = len(members)
            observation[group] = Composite(
                {
                    f"observation_{i}": Unbounded((n, *obs.shape), dtype=torch.float32)
                    for i, obs in enumerate(spec.observation_specs)
                },
                shape=(n,),
            )
            actions = {}
            if spec.action_spec.continuous_size:
                size = int(spec.action_spec.continuous_size)
                actions["continuous_action"] = Bounded(-1.0, 1.0, (n, size), dtype=torch.float32)
            branches = [int(b) for b in spec.action_spec.discrete_branches]
            if branches:
                actions["discrete_action"] = MultiCategorical(branches, (n, len(branches)))
            action[group] = Composite(actions, shape=(n,))
            reward[group] = Composite(reward=Unbounded((n, 1), dtype=torch.float32), shape=(n,))
            flag = Categorical(2, (n, 1), dtype=torch.bool)
            done[group] = Composite({key: flag.clone() for key in _FLAGS}, shape=(n,))
        self.observation_spec = observation.to(device or "cpu")
        self.full_action_spec = action.to(device or "cpu")
        self.full_reward_spec = reward.to(device or "cpu")
        self.full_done_spec = done.to(device or "cpu")

    #: The mlagents_envs module (read on the class or an instance; imported when first read).
    lib = BackendModule("mlagents_envs")

    # ------------------------------------------------------------------ simulator I/O
    def _collect(self) -> dict[str, dict]:
        """Each agent's latest observations, reward and end, after a reset or a step."""
        records: dict[str, dict] = {}
        labels = {(behavior, agent_id): name for name, (behavior, agent_id) in self._agents.items()}
        self._next_episode = {}
        for behavior in self._behavior_specs:
            decisions, terminals = self._env.get_steps(behavior)
            for index, agent_id in enumerate(terminals.agent_id):
                name = labels.get((behavior, int(agent_id)))
                if name is not None:
                    interrupted = bool(terminals.interrupted[index])
                    records[name] = {
                        "obs": [np.asarray(obs[index]) for obs in terminals.obs],
                        "reward": float(terminals.reward[index]),
                        "terminated": not interrupted,
                        "truncated": interrupted,
                    }
            for index, agent_id in enumerate(decisions.agent_id):
                name = labels.get((behavior, int(agent_id)))
                if name is None:
                    continue
                observations = [np.asarray(obs[index]) for obs in decisions.obs]
                if name in records:  # ended and started again in the same step
                    self._next_episode[name] = observations
                    continue
                records[name] = {
                    "obs": observations,
                    "reward": float(decisions.reward[index]),
                    "terminated": False,
                    "truncated": False,
                }
        return records

    def _send_actions(self, tensordict: TensorDictBase) -> None:
        from mlagents_envs.base_env import ActionTuple

        actions: dict[str, dict[int, dict[str, np.ndarray]]] = {}
        for group, members in self.group_map.items():
            for position, name in enumerate(members):
                behavior, agent_id = self._agents[name]
                entry = {}
                for key in self.full_action_spec[group].keys():
                    entry[key] = tensordict.get((group, key))[position].detach().cpu().numpy()
                actions.setdefault(behavior, {})[agent_id] = entry
        for behavior, by_agent in actions.items():
            decisions, _ = self._env.get_steps(behavior)
            waiting = [
                int(agent_id) for agent_id in decisions.agent_id if int(agent_id) in by_agent
            ]
            if not waiting:
                continue
            continuous = [by_agent[a].get("continuous_action") for a in waiting]
            discrete = [by_agent[a].get("discrete_action") for a in waiting]
            self._env.set_actions(
                behavior,
                ActionTuple(
                    continuous=None
                    if continuous[0] is None
                    else np.stack(continuous).astype(np.float32),
                    discrete=None if discrete[0] is None else np.stack(discrete).astype(np.int32),
                ),
            )

    def _output(self, records: dict[str, dict], with_reward: bool) -> TensorDictBase:
        data = TensorDict({}, batch_size=(), device=self.device)
        for group, members in self.group_map.items():
            n_obs = len(self.observation_spec[group].keys())
            for i in range(n_obs):
                data.set(
                    (group, f"observation_{i}"),
                    torch.as_tensor(
                        np.stack([self._last[name]["obs"][i] for name in members]),
                        dtype=torch.float32,
                    ),
                )
            terminated = torch.tensor(
                [[records.get(n, {}).get("terminated", False)] for n in members]
            )
            truncated = torch.tensor(
                [[records.get(n, {}).get("truncated", False)] for n in members]
            )
            data.set((group, "terminated"), terminated)
            data.set((group, "truncated"), truncated)
            data.set((group, "done"), terminated | truncated)
            if with_reward:
                rewards = [[records.get(n, {}).get("reward", 0.0)] for n in members]
                data.set((group, "reward"), torch.tensor(rewards, dtype=torch.float32))
        return data.to(self.device) if self.device is not None else data

    # ------------------------------------------------------------------ env protocol
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        masks = {}
        if tensordict is not None:
            for group in self.group_map:
                mask = tensordict.get((group, "_reset"), None)
                if mask is not None:
                    masks[group] = mask
        partial = len(masks) == len(self.group_map) and not all(
            all_true(mask) for mask in masks.values()
        )
        if not partial:
            self._env.reset()
            self._last = self._collect()
        else:
            for group, mask in masks.items():
                for name, selected in zip(self.group_map[group], mask.reshape(-1).tolist()):
                    if selected and name in self._next_episode:
                        self._last[name] = {"obs": self._next_episode.pop(name)}
        return self._output({}, with_reward=False)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._send_actions(tensordict)
        self._env.step()
        records = self._collect()
        for name, record in records.items():
            self._last[name] = record
        return self._output(records, with_reward=True)

    def _set_seed(self, seed: int | None) -> None:
        """Unity seeds its scene when the environment is launched (``seed=`` of the env)."""

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the Unity process."""
        self.is_closed = True
        self._env.close()


def _describe(spec: Any) -> tuple:
    return (
        tuple(tuple(obs.shape) for obs in spec.observation_specs),
        int(spec.action_spec.continuous_size),
        tuple(int(b) for b in spec.action_spec.discrete_branches),
    )


class UnityMLAgentsEnv(UnityMLAgentsWrapper):
    """Launches a Unity ML-Agents environment (a build, the editor or a registered one).

    Args:
        file_name: the path of a Unity build; None connects to the editor (press Play).

    Keyword Args:
        registered_name: build a registry environment instead (e.g. ``"3DBall"``,
            downloaded by ``mlagents_envs.registry.default_registry``).
        group_map, device: as in :class:`UnityMLAgentsWrapper`.
        **kwargs: passed to ``UnityEnvironment`` (``worker_id``, ``seed``, ``no_graphics``,
            ``timeout_wait``, ...) or to the registry entry's ``make``.

    Examples:
        >>> env = UnityMLAgentsEnv(registered_name="3DBall", no_graphics=True)  # doctest: +SKIP
    """

    def __init__(
        self,
        file_name: str | None = None,
        *,
        registered_name: str | None = None,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = None,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if not _HAS_MLAGENTS:
            raise ImportError(MISSING_MLAGENTS.format(name="UnityMLAgentsEnv"))
        if registered_name is not None:
            from mlagents_envs.registry import default_registry

            if registered_name not in default_registry:
                raise ValueError(
                    f"UnityMLAgentsEnv registered_name: expected one of "
                    f"{sorted(default_registry)}, got {registered_name!r}"
                )
            env = default_registry[registered_name].make(**kwargs)
        else:
            from mlagents_envs.environment import UnityEnvironment

            env = UnityEnvironment(file_name, **kwargs)
        super().__init__(env, group_map=group_map, device=device)


def _make_from_id(env_id: str, **kwargs: Any) -> UnityMLAgentsEnv:
    """``UnityMLAgentsEnv(registered_name=env_id)`` for ``tdrl check-env --lib unity_mlagents``."""
    return UnityMLAgentsEnv(registered_name=env_id, no_graphics=True, **kwargs)
