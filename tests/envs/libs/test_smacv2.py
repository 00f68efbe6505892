"""SMACv2Env / SMACv2Wrapper against a fake of SMACv2's API (it cannot install here)."""

from __future__ import annotations

import sys

import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.data import Categorical, OneHot
from tdrl.envs import ActionMask, ParallelEnv, SerialEnv, TransformedEnv, check_env_specs
from tdrl.envs.libs.smacv2 import SMACv2Env, SMACv2Wrapper
from tests.envs.conformance import EnvConformance
from tests.envs.libs import fake_smacv2

PROCEDURAL = {
    "n_units": 4,
    "n_enemies": 3,
    "team_gen": {"dist_type": "weighted_teams", "unit_types": ["marine"], "weights": [1.0]},
}


@pytest.fixture(autouse=True)
def fake_backend():
    fake_smacv2.install()
    yield
    fake_smacv2.uninstall()


def make_env(map_name="3s_vs_5z", **kwargs):
    """Build an env in any process (batched envs' workers install the fake themselves)."""
    fake_smacv2.install()
    return SMACv2Env(map_name, seed=0, **kwargs)


def first_available(td):
    """A policy taking each agent's last available action (an attack while enemies live)."""
    mask = td["agents", "action_mask"]
    last = mask.shape[-1] - 1 - mask.flip(-1).int().argmax(-1)
    return td.set(("agents", "action"), last)


class TestSMACv2Conformance(EnvConformance):
    def make_env(self):
        return make_env()


class TestProceduralConformance(EnvConformance):
    def make_env(self):
        return make_env("10gen_terran", capability_config=PROCEDURAL, categorical_actions=False)


# --------------------------------------------------------------------------- layout
def test_layout():
    env = make_env()
    assert env.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
    assert env.action_key == ("agents", "action")
    assert isinstance(env.full_action_spec["agents", "action"], Categorical)
    assert env.full_action_spec["agents", "action"].space.n == 11
    td = env.reset()
    assert td["agents", "observation"].shape == (3, 8)
    assert td["agents", "action_mask"].shape == (3, 11)
    assert td["state"].shape == (8,)
    assert set(td["info"].keys()) == {"battle_won", "dead_allies", "dead_enemies", "episode_limit"}
    td = env.rand_step(td)
    assert td["next", "reward"].shape == (1,)


def test_one_hot_actions():
    env = make_env(categorical_actions=False)
    spec = env.full_action_spec["agents", "action"]
    assert isinstance(spec, OneHot) and spec.shape == (3, 11)
    td = env.reset()
    action = torch.zeros(3, 11, dtype=torch.bool)
    action[:, 6] = True  # everyone attacks enemy 0
    td = env.step(td.set(("agents", "action"), action))
    assert env._env.actions[-1] == [6, 6, 6]
    assert td["next", "reward"].item() == 2.0  # enemy 0 has two hit points


def test_random_actions_are_available_ones():
    env = make_env()
    env.set_seed(0)
    data = env.rollout(6, break_when_any_done=False)
    picked = data["agents", "action_mask"].gather(-1, data["agents", "action"].unsqueeze(-1))
    assert picked.all()
    # the last agent dies after two steps: only the no-op is left to it
    assert data["next", "agents", "action_mask"][2, 2].tolist() == [True] + [False] * 10


def test_unavailable_action_names_key_and_agent():
    env = make_env()
    td = env.reset()
    with pytest.raises(ValueError, match=r"\('agents', 'action'\).*agent_1.*\[1, 2, .*got 0"):
        env.step(td.set(("agents", "action"), torch.tensor([1, 0, 1])))


# --------------------------------------------------------------------------- episodes
def test_won_battle_terminates():
    env = make_env("10gen_terran", capability_config=PROCEDURAL)
    data = env.rollout(20, policy=first_available)
    final = data[-1]["next"]
    assert final["info", "battle_won"].all() and final["terminated"].all()
    assert not final["truncated"].any() and not final["info", "episode_limit"].any()
    assert final["info", "dead_enemies"].item() == 3


def test_episode_limit_truncates():
    env = make_env()

    # stopping (action 1; the no-op 0 for dead agents) never wins: the battle ends at the
    # map's limit of 6 steps
    def stop(td):
        mask = td["agents", "action_mask"]
        return td.set(("agents", "action"), mask[..., 1].long())

    data = env.rollout(20, policy=stop)
    assert data.batch_size == (6,)
    final = data[-1]["next"]
    assert final["truncated"].all() and not final["terminated"].any()
    assert final["info", "episode_limit"].all() and not final["info", "battle_won"].any()


def test_procedural_config_is_not_edited():
    config = {"n_units": 2, "n_enemies": 2, "team_gen": {"dist_type": "weighted_teams"}}
    env = SMACv2Env("10gen_terran", capability_config=config, seed=0)
    assert env.n_agents == 2
    assert config == {"n_units": 2, "n_enemies": 2, "team_gen": {"dist_type": "weighted_teams"}}


def test_seeding_rebuilds_the_env_and_wrapper_warns():
    env = make_env()
    env.set_seed(3)
    first = env.reset()["agents", "observation"]
    env.set_seed(3)
    assert torch.equal(env.reset()["agents", "observation"], first)
    env.set_seed(4)
    assert not torch.equal(env.reset()["agents", "observation"], first)
    wrapper = SMACv2Wrapper(fake_smacv2.StarCraft2Env("3s_vs_5z", seed=1))
    with pytest.warns(UserWarning, match="seeded when it is built"):
        wrapper.set_seed(0)


# --------------------------------------------------------------------------- construction
def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="map_name"):
        SMACv2Env(3)
    with pytest.raises(ValueError, match=r"batch_size.*\(\).*\(4,\)"):
        SMACv2Env("3s_vs_5z", batch_size=(4,))
    with pytest.raises(TypeError, match="SMACv2 StarCraft2Env"):
        SMACv2Wrapper(object())


def test_missing_backend_names_the_package(monkeypatch):
    fake_smacv2.uninstall()
    monkeypatch.setitem(sys.modules, "smacv2", None)
    with pytest.raises(ImportError, match="oxwhirl/smacv2"):
        SMACv2Env("3s_vs_5z")


def test_close_closes_the_game():
    env = make_env()
    game = env._env
    env.close()
    assert game.closed


# --------------------------------------------------------------------------- composition
def test_parallel_env_with_action_mask_transform():
    env = TransformedEnv(
        ParallelEnv(2, make_env),
        ActionMask(action_key=("agents", "action"), mask_key=("agents", "action_mask")),
    )
    try:
        check_env_specs(env)
        data = env.rollout(4, policy=first_available)
        assert data.batch_size == (2, 4)
    finally:
        env.close()
    serial = SerialEnv(2, make_env)
    try:
        assert serial.rollout(3, policy=first_available).batch_size == (2, 3)
    finally:
        serial.close()


def test_collector():
    collector = SyncDataCollector(
        make_env, policy=first_available, frames_per_batch=4, total_frames=8
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert [batch.batch_size for batch in batches] == [(4,), (4,)]
    assert batches[0]["next", "reward"].shape == (4, 1)
