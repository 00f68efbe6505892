"""FlattenObservation, UnsqueezeTransform, SqueezeTransform, PermuteTransform,
BatchSizeTransform."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded
from tdrl.envs import (
    BatchSizeTransform,
    Compose,
    FlattenObservation,
    GymEnv,
    PendulumEnv,
    PermuteTransform,
    SqueezeTransform,
    StepCounter,
    TransformedEnv,
    UnsqueezeTransform,
    check_env_specs,
)
from tests.mocks import CountingEnv, StatelessCountingEnv


@pytest.fixture(scope="module")
def pixels_env():
    env = GymEnv("CartPole-v1", from_pixels=True, pixels_only=False)
    yield env
    env.close()


@pytest.fixture
def pendulum():
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    yield env
    env.close()


def test_permute_and_flatten_pixels(pixels_env):
    env = TransformedEnv(
        pixels_env,
        Compose(
            PermuteTransform([-1, -3, -2], in_keys=["pixels"]),
            FlattenObservation(-2, -1, in_keys=["pixels"], out_keys=["flat"]),
        ),
    )
    assert env.observation_spec["pixels"].shape == (3, 400, 600)
    assert env.observation_spec["flat"].shape == (3, 240000)
    assert env.observation_spec["pixels"].dtype == torch.uint8
    check_env_specs(env)
    td = env.reset()
    assert td["pixels"].shape == (3, 400, 600) and td["flat"].shape == (3, 240000)


def test_permute_inverse_and_bounds():
    t = PermuteTransform([-1, -2], in_keys=["x"], in_keys_inv=["y"])
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(t(TensorDict({"x": x}, []))["x"], x.T)
    assert torch.equal(t.inv(TensorDict({"y": x.T}, []))["y"], x)
    spec = Bounded(torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3) + 1)
    assert torch.equal(t._transform_spec(spec).low, spec.low.T)
    with pytest.raises(
        ValueError, match="negative indices.*permutation of \\[-2, -1\\], got \\[-1, 0\\]"
    ):
        PermuteTransform([-1, 0])


def test_flatten_requires_negative_dims():
    with pytest.raises(ValueError, match="negative"):
        FlattenObservation(0, 1)
    t = FlattenObservation(0, 1, in_keys=["x"], allow_positive_dim=True)
    assert t(TensorDict({"x": torch.zeros(2, 3, 4)}, []))["x"].shape == (6, 4)


def test_unsqueeze_outputs_on_gym(pendulum):
    env = TransformedEnv(pendulum, UnsqueezeTransform(-1, in_keys=["observation", "reward"]))
    assert env.observation_spec["observation"].shape == (3, 1)
    assert env.reward_spec.shape == (1, 1)
    check_env_specs(env)
    assert env.rand_step(env.reset())["next", "reward"].shape == (1, 1)


def test_unsqueeze_batched_partial_reset():
    env = TransformedEnv(
        CountingEnv(max_steps=100, batch_size=(2,)),
        UnsqueezeTransform(-2, in_keys=["observation"], out_keys=["obs_u"]),
    )
    check_env_specs(env)
    td = env.step_and_maybe_reset(env.rand_action(env.reset()))[1]
    assert td["obs_u"].shape == (2, 1, 4)
    td["_reset"] = torch.tensor([[True], [False]])
    td = env.reset(td)
    assert td["obs_u"][:, 0, 0].tolist() == [0.0, 1.0]


def test_squeeze_action_inverse(pendulum):
    env = TransformedEnv(pendulum, SqueezeTransform(-1, in_keys_inv=["action"]))
    assert env.action_spec.shape == ()
    check_env_specs(env)
    td = env.reset()
    td["action"] = torch.tensor(0.5)
    td = env.step(td)
    assert td["action"].shape == ()


def test_unsqueeze_positive_dim_and_errors():
    with pytest.raises(ValueError, match="negative"):
        UnsqueezeTransform(0, in_keys=["x"])
    with pytest.raises(TypeError, match="dim"):
        UnsqueezeTransform(in_keys=["x"])
    t = UnsqueezeTransform(0, in_keys=["x"], allow_positive_dim=True)
    assert t(TensorDict({"x": torch.zeros(3)}, []))["x"].shape == (1, 3)
    with pytest.raises(TypeError, match="expected an int, got 1.5"):
        UnsqueezeTransform(1.5, in_keys=["x"])


def test_squeeze_leaves_dims_not_of_size_one():
    # as torch.squeeze(dim): only a dim of size 1 is removed, in data and in specs
    t = SqueezeTransform(-1, in_keys=["x"])
    assert t(TensorDict({"x": torch.zeros(3)}, []))["x"].shape == (3,)
    assert t(TensorDict({"x": torch.zeros(3, 1)}, []))["x"].shape == (3,)
    assert t._transform_spec(Bounded(-1.0, 1.0, (3,))).shape == (3,)
    assert t._transform_spec(Bounded(-1.0, 1.0, (3, 1))).shape == (3,)
    inverse = UnsqueezeTransform(-2, in_keys_inv=["a"])
    assert inverse.inv(TensorDict({"a": torch.zeros(2, 5, 4)}, [2]))["a"].shape == (2, 5, 4)
    assert inverse.inv(TensorDict({"a": torch.zeros(2, 1, 4)}, [2]))["a"].shape == (2, 4)


def test_positive_dims_index_the_whole_entry_batch_dims_included():
    td = TensorDict({"x": torch.zeros(2, 4, 3)}, [2])
    unsqueeze = UnsqueezeTransform(1, in_keys=["x"], allow_positive_dim=True)
    assert unsqueeze(td.clone())["x"].shape == (2, 1, 4, 3)
    assert unsqueeze._transform_spec(Bounded(-1.0, 1.0, (2, 4, 3))).shape == (2, 1, 4, 3)
    with pytest.raises(RuntimeError, match="batch dimension mismatch"):
        # inserted among the batch dims of a batch-size (2, 4) tensordict
        unsqueeze(TensorDict({"x": torch.zeros(2, 4, 3)}, [2, 4]))
    squeeze = SqueezeTransform(2, in_keys=["x"], in_keys_inv=["y"], allow_positive_dim=True)
    squeezed = squeeze(TensorDict({"x": torch.zeros(2, 4, 1, 3)}, [2]))
    assert squeezed["x"].shape == (2, 4, 3)
    assert squeeze.inv(TensorDict({"y": torch.zeros(2, 4, 3)}, [2]))["y"].shape == (2, 4, 1, 3)


def test_positive_dim_in_an_env_counts_the_env_batch_dims():
    env = TransformedEnv(
        CountingEnv(batch_size=(2,)),
        UnsqueezeTransform(1, in_keys=["observation"], allow_positive_dim=True),
    )
    assert env.observation_spec["observation"].shape == (2, 1, 4)
    check_env_specs(env)
    assert env.reset()["observation"].shape == (2, 1, 4)


def test_batch_size_transform_on_stateless_env():
    env = TransformedEnv(PendulumEnv(), Compose(BatchSizeTransform(batch_size=[3]), StepCounter()))
    assert env.batch_size == (3,)
    assert env.observation_spec["th"].shape == (3,)
    check_env_specs(env)
    rollout = env.rollout(4)
    assert rollout.batch_size == (3, 4)
    assert rollout["next", "step_count"].shape == (3, 4, 1)


def test_batch_size_reshape_fn():
    env = TransformedEnv(
        CountingEnv(batch_size=(2, 3)),
        BatchSizeTransform(reshape_fn=lambda td: td.reshape(-1)),
    )
    assert env.batch_size == (6,)
    assert env.observation_spec["observation"].shape == (6, 4)
    assert env.action_spec.shape == (6, 1)
    check_env_specs(env)
    assert env.rollout(3).batch_size == (6, 3)


def test_batch_size_reset_func():
    def reset_func(tensordict, tensordict_reset, env):
        tensordict_reset["count"] = torch.full_like(tensordict_reset["count"], 2.0)
        return tensordict_reset

    env = TransformedEnv(
        StatelessCountingEnv(max_steps=100),
        BatchSizeTransform(batch_size=[2], reset_func=reset_func, env_kwarg=True),
    )
    td = env.reset()
    assert td["count"].reshape(-1).tolist() == [2.0, 2.0]


def test_batch_size_validation():
    with pytest.raises(ValueError, match="expected one of"):
        BatchSizeTransform()
    with pytest.raises(ValueError, match="reshape_fn"):
        BatchSizeTransform(batch_size=[2], reshape_fn=lambda td: td)


def test_batch_size_reshape_fn_on_gym(pendulum):
    env = TransformedEnv(pendulum, BatchSizeTransform(reshape_fn=lambda td: td.unsqueeze(0)))
    assert env.batch_size == (1,)
    assert env.action_spec.shape == (1, 1)
    check_env_specs(env)
    assert env.rollout(3).batch_size == (1, 3)


def test_batch_size_transform_reshapes_replay_buffer_samples():
    from tdrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(20))
    rb.append_transform(Compose(BatchSizeTransform(reshape_fn=lambda td: td.reshape(1, -1))))
    rb.extend(TensorDict({"a": torch.arange(60.0).reshape(20, 3)}, [20, 3]))  # stored as given
    assert rb.sample(4).batch_size == (1, 12)
