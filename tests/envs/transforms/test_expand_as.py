"""ExpandAs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import ExpandAs, SerialEnv, TransformedEnv, check_env_specs
from tests.mocks import MultiAgentCountingEnv


def _transform(out_key="agent_done"):
    return ExpandAs(in_key="done", ref_key=("agents", "observation"), out_key=out_key)


def test_expand_as_broadcasts_an_env_flag_to_each_agent():
    env = TransformedEnv(MultiAgentCountingEnv(n_agents=2), _transform())
    check_env_specs(env)
    assert env.observation_spec["agent_done"].shape == (2, 3)
    assert env.observation_spec["agent_done"].dtype == torch.bool
    td = env.reset()
    assert td["agent_done"].shape == td["agents", "observation"].shape
    rollout = env.rollout(10)
    last = rollout[-1]
    assert torch.equal(last["next", "agent_done"], last["next", "done"].expand(2, 3))


def test_expand_as_in_a_batched_env():
    env = TransformedEnv(SerialEnv(2, lambda: MultiAgentCountingEnv(n_agents=2)), _transform())
    check_env_specs(env)
    assert env.reset()["agent_done"].shape == (2, 2, 3)


def test_expand_as_on_data_in_place_and_from_a_buffer():
    data = TensorDict(
        {"done": torch.tensor([[False], [True]]), ("agents", "observation"): torch.zeros(2, 4, 3)},
        [2],
    )
    out = _transform(out_key="done")(data.clone())
    assert out["done"].shape == (2, 4, 3)
    assert out["done"][1].all() and not out["done"][0].any()
    rb = ReplayBuffer(storage=LazyTensorStorage(2), transform=_transform())
    rb.extend(data)
    assert rb.sample(3)["agent_done"].shape == (3, 4, 3)


def test_expand_as_errors():
    t = _transform()
    with pytest.raises(KeyError, match="agents"):
        t(TensorDict({"done": torch.zeros(1, dtype=torch.bool)}))
    bad = TensorDict({"done": torch.zeros(3), ("agents", "observation"): torch.zeros(2)})
    with pytest.raises(ValueError, match="cannot expand"):
        t(bad)
