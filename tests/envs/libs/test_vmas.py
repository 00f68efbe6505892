from __future__ import annotations

import subprocess
import sys
import warnings
from functools import partial

import pytest
import torch
import vmas
from tensordict import LazyStackedTensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.data import Categorical, Composite, OneHot, StackedComposite
from tdrl.envs import (
    MarlGroupMapType,
    ParallelEnv,
    RewardSum,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.libs import vmas as vmas_module
from tdrl.envs.libs.vmas import VmasEnv, VmasWrapper, default_vmas_group_map
from tests.envs.conformance import EnvConformance

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


# --------------------------------------------------------------------------- conformance
class TestBalanceConformance(EnvConformance):
    def make_env(self):
        return VmasEnv("balance", num_envs=2, n_agents=2)


class TestDiscreteConformance(EnvConformance):
    def make_env(self):
        return VmasEnv("dispersion", num_envs=2, n_agents=2, continuous_actions=False)


class TestTwoGroupsConformance(EnvConformance):
    rollout_steps = 3

    def make_env(self):
        return VmasEnv(
            "simple_adversary", num_envs=2, continuous_actions=False, categorical_actions=False
        )


# --------------------------------------------------------------------------- layout
def test_documented_multi_agent_step_layout():
    env = VmasEnv("balance", num_envs=3, n_agents=5)
    td = env.rand_step()
    assert td.batch_size == (3,)
    assert td["agents"].batch_size == (3, 5)
    assert td["agents", "action"].shape == (3, 5, 2)
    nxt = td["next"]
    assert nxt["agents"].batch_size == (3, 5)
    assert nxt["agents", "observation"].shape == (3, 5, 16)
    assert nxt["agents", "reward"].shape == (3, 5, 1)
    assert set(nxt["agents", "info"].keys()) == {"pos_rew", "ground_rew"}
    assert nxt["agents", "info", "pos_rew"].shape == (3, 5, 1)
    assert nxt["done"].shape == (3, 1) and nxt["done"].dtype == torch.bool
    assert env.action_key == ("agents", "action")
    assert env.reward_key == ("agents", "reward")
    assert env.done_keys == ["done", "terminated", "truncated"]
    assert env.reward_spec == env.output_spec["full_reward_spec"][env.reward_key]


def test_reset_carries_observation_and_info():
    env = VmasEnv("balance", num_envs=2, n_agents=3)
    td = env.reset()
    assert td["agents", "observation"].shape == (2, 3, 16)
    assert td["agents", "info", "pos_rew"].shape == (2, 3, 1)
    assert not td["done"].any()


def test_repr_and_available_scenarios():
    env = VmasEnv("balance", num_envs=2, n_agents=2)
    assert repr(env) == (
        "VmasEnv(num_envs=2, n_agents=2, batch_size=torch.Size([2]), device=cpu) (scenario=balance)"
    )
    assert "balance" in VmasEnv.available_envs and "simple_tag" in VmasWrapper.available_envs


def test_wrapper_of_make_env_matches_env():
    raw = vmas.make_env("balance", num_envs=2, n_agents=2, seed=1, terminated_truncated=True)
    wrapped = VmasWrapper(raw)
    built = VmasEnv("balance", num_envs=2, n_agents=2, seed=1)
    assert wrapped.full_observation_spec == built.full_observation_spec
    assert wrapped.full_action_spec == built.full_action_spec
    check_env_specs(wrapped)


# --------------------------------------------------------------------------- groups
def test_default_group_map_by_name_prefix():
    assert default_vmas_group_map(["agent_0", "agent_1"]) == {"agents": ["agent_0", "agent_1"]}
    env = VmasEnv("simple_tag", num_envs=2, num_good_agents=1, num_adversaries=2)
    assert env.group_map == {"adversary": ["adversary_0", "adversary_1"], "agent": ["agent_0"]}
    assert set(env.reward_keys) == {("adversary", "reward"), ("agent", "reward")}
    # adversaries and good agents see different observations but each group is dense
    assert env.full_observation_spec["adversary", "observation"].shape[:2] == (2, 2)
    assert env.full_observation_spec["agent", "observation"].shape[:2] == (2, 1)
    assert not env.het_specs


def test_one_group_per_agent_steps_the_right_agent():
    env = VmasEnv(
        "dispersion",
        num_envs=2,
        n_agents=3,
        group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT,
    )
    assert list(env.group_map) == ["agent_0", "agent_1", "agent_2"]
    for group in env.group_map:
        env.reset()
        action = env.full_action_spec.zero()
        action.set((group, "action"), action.get((group, "action")) + 1.0)
        before = {agent.name: agent.state.pos.clone() for agent in env.agents}
        env.step(action)
        after = {agent.name: agent.state.pos.clone() for agent in env.agents}
        for name in env.agent_names:
            moved = (after[name] != before[name]).any()
            assert bool(moved) == (name == group), (group, name)


def test_reversed_group_order_maps_agents_by_name():
    names = ["agent_0", "agent_1"]
    env = VmasEnv("dispersion", num_envs=1, n_agents=2, group_map={"team": names[::-1]})
    env.reset()
    action = env.full_action_spec.zero()
    action["team", "action"][:, 0] = 1.0  # first entry of the group is agent_1
    before = [agent.state.pos.clone() for agent in env.agents]
    env.step(action)
    assert (env.agents[0].state.pos == before[0]).all()
    assert (env.agents[1].state.pos != before[1]).any()


def test_heterogeneous_group_has_stacked_specs_and_lazy_data():
    env = VmasEnv(
        "simple_tag",
        num_envs=2,
        num_good_agents=1,
        num_adversaries=2,
        group_map=MarlGroupMapType.ALL_IN_ONE_GROUP,
    )
    assert env.het_specs and env.het_specs_map == {"agents": True}
    assert isinstance(env.full_observation_spec["agents"], StackedComposite)
    td = env.reset()
    assert isinstance(td["agents"], LazyStackedTensorDict)
    assert td["agents"].batch_size == (2, 3)
    sizes = [agent_td["observation"].shape[-1] for agent_td in td["agents"].unbind(1)]
    assert sizes[0] == sizes[1] != sizes[2]
    td = env.rand_step(td)
    rewards = td["next", "agents"].get("reward")
    assert rewards.shape == (2, 3, 1)


@pytest.mark.parametrize(
    "group_map, error",
    [
        ({"agents": ["agent_0"]}, ValueError),
        ({"a": ["agent_0", "agent_1"], "b": ["agent_1"]}, ValueError),
        (["agent_0", "agent_1"], TypeError),
        ({"agents": "agent_0"}, TypeError),
    ],
)
def test_bad_group_map(group_map, error):
    with pytest.raises(error, match="group"):
        VmasEnv("balance", num_envs=1, n_agents=2, group_map=group_map)


# --------------------------------------------------------------------------- actions
def test_categorical_and_one_hot_discrete_actions():
    categorical = VmasEnv("dispersion", num_envs=2, n_agents=2, continuous_actions=False)
    spec = categorical.full_action_spec["agents", "action"]
    assert isinstance(spec, Categorical) and spec.shape == (2, 2)
    one_hot = VmasEnv(
        "dispersion",
        num_envs=2,
        n_agents=2,
        continuous_actions=False,
        categorical_actions=False,
    )
    spec = one_hot.full_action_spec["agents", "action"]
    assert isinstance(spec, OneHot) and spec.shape == (2, 2, spec.n)
    for env in (categorical, one_hot):
        env.set_seed(0)
        env.rollout(3)


def test_same_discrete_action_moves_agents_the_same_way_in_both_encodings():
    positions = []
    for categorical in (True, False):
        env = VmasEnv(
            "dispersion",
            num_envs=1,
            n_agents=1,
            continuous_actions=False,
            categorical_actions=categorical,
            seed=0,
        )
        env.reset()
        action = env.full_action_spec.zero()
        if categorical:
            action["agents", "action"].fill_(2)
        else:
            action["agents", "action"][..., 2] = 1
        env.step(action)
        positions.append(env.agents[0].state.pos.clone())
    torch.testing.assert_close(positions[0], positions[1])


def test_wrong_action_shape_names_group_and_key():
    env = VmasEnv("balance", num_envs=2, n_agents=3)
    td = env.reset()
    td.set(("agents", "action"), torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match=r"\('agents', 'action'\).*\(2, 3, 2\).*\(2, 3, 5\)"):
        env.step(td)


def test_out_of_range_action_names_group_and_key():
    env = VmasEnv("balance", num_envs=2, n_agents=3)
    td = env.reset()
    td.set(("agents", "action"), torch.full((2, 3, 2), 5.0))
    with pytest.raises(ValueError, match=r"\('agents', 'action'\).*5\.0"):
        env.step(td)


# --------------------------------------------------------------------------- episodes
def test_max_steps_sets_truncated_not_terminated():
    env = VmasEnv("dispersion", num_envs=2, n_agents=2, max_steps=3)
    data = env.rollout(3, break_when_any_done=False)
    truncated = data["next", "truncated"].squeeze(-1)
    assert truncated[:, -1].all() and not truncated[:, :-1].any()
    assert torch.equal(data["next", "done"], data["next", "truncated"])


def test_wrapper_without_terminated_truncated_splits_time_limit():
    raw = vmas.make_env("dispersion", num_envs=2, n_agents=2, max_steps=2)
    env = VmasWrapper(raw)
    data = env.rollout(2, break_when_any_done=False)
    assert data["next", "truncated"][:, -1].all()
    assert not data["next", "terminated"].any()


def test_partial_reset_resets_only_marked_worlds():
    env = VmasEnv("balance", num_envs=3, n_agents=2)
    td = env.rand_step(env.reset())
    nxt = td["next"].exclude(("agents", "reward"))
    before = nxt["agents", "observation"].clone()
    nxt.set("_reset", torch.tensor([[False], [True], [False]]))
    out = env.reset(nxt)
    torch.testing.assert_close(out["agents", "observation"][[0, 2]], before[[0, 2]])
    assert (out["agents", "observation"][1] != before[1]).any()
    assert env._env.steps.tolist() == [1, 0, 1]


def test_seeded_rollouts_are_identical():
    def run():
        env = VmasEnv("balance", num_envs=2, n_agents=2)
        env.set_seed(7)
        torch.manual_seed(7)
        return env.rollout(4)

    first, second = run(), run()
    assert (first == second).all()


# --------------------------------------------------------------------------- composition
def test_serial_and_parallel_envs():
    make = partial(VmasEnv, "balance", num_envs=2, n_agents=2)
    for batched in (SerialEnv(2, make), ParallelEnv(2, make)):
        try:
            data = batched.rollout(3)
            assert data.batch_size == (2, 2, 3)
            assert data["next", "agents", "observation"].shape == (2, 2, 3, 2, 16)
            check_env_specs(batched)
        finally:
            batched.close()


def test_transformed_env_with_per_agent_episode_reward():
    base = VmasEnv("balance", num_envs=2, n_agents=2, max_steps=3)
    env = TransformedEnv(
        base,
        RewardSum(in_keys=base.reward_keys, out_keys=[("agents", "episode_reward")]),
    )
    env.append_transform(StepCounter())
    check_env_specs(env)
    data = env.rollout(3)
    episode = data["next", "agents", "episode_reward"]
    torch.testing.assert_close(episode[:, -1], data["next", "agents", "reward"].sum(1))


def test_sync_data_collector_batches():
    collector = SyncDataCollector(
        partial(VmasEnv, "balance", num_envs=2, n_agents=2, max_steps=5),
        frames_per_batch=8,
        total_frames=16,
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert len(batches) == 2
    batch = batches[0]
    assert batch.batch_size == (2, 4)
    assert batch["next", "agents", "reward"].shape == (2, 4, 2, 1)
    assert batch["agents", "info", "pos_rew"].shape == (2, 4, 2, 1)


# --------------------------------------------------------------------------- construction
@pytest.mark.parametrize("batch_size", [(4,), (3, 1), (3, 2)])
def test_batch_size_must_be_num_envs(batch_size):
    with pytest.raises(TypeError, match=r"num_envs=3.*\(3,\)"):
        VmasEnv("balance", num_envs=3, n_agents=2, batch_size=batch_size)


@pytest.mark.parametrize("batch_size", [None, (), (3,)])
def test_accepted_batch_sizes(batch_size):
    env = VmasEnv("balance", num_envs=3, n_agents=2, batch_size=batch_size)
    assert env.batch_size == (3,)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="available_envs.*'no_such_scenario'"):
        VmasEnv("no_such_scenario", num_envs=1)
    with pytest.raises(TypeError, match="num_envs"):
        VmasEnv("balance", num_envs=2.0)
    with pytest.raises(TypeError, match="VMAS Environment"):
        VmasWrapper(object())


def test_missing_backend_names_the_package(monkeypatch):
    monkeypatch.setattr(vmas_module, "_has_vmas", False)
    with pytest.raises(ImportError, match="pip install vmas"):
        VmasEnv("balance", num_envs=1)


def test_importing_the_wrapper_does_not_import_vmas():
    code = "import sys, tdrl.envs.libs.vmas; print('vmas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_done_spec_is_shared_at_root():
    env = VmasEnv("balance", num_envs=2, n_agents=2)
    spec = env.full_done_spec
    assert isinstance(spec, Composite) and set(spec.keys()) == {"done", "terminated", "truncated"}
    assert env.reset_keys == ["_reset"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert spec["done"].shape == (2, 1)


def test_info_entries_keep_their_spec_dtype():
    # "discovery" reports targets_covered as a float before any step and as an int after
    env = VmasEnv("discovery", num_envs=2, n_agents=2)
    spec = env.full_observation_spec["agents", "info", "targets_covered"]
    data = env.rollout(3)
    assert data["next", "agents", "info", "targets_covered"].dtype == spec.dtype
    check_env_specs(env)
