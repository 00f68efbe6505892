"""Tests of the Stack transform (tdrl/envs/transforms/stack.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Categorical, Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from tdrl.envs import EnvBase, Stack, TransformedEnv, check_env_specs


class SplitAgentsEnv(EnvBase):
    """Agents kept in separate sub-tensordicts ``("agents", "agent_i")``; agent i counts by i+1."""

    def __init__(self, n_agents: int = 3, max_steps: int = 4):
        super().__init__()
        self.n_agents = n_agents
        self.max_steps = max_steps
        names = [f"agent_{i}" for i in range(n_agents)]
        self.observation_spec = Composite(
            agents=Composite({n: Composite(observation=Unbounded((2,))) for n in names})
        )
        self.reward_spec = Composite(
            agents=Composite({n: Composite(reward=Unbounded((1,))) for n in names})
        )
        self.full_done_spec = Composite(
            done=Categorical(2, (1,), dtype=torch.bool),
            terminated=Categorical(2, (1,), dtype=torch.bool),
            agents=Composite(
                {n: Composite(done=Categorical(2, (1,), dtype=torch.bool)) for n in names}
            ),
        )
        self.action_spec = Composite(
            agents=Composite({n: Composite(action=Bounded(-1.0, 1.0, (1,))) for n in names})
        )
        self.count = 0
        self.last_actions: list = []

    def _data(self, reward=None):
        done = torch.tensor([self.count >= self.max_steps])
        agents = {}
        for i in range(self.n_agents):
            agent = {"observation": torch.full((2,), float(self.count * (i + 1))), "done": done}
            if reward is not None:
                agent["reward"] = reward[i]
            agents[f"agent_{i}"] = agent
        return TensorDict({"agents": agents, "done": done, "terminated": done}, [])

    def _reset(self, tensordict=None, **kwargs):
        self.count = 0
        return self._data()

    def _step(self, tensordict):
        self.count += 1
        actions = [tensordict["agents", f"agent_{i}", "action"] for i in range(self.n_agents)]
        self.last_actions = actions
        return self._data(reward=actions)

    def _set_seed(self, seed):
        pass


def _agents_stack(**kwargs) -> Stack:
    keys = [("agents", f"agent_{i}") for i in range(3)]
    return Stack(in_keys=keys, out_key="team", in_key_inv="team", out_keys_inv=keys, **kwargs)


def test_stack_tensors_and_unbind_back():
    td = TensorDict({"a": torch.rand(1, 3), "b": torch.rand(1, 3), "c": torch.rand(1, 3)}, [1])
    original = td.clone()
    t = Stack(in_keys=["a", "b"], out_key="ab", in_key_inv="ab", out_keys_inv=["a", "b"], dim=-2)
    out = t(td)
    assert out is td  # the entries are replaced in place
    assert sorted(out.keys()) == ["ab", "c"]
    assert out["ab"].shape == (1, 2, 3)
    torch.testing.assert_close(out["ab"][:, 1], original["b"])
    assert (t.inv(out) == original).all()


def test_stack_tensordicts_along_a_positive_dim():
    def value():
        return TensorDict({"x": torch.rand(3), "y": torch.rand(2, 4)}, [])

    td = TensorDict({"k1": value(), "k2": value(), "k3": value()}, [])
    original = td.clone()
    t = Stack(
        ["k1", "k2"],
        "both",
        in_key_inv="both",
        out_keys_inv=["k1", "k2"],
        dim=0,
        allow_positive_dim=True,
    )
    out = t(td)
    assert out["both", "y"].shape == (2, 2, 4)
    assert (out["both"][1] == original["k2"]).all()
    assert (t.inv(out) == original).all()


def test_del_keys_prunes_emptied_groups_and_keep_option():
    def groups():
        return TensorDict(
            {"g": {"a": {"obs": torch.zeros(2)}, "b": {"obs": torch.ones(2)}}, "h": torch.ones(1)},
            [],
        )

    keys = [("g", "a", "obs"), ("g", "b", "obs")]
    out = Stack(keys, "all_obs")(groups())
    assert sorted(out.keys(True, True)) == ["all_obs", "h"]
    kept = Stack(keys, "all_obs", del_keys=False)(groups())
    assert ("g", "a", "obs") in kept.keys(True, True)


def test_inverse_without_the_stacked_entry_is_a_no_op():
    td = TensorDict({"a": torch.zeros(2)}, [])
    assert (Stack(["a", "b"], "ab").inv(td) == td).all()
    assert (_agents_stack().inv(td) == td).all()


def test_env_agents_stacked_in_every_spec_category():
    base = SplitAgentsEnv()
    env = TransformedEnv(base, _agents_stack())
    assert env.observation_spec["team", "observation"].shape == (3, 2)
    assert env.full_done_spec["team", "done"].shape == (3, 1)
    assert env.full_reward_spec["team", "reward"].shape == (3, 1)
    assert env.full_action_spec["team", "action"].shape == (3, 1)
    assert "agents" not in env.full_action_spec.keys()
    check_env_specs(env)
    td = env.reset()
    assert td["team", "observation"].shape == (3, 2)
    td["team", "action"] = torch.tensor([[0.1], [0.2], [0.3]])
    td = env.step(td)
    assert [a.item() for a in base.last_actions] == pytest.approx([0.1, 0.2, 0.3])
    assert td["next", "team", "observation"][:, 0].tolist() == [1.0, 2.0, 3.0]
    rollout = env.rollout(10)
    assert rollout["next", "team", "done"].shape == (4, 3, 1)
    assert bool(rollout["next", "team", "done"][-1].all())


def test_stack_in_a_replay_buffer():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=Stack(["x", "y"], "xy"))
    rb.extend(TensorDict({"x": torch.zeros(10, 2), "y": torch.ones(10, 2)}, [10]))
    sample = rb.sample(4)
    assert sample["xy"].shape == (4, 2, 2)
    assert "x" not in sample.keys()


def test_argument_and_data_errors():
    with pytest.raises(ValueError, match="negative dim.*got 0"):
        Stack(["a", "b"], "ab", dim=0)
    with pytest.raises(TypeError, match="expected an int, got 'x'"):
        Stack(["a", "b"], "ab", dim="x")
    with pytest.raises(ValueError, match="given together, got only in_key_inv"):
        Stack(["a", "b"], "ab", in_key_inv="ab")
    with pytest.raises(KeyError, match="'b'"):
        Stack(["a", "b"], "ab")(TensorDict({"a": torch.zeros(2)}, []))
    inverse = Stack(["a", "b"], "ab", in_key_inv="ab", out_keys_inv=["a", "b"])
    with pytest.raises(ValueError, match="has 3 entries along dim -1, expected 2"):
        inverse.inv(TensorDict({"ab": torch.zeros(2, 3)}, []))
    env = SplitAgentsEnv()
    with pytest.raises(ValueError, match="one spec category"):
        TransformedEnv(env, Stack([("agents", "agent_0", "observation"), "done"], "mixed"))
    with pytest.raises(KeyError, match="not in the env output specs"):
        TransformedEnv(SplitAgentsEnv(), Stack(["nope", "nada"], "n"))
