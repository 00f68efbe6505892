"""UnityMLAgentsEnv / UnityMLAgentsWrapper against a fake of the ML-Agents low-level API.

mlagents_envs cannot be used here (its wheels do not import under protobuf >= 4, which the
other backends need). The fake follows the documented low-level API: ``behavior_specs``,
``get_steps`` returning decision and terminal steps (an agent whose episode ends requests a
decision for its next episode in the same step), ``set_actions`` with an ``ActionTuple``.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.envs import MarlGroupMapType, ParallelEnv, SerialEnv, check_env_specs
from tdrl.envs.libs import unity_mlagents as unity_lib
from tdrl.envs.libs.unity_mlagents import UnityMLAgentsEnv, UnityMLAgentsWrapper
from tests.envs.conformance import EnvConformance


@dataclass
class ObservationSpec:
    shape: tuple


@dataclass
class ActionSpec:
    continuous_size: int
    discrete_branches: tuple


@dataclass
class BehaviorSpec:
    observation_specs: list
    action_spec: ActionSpec


@dataclass
class Steps:
    obs: list
    reward: np.ndarray
    agent_id: np.ndarray
    interrupted: np.ndarray | None = None


@dataclass
class ActionTuple:
    continuous: np.ndarray | None = None
    discrete: np.ndarray | None = None


class FakeUnityEnvironment:
    """Walkers (agents 0 and 1) and a runner (agent 7); agent a's episode lasts 2 + a % 3 steps.

    Agent 1's episodes are interrupted (a time limit); the others terminate.
    """

    SPEC = BehaviorSpec([ObservationSpec((3,)), ObservationSpec((2, 2))], ActionSpec(2, (3, 2)))

    def __init__(self, file_name=None, **kwargs):
        self.kwargs = kwargs
        self.behavior_specs = {"Walker?team=0": self.SPEC, "Runner?team=0": self.SPEC}
        self.agents = {"Walker?team=0": [0, 1], "Runner?team=0": [7]}
        self.actions = {}
        self.closed = False
        self.reset()

    def _obs(self, behavior, ids):
        position = np.array([self.position[(behavior, a)] for a in ids], np.float32)
        return [np.repeat(position[:, None], 3, 1), np.zeros((len(ids), 2, 2), np.float32)]

    def reset(self):
        self.position = {(b, a): 0.0 for b, ids in self.agents.items() for a in ids}
        self.count = dict.fromkeys(self.position, 0)
        self.ended = {b: [] for b in self.agents}

    def get_steps(self, behavior):
        ids = self.agents[behavior]
        decisions = Steps(self._obs(behavior, ids), np.ones(len(ids), np.float32), np.array(ids))
        ended = self.ended[behavior]
        terminals = Steps(
            [np.stack([e[0] for e in ended]), np.stack([e[1] for e in ended])] if ended else [],
            np.full(len(ended), -1.0, np.float32),
            np.array([e[2] for e in ended], dtype=int),
            np.array([e[2] == 1 for e in ended]),
        )
        return decisions, terminals

    def set_actions(self, behavior, action):
        assert action.continuous.shape == (len(self.agents[behavior]), 2)
        assert action.discrete.shape == (len(self.agents[behavior]), 2)
        self.actions[behavior] = action

    def step(self):
        self.ended = {b: [] for b in self.agents}
        for behavior, ids in self.agents.items():
            action = self.actions.pop(behavior)
            for index, agent in enumerate(ids):
                key = (behavior, agent)
                self.position[key] += float(action.continuous[index].sum()) + 1.0
                self.count[key] += 1
                if self.count[key] >= 2 + agent % 3:
                    last = np.full(3, self.position[key], np.float32)
                    self.ended[behavior].append((last, np.zeros((2, 2), np.float32), agent))
                    self.position[key] = 0.0
                    self.count[key] = 0

    def close(self):
        self.closed = True


@pytest.fixture(autouse=True)
def fake_mlagents(monkeypatch):
    package = types.ModuleType("mlagents_envs")
    base_env = types.ModuleType("mlagents_envs.base_env")
    base_env.ActionTuple = ActionTuple
    environment = types.ModuleType("mlagents_envs.environment")
    environment.UnityEnvironment = FakeUnityEnvironment
    registry = types.ModuleType("mlagents_envs.registry")
    registry.default_registry = {
        "3DBall": types.SimpleNamespace(make=lambda **kwargs: FakeUnityEnvironment(**kwargs))
    }
    for name, module in (
        ("mlagents_envs", package),
        ("mlagents_envs.base_env", base_env),
        ("mlagents_envs.environment", environment),
        ("mlagents_envs.registry", registry),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(unity_lib, "_HAS_MLAGENTS", True)


@pytest.mark.parametrize(
    "group_map", [None, MarlGroupMapType.ALL_IN_ONE_GROUP, MarlGroupMapType.ONE_GROUP_PER_AGENT]
)
def test_group_maps_and_specs(group_map):
    env = UnityMLAgentsWrapper(FakeUnityEnvironment(), group_map=group_map)
    expected = {
        None: {"Walker": ["Walker_0", "Walker_1"], "Runner": ["Runner_7"]},
        MarlGroupMapType.ALL_IN_ONE_GROUP: {"agents": ["Walker_0", "Walker_1", "Runner_7"]},
        MarlGroupMapType.ONE_GROUP_PER_AGENT: {
            "Walker_0": ["Walker_0"],
            "Walker_1": ["Walker_1"],
            "Runner_7": ["Runner_7"],
        },
    }[group_map]
    assert env.group_map == expected
    group, members = next(iter(expected.items()))
    assert env.observation_spec[group, "observation_1"].shape == (len(members), 2, 2)
    assert env.full_action_spec[group, "continuous_action"].shape == (len(members), 2)
    assert env.full_action_spec[group, "discrete_action"].nvec[..., :].tolist()[-1] == [3, 2]
    check_env_specs(env)
    env.rollout(20, break_when_any_done=False, break_when_all_done=False)


class TestUnityConformance(EnvConformance):
    def make_env(self):
        return UnityMLAgentsEnv(" ")

    def test_partial_reset_keeps_unreset_elements(self):
        # every group has its own "_reset" (no root done): unset masks everywhere reset nothing
        env = self._env()
        data = env.rand_step(env.reset())["next"].clone()
        before = {key: data.get(key).clone() for key in env.observation_keys}
        for group in env.group_map:
            data.set((group, "_reset"), torch.zeros(len(env.group_map[group]), 1, dtype=torch.bool))
        out = env.reset(data)
        for key, value in before.items():
            torch.testing.assert_close(out.get(key), value)
        assert all(out.get(key, None) is None for key in env.reset_keys)


def test_episode_ends_and_next_episodes():
    env = UnityMLAgentsEnv(registered_name="3DBall", no_graphics=True)
    assert env._env.kwargs == {"no_graphics": True}
    env.set_seed(0)
    data = env.rollout(5, break_when_any_done=False)
    walker = data["next", "Walker"]
    # agent 0 ends every 2 steps (terminated), agent 1 every 3 (interrupted: truncated)
    assert walker["terminated"][:, 0, 0].tolist() == [False, True, False, True, False]
    assert walker["truncated"][:, 1, 0].tolist() == [False, False, True, False, False]
    assert walker["reward"][:, 0, 0].tolist() == [1.0, -1.0, 1.0, -1.0, 1.0]
    # the step after an end starts from the next episode's first observation (position 0)
    assert data["Walker", "observation_0"][2, 0, 0].item() == 0.0
    assert "done" not in data["next"].keys()  # agents end their episodes on their own


def test_errors():
    with pytest.raises(TypeError, match="UnityEnvironment"):
        UnityMLAgentsWrapper(object())
    with pytest.raises(ValueError, match="registered_name: expected one of"):
        UnityMLAgentsEnv(registered_name="Nope")
    with pytest.raises(ValueError, match="missing"):
        UnityMLAgentsWrapper(FakeUnityEnvironment(), group_map={"agents": ["Walker_0"]})


def test_missing_backend(monkeypatch):
    monkeypatch.setattr(unity_lib, "_HAS_MLAGENTS", False)
    with pytest.raises(ImportError, match="pip install mlagents-envs"):
        UnityMLAgentsEnv(" ")


def test_batched_envs_and_a_collector():
    def make():
        return UnityMLAgentsWrapper(FakeUnityEnvironment())

    check_env_specs(SerialEnv(2, make))
    # forked workers inherit the fake backend (a fork server's would not see it)
    with ParallelEnv(2, make, mp_start_method="fork") as env:
        assert env.rollout(3, break_when_any_done=False).shape == (2, 3)
    collector = SyncDataCollector(make(), frames_per_batch=4, total_frames=8)
    assert [batch.numel() for batch in collector] == [4, 4]
    collector.shutdown()
