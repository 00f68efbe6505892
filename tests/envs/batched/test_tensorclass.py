"""Batched envs whose sub-envs observe tensorclasses give the tensorclasses back."""

import pytest

from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tests.envs.batched._envs import Reading, TensorclassEnv


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
