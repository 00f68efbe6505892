"""AsyncEnvPool with both backends: sync API, async send/recv by env index, faults."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tensordict import LazyStackedTensorDict

from tdrl.envs.async_pool import AsyncEnvPool, ProcessorAsyncEnvPool, ThreadingAsyncEnvPool
from tdrl.envs.libs.gym import GymEnv
from tests.envs.batched._envs import FailingEnv, SizedEnv
from tests.mocks import CountingEnv

BACKENDS = ["threading", "multiprocessing"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_seeds_example_pendulum_and_cartpole(backend):
    env = AsyncEnvPool(
        [partial(GymEnv, "Pendulum-v1"), partial(GymEnv, "CartPole-v1")],
        stack="lazy",
        backend=backend,
    )
    assert isinstance(
        env, ThreadingAsyncEnvPool if backend == "threading" else ProcessorAsyncEnvPool
    )
    reset = env.reset()
    assert isinstance(reset, LazyStackedTensorDict)
    assert reset[0]["observation"].shape == (3,) and reset[1]["observation"].shape == (4,)
    s = env.rand_step(reset)
    assert s[1]["next", "observation"].shape == (4,)
    s0 = s[0]
    s0["action"] = torch.randn(1).clamp(-1, 1)
    s0["env_index"] = 0
    env.async_step_send(s0)
    result = env.async_step_recv()
    assert result["env_index"].tolist() == [0]
    assert result[0]["next", "observation"].shape == (3,)
    env.close()
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_sync_rollout_dense(backend):
    with AsyncEnvPool([CountingEnv] * 3, backend=backend) as env:
        assert env.batch_size == (3,)
        data = env.rollout(4)
        assert data.batch_size == (3, 4)
        assert data["next", "observation"][:, -1, 0].tolist() == [4.0, 4.0, 4.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_routing_by_env_index(backend):
    env = AsyncEnvPool([CountingEnv] * 3, backend=backend)
    env.async_reset_send()
    data = env.async_reset_recv(min_get=3)
    assert data["env_index"].tolist() == [0, 1, 2]
    rows = env.rand_action(data.exclude("env_index"))[torch.tensor([2, 0])]
    rows["env_index"] = torch.tensor([2, 0])
    env.async_step_send(rows)
    out = env.async_step_recv(min_get=2)
    assert sorted(out["env_index"].tolist()) == [0, 2]
    assert out["next", "observation"][:, 0].tolist() == [1.0, 1.0]
    # env 2 stepped twice, env 1 never
    again = out[1:].exclude("env_index")
    again["env_index"] = torch.tensor([2])
    env.async_step_send(again.set("observation", again["next", "observation"]))
    assert env.async_step_recv()["next", "observation"][0, 0].item() == 2.0
    counts = env.count
    assert [c.item() for c in counts] == [1.0, 0.0, 2.0]
    env.close()


def test_recv_without_send_raises():
    with AsyncEnvPool([CountingEnv] * 2) as env:
        with pytest.raises(RuntimeError, match="sent"):
            env.async_step_recv()


def test_busy_env_cannot_get_a_second_command():
    with AsyncEnvPool([CountingEnv] * 2) as env:
        td = env.reset()[0]
        td["action"] = torch.zeros(1)
        td["env_index"] = 1
        env.async_step_send(td)
        with pytest.raises(RuntimeError, match="still running"):
            env.async_step_send(td)
        assert env.async_step_recv()["env_index"].tolist() == [1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_errors_reach_the_caller(backend):
    env = AsyncEnvPool([partial(FailingEnv, 0), CountingEnv], backend=backend)
    with pytest.raises(ValueError, match="boom at step 1"):
        env.rand_step(env.reset())
    env.close()


def test_dense_stack_of_different_shapes_explains():
    env = AsyncEnvPool([partial(SizedEnv, 2), partial(SizedEnv, 3)], stack="dense")
    with pytest.raises(ValueError, match="stack='lazy'"):
        env.reset()
    env.close()
    env = AsyncEnvPool([partial(SizedEnv, 2), partial(SizedEnv, 3)], stack="maybe_dense")
    assert isinstance(env.reset(), LazyStackedTensorDict)
    env.close()


def test_attributes_and_seeding():
    with AsyncEnvPool([partial(GymEnv, "Pendulum-v1", g=9.81)] * 2) as env:
        assert env.g == [9.81, 9.81]
        assert env.set_seed(0) == env.set_seed(0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend"):
        AsyncEnvPool([CountingEnv], backend="carrier-pigeon")
    with pytest.raises(ValueError, match="stack"):
        AsyncEnvPool([CountingEnv], stack="tall")
