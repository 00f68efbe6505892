"""DTypeCastTransform, DoubleToFloat, DeviceCastTransform, PinMemoryTransform."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.envs import (
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    GymEnv,
    PinMemoryTransform,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import CountingEnv


class DoubleEnv(CountingEnv):
    """A counting env speaking float64 (observation and action)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        batch = self.batch_size
        self.observation_spec = Composite(
            observation=Unbounded((*batch, 4), dtype=torch.float64), shape=batch
        )
        self.action_spec = Unbounded((*batch, 1), dtype=torch.float64)
        self.seen_action_dtype = None

    def _reset(self, tensordict=None, **kwargs):
        out = super()._reset(tensordict)
        out["observation"] = out["observation"].double()
        return out

    def _step(self, tensordict):
        self.seen_action_dtype = tensordict["action"].dtype
        out = super()._step(tensordict)
        out["observation"] = out["observation"].double()
        out["reward"] = out["reward"].float()
        return out


@pytest.fixture
def pendulum():
    env = GymEnv("Pendulum-v1")
    yield env
    env.close()


def test_double_to_float_outputs_and_inputs():
    base = DoubleEnv()
    env = TransformedEnv(base, DoubleToFloat(in_keys_inv=["action"]))
    assert env.observation_spec["observation"].dtype == torch.float32
    assert env.action_spec.dtype == torch.float32
    assert base.observation_spec["observation"].dtype == torch.float64
    check_env_specs(env)
    td = env.reset()
    assert td["observation"].dtype == torch.float32
    td["action"] = torch.zeros(1)
    env.step(td)
    assert base.seen_action_dtype == torch.float64
    assert td["action"].dtype == torch.float32


def test_double_to_float_all_keys_on_data():
    td = TensorDict(
        {"a": torch.zeros(1, dtype=torch.float64), "b": torch.zeros(1, dtype=torch.int64)}, []
    )
    out = DoubleToFloat()(td)
    assert out["a"].dtype == torch.float32 and out["b"].dtype == torch.int64


def test_double_to_float_without_keys_inverts_every_float_entry_of_data():
    # no keys and no env: the inverse casts every float32 entry back to float64
    td = TensorDict({"a": torch.zeros(1), "n": torch.zeros(1, dtype=torch.int64)}, [])
    back = DoubleToFloat().inv(td)
    assert back["a"].dtype == torch.float64 and back["n"].dtype == torch.int64
    assert td["a"].dtype == torch.float32  # the input is left as it was
    # in an env, the keys come from the specs: float32 inputs the env does not expect in
    # float64 are left alone
    env = TransformedEnv(CountingEnv(), DoubleToFloat())
    assert env.transform.in_keys_inv == []
    assert env.transform.inv(TensorDict({"action": torch.zeros(1)}, []))["action"].dtype == (
        torch.float32
    )


def test_double_to_float_observation_spec_hook():
    spec = Composite(
        a=Bounded(0.0, 1.0, (3,), dtype=torch.float64), b=Unbounded((2,), dtype=torch.float64)
    )
    keyed = DoubleToFloat(in_keys=["a"]).transform_observation_spec(spec.clone())
    assert keyed["a"].dtype == torch.float32 and keyed["b"].dtype == torch.float64
    every = DoubleToFloat().transform_observation_spec(spec.clone())
    assert every["a"].dtype == every["b"].dtype == torch.float32
    leaf = DoubleToFloat(in_keys=["a"]).transform_observation_spec(spec["a"].clone())
    assert leaf.dtype == torch.float32 and isinstance(leaf, Bounded)


def test_dtype_cast_on_gym(pendulum):
    env = TransformedEnv(
        pendulum,
        DTypeCastTransform(
            torch.float32, torch.float64, in_keys=["observation"], in_keys_inv=["action"]
        ),
    )
    assert env.observation_spec["observation"].dtype == torch.float64
    assert env.action_spec.dtype == torch.float64
    check_env_specs(env)
    td = env.rand_step(env.reset())
    assert td["next", "observation"].dtype == torch.float64
    assert td["action"].dtype == torch.float64


def test_dtype_cast_out_keys_partial_reset():
    env = TransformedEnv(
        CountingEnv(max_steps=100, batch_size=(2,)),
        DTypeCastTransform(torch.float32, torch.int64, in_keys=["observation"], out_keys=["obs_i"]),
    )
    check_env_specs(env)
    td = env.step_and_maybe_reset(env.rand_action(env.reset()))[1]
    td["_reset"] = torch.tensor([[False], [True]])
    td = env.reset(td)
    assert td["obs_i"].dtype == torch.int64 and td["obs_i"][:, 0].tolist() == [1, 0]


def test_dtype_cast_validation():
    with pytest.raises(TypeError, match="dtype_in"):
        DTypeCastTransform("float", torch.float32)


def test_device_cast_cpu_roundtrip(pendulum):
    env = TransformedEnv(pendulum, DeviceCastTransform("cpu"))
    assert env.device == torch.device("cpu")
    check_env_specs(env)
    assert env.rollout(3)["next", "observation"].device == torch.device("cpu")
    keyed = TransformedEnv(
        GymEnv("Pendulum-v1"), DeviceCastTransform("cpu", in_keys=["observation"])
    )
    check_env_specs(keyed)
    data = DeviceCastTransform("cpu")(TensorDict({"a": torch.ones(1)}, []))
    assert data.device == torch.device("cpu")


def test_device_cast_some_entries_leaves_data_without_device():
    # "cpu:1" is a device of its own for tensordicts, which is enough to mix devices on a CPU
    partial = DeviceCastTransform(
        "cpu:1", "cpu:0", in_keys=["a"], out_keys=["b"], in_keys_inv=["c"], out_keys_inv=["d"]
    )
    td = TensorDict({"a": torch.zeros(()), "d": torch.zeros(())}, [], device="cpu:0")
    assert partial._call(td.clone()).device is None
    outside = TensorDict({"d": torch.zeros(())}, [], device="cpu:1")
    assert partial._inv_call(outside).device is None  # "c" went back to cpu:0
    # the inverse skips entries the data lack (a reset input carries no action)
    assert partial._inv_call(TensorDict({"a": torch.zeros(())}, [], device="cpu:0")).device == (
        torch.device("cpu:0")
    )
    env = TransformedEnv(
        CountingEnv(device="cpu:0"),
        DeviceCastTransform("cpu:1", in_keys=["observation"], in_keys_inv=["action"]),
    )
    assert env.device is None
    assert env.transform.orig_device == torch.device("cpu:0")
    check_env_specs(env)
    whole = TransformedEnv(CountingEnv(device="cpu:0"), DeviceCastTransform("cpu:1"))
    assert whole.device == torch.device("cpu:1")
    assert whole.reset().device == torch.device("cpu:1")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_cast_to_cuda(pendulum):
    env = TransformedEnv(pendulum, DeviceCastTransform("cuda:0"))
    assert env.device.type == "cuda"
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["next", "observation"].device.type == "cuda"


def test_pin_memory_transform(pendulum):
    env = TransformedEnv(pendulum, PinMemoryTransform())
    check_env_specs(env)
    td = env.rand_step(env.reset())
    if torch.cuda.is_available():
        assert td["next", "observation"].is_pinned()
    else:
        assert not td["next", "observation"].is_pinned()


def test_double_to_float_without_keys_casts_inputs_too():
    base = DoubleEnv()
    env = TransformedEnv(base, DoubleToFloat())
    assert env.action_spec.dtype == torch.float32
    assert env.observation_spec["observation"].dtype == torch.float32
    check_env_specs(env)
    td = env.reset()
    td["action"] = torch.zeros(1)
    env.step(td)
    assert base.seen_action_dtype == torch.float64
