from __future__ import annotations

import subprocess
import sys
from functools import partial

import numpy as np
import pytest
import torch
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv as PZParallelEnv

from tdrl.collectors import SyncDataCollector
from tdrl.data import Categorical, OneHot
from tdrl.envs import (
    MarlGroupMapType,
    ParallelEnv,
    RewardSum,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.libs import pettingzoo as pz_module
from tdrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from tests.envs.conformance import EnvConformance

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


class FadingAgents(PZParallelEnv):
    """Three agents with a masked discrete action; ``a_0`` leaves after ``leave_at`` steps,
    the others after ``length`` steps."""

    metadata = {"name": "fading_agents_v0"}

    def __init__(self, leave_at=2, length=4):
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self.agents = list(self.possible_agents)
        self.leave_at, self.length = leave_at, length
        self._obs = spaces.Dict(
            {
                "observation": spaces.Box(0.0, 10.0, (2,), np.float32),
                "action_mask": spaces.MultiBinary(3),
            }
        )
        self.t = 0

    def observation_space(self, agent):
        return self._obs

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _observe(self, agent):
        index = self.possible_agents.index(agent)
        return {
            "observation": np.array([self.t, index], np.float32),
            "action_mask": np.array([1, 1, 0], np.int8),
        }

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def state(self):
        return np.array([self.t, len(self.agents)], dtype=np.float64)

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        ending = {a: self.t >= (self.leave_at if a == "a_0" else self.length) for a in self.agents}
        obs = {a: self._observe(a) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        truncated = {a: False for a in self.agents}
        self.agents = [a for a in self.agents if not ending[a]]
        return obs, rewards, ending, truncated, {a: {} for a in obs}


# --------------------------------------------------------------------------- conformance
class TestSimpleSpreadConformance(EnvConformance):
    def make_env(self):
        return PettingZooEnv("simple_spread_v3", parallel=True, N=2, max_cycles=6)


class TestTicTacToeConformance(EnvConformance):
    def make_env(self):
        return PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True)


class TestAdversaryAecConformance(EnvConformance):
    rollout_steps = 4

    def make_env(self):
        return PettingZooEnv(
            "simple_adversary_v3",
            parallel=False,
            use_mask=True,
            categorical_actions=False,
            max_cycles=5,
        )


# --------------------------------------------------------------------------- layout
def test_mpe_parallel_layout_and_default_groups():
    env = PettingZooEnv("simple_adversary_v3", parallel=True, seed=0, max_cycles=5)
    assert env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
    td = env.rollout(10)
    assert td.batch_size == (5,)
    assert td["next", "agent", "observation"].shape == (5, 2, 10)
    assert td["next", "adversary", "observation"].shape == (5, 1, 8)
    assert td["next", "agent", "reward"].shape == (5, 2, 1)
    assert td["agent", "action"].shape == (5, 2) and td["agent", "action"].dtype == torch.int64
    for group in ("agent", "adversary"):
        for key in ("done", "terminated", "truncated"):
            assert td["next", group, key].shape[-1] == 1
    assert td["next", "truncated"][-1].all() and td["next", "done"][-1].all()
    assert not td["next", "done"][:-1].any()


def test_one_hot_actions_and_custom_groups():
    env = PettingZooEnv(
        "simple_spread_v3",
        parallel=True,
        N=3,
        categorical_actions=False,
        group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT,
    )
    assert list(env.group_map) == ["agent_0", "agent_1", "agent_2"]
    spec = env.full_action_spec["agent_1", "action"]
    assert isinstance(spec, OneHot) and spec.shape == (1, 5)
    check_env_specs(env)


def test_return_state_is_the_env_state():
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=2, return_state=True, seed=0)
    td = env.reset()
    np.testing.assert_allclose(td["state"].numpy(), env._env.state())
    assert td["state"].dtype == torch.float32
    data = env.rollout(3)
    np.testing.assert_allclose(data["next", "state"][-1].numpy(), env._env.state())


def test_return_state_without_declared_state_space():
    env = PettingZooWrapper(FadingAgents(), use_mask=True, return_state=True, done_on_any=False)
    assert env.full_observation_spec["state"].dtype == torch.float32
    data = env.rollout(3, break_when_any_done=False)
    assert data["next", "state"].tolist() == [[1.0, 3.0], [2.0, 2.0], [3.0, 2.0]]


def test_seeded_rollouts_are_identical():
    def run():
        env = PettingZooEnv("simple_spread_v3", parallel=True, N=2)
        env.set_seed(5)
        torch.manual_seed(5)
        return env.rollout(6)

    first, second = run(), run()
    assert (first == second).all()
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=2, seed=5)
    torch.testing.assert_close(
        env.reset()["agent", "observation"], first["agent", "observation"][0]
    )


# --------------------------------------------------------------------------- AEC
def test_tic_tac_toe_turns_masks_and_final_rewards():
    env = PettingZooEnv(
        "tictactoe_v3",
        parallel=False,
        use_mask=True,
        categorical_actions=False,
        group_map={"player": ["player_1", "player_2"]},
    )
    # player_1 takes the first column (cells 0, 1, 2); player_2 plays cells 3 and 4
    moves = iter([0, 3, 1, 4, 2])

    def policy(td):
        acting = int(td["player", "mask"].int().argmax())
        other = 1 - acting
        assert td["player", "mask"].tolist() == [acting == 0, acting == 1]
        assert td["player", "action_mask"][other].all()
        move = next(moves)
        assert td["player", "action_mask"][acting, move]
        action = torch.zeros(2, 9, dtype=torch.int64)
        action[acting, move] = 1
        td.set(("player", "action"), action)
        return td

    data = env.rollout(20, policy=policy)
    assert data.batch_size == (5,)
    rewards = data["next", "player", "reward"]
    assert (rewards[:-1] == 0).all()
    assert rewards[-1].squeeze(-1).tolist() == [1.0, -1.0]
    assert data["next", "done"][-1].all() and data["next", "player", "terminated"][-1].all()


def test_random_actions_are_legal_moves():
    env = PettingZooEnv("connect_four_v3", parallel=False, use_mask=True, seed=0)
    spec = env.full_action_spec["player", "action"]
    assert isinstance(spec, Categorical)
    td = env.reset()
    for _ in range(30):
        td = env.rand_action(td)
        acting = int(td["player", "mask"].int().argmax())
        move = int(td["player", "action"][acting])
        assert td["player", "action_mask"][acting, move]
        td, td_ = env.step_and_maybe_reset(td)
        # an illegal move would end the game at once with a -1 penalty
        assert (td["next", "player", "reward"] >= 0).all() or td["next", "done"].all()
        td = td_


def test_out_of_range_discrete_action_names_key_and_agent():
    env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True)
    td = env.reset()
    td.set(("player", "action"), torch.tensor([12, 0]))
    with pytest.raises(ValueError, match=r"\('player', 'action'\).*\[0, 9\).*'player_1'.*12"):
        env.step(td)


def test_wrong_action_shape_names_key():
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=2)
    td = env.reset()
    td.set(("agent", "action"), torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\('agent', 'action'\).*\(2,\).*\(2, 3\)"):
        env.step(td)


# --------------------------------------------------------------------------- agents leaving
def test_leaving_agents_without_mask_raise():
    # with done_on_any=False the episode goes on after a_0 has left
    env = PettingZooWrapper(FadingAgents(), done_on_any=False)
    with pytest.raises(ValueError, match=r"\['a_0'\].*use_mask=True"):
        env.rollout(4, break_when_any_done=False, auto_reset=True)


@pytest.mark.parametrize("done_on_any", [True, False])
def test_leaving_agents_with_mask(done_on_any):
    env = PettingZooWrapper(FadingAgents(), use_mask=True, done_on_any=done_on_any)
    assert env.group_map == {"a": ["a_0", "a_1", "a_2"]}
    assert env.has_action_mask == {"a": True}
    data = env.rollout(4, break_when_any_done=False)
    mask = data["next", "a", "mask"]
    done = data["next", "a", "done"].squeeze(-1)
    assert not done[mask].any() and done[~mask].all()
    if done_on_any:
        # a_0 ending ends the episode at step 2: the env is reset and runs 2 more steps
        assert data["next", "done"].squeeze(-1).tolist() == [False, True, False, True]
        assert data["next", "a", "done"][1].squeeze(-1).tolist() == [True, False, False]
    else:
        # a_0 has left: masked, done, and it keeps its last observation
        assert mask[:, 0].tolist() == [True, False, False, False]
        assert mask[:3, 1:].all() and not mask[3].any()
        torch.testing.assert_close(
            data["next", "a", "observation"][2:, 0],
            data["next", "a", "observation"][1, 0].expand(2, 2),
        )
        assert data["next", "done"][-1].all() and not data["next", "done"][:-1].any()
    # the action mask comes from the observation and restricts random actions
    assert data["a", "action_mask"].shape == data["a", "mask"].shape + (3,)
    assert (data["a", "action"] < 2).all()


def make_kaz(**kwargs):
    """Knights, archers and zombies with agents that die early (they die at the walls)."""
    return PettingZooEnv(
        "knights_archers_zombies_v11",
        seed=0,
        spawn_delay=2,
        line_death=True,
        max_cycles=150,
        **kwargs,
    )


@pytest.mark.parametrize("parallel", [True, False])
def test_agents_dying_in_a_real_game(parallel):
    env = make_kaz(parallel=parallel, use_mask=True, done_on_any=False)
    assert env.group_map == {"archer": ["archer_0", "archer_1"], "knight": ["knight_0", "knight_1"]}
    data = env.rollout(150, break_when_any_done=False)
    mask = torch.cat([data["next", "archer", "mask"], data["next", "knight", "mask"]], -1)
    done = torch.cat([data["next", "archer", "done"], data["next", "knight", "done"]], -2)
    done = done.squeeze(-1)
    root_done = data["next", "done"].squeeze(-1)
    if parallel:
        # masked agents are exactly the done ones; some die while the game goes on
        assert torch.equal(~mask, done)
        partial = (done.any(-1) & ~done.all(-1)) & ~root_done
        assert partial.any()
        assert (root_done == done.all(-1)).all()
    else:
        # one live agent acts at a time and done agents never act
        assert (mask.sum(-1) <= 1).all()
        assert not (mask & done).any()
        assert (done.any(-1) & ~root_done).any()


def test_agents_dying_in_a_real_game_without_mask_raise():
    env = make_kaz(parallel=True, done_on_any=False)
    with pytest.raises(ValueError, match="use_mask=True"):
        env.rollout(150, break_when_any_done=False)


class FlippedObservations(FadingAgents):
    """Observations that are views with negative strides (as ``np.flip`` gives)."""

    def _observe(self, agent):
        entries = super()._observe(agent)
        entries["observation"] = entries["observation"][::-1]
        return entries


def test_observations_with_negative_strides():
    env = PettingZooWrapper(FlippedObservations(), use_mask=True)
    td = env.reset()
    assert td["a", "observation"].tolist() == [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]


def test_aec_root_done_needs_every_agent_by_default():
    env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True)
    assert env.done_on_any is False
    env = PettingZooEnv("simple_spread_v3", parallel=True)
    assert env.done_on_any is True


# --------------------------------------------------------------------------- composition
def test_serial_and_parallel_envs():
    make = partial(PettingZooEnv, "simple_spread_v3", parallel=True, N=2, max_cycles=4)
    for batched in (SerialEnv(2, make), ParallelEnv(2, make)):
        try:
            data = batched.rollout(6, break_when_any_done=False)
            assert data.batch_size == (2, 6)
            assert data["next", "agent", "observation"].shape == (2, 6, 2, 12)
            assert data["next", "done"][:, 3].all()
        finally:
            batched.close()


def test_transformed_env_and_collector():
    base = PettingZooEnv("simple_adversary_v3", parallel=True, max_cycles=4)
    env = TransformedEnv(
        base,
        RewardSum(in_keys=base.reward_keys, reset_keys=["_reset"] * len(base.group_map)),
    )
    env.append_transform(StepCounter())
    check_env_specs(env)
    data = env.rollout(4)
    torch.testing.assert_close(
        data["next", "agent", "episode_reward"][-1], data["next", "agent", "reward"].sum(0)
    )
    collector = SyncDataCollector(
        partial(PettingZooEnv, "tictactoe_v3", parallel=False, use_mask=True),
        frames_per_batch=6,
        total_frames=12,
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert [batch.batch_size for batch in batches] == [(6,), (6,)]
    assert batches[0]["player", "mask"].sum(-1).eq(1).all()


# --------------------------------------------------------------------------- construction
def test_available_envs_lists_mpe_and_classic_tasks():
    names = PettingZooEnv.available_envs
    assert {"simple_spread_v3", "tictactoe_v3", "connect_four_v3"} <= set(names)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="available_envs.*'no_such_task_v0'"):
        PettingZooEnv("no_such_task_v0", parallel=True)
    # a version that is not installed: the error lists the installed ones
    with pytest.raises(ValueError, match=r"installed versions of this task: \['tictactoe_v3'\]"):
        PettingZooEnv("tictactoe_v1", parallel=False)
    with pytest.raises(ValueError, match="no parallel_env.*parallel=False"):
        PettingZooEnv("connect_four_v3", parallel=True)
    with pytest.raises(ValueError, match=r"batch_size.*\(\).*\(2,\)"):
        PettingZooEnv("simple_v3", parallel=True, batch_size=(2,))
    with pytest.raises(TypeError, match="PettingZoo AECEnv or ParallelEnv"):
        PettingZooWrapper(object())
    with pytest.raises(ValueError, match="missing"):
        PettingZooEnv("simple_spread_v3", parallel=True, N=2, group_map={"x": ["agent_0"]})


def test_missing_backend_names_the_package(monkeypatch):
    monkeypatch.setattr(pz_module, "_has_pettingzoo", False)
    with pytest.raises(ImportError, match="pip install 'pettingzoo"):
        PettingZooEnv("simple_v3", parallel=True)


def test_importing_the_wrapper_does_not_import_pettingzoo():
    code = "import sys, tdrl.envs.libs.pettingzoo; print('pettingzoo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_tdrl_info_lists_the_multi_agent_backends():
    from tdrl.envs.utils import get_available_libraries

    libraries = get_available_libraries()
    assert libraries["pettingzoo"] and libraries["mpe2"]
    assert {"vmas", "open_spiel", "meltingpot", "smacv2"} <= set(libraries)
