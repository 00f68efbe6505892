"""Batched envs whose sub-envs observe tensorclasses give the tensorclasses back."""

import pytest

from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tests.envs.batched._envs import Gauge, GaugeEnv, Reading, TensorclassEnv


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
@pytest.mark.parametrize("use_buffers", [True, False])
def test_tensorclass_observations_keep_their_class(cls, use_buffers):
    with cls(2, TensorclassEnv, use_buffers=use_buffers) as env:
        check_env_specs(env)
        data = env.reset()
        assert isinstance(data["reading"], Reading)
        for step in range(1, 3):
            data = env.rand_step(data)
            reading = data["next", "reading"]
            assert isinstance(reading, Reading)
            assert reading.label == [str(step)] * 2
            assert reading.value.tolist() == [float(step)] * 2
            data = env.step_mdp(data)
            assert isinstance(data["reading"], Reading)


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_tensor_only_tensorclass_kept_through_step_and_maybe_reset(cls):
    # a tensorclass of tensors only travels through the buffers with nothing else to report:
    # the fused step-and-reset must give the class back too, across resets
    with cls(2, GaugeEnv, create_env_kwargs={"max_steps": 2}) as env:
        data = env.reset()
        data.set("action", env.action_spec.zero())
        for step in range(1, 5):
            data, data_ = env.step_and_maybe_reset(data)
            gauge = data["next", "gauge"]
            assert isinstance(gauge, Gauge)
            assert gauge.level.tolist() == [float((step - 1) % 2 + 1)] * 2
            assert isinstance(data_["gauge"], Gauge)
            assert data_["gauge"].level.tolist() == [float(step % 2)] * 2
            data = data_.set("action", env.action_spec.zero())
