"""EnvBase.register_gym: tdrl envs made with gymnasium.make, behind the gym API."""

import gymnasium
import numpy as np
import pytest
import torch

from tdrl.data import Composite, OneHot, Unbounded
from tdrl.envs import StepCounter
from tests.mocks import CountingEnv


class _GroupedEnv(CountingEnv):
    """A counting env with an extra nested observation group and a required argument."""

    def __init__(self, scale, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale
        self.observation_spec = Composite(
            observation=Unbounded((4,)), extra=Composite(value=Unbounded((2,)))
        )

    def _reset(self, tensordict=None, **kwargs):
        return super()._reset(tensordict).set(("extra", "value"), torch.zeros(2))

    def _step(self, tensordict):
        out = super()._step(tensordict)
        return out.set(("extra", "value"), torch.full((2,), float(self.scale)))


def test_registered_env_speaks_the_gym_api():
    _GroupedEnv.register_gym("TdrlGrouped-v0", scale=3, to_numpy=True, max_steps=4)
    env = gymnasium.make("TdrlGrouped-v0")
    assert isinstance(env.unwrapped, gymnasium.Env)
    observation, info = env.reset(seed=0)
    assert set(observation) == {"observation", "extra"} and info == {}
    assert isinstance(observation["observation"], np.ndarray)
    assert env.observation_space.contains(observation)
    for step in range(4):
        observation, reward, terminated, truncated, info = env.step(np.full(1, 0.5, np.float32))
        assert reward == pytest.approx(0.5) and not truncated
        assert observation["observation"][0] == step + 1
        assert observation["extra"]["value"].tolist() == [3.0, 3.0]
    assert terminated  # CountingEnv(max_steps=4) is done after 4 steps


def test_make_arguments_info_keys_tensors_and_transforms():
    _GroupedEnv.register_gym("TdrlGroupedInfo-v0")
    env = gymnasium.make("TdrlGroupedInfo-v0", scale=2, info_keys=("extra",), to_numpy=False)
    observation, info = env.reset()
    assert set(observation) == {"observation"} and set(info) == {"extra"}
    observation, *_, info = env.step(np.zeros(1, np.float32))
    assert isinstance(observation["observation"], torch.Tensor)
    assert info["extra"]["value"].tolist() == [2.0, 2.0]
    counted = gymnasium.make("TdrlGroupedInfo-v0", scale=1, transform=StepCounter())
    observation, _ = counted.reset()
    observation, *_ = counted.step(np.zeros(1, np.float32))
    assert observation["step_count"].item() == 1
    with pytest.raises(TypeError, match="scale"):
        gymnasium.make("TdrlGroupedInfo-v0")  # the constructor argument is required


def test_discrete_actions_of_a_one_hot_spec():
    class OneHotEnv(CountingEnv):
        def __init__(self):
            super().__init__(max_steps=10)
            self.action_spec = OneHot(3)

        def _step(self, tensordict):
            action = tensordict["action"]
            tensordict = tensordict.set("action", action.long().argmax(-1, keepdim=True).float())
            return super()._step(tensordict)

    OneHotEnv.register_gym("TdrlOneHot-v0")
    env = gymnasium.make("TdrlOneHot-v0")
    assert env.action_space == gymnasium.spaces.Discrete(3)
    env.reset()
    _, reward, *_ = env.step(2)
    assert reward == 2.0
    with pytest.raises(RuntimeError, match="call reset"):
        gymnasium.make("TdrlOneHot-v0").unwrapped.step(1)
