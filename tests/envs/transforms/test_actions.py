"""ActionMask."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Categorical, Composite, OneHot, Unbounded
from tdrl.envs import (
    ActionMask,
    EnvBase,
    GymEnv,
    GymWrapper,
    TicTacToeEnv,
    TransformedEnv,
    check_env_specs,
)


class MaskedCountingEnv(EnvBase):
    """A batched env whose legal actions rotate: element ``b`` may only pick ``(t + b) % n``."""

    def __init__(self, n=4, batch_size=(2,), one_hot=False, rotate=True):
        super().__init__(batch_size=batch_size)
        self.n = n
        self.rotate = rotate
        batch = self.batch_size
        self.observation_spec = Composite(
            observation=Unbounded((*batch, 1)),
            action_mask=Categorical(2, (*batch, n), dtype=torch.bool),
            shape=batch,
        )
        if one_hot:
            self.action_spec = OneHot(n, (*batch, n))
        else:
            self.action_spec = Categorical(n, (*batch,))
        self.reward_spec = Unbounded((*batch, 1))
        self.one_hot = one_hot
        self.t = 0
        self.illegal = 0

    def _mask(self):
        index = (torch.arange(self.batch_size[0]) + (self.t if self.rotate else 0)) % self.n
        return torch.nn.functional.one_hot(index, self.n).bool()

    def _data(self):
        return {
            "observation": torch.full((*self.batch_size, 1), float(self.t)),
            "action_mask": self._mask(),
            "done": torch.zeros((*self.batch_size, 1), dtype=torch.bool),
        }

    def _reset(self, tensordict=None, **kwargs):
        self.t = 0
        return TensorDict(self._data(), batch_size=self.batch_size)

    def _step(self, tensordict):
        action = tensordict["action"]
        if self.one_hot:
            action = action.long().argmax(-1)
        legal = self._mask().gather(-1, action.long().reshape(-1, 1)).squeeze(-1)
        self.illegal += int((~legal).sum())
        self.t += 1
        data = self._data()
        data["reward"] = legal.float().unsqueeze(-1)
        return TensorDict(data, batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


@pytest.mark.parametrize("one_hot", [False, True])
def test_action_mask_random_actions_are_legal(one_hot):
    check_env_specs(TransformedEnv(MaskedCountingEnv(one_hot=one_hot, rotate=False), ActionMask()))
    base = MaskedCountingEnv(one_hot=one_hot)
    env = TransformedEnv(base, ActionMask())
    env.rollout(20)
    assert base.illegal == 0
    td = env.reset()
    for _ in range(10):
        td.set("action", env.action_spec.rand())
        td = env.step_and_maybe_reset(td)[1]
    assert base.illegal == 0
    unmasked = MaskedCountingEnv(one_hot=one_hot)
    unmasked.rollout(50)
    assert unmasked.illegal > 0


def test_action_mask_on_tictactoe():
    env = TransformedEnv(TicTacToeEnv(), ActionMask())
    rollout = env.rollout(9)
    cells = rollout["action"].reshape(-1).tolist()
    assert len(set(cells)) == len(cells)


def test_action_mask_follows_partial_state():
    base = MaskedCountingEnv(batch_size=(3,))
    env = TransformedEnv(base, ActionMask())
    env.reset()
    assert env.action_spec.mask.shape == (3, 4)
    assert env.action_spec.mask.sum(-1).tolist() == [1, 1, 1]
    assert base.action_spec.mask is None


def test_action_mask_errors():
    with pytest.raises(TypeError, match="action_key"):
        ActionMask(action_key=3)
    pendulum = TransformedEnv(GymEnv("Pendulum-v1"), ActionMask())
    with pytest.raises(ValueError, match="The action spec must be one of .* got Bounded"):
        pendulum.reset()
    with pytest.raises(RuntimeError, match="not implemented"):
        ActionMask()(TensorDict({}, []))
    with pytest.raises(RuntimeError, match="parent cannot be None"):
        ActionMask()._call(TensorDict({}, []))
    cartpole = TransformedEnv(GymEnv("CartPole-v1"), ActionMask())
    with pytest.raises(KeyError, match="action_mask"):
        cartpole.reset()


class JointMaskGymEnv(gym.Env):
    """A MultiDiscrete([3, 4]) gymnasium env whose mask allows two action combinations."""

    def __init__(self):
        self.action_space = gym.spaces.MultiDiscrete([3, 4])
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(0, 1, (2,)),
                "action_mask": gym.spaces.Box(0, 1, (3, 4), dtype=bool),
            }
        )
        self.seen = []

    def _obs(self):
        mask = np.zeros((3, 4), dtype=bool)
        mask[1, 2] = mask[2, 0] = True
        return {"observation": np.zeros(2, dtype=np.float32), "action_mask": mask}

    def reset(self, seed=None, options=None):
        return self._obs(), {}

    def step(self, action):
        self.seen.append(tuple(int(a) for a in action))
        return self._obs(), 0.0, False, False, {}


@pytest.mark.parametrize("categorical", [True, False])
def test_action_mask_joint_mask_over_multi_discrete_actions(categorical):
    raw = JointMaskGymEnv()
    env = TransformedEnv(GymWrapper(raw, categorical_action_encoding=categorical), ActionMask())
    # one choice among the 12 combinations, so that the (3, 4) mask applies
    expected = Categorical(12, ()) if categorical else OneHot(12, (12,))
    assert type(env.action_spec) is type(expected) and env.action_spec.shape == expected.shape
    check_env_specs(env)
    env.rollout(30)
    assert set(raw.seen) == {(1, 2), (2, 0)}
