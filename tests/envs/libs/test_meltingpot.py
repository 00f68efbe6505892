"""MeltingpotEnv / MeltingpotWrapper against a fake of MeltingPot's API (it cannot install here)."""

from __future__ import annotations

import sys

import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.data import Categorical, OneHot
from tdrl.envs import (
    MarlGroupMapType,
    ParallelEnv,
    RewardSum,
    SerialEnv,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.libs.meltingpot import MeltingpotEnv, MeltingpotWrapper
from tests.envs.conformance import EnvConformance
from tests.envs.libs import fake_meltingpot

SUBSTRATE = "commons_harvest__open"  # 3 players in the fake


@pytest.fixture(autouse=True)
def fake_backend():
    fake_meltingpot.install()
    yield
    fake_meltingpot.uninstall()


def make_env(**kwargs):
    """Build an env in any process (batched envs' workers install the fake themselves)."""
    fake_meltingpot.install()
    return MeltingpotEnv(SUBSTRATE, **kwargs)


@pytest.mark.filterwarnings("ignore:.*take no seed:UserWarning")
class TestMeltingpotConformance(EnvConformance):
    seeded = False  # MeltingPot takes no seed

    def make_env(self):
        return make_env()


# --------------------------------------------------------------------------- layout
def test_layout_routes_players_and_global_views():
    env = MeltingpotEnv(SUBSTRATE)
    assert env.group_map == {"agents": ["player_0", "player_1", "player_2"]}
    td = env.reset()
    rgb = td["agents", "observation", "RGB"]
    assert rgb.shape == (3, 4, 4, 3) and rgb.dtype == torch.uint8
    assert rgb[:, 0, 0, 0].tolist() == [0, 1, 2]  # player i sees 10 * t + i
    assert td["RGB"].shape == (6, 6, 3)
    assert td["agents", "observation", "READY_TO_SHOOT"].dtype == torch.float32
    assert "WORLD.RGB" not in td.keys(True, True)
    action = torch.tensor([1, 5, 7])
    td = env.step(td.set(("agents", "action"), action))
    assert td["next", "agents", "reward"].squeeze(-1).tolist() == [1.0, 5.0, 7.0]
    assert td["next", "agents", "observation", "RGB"][:, 0, 0, 0].tolist() == [10, 11, 12]
    assert env._env.actions[-1] == [1, 5, 7]


def test_categorical_and_one_hot_actions():
    spec = MeltingpotEnv(SUBSTRATE).full_action_spec["agents", "action"]
    assert isinstance(spec, Categorical) and spec.shape == (3,)
    env = MeltingpotEnv(SUBSTRATE, categorical_actions=False)
    spec = env.full_action_spec["agents", "action"]
    assert isinstance(spec, OneHot) and spec.shape == (3, 8)
    td = env.reset()
    one_hot = torch.zeros(3, 8, dtype=torch.bool)
    one_hot[[0, 1, 2], [2, 0, 4]] = True
    env.step(td.set(("agents", "action"), one_hot))
    assert env._env.actions[-1] == [2, 0, 4]
    check_env_specs(env)


def test_one_group_per_player():
    env = MeltingpotEnv(SUBSTRATE, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
    assert list(env.group_map) == ["player_0", "player_1", "player_2"]
    td = env.reset()
    assert td["player_2", "observation", "RGB"][0, 0, 0, 0] == 2
    check_env_specs(env)


# --------------------------------------------------------------------------- episodes
@pytest.mark.parametrize("max_steps", [1, 4])
def test_max_steps_truncates(max_steps):
    env = MeltingpotEnv(SUBSTRATE, max_steps=max_steps)
    data = env.rollout(100)
    assert data.batch_size == (max_steps,)
    assert data["next", "truncated"][-1].all() and not data["next", "terminated"].any()


def test_substrate_end_terminates():
    data = MeltingpotEnv(SUBSTRATE).rollout(100)
    assert data.batch_size == (6,)  # the fake's episodes last 6 steps
    assert data["next", "terminated"][-1].all() and not data["next", "truncated"].any()
    assert not data["next", "done"][:-1].any()


def test_rgb_image_is_the_current_global_view():
    env = MeltingpotEnv(SUBSTRATE)
    data = env.rollout(2)
    image = env.get_rgb_image()
    assert torch.equal(data[-1]["next", "RGB"], image)
    assert not torch.equal(data[-1]["RGB"], image)


# --------------------------------------------------------------------------- construction
def test_config_and_wrapper():
    from meltingpot import substrate

    config = substrate.get_config("clean_up")
    env = MeltingpotEnv(config)
    assert env.num_players == 2
    env.rollout(3)
    built = substrate.build_from_config(config, roles=config.default_player_roles)
    wrapped = MeltingpotWrapper(built, max_steps=2)
    assert wrapped.rollout(5).batch_size == (2,)
    wrapped.close()
    assert built.closed


def test_wrong_actions_name_the_key():
    env = MeltingpotEnv(SUBSTRATE)
    td = env.reset()
    with pytest.raises(ValueError, match=r"\('agents', 'action'\).*\(3,\).*\(3, 2\)"):
        env.step(td.set(("agents", "action"), torch.zeros(3, 2, dtype=torch.int64)))
    with pytest.raises(ValueError, match=r"\('agents', 'action'\).*\[0, 8\).*9.*player_1"):
        env.step(td.set(("agents", "action"), torch.tensor([1, 9, 2])))


def test_seed_is_reported_as_unused():
    env = MeltingpotEnv(SUBSTRATE)
    with pytest.warns(UserWarning, match="take no seed"):
        env.set_seed(0)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="available_envs.*'nowhere'"):
        MeltingpotEnv("nowhere")
    with pytest.raises(TypeError, match="substrate name or config"):
        MeltingpotEnv(3)
    with pytest.raises(ValueError, match=r"batch_size.*\(\).*\(2,\)"):
        MeltingpotEnv(SUBSTRATE, batch_size=(2,))
    with pytest.raises(ValueError, match="max_steps.*0"):
        MeltingpotEnv(SUBSTRATE, max_steps=0)
    with pytest.raises(TypeError, match="MeltingPot substrate"):
        MeltingpotWrapper(object())
    assert MeltingpotEnv.available_envs == sorted(fake_meltingpot.SUBSTRATES)


def test_missing_backend_names_the_package(monkeypatch):
    fake_meltingpot.uninstall()
    monkeypatch.setitem(sys.modules, "meltingpot", None)
    with pytest.raises(ImportError, match="pip install dm-meltingpot"):
        MeltingpotEnv(SUBSTRATE)
    assert MeltingpotEnv.available_envs == []


# --------------------------------------------------------------------------- composition
def test_serial_and_parallel_envs():
    for batched in (SerialEnv(2, make_env), ParallelEnv(2, make_env)):
        try:
            data = batched.rollout(8, break_when_any_done=False)
            assert data.batch_size == (2, 8)
            assert data["next", "agents", "observation", "RGB"].shape == (2, 8, 3, 4, 4, 3)
            assert data["next", "done"][:, 5].all()
        finally:
            batched.close()


def test_transformed_env_and_collector():
    base = MeltingpotEnv(SUBSTRATE)
    env = TransformedEnv(base, RewardSum(in_keys=base.reward_keys))
    check_env_specs(env)
    collector = SyncDataCollector(make_env, frames_per_batch=4, total_frames=8)
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert [batch.batch_size for batch in batches] == [(4,), (4,)]
