"""Envs whose agents differ in their action / observation sizes (lazily stacked groups)."""

import pytest
import torch
from tensordict import LazyStackedTensorDict, dense_stack_tds

from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tests.mocks import HeterogeneousAgentsEnv


@pytest.mark.parametrize("batch_size", [(), (2,)])
def test_single_env_specs_and_rollout(batch_size):
    env = HeterogeneousAgentsEnv(batch_size=batch_size)
    check_env_specs(env)
    data = env.rollout(5, return_contiguous=False, break_when_any_done=False)
    assert data.batch_size == (*batch_size, 5) and data.names[-1] == "time"
    dense = dense_stack_tds(data)
    agents = dense["agents"]
    assert isinstance(agents, LazyStackedTensorDict)
    # steps share their structure, so time is stacked densely and agents stay lazy
    assert agents.stack_dim == agents.batch_dims - 1
    for index, size in enumerate(HeterogeneousAgentsEnv.sizes):
        agent = agents[..., index]
        assert agent["action"].shape == (*batch_size, 5, size)
        assert set(agent.keys()) == {"obs", "action"}
    counts = dense["next", "agents"][..., 0]["obs"][..., 0]
    expected = torch.arange(1, 6, dtype=torch.float32) % 4
    expected[expected == 0] = 4  # reset after the 4th step
    assert (counts == expected.expand(*batch_size, 5)).all()


def test_random_actions_have_each_agent_size():
    env = HeterogeneousAgentsEnv(batch_size=(3,))
    data = env.rand_action(env.reset())
    parts = data["agents"].tensordicts
    assert [part["action"].shape for part in parts] == [(3, 3), (3, 2)]


@pytest.mark.parametrize("batched_cls", [SerialEnv, ParallelEnv])
def test_batched_heterogeneous_env(batched_cls):
    with pytest.warns(UserWarning, match="stacked lazily"):
        env = batched_cls(2, HeterogeneousAgentsEnv)
    try:
        check_env_specs(env)
        data = env.rollout(3, return_contiguous=False, break_when_any_done=False)
        assert data.batch_size == (2, 3)
        rewards = dense_stack_tds(data)["next", "agents"][..., 1]["reward"]
        assert rewards.shape == (2, 3, 1)
    finally:
        env.close()
