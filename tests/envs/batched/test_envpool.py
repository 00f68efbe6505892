"""MultiThreadedEnvWrapper on a fake EnvPool env; MultiThreadedEnv when envpool is installed."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.envs import SerialEnv, check_env_specs
from tdrl.envs.libs.envpool import MultiThreadedEnv, MultiThreadedEnvWrapper
from tests.envs.conformance import EnvConformance

# EnvPool's classic-control spaces declare float64 bounds on float32 boxes
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered by casting:UserWarning")


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


# --------------------------------------------------------------------------- the real EnvPool
@pytest.fixture
def envpool():
    return pytest.importorskip("envpool")


class TestMultiThreadedConformance(EnvConformance):
    def make_env(self):
        pytest.importorskip("envpool")
        return MultiThreadedEnv(3, "CartPole-v1")


class TestMultiThreadedDMConformance(EnvConformance):
    def make_env(self):
        pytest.importorskip("envpool")
        return MultiThreadedEnv(2, "CheetahRun-v1")


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "CheetahRun-v1"])
def test_real_pools_pass_check_env_specs(envpool, name):
    env = MultiThreadedEnv(3, name)
    check_env_specs(env)
    data = env.rollout(10, break_when_any_done=False)
    assert data.shape == (3, 10)
    env.close()


def test_dm_tasks_have_unbounded_observations(envpool):
    # EnvPool declares these with the smallest positive float as lower bound
    env = MultiThreadedEnv(2, "CheetahRun-v1")
    assert env.observation_spec["velocity"].dtype == torch.float64
    assert (env.rollout(5)["next", "velocity"] < 0).any()
    env.close()


def test_seeds_rebuild_the_pool(envpool):
    env = MultiThreadedEnv(4, "Pendulum-v1")
    action = env.action_spec.rand()
    outs = []
    for seed in (100, 100, 110):
        env.set_seed(seed)
        start = env.reset()
        outs.append(
            (start["observation"], env.step(start.set("action", action))["next", "observation"])
        )
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert not torch.equal(outs[0][0], outs[2][0])
    env.close()


def test_real_partial_reset_and_step(envpool):
    env = MultiThreadedEnv(3, "CartPole-v1", categorical_action_encoding=True)
    env.set_seed(0)
    data = env.rand_step(env.reset())["next"].clone()
    before = data["observation"].clone()
    data.set("_reset", torch.tensor([[False], [True], [False]]))
    out = env.reset(data)
    assert torch.equal(out["observation"][[0, 2]], before[[0, 2]])
    assert not torch.equal(out["observation"][1], before[1])
    env.close()


def test_wrong_batch_size_is_refused(envpool):
    env = MultiThreadedEnv(3, "CartPole-v1")
    with pytest.raises(ValueError, match=r"got batch size \(2,\) where env.batch_size=\(3,\)"):
        env.step(TensorDict({"action": env.action_spec.rand()[:2]}, batch_size=[2]))
    env.close()


def test_closed_pool_is_rebuilt_by_reset(envpool):
    env = MultiThreadedEnv(2, "Pendulum-v1")
    env.rand_step(env.reset())
    env.close()
    assert env.is_closed
    assert env.reset()["observation"].shape == (2, 3)
    assert not env.is_closed
    env.close()
    wrapper = MultiThreadedEnvWrapper(envpool.make("CartPole-v1", env_type="gym", num_envs=2))
    wrapper.close()
    with pytest.raises(RuntimeError, match="cannot be rebuilt"):
        wrapper.reset()
    with pytest.warns(UserWarning, match="seeded when it is built"):
        MultiThreadedEnvWrapper(FakePool()).set_seed(0)


def test_in_a_serial_env_and_a_collector(envpool):
    env = SerialEnv(2, lambda: MultiThreadedEnv(2, "CartPole-v1"))
    check_env_specs(env)
    assert env.rollout(3, break_when_any_done=False).shape == (2, 2, 3)
    collector = SyncDataCollector(
        MultiThreadedEnv(2, "Pendulum-v1"), frames_per_batch=8, total_frames=16
    )
    assert [batch.shape for batch in collector] == [torch.Size([2, 4])] * 2
    collector.shutdown()
