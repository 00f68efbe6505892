"""What rollout accepts as actions: policies in and out of place, tensor modules, iterables."""

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.data import Composite, Unbounded
from tdrl.envs import GymEnv, SerialEnv
from tests.mocks import CountingEnv, MultiAgentCountingEnv


def _in_place(td):
    return td.set("action", torch.full((*td.shape, 1), 0.5))


def _out_of_place(td):
    return td.empty().set("action", torch.full((*td.shape, 1), 0.5))


@pytest.mark.parametrize("batch_size", [(), (3,)])
@pytest.mark.parametrize(
    "flags", [{}, {"break_when_any_done": False}, {"break_when_all_done": True}]
)
def test_out_of_place_policy_gives_the_same_rollout(batch_size, flags):
    env = CountingEnv(max_steps=4, batch_size=batch_size)
    expected = env.rollout(10, _in_place, **flags)
    got = env.rollout(10, _out_of_place, **flags)
    assert got.batch_size == expected.batch_size
    assert (got == expected).all()
    assert (got["next", "reward"] == 0.5).all()


def test_policy_returning_none_is_taken_as_in_place():
    env = CountingEnv(max_steps=3)

    def writes_and_returns_nothing(td):
        td.set("action", torch.ones(1))

    data = env.rollout(3, writes_and_returns_nothing)
    assert (data["action"] == 1).all()


def test_module_on_tensors_reads_the_single_observation():
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    torch.manual_seed(0)
    linear = nn.Linear(env.observation_spec["observation"].shape[-1], 2)

    class ArgMax(nn.Module):
        def forward(self, values):
            return values.argmax(-1)

    policy = nn.Sequential(linear, ArgMax())
    data = env.rollout(5, policy)
    expected = linear(data["observation"]).argmax(-1)
    assert (data["action"] == expected).all()
    batched = SerialEnv(2, lambda: GymEnv("CartPole-v1", categorical_action_encoding=True))
    assert batched.rollout(3, policy)["action"].shape == (2, 3)
    batched.close()


def test_module_on_tensors_reads_observations_by_argument_name():
    env = MultiAgentCountingEnv(n_agents=2)

    class FromState(nn.Module):
        def forward(self, state):
            return state[..., :1].expand(2, 2).clone()

    data = env.rollout(2, FromState())
    assert data["agents", "action"].shape == (2, 2, 2)

    class Unnamed(nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(TypeError, match=r"forward arguments \['x'\] do not name"):
        env.rollout(2, Unnamed())


def test_actions_list_caps_the_rollout():
    env = CountingEnv(max_steps=100)
    actions = [torch.full((1,), float(i) / 10) for i in range(5)]
    data = env.rollout(50, actions=actions, break_when_any_done=False)
    assert data.batch_size == (5,)
    assert data["action"].squeeze(-1).tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_actions_generator_ends_the_rollout_when_exhausted():
    env = CountingEnv(max_steps=100)
    data = env.rollout(10, actions=(torch.ones(1) for _ in range(3)), break_when_any_done=False)
    assert data.batch_size == (3,)
    data = env.rollout(2, actions=(torch.ones(1) for _ in range(5)))
    assert data.batch_size == (2,)


def test_actions_as_tensordicts_for_nested_actions():
    env = MultiAgentCountingEnv(n_agents=3)
    steps = [env.full_action_spec.zero() for _ in range(2)]
    data = env.rollout(5, actions=steps, break_when_any_done=False)
    assert data.batch_size == (2,)
    assert (data["agents", "action"] == 0).all()
    # a tensor goes to the single (nested) action key
    data = env.rollout(2, actions=[torch.ones(3, 2)] * 2, break_when_any_done=False)
    assert (data["agents", "action"] == 1).all()
    two_actions = CountingEnv()
    two_actions.full_action_spec = Composite(a=Unbounded((1,)), b=Unbounded((1,)))
    with pytest.raises(TypeError, match=r"2 action keys \['a', 'b'\]; give each step's"):
        two_actions.rollout(2, actions=[torch.zeros(1)])


def test_actions_errors():
    env = CountingEnv()
    with pytest.raises(ValueError, match="both a policy and actions"):
        env.rollout(3, policy=_in_place, actions=[torch.ones(1)])
    with pytest.raises(ValueError, match="at least one action"):
        env.rollout(3, actions=[])
    with pytest.raises(ValueError, match="gave no action"):
        env.rollout(3, actions=iter(()))


def test_storing_device_moves_the_result():
    env = CountingEnv(max_steps=3)
    data = env.rollout(3, storing_device="meta")
    assert data.device == torch.device("meta")
    assert all(value.device.type == "meta" for value in data.values(True, True))


def test_empty_step_output_gets_false_done_flags():
    class Silent(CountingEnv):
        def _step(self, tensordict):
            super()._step(tensordict)
            return TensorDict(batch_size=self.batch_size)

        def _reset(self, tensordict=None, **kwargs):
            super()._reset(tensordict)
            return TensorDict(batch_size=self.batch_size)

    env = Silent(batch_size=(2,))
    env.observation_spec = env.observation_spec.empty()
    env.full_reward_spec = env.full_reward_spec.empty()
    data = env.rollout(3)
    assert data.batch_size == (2, 3)
    assert not data["next", "done"].any() and not data["next", "terminated"].any()


def test_add_truncated_keys_and_set_truncated():
    env = CountingEnv(max_steps=100)
    with pytest.raises(RuntimeError, match="call env.add_truncated_keys"):
        env.rollout(4, set_truncated=True)
    assert env.add_truncated_keys() is env
    assert env.done_keys == ["done", "terminated", "truncated"]
    data = env.rollout(4, set_truncated=True, break_when_any_done=False)
    assert data["next", "truncated"].squeeze(-1).tolist() == [False, False, False, True]
    assert data["next", "done"][-1].all() and not data["next", "terminated"].any()
    env.check_env_specs()
