"""Reward transforms: value maps, RewardSum, TargetReturn, Reward2GoTransform."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Categorical, Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from tdrl.envs import (
    BinarizeReward,
    ClipTransform,
    Compose,
    GymEnv,
    LineariseReward,
    LineariseRewards,
    PendulumEnv,
    RenameTransform,
    Reward2GoTransform,
    RewardClipping,
    RewardScaling,
    RewardSum,
    SerialEnv,
    SignTransform,
    StepCounter,
    SuccessReward,
    TargetReturn,
    TransformedEnv,
    check_env_specs,
    step_mdp,
)
from tests.mocks import CountingEnv, MultiAgentCountingEnv


@pytest.fixture
def cartpole():
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    yield env
    env.close()


@pytest.fixture
def pendulum():
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    yield env
    env.close()


@pytest.fixture
def cartpole2():
    env = GymEnv("CartPole-v1", num_envs=2)
    env.set_seed(0)
    yield env
    env.close()


def _specs_unchanged(base, build):
    before = base.output_spec.clone(), base.input_spec.clone()
    env = build(base)
    assert base.output_spec == before[0] and base.input_spec == before[1]
    return env


# ----------------------------------------------------------------- value maps
def test_reward_scaling_on_gym(cartpole):
    env = _specs_unchanged(cartpole, lambda b: TransformedEnv(b, RewardScaling(1.0, 2.0)))
    check_env_specs(env)
    assert env.rollout(3)["next", "reward"].squeeze(-1).tolist() == [3.0, 3.0, 3.0]
    assert cartpole.rollout(2)["next", "reward"].squeeze(-1).tolist() == [1.0, 1.0]


def test_reward_scaling_standard_normal_and_bounded_specs():
    t = RewardScaling(loc=1.0, scale=4.0, standard_normal=True)
    td = t(TensorDict({"reward": torch.tensor([5.0, 1.0])}))
    assert td["reward"].tolist() == [1.0, 0.0]
    spec = t._spec(Bounded(-3.0, 5.0, (1,)))
    assert isinstance(spec, Bounded) and spec.low.tolist() == [-1.0] and spec.high.tolist() == [1.0]
    assert isinstance(t._spec(Unbounded((1,))), Unbounded)
    assert RewardScaling(0.0, 0.0).scale.item() == pytest.approx(1e-6)


def test_reward_scaling_keeps_buffer_data():
    reward = torch.ones(3, 1)
    out = RewardScaling(0.0, 3.0)(TensorDict({"reward": reward}, [3]))
    assert reward.sum().item() == 3.0 and out["reward"].sum().item() == 9.0


def test_reward_clipping_on_pendulum(pendulum):
    env = _specs_unchanged(pendulum, lambda b: TransformedEnv(b, RewardClipping(-0.1, 0.0)))
    check_env_specs(env)
    assert isinstance(env.reward_spec, Bounded)
    assert env.reward_spec.low.tolist() == pytest.approx([-0.1])
    rewards = env.rollout(10)["next", "reward"]
    assert bool((rewards >= -0.1).all()) and bool((rewards <= 0.0).all())
    with pytest.raises(ValueError, match="clamp_min <= clamp_max"):
        RewardClipping(1.0, 0.0)


def test_reward_clipping_one_sided():
    t = RewardClipping(clamp_max=1.0)
    td = t(TensorDict({"reward": torch.tensor([-5.0, 3.0])}))
    assert td["reward"].tolist() == [-5.0, 1.0]
    env = TransformedEnv(CountingEnv(), RewardClipping(clamp_max=0.5))
    assert env.reward_spec.high.tolist() == [0.5] and env.reward_spec.low.item() == -float("inf")
    check_env_specs(env)


def test_binarize_reward_on_gym(pendulum):
    env = TransformedEnv(pendulum, BinarizeReward())
    check_env_specs(env)
    assert env.reward_spec.dtype == torch.int64
    rollout = env.rollout(5)
    assert rollout["next", "reward"].dtype == torch.int64
    assert set(rollout["next", "reward"].reshape(-1).tolist()) <= {0, 1}
    td = BinarizeReward()(TensorDict({"reward": torch.tensor([[0.0], [-2.0], [0.5]])}, [3]))
    # positive rewards map to 1, zero and negative ones to 0
    assert td["reward"].reshape(-1).tolist() == [0, 0, 1]


def test_sign_transform_outputs_and_inverse(pendulum):
    env = TransformedEnv(pendulum, SignTransform(in_keys=["observation", "reward"]))
    check_env_specs(env)
    rollout = env.rollout(5)
    assert set(rollout["next", "reward"].reshape(-1).tolist()) <= {-1.0, 0.0}
    assert set(rollout["observation"].reshape(-1).tolist()) <= {-1.0, 0.0, 1.0}
    base = CountingEnv()
    env = TransformedEnv(base, SignTransform(in_keys_inv=["action"]))
    check_env_specs(env)
    td = env.reset()
    td["action"] = torch.tensor([0.3])
    assert env.step(td)["next", "reward"].tolist() == [1.0]


def test_clip_transform_outputs_and_inputs(pendulum):
    env = _specs_unchanged(
        pendulum,
        lambda b: TransformedEnv(
            b, ClipTransform(in_keys=["observation"], in_keys_inv=["action"], low=-0.5, high=0.5)
        ),
    )
    check_env_specs(env)
    assert env.action_spec.low.tolist() == [-0.5] and env.action_spec.high.tolist() == [0.5]
    spec = env.observation_spec["observation"]
    assert spec.low.tolist() == [-0.5] * 3 and spec.high.tolist() == [0.5] * 3
    assert bool((env.reset()["observation"].abs() <= 0.5).all())
    base = CountingEnv()
    env = TransformedEnv(base, ClipTransform(in_keys_inv=["action"], low=-0.25, high=0.25))
    td = env.reset()
    td["action"] = torch.tensor([0.75])
    assert env.step(td)["next", "reward"].tolist() == [0.25]
    assert td["action"].tolist() == [0.75]
    with pytest.raises(TypeError, match="at least one"):
        ClipTransform(in_keys=["observation"])


def test_linearise_reward():
    assert LineariseRewards is LineariseReward
    t = LineariseReward(in_keys=["reward"], weights=[2.0, -1.0])
    spec = t.transform_reward_spec(
        Bounded(torch.tensor([0.0, -1.0]), torch.tensor([1.0, 3.0]), (2,))
    )
    assert spec.shape == (1,) and spec.low.item() == -3.0 and spec.high.item() == 3.0
    assert t._apply_transform(torch.tensor([[1.0, 1.0]])).tolist() == [[1.0]]
    with pytest.raises(ValueError, match="objectives"):
        t.transform_reward_spec(Unbounded((3,)))
    with pytest.raises(ValueError, match="Expected weights to be a unidimensional tensor"):
        LineariseReward(in_keys=["reward"], weights=[[1.0]])
    with pytest.raises(NotImplementedError, match="discrete values"):
        LineariseReward(in_keys=["reward"]).transform_reward_spec(Categorical(2))


def test_linearise_reward_maps_each_entry_of_a_composite():
    spec = Composite(
        a=Composite(reward=Bounded(0.0, 1.0, (3,))),
        b=Composite(reward=Unbounded((2,))),
        other=Unbounded((4,)),
    )
    out = LineariseReward(in_keys=[("a", "reward"), ("b", "reward")]).transform_reward_spec(spec)
    assert out["a", "reward"] == Bounded(0.0, 3.0, (1,))
    assert out["b", "reward"] == Unbounded((1,))
    assert out["other"] == Unbounded((4,))


def test_linearise_reward_on_gym(pendulum):
    env = TransformedEnv(pendulum, LineariseReward(in_keys=["reward"], weights=[3.0]))
    check_env_specs(env)
    assert env.reward_spec.shape == (1,)
    raw = GymEnv("Pendulum-v1")
    raw.set_seed(0)
    pendulum.set_seed(0)
    torch.manual_seed(0)
    rollout = env.rollout(4)
    torch.manual_seed(0)
    expected = raw.rollout(4)["next", "reward"] * 3
    assert rollout["next", "reward"].shape == (4, 1)
    assert torch.allclose(rollout["next", "reward"], expected)
    raw.close()


def test_linearise_reward_output_can_feed_another_reward_transform():
    class TwoObjectives(CountingEnv):
        def __init__(self):
            super().__init__(max_steps=100)
            self.reward_spec = Unbounded((2,))

        def _step(self, tensordict):
            out = super()._step(tensordict)
            return out.set("reward", torch.tensor([1.0, 2.0]))

    chain = Compose(
        LineariseReward(in_keys=["reward"], out_keys=[("nested", "scalar")], weights=[1.0, 3.0]),
        RewardScaling(loc=0.0, scale=2.0, in_keys=[("nested", "scalar")]),
    )
    env = TransformedEnv(TwoObjectives(), chain)
    check_env_specs(env)
    assert ("nested", "scalar") in env.reward_keys
    assert env.rollout(2)["next", "nested", "scalar"].reshape(-1).tolist() == [14.0, 14.0]


def test_success_reward_replaces_the_reward_on_success():
    env = TransformedEnv(
        CountingEnv(max_steps=3),
        Compose(
            RenameTransform(in_keys=["done"], out_keys=["success"], create_copy=True),
            SuccessReward(scale=2.0),
        ),
    )
    check_env_specs(env)
    assert env.reward_spec == Bounded(0.0, 2.0, (1,))
    assert "reward" not in env.reset().keys()
    rollout = env.rollout(10)
    assert rollout["next", "reward"].reshape(-1).tolist() == [0.0, 0.0, 2.0]
    sample = SuccessReward(("next", "ok"), ("next", "r"), scale=-1.0)(
        TensorDict({"next": {"ok": torch.tensor([True, False])}}, [2])
    )
    assert sample["next", "r"].tolist() == [-1.0, 0.0]


def test_success_reward_spec_without_env():
    t = SuccessReward(scale=3.0)
    out = t.transform_reward_spec(Composite(reward=Unbounded((4, 1)), shape=(4,)))
    assert out["reward"] == Bounded(0.0, 3.0, (4, 1))
    with pytest.raises(RuntimeError, match="could not infer"):
        t.transform_reward_spec(Composite(shape=()))
    with pytest.raises(TypeError, match="scale"):
        SuccessReward(scale="2")


# ----------------------------------------------------------------- RewardSum
def test_reward_sum_on_gym(cartpole):
    env = _specs_unchanged(cartpole, lambda b: TransformedEnv(b, RewardSum()))
    check_env_specs(env)
    assert "episode_reward" in env.observation_spec.keys()
    assert "episode_reward" in env.state_spec.keys()
    assert "episode_reward" not in cartpole.observation_spec.keys()
    rollout = env.rollout(4)
    assert rollout["next", "episode_reward"].squeeze(-1).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert rollout["episode_reward"].squeeze(-1).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_reward_sum_restarts_after_done(cartpole):
    env = TransformedEnv(cartpole, Compose(StepCounter(max_steps=3), RewardSum()))
    rollout = env.rollout(7, break_when_any_done=False)
    assert rollout["next", "episode_reward"].squeeze(-1).tolist() == [1, 2, 3, 1, 2, 3, 1]


def test_reward_sum_partial_reset_batched_gym(cartpole2):
    env = TransformedEnv(cartpole2, RewardSum())
    check_env_specs(env)
    td = env.reset()
    for _ in range(3):
        td = step_mdp(env.rand_step(td))
    assert td["episode_reward"].reshape(-1).tolist() == [3.0, 3.0]
    td["_reset"] = torch.tensor([[True], [False]])
    td = env.reset(td)
    assert td["episode_reward"].reshape(-1).tolist() == [0.0, 3.0]
    td = env.rand_step(td)
    assert td["next", "episode_reward"].reshape(-1).tolist() == [1.0, 4.0]


def test_reward_sum_partial_reset_batch_unlocked_pendulum():
    env = TransformedEnv(PendulumEnv(), RewardSum())
    check_env_specs(env)
    td = env.reset(TensorDict(batch_size=[3]))
    td = step_mdp(env.rand_step(td))
    summed = td["episode_reward"].clone()
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    assert td["episode_reward"][1].item() == 0.0
    assert torch.equal(td["episode_reward"][[0, 2]], summed[[0, 2]])


def test_reward_sum_transform_only_reset_mask():
    transform = RewardSum()
    env = TransformedEnv(CountingEnv(max_steps=100, batch_size=(2,)), transform)
    previous = TensorDict(
        {"episode_reward": torch.tensor([[5.0], [7.0]]), "_reset": torch.tensor([[False], [True]])},
        [2],
    )
    out = transform._reset(previous, TensorDict({}, [2]))
    assert out["episode_reward"].reshape(-1).tolist() == [5.0, 0.0]
    assert env.reset()["episode_reward"].reshape(-1).tolist() == [0.0, 0.0]


def test_reward_sum_inside_and_around_batched_env():
    def make():
        return TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=3))

    env = TransformedEnv(SerialEnv(2, make), Compose(RewardSum(), TargetReturn(3.0)))
    check_env_specs(env)
    rollout = env.rollout(5, break_when_any_done=False)
    assert rollout["next", "episode_reward"].squeeze(-1).tolist() == [[1, 2, 3, 1, 2]] * 2
    assert rollout["target_return"].squeeze(-1).tolist() == [[3, 2, 1, 3, 2]] * 2
    inner = SerialEnv(2, lambda: TransformedEnv(make(), RewardSum()))
    rollout = inner.rollout(4, break_when_any_done=False)
    assert rollout["next", "episode_reward"].squeeze(-1).tolist() == [[1, 2, 3, 1]] * 2
    env.close()
    inner.close()


def test_reward_sum_nested_multi_agent_keys():
    base = MultiAgentCountingEnv(n_agents=2, max_steps=5)
    env = TransformedEnv(base, RewardSum())
    check_env_specs(env)
    assert env.transform.in_keys == [("agents", "reward")]
    assert env.transform.out_keys == [("agents", "episode_reward")]
    assert env.observation_spec["agents", "episode_reward"].shape == (2, 1)
    rollout = env.rollout(3)
    rewards = rollout["next", "agents", "reward"]
    assert torch.allclose(rollout["next", "agents", "episode_reward"], rewards.cumsum(0))
    td = step_mdp(rollout[-1])
    td["_reset"] = torch.tensor([True])
    assert env.reset(td)["agents", "episode_reward"].abs().sum().item() == 0.0


def test_reward_sum_nested_partial_reset_masks():
    base = MultiAgentCountingEnv(n_agents=2, max_steps=50, batch_size=(2,))
    transform = RewardSum()
    TransformedEnv(base, transform)
    previous = TensorDict(
        {
            "agents": TensorDict({"episode_reward": torch.ones(2, 2, 1)}, [2, 2]),
            "_reset": torch.tensor([[True], [False]]),
        },
        [2],
    )
    reset_out = TensorDict({"agents": TensorDict({}, [2, 2])}, [2])
    out = transform._reset(previous, reset_out)
    assert out["agents", "episode_reward"].reshape(2, 2).tolist() == [[0, 0], [1, 1]]
    previous["agents", "_reset"] = torch.tensor([[[True], [False]], [[False], [False]]])
    del previous["_reset"]
    out = transform._reset(previous, TensorDict({"agents": TensorDict({}, [2, 2])}, [2]))
    assert out["agents", "episode_reward"].reshape(2, 2).tolist() == [[0, 1], [1, 1]]


def test_reward_sum_custom_keys_and_reward_spec_option():
    env = TransformedEnv(CountingEnv(), RewardSum(in_keys=["reward"], out_keys=["ret"]))
    check_env_specs(env)
    assert "ret" in env.reset().keys()
    env = TransformedEnv(CountingEnv(), RewardSum(reward_spec=True))
    assert "episode_reward" in env.full_reward_spec.keys()
    assert "episode_reward" not in env.observation_spec.keys()
    with pytest.raises(KeyError, match="missing_reward"):
        TransformedEnv(CountingEnv(), RewardSum(in_keys=["missing_reward"]))
    with pytest.raises(ValueError, match="distinct"):
        RewardSum(in_keys=["a", "b"], out_keys=["c", "c"])


def test_reward_sum_forward_on_rollout_data(cartpole):
    env = TransformedEnv(cartpole, Compose(StepCounter(max_steps=3), RewardSum()))
    rollout = env.rollout(8, break_when_any_done=False)
    data = rollout.exclude("episode_reward", ("next", "episode_reward"))
    t = RewardSum(in_keys=[("next", "reward")], out_keys=[("next", "episode_reward")])
    out = t(data)
    assert torch.equal(out["next", "episode_reward"], rollout["next", "episode_reward"])
    # rewards are read where in_keys say, never looked up under "next"
    with pytest.raises(KeyError, match="reward"):
        RewardSum()(rollout.exclude("episode_reward", ("next", "episode_reward")))
    flat = RewardSum()(TensorDict({"reward": torch.tensor([1.0, 2.0, 3.0])}, [3]))
    assert flat["episode_reward"].tolist() == [1.0, 3.0, 6.0]
    done = torch.tensor([False, True, False])
    flat = RewardSum()(TensorDict({"reward": torch.tensor([1.0, 2.0, 3.0]), "done": done}, [3]))
    assert flat["episode_reward"].tolist() == [1.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="At least one dimension of the tensordict"):
        RewardSum()(TensorDict({"reward": torch.ones(1)}, []))


def test_reward_sum_in_the_reward_spec_accumulates_over_a_rollout(pendulum):
    env = TransformedEnv(pendulum, RewardSum(out_keys=["ret"], reward_spec=True))
    assert "ret" in env.reward_keys and "ret" not in env.observation_spec.keys()
    rollout = env.rollout(4)
    assert torch.allclose(rollout["next", "ret"], rollout["next", "reward"].cumsum(0))


def test_reward_sum_reset_keys_are_matched_with_the_env_at_reset():
    with pytest.raises(ValueError, match="same number of input and output keys"):
        RewardSum(in_keys=["a", "b"], out_keys=["c"])
    env = TransformedEnv(CountingEnv(), RewardSum(reset_keys=[("some", "reset")]))
    with pytest.raises(ValueError, match="Could not match the env reset_keys"):
        env.reset()
    env = TransformedEnv(CountingEnv(), RewardSum(reset_keys=["_reset"]))
    assert env.transform.reset_keys == ["_reset"]
    assert env.reset()["episode_reward"].tolist() == [0.0]


def test_reward_sum_standalone_reset_needs_reset_keys():
    td = TensorDict(
        {"_reset": torch.tensor([True, False]), "episode_reward": torch.tensor([3.0, 4.0])}, [2]
    )
    with pytest.raises(TypeError, match="reset_keys not provided"):
        RewardSum()._reset(td, td.empty())
    out = RewardSum(reset_keys=["_reset"])._reset(td, td.empty())
    assert out["episode_reward"].tolist() == [0.0, 4.0]
    with pytest.raises(ValueError, match=r"Could not match the env reset_keys \['_reset'\]"):
        RewardSum(in_keys=["a", "b"], reset_keys=["_reset"])._reset(td, td.empty())


# -------------------------------------------------------------- TargetReturn
def test_target_return_reduce_and_constant(cartpole):
    env = TransformedEnv(cartpole, Compose(StepCounter(max_steps=3), TargetReturn(5.0)))
    check_env_specs(env)
    rollout = env.rollout(5, break_when_any_done=False)
    assert rollout["target_return"].squeeze(-1).tolist() == [5, 4, 3, 5, 4]
    assert rollout["next", "target_return"].squeeze(-1).tolist() == [4, 3, 2, 4, 3]
    data = rollout.exclude("target_return", ("next", "target_return"))
    with pytest.raises(NotImplementedError, match="cannot be executed without a parent"):
        TargetReturn(5.0)(data)
    env = TransformedEnv(GymEnv("CartPole-v1"), TargetReturn(2.0, mode="constant"))
    assert env.rollout(3)["next", "target_return"].squeeze(-1).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="mode"):
        TargetReturn(1.0, mode="other")


def test_target_return_partial_reset(cartpole2):
    env = TransformedEnv(cartpole2, TargetReturn(10.0, reset_key="_reset"))
    td = step_mdp(env.rand_step(env.reset()))
    assert td["target_return"].reshape(-1).tolist() == [9.0, 9.0]
    td["_reset"] = torch.tensor([[False], [True]])
    assert env.reset(td)["target_return"].reshape(-1).tolist() == [9.0, 10.0]


# ---------------------------------------------------------- Reward2GoTransform
def _trajectories():
    done = torch.zeros(2, 4, 1, dtype=torch.bool)
    done[0, 1] = True
    reward = torch.arange(8, dtype=torch.float32).reshape(2, 4, 1)
    return TensorDict({"next": {"reward": reward, "done": done}}, [2, 4])


def _reference_to_go(reward, done, gamma):
    out = torch.zeros_like(reward)
    for b in range(reward.shape[0]):
        running = 0.0
        for t in reversed(range(reward.shape[1])):
            running = reward[b, t] + gamma * running * (~done[b, t])
            out[b, t] = running
    return out


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reward_to_go_matches_reference(gamma):
    data = _trajectories()
    out = Reward2GoTransform(gamma, out_keys=[("next", "r2g")]).inv(data)
    expected = _reference_to_go(data["next", "reward"], data["next", "done"], gamma)
    assert torch.allclose(out["next", "r2g"], expected)
    assert torch.equal(out["next", "reward"], data["next", "reward"])
    assert ("next", "r2g") not in data.keys(True)


def test_reward_to_go_forward_leaves_samples_unchanged():
    data = _trajectories()
    out = Reward2GoTransform(0.9, out_keys=["r2g"])(data.clone())
    assert (out == data).all()
    with pytest.raises(KeyError, match="Could not find the reward entry"):
        Reward2GoTransform(0.9).inv(data.exclude(("next", "reward")))


def test_reward_to_go_long_trajectory_and_truncation():
    torch.manual_seed(0)
    reward = torch.rand(1, 300, 1)
    done = torch.rand(1, 300, 1) < 0.02
    truncated = torch.zeros_like(done)
    truncated[0, 150] = True
    data = TensorDict({"next": {"reward": reward, "done": done, "truncated": truncated}}, [1, 300])
    out = Reward2GoTransform(0.99).inv(data)
    expected = _reference_to_go(reward, done | truncated, 0.99)
    assert torch.allclose(out["next", "reward"], expected, atol=1e-4)


def test_reward_to_go_on_replay_buffer_extend_and_sample():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(8),
        transform=Reward2GoTransform(gamma=1.0, out_keys=[("next", "reward_to_go")]),
    )
    data = _trajectories()[0]
    rb.extend(data)
    stored = rb[:]
    assert stored["next", "reward_to_go"].squeeze(-1).tolist() == [1.0, 1.0, 5.0, 3.0]
    assert "reward_to_go" not in data["next"].keys()
    assert rb.sample(3)["next", "reward_to_go"].shape == (3, 1)


def test_reward_to_go_refuses_envs(cartpole):
    with pytest.raises(ValueError, match=Reward2GoTransform.ENV_ERR):
        TransformedEnv(cartpole, Reward2GoTransform())
    env = TransformedEnv(CountingEnv())
    with pytest.raises(ValueError, match=Reward2GoTransform.ENV_ERR):
        env.append_transform(Compose(Reward2GoTransform()))
    # the refused transform is not left in the chain
    assert len(env.transform) == 0
    check_env_specs(env)
    with pytest.raises(ValueError, match="gamma"):
        Reward2GoTransform(gamma=1.5)
