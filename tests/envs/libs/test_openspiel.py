from __future__ import annotations

import subprocess
import sys
from functools import partial

import pytest
import torch
from tensordict import NonTensorData

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
from tdrl.envs.libs import openspiel as openspiel_module
from tdrl.envs.libs.openspiel import OpenSpielEnv, OpenSpielWrapper
from tests.envs.conformance import EnvConformance


def play(env, moves):
    """Play ``moves`` (one per step, by whoever's turn it is) and return the rollout."""
    count = len(moves)
    moves = iter(moves)

    def policy(td):
        action = env.full_action_spec.zero()
        player = int(td["current_player"])
        move = next(moves)
        if env.categorical_actions:
            action["agents", "action"][player] = move
        else:
            action["agents", "action"][player, move] = True
        return td.update(action)

    return env.rollout(count, policy=policy)


# --------------------------------------------------------------------------- conformance
class TestTicTacToeConformance(EnvConformance):
    def make_env(self):
        return OpenSpielEnv("tic_tac_toe")


class TestKuhnPokerConformance(EnvConformance):
    def make_env(self):
        return OpenSpielEnv("kuhn_poker", categorical_actions=True, return_state=True)


class TestSimultaneousConformance(EnvConformance):
    def make_env(self):
        return OpenSpielEnv("matrix_rps", categorical_actions=True)


# --------------------------------------------------------------------------- turn-based play
@pytest.mark.parametrize("categorical_actions", [True, False])
def test_tic_tac_toe_game(categorical_actions):
    env = OpenSpielEnv("tic_tac_toe", categorical_actions=categorical_actions)
    spec = env.full_action_spec["agents", "action"]
    assert isinstance(spec, Categorical if categorical_actions else OneHot)
    # player 0 takes the top row (cells 0, 1, 2), player 1 plays 3 and 4
    data = play(env, [0, 3, 1, 4, 2])
    assert data.batch_size == (5,)
    assert data["current_player"].tolist() == [0, 1, 0, 1, 0]
    assert data["next", "current_player"][-1] == -4
    mask = data["agents", "action_mask"]
    # the waiting player's mask is all True; the acting player's shows the free cells
    assert mask[1, 0].all() and not mask[1, 1, 0] and mask[1, 1, 1]
    rewards = data["next", "agents", "reward"].squeeze(-1)
    assert (rewards[:-1] == 0).all() and rewards[-1].tolist() == [1.0, -1.0]
    assert data["next", "done"][-1].all() and data["next", "terminated"][-1].all()
    assert not data["next", "truncated"].any()


def test_observation_is_the_game_tensor():
    env = OpenSpielEnv("tic_tac_toe")
    td = env.reset()
    expected = torch.tensor(env._env.observation_tensor(1)).reshape(3, 3, 3)
    torch.testing.assert_close(td["agents", "observation"][1], expected)


def test_illegal_action_names_key_player_and_legal_moves():
    env = OpenSpielEnv("tic_tac_toe", categorical_actions=True)
    td = env.reset()
    td = env.step(td.set(("agents", "action"), torch.tensor([4, 0])))
    td = td["next"].set(("agents", "action"), torch.tensor([0, 4]))
    with pytest.raises(
        ValueError, match=r"\('agents', 'action'\).*player_1.*\[0, 1, 2, 3, 5.*got 4"
    ):
        env.step(td)


def test_random_actions_are_legal():
    env = OpenSpielEnv("connect_four", categorical_actions=True)
    env.set_seed(0)
    torch.manual_seed(0)
    # a full game of random moves never raises the illegal-move error
    data = env.rollout(60)
    assert data["next", "done"][-1].all()


def test_a_finished_game_is_absorbing():
    env = OpenSpielEnv("matrix_rps", categorical_actions=True)
    td = env.rand_step(env.reset())
    assert td["next", "done"].all()
    again = env.step(td["next"].update(env.rand_action()))["next"]
    assert again["done"].all() and (again["agents", "reward"] == 0).all()
    torch.testing.assert_close(again["agents", "observation"], td["next", "agents", "observation"])


def test_random_actions_are_legal_before_the_first_reset():
    env = OpenSpielEnv("backgammon")
    assert not env._env.is_chance_node()
    td = env.rand_step()  # no reset: the masks are set when the env is built
    assert td["next", "agents", "observation"].shape[0] == 2


# --------------------------------------------------------------------------- simultaneous games
def test_simultaneous_moves_are_applied_together():
    env = OpenSpielEnv("matrix_rps", categorical_actions=True)
    td = env.reset()
    assert td["current_player"] == -2
    assert td["agents", "action_mask"].all()
    # rock (0) against paper (1): the second player wins
    td = env.step(td.set(("agents", "action"), torch.tensor([0, 1])))
    assert td["next", "agents", "reward"].squeeze(-1).tolist() == [-1.0, 1.0]
    assert td["next", "done"].all()


# --------------------------------------------------------------------------- chance
def test_chance_nodes_are_resolved():
    env = OpenSpielEnv("kuhn_poker", categorical_actions=True)
    assert not env._env.is_chance_node()
    td = env.reset()
    assert td["current_player"] == 0 and not env._env.is_chance_node()
    data = env.rollout(10)
    final = data["next", "agents", "reward"][-1]
    assert final.sum() == 0 and final.abs().sum() > 0


def test_custom_chance_sampler_picks_the_outcomes():
    calls = []

    def first_outcome(actions, probabilities):
        calls.append((list(actions), list(probabilities)))
        return actions[0]

    state = OpenSpielWrapper.lib.load_game("kuhn_poker").new_initial_state()
    env = OpenSpielWrapper(state, chance_sampler=first_outcome, return_state=True)
    assert calls[0] == ([0, 1, 2], [pytest.approx(1 / 3)] * 3)
    # the first card goes to player 0, then the first remaining one (card 1) to player 1
    assert env.reset()["state"] == "0\n1\n"


def test_seeded_deals_are_reproducible():
    def deal(seed):
        env = OpenSpielEnv("kuhn_poker", return_state=True)
        env.set_seed(seed)
        return [env.reset()["state"] for _ in range(5)]

    assert deal(0) == deal(0)
    assert len({tuple(deal(seed)) for seed in range(4)}) > 1


# --------------------------------------------------------------------------- saved states
def test_reset_resumes_a_saved_state():
    env = OpenSpielEnv("tic_tac_toe", return_state=True, categorical_actions=True)
    data = play(env, [0, 3, 1, 4, 8])
    saved = data[3]["next"].clone()
    assert isinstance(saved.get("state"), NonTensorData)
    resumed = env.reset(saved.clone())
    assert resumed["state"] == saved["state"]
    torch.testing.assert_close(resumed["agents", "observation"], saved["agents", "observation"])
    assert resumed["current_player"] == 0
    # the game goes on from there (not from the last state): player 0 completes the top row
    td = env.step(resumed.set(("agents", "action"), torch.tensor([2, 0])))
    assert td["next", "agents", "reward"].squeeze(-1).tolist() == [1.0, -1.0]
    # a saved finished game resumes as done, and a "_reset" entry starts a new game instead
    finished = td["next"].exclude(("agents", "reward"))
    assert env.reset(finished.clone())["done"].all()
    finished.set("_reset", torch.tensor([True]))
    assert not env.reset(finished)["done"].any()


# --------------------------------------------------------------------------- groups and composition
def test_one_group_per_player():
    env = OpenSpielEnv("kuhn_poker", group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
    assert env.group_map == {"player_0": ["player_0"], "player_1": ["player_1"]}
    check_env_specs(env)
    data = env.rollout(10)
    assert data["next", "player_1", "reward"].shape[-2:] == (1, 1)


def legal_random_moves(td):
    """A policy drawing legal moves from the action masks in the data (the batched envs' own
    specs do not follow each game's mask)."""
    mask = td["agents", "action_mask"]
    moves = torch.multinomial(mask.reshape(-1, mask.shape[-1]).float(), 1)
    return td.set(("agents", "action"), moves.reshape(mask.shape[:-1]))


def test_serial_and_parallel_envs():
    make = partial(OpenSpielEnv, "tic_tac_toe", categorical_actions=True)
    for batched in (SerialEnv(2, make), ParallelEnv(2, make)):
        try:
            data = batched.rollout(12, policy=legal_random_moves, break_when_any_done=False)
            assert data.batch_size == (2, 12)
            assert data["next", "agents", "observation"].shape == (2, 12, 2, 3, 3, 3)
        finally:
            batched.close()


def test_transformed_env_and_collector():
    base = OpenSpielEnv("kuhn_poker", categorical_actions=True)
    env = TransformedEnv(base, RewardSum(in_keys=base.reward_keys))
    env.append_transform(StepCounter())
    check_env_specs(env)
    collector = SyncDataCollector(
        partial(OpenSpielEnv, "kuhn_poker", categorical_actions=True),
        frames_per_batch=5,
        total_frames=10,
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert [batch.batch_size for batch in batches] == [(5,), (5,)]


# --------------------------------------------------------------------------- construction
def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match=r"batch_size.*\(\).*\(4,\)"):
        OpenSpielEnv("tic_tac_toe", batch_size=(4,))
    with pytest.raises(ValueError, match="registered game.*'no_such_game'"):
        OpenSpielEnv("no_such_game")
    with pytest.raises(TypeError, match="pyspiel.State"):
        OpenSpielWrapper(object())
    with pytest.raises(TypeError, match="chance_sampler"):
        OpenSpielEnv("kuhn_poker", chance_sampler=3)
    assert "tic_tac_toe" in OpenSpielEnv.available_envs


def test_missing_backend_names_the_package(monkeypatch):
    monkeypatch.setattr(openspiel_module, "_has_pyspiel", False)
    with pytest.raises(ImportError, match="pip install open_spiel"):
        OpenSpielEnv("tic_tac_toe")


def test_importing_the_wrapper_does_not_import_pyspiel():
    code = "import sys, tdrl.envs.libs.openspiel; print('pyspiel' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
