"""MultiThreadedEnvWrapper on a fake EnvPool env; MultiThreadedEnv when envpool is installed."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from tdrl.envs.libs.envpool import MultiThreadedEnv, MultiThreadedEnvWrapper


class FakePool:
    """The members of an EnvPool env that the wrapper uses; obs = per-env step count."""

    observation_space = gymnasium.spaces.Box(-10.0, 10.0, (2,))
    action_space = gymnasium.spaces.Discrete(2)
    num_envs = 3

    def __init__(self):
        self.counts = np.zeros(3, np.float32)

    def _obs(self, ids):
        return np.repeat(self.counts[ids][:, None], 2, 1)

    def reset(self, env_id=None):
        ids = np.arange(3) if env_id is None else np.asarray(env_id)
        self.counts[ids] = 0
        return self._obs(ids), {}

    def step(self, action, env_id=None):
        ids = np.arange(3) if env_id is None else np.asarray(env_id)
        self.counts[ids] += 1
        n = len(ids)
        done = self.counts[ids] >= 3
        return self._obs(ids), np.ones(n), done, np.zeros(n, bool), {}


def test_wrapper_rollout_and_specs():
    env = MultiThreadedEnvWrapper(FakePool(), categorical_action_encoding=True)
    assert env.batch_size == (3,)
    data = env.rollout(5)
    assert data.batch_size == (3, 3)
    assert data["next", "terminated"][:, -1].all()


def test_wrapper_partial_reset_and_step():
    pool = FakePool()
    env = MultiThreadedEnvWrapper(pool, categorical_action_encoding=True)
    data = env.rand_step(env.reset())["next"].clone()
    data = env.rand_action(data)
    data.set("_step", torch.tensor([True, False, True]))
    out = env.step(data)
    assert out["next", "observation"][:, 0].tolist() == [2.0, 1.0, 2.0]
    nxt = out["next"].clone()
    nxt.set("_reset", torch.tensor([[False], [True], [False]]))
    out = env.reset(nxt)
    assert out["observation"][:, 0].tolist() == [2.0, 0.0, 2.0]
    assert pool.counts.tolist() == [2.0, 0.0, 2.0]


def test_wrapper_needs_an_env():
    with pytest.raises(TypeError, match="EnvPool env"):
        MultiThreadedEnvWrapper()


def test_multithreaded_env_with_envpool():
    pytest.importorskip("envpool")
    env = MultiThreadedEnv(2, "CartPole-v1")
    assert env.rollout(3).batch_size[0] == 2
    env.close()
