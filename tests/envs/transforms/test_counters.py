"""StepCounter, TrajCounter, InitTracker."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Composite
from tdrl.envs import (
    Compose,
    GymEnv,
    InitTracker,
    ParallelEnv,
    StepCounter,
    TrajCounter,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import CountingEnv, MultiAgentCountingEnv


@pytest.fixture
def cartpole():
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    yield env
    env.close()


def _step_counts(env, td, steps):
    counts = []
    for _ in range(steps):
        td, td = env.step_and_maybe_reset(env.rand_action(td))
        counts.append(td["step_count"].reshape(-1).tolist())
    return td, counts


def test_step_counter_on_gym(cartpole):
    env = TransformedEnv(cartpole, StepCounter(max_steps=5))
    check_env_specs(env)
    assert env.observation_spec["step_count"].dtype == torch.int64
    assert "step_count" in env.state_spec.keys()
    rollout = env.rollout(20)
    assert rollout["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3, 4, 5]
    assert rollout["step_count"].squeeze(-1).tolist() == [0, 1, 2, 3, 4]
    assert rollout["next", "truncated"].squeeze(-1).tolist() == [False] * 4 + [True]
    assert rollout["next", "done"][-1].item()


def test_step_counter_adds_truncated_when_missing():
    env = TransformedEnv(CountingEnv(max_steps=100), StepCounter(max_steps=2))
    assert "truncated" not in CountingEnv().done_keys
    assert "truncated" in env.done_keys
    check_env_specs(env)
    assert env.reset()["truncated"].tolist() == [False]
    rollout = env.rollout(10)
    assert rollout.shape == (2,) and rollout["next", "done"][-1].item()


def test_step_counter_without_done_update():
    env = TransformedEnv(CountingEnv(max_steps=100), StepCounter(max_steps=2, update_done=False))
    rollout = env.rollout(4)
    assert rollout.shape == (4,)
    assert rollout["next", "truncated"].squeeze(-1).tolist() == [False, True, True, True]
    assert not rollout["next", "done"].any()


def test_step_counter_custom_keys_and_validation():
    env = TransformedEnv(CountingEnv(), StepCounter(3, truncated_key="cut", step_count_key="t"))
    check_env_specs(env)
    assert {"cut", "t"} <= set(env.reset().keys())
    with pytest.raises(ValueError, match="max_steps"):
        StepCounter(max_steps=0)


def test_step_counter_partial_reset():
    env = TransformedEnv(CountingEnv(max_steps=100, batch_size=(3,)), StepCounter())
    td = env.reset()
    td, counts = _step_counts(env, td, 2)
    assert counts[-1] == [2, 2, 2]
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    assert td["step_count"].reshape(-1).tolist() == [2, 0, 2]
    td = env.rand_step(td)
    assert td["next", "step_count"].reshape(-1).tolist() == [3, 1, 3]


def test_step_counter_counts_at_the_top_done_level_and_truncates_every_level():
    base = MultiAgentCountingEnv(n_agents=2, max_steps=30)
    env = TransformedEnv(base, StepCounter(max_steps=3))
    # the root done hides the nested level: one counter, at the root
    assert env.transform.step_count_keys == ["step_count"]
    assert ("agents", "step_count") not in env.observation_spec.keys(True)
    assert env.transform.all_done_keys == ["done", ("agents", "done")]
    assert env.transform.all_truncated_keys == ["truncated", ("agents", "truncated")]
    assert ("agents", "truncated") in env.done_keys
    check_env_specs(env)
    rollout = env.rollout(10)
    assert rollout.shape == (3,)
    assert rollout["next", "step_count"].reshape(-1).tolist() == [1, 2, 3]
    # the truncation reaches the agents, whose own done is far away
    assert rollout["next", "agents", "done"][-1].all()
    assert rollout["next", "agents", "truncated"][-1].all()
    assert not rollout["next", "agents", "done"][:-1].any()


class AgentsOnlyDoneEnv(MultiAgentCountingEnv):
    """Multi-agent counting env whose only done level is the agents' one."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.full_done_spec = Composite(agents=self.full_done_spec["agents"].clone())

    def _data(self):
        data = super()._data()
        del data["done"]
        return data


def test_step_counter_counts_nested_levels_without_root_done():
    env = TransformedEnv(AgentsOnlyDoneEnv(n_agents=2, max_steps=3), StepCounter())
    assert env.transform.step_count_keys == [("agents", "step_count")]
    assert env.observation_spec["agents", "step_count"].shape == (2, 1)
    check_env_specs(env)
    rollout = env.rollout(2)
    assert rollout["next", "agents", "step_count"][-1].reshape(-1).tolist() == [2, 2]


def test_step_counter_standalone_reset_and_step():
    # without env the keys default to the root level and shapes come from the data
    counter = StepCounter(max_steps=2)
    done = torch.zeros(3, 1, dtype=torch.bool)
    td = TensorDict(
        {
            "done": done,
            "_reset": torch.tensor([[True], [False], [True]]),
            "step_count": torch.full((3, 1), 7, dtype=torch.int32),
        },
        [3],
    )
    td_reset = counter._reset(td, td.empty())
    assert td_reset["step_count"].reshape(-1).tolist() == [0, 7, 0]
    assert not td_reset["truncated"].any()
    next_td = counter._step(td_reset, TensorDict({"done": done.clone()}, [3]))
    assert next_td["step_count"].reshape(-1).tolist() == [1, 8, 1]
    assert next_td["truncated"].reshape(-1).tolist() == [False, True, False]
    assert next_td["done"].reshape(-1).tolist() == [False, True, False]
    full = counter._reset(TensorDict({"done": done}, [3]), TensorDict({}, [3]))
    assert full["step_count"].reshape(-1).tolist() == [0, 0, 0]


def test_step_counter_reset_output_without_done_entries():
    # the count is shaped from the specs when the env's reset returns no done entry
    class NoDoneAtReset(CountingEnv):
        def _reset(self, tensordict=None, **kwargs):
            return super()._reset(tensordict).exclude("done")

    env = TransformedEnv(NoDoneAtReset(batch_size=(2,)), StepCounter(max_steps=4))
    td = env.reset()
    assert td["step_count"].shape == (2, 1)
    assert not td["step_count"].any()


def test_step_counter_refuses_data_outside_an_env():
    with pytest.raises(NotImplementedError, match="StepCounter cannot be called independently"):
        StepCounter()(TensorDict({"a": torch.ones(1)}, []))


def test_traj_counter_counts_episodes(cartpole):
    env = TransformedEnv(cartpole, Compose(StepCounter(max_steps=3), TrajCounter()))
    check_env_specs(env)
    rollout = env.rollout(9, break_when_any_done=False)
    ids = rollout["traj_count"].squeeze(-1).tolist()
    assert ids[0:3] == [ids[0]] * 3 and ids[3:6] == [ids[0] + 1] * 3
    assert ids[6:9] == [ids[0] + 2] * 3
    assert rollout["next", "traj_count"].squeeze(-1).tolist() == ids


def test_traj_counter_partial_reset_and_shared_clones():
    base = CountingEnv(max_steps=100, batch_size=(3,))
    counter = TrajCounter()
    env = TransformedEnv(base, counter)
    td = env.reset()
    assert td["traj_count"].reshape(-1).tolist() == [0, 1, 2]
    td["_reset"] = torch.tensor([[True], [False], [True]])
    td = env.reset(td)
    assert td["traj_count"].reshape(-1).tolist() == [3, 1, 4]
    other = TransformedEnv(CountingEnv(), counter.clone())
    assert other.reset()["traj_count"].reshape(-1).tolist() == [5]


def test_traj_counter_refuses_data_outside_an_env():
    with pytest.raises(RuntimeError, match="TrajCounter can only be called within an environment"):
        TrajCounter()(TensorDict({"a": torch.ones(2)}, [2]))


def test_traj_counter_nested_key_follows_its_done_level():
    env = TransformedEnv(AgentsOnlyDoneEnv(n_agents=2), TrajCounter(("agents", "traj_count")))
    check_env_specs(env)
    td = env.reset()
    first = td["agents", "traj_count"].reshape(-1).tolist()
    assert first[1] == first[0] + 1
    td = env.reset(td.set(("agents", "_reset"), torch.tensor([[False], [True]])))
    assert td["agents", "traj_count"].reshape(-1).tolist() == [first[0], first[0] + 2]


def _traj_env(counter, max_steps):
    return TransformedEnv(CountingEnv(max_steps=max_steps), counter.clone())


def test_traj_counter_ids_are_distinct_across_spawned_workers():
    counter = TrajCounter()
    env = ParallelEnv(
        2,
        [partial(_traj_env, counter, 3), partial(_traj_env, counter, 4)],
        mp_start_method="spawn",
    )
    try:
        rollout = env.rollout(20, break_when_any_done=False)
    finally:
        env.close()
    first = set(rollout[0]["traj_count"].reshape(-1).tolist())
    second = set(rollout[1]["traj_count"].reshape(-1).tolist())
    assert len(first) > 3 and len(second) > 3
    assert not first & second
    # the parent's copy draws after the workers' ids
    local = TransformedEnv(CountingEnv(), counter.clone()).reset()["traj_count"].item()
    assert local > max(first | second)


def test_traj_counter_pickles():
    import pickle

    counter = TrajCounter(out_key="tid")
    restored = pickle.loads(pickle.dumps(counter))
    assert restored.out_key == "tid"
    env = TransformedEnv(CountingEnv(), restored)
    assert "tid" in env.reset().keys()


def test_init_tracker_marks_first_step(cartpole):
    env = TransformedEnv(cartpole, Compose(StepCounter(max_steps=3), InitTracker()))
    check_env_specs(env)
    rollout = env.rollout(7, break_when_any_done=False)
    assert rollout["is_init"].squeeze(-1).tolist() == [True, False, False] * 2 + [True]
    assert not rollout["next", "is_init"].any()
    assert env.observation_spec["is_init"].dtype == torch.bool


def test_init_tracker_partial_reset_and_nested():
    env = TransformedEnv(CountingEnv(max_steps=100, batch_size=(2,)), InitTracker("first"))
    td = env.rand_step(env.reset())
    td = env.step_and_maybe_reset(env.rand_action(td))[1]
    assert td["first"].reshape(-1).tolist() == [False, False]
    td["_reset"] = torch.tensor([[True], [False]])
    assert env.reset(td)["first"].reshape(-1).tolist() == [True, False]
    nested = TransformedEnv(MultiAgentCountingEnv(n_agents=2), InitTracker())
    check_env_specs(nested)
    assert nested.transform.init_keys == ["is_init"]
    agents_only = TransformedEnv(AgentsOnlyDoneEnv(n_agents=2), InitTracker())
    check_env_specs(agents_only)
    assert agents_only.transform.init_keys == [("agents", "is_init")]
    td = agents_only.reset(TensorDict({("agents", "_reset"): torch.tensor([[True], [False]])}))
    assert td["agents", "is_init"].reshape(-1).tolist() == [True, False]


def test_init_tracker_checks_its_key_and_refuses_data_outside_an_env():
    with pytest.raises(TypeError, match="init_key"):
        InitTracker(3)
    with pytest.raises(ValueError, match="init_key can only be of type str"):
        InitTracker(("some", "nested"))
    with pytest.raises(
        NotImplementedError, match="InitTracker cannot be executed without a parent"
    ):
        InitTracker()(TensorDict())
