"""JumanjiEnv / JumanjiWrapper against the real jumanji (JAX on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.data import MultiCategorical, OneHot
from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tdrl.envs.batched import _start
from tdrl.envs.libs import jumanji as jumanji_lib
from tdrl.envs.libs.jumanji import JumanjiEnv, JumanjiWrapper
from tests.envs.conformance import EnvConformance

jax = pytest.importorskip("jax")
jumanji = pytest.importorskip("jumanji")
# JAX compilation: slow, left out of `make test-min`
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.slow]


class TestJumanjiConformance(EnvConformance):
    def make_env(self):
        return JumanjiEnv("Snake-v1", batch_size=[2], jit=False)


@pytest.fixture(scope="module")
def snake():
    env = JumanjiEnv("Snake-v1", jit=True)
    yield env
    env.close()


def test_specs_follow_jumanji(snake):
    assert set(snake.observation_spec.keys()) == {"grid", "step_count", "action_mask", "state"}
    assert snake.observation_spec["grid"].shape == (12, 12, 5)
    assert snake.observation_spec["action_mask"].dtype == torch.bool
    assert snake.action_spec.n == 4 and snake.action_spec.dtype == torch.int32
    assert snake.reward_spec.shape == (1,)
    assert snake.observation_spec["state", "key"].dtype == torch.int64  # uint32 key, widened
    assert not snake.batch_locked


@pytest.mark.parametrize("batch_size", [(), (3,), (2, 2)])
def test_batch_sizes_and_seeding(snake, batch_size):
    env = JumanjiEnv("Snake-v1", batch_size=batch_size)
    env.set_seed(0)
    torch.manual_seed(0)
    first = env.rollout(5, break_when_any_done=False)
    env.set_seed(0)
    torch.manual_seed(0)
    second = env.rollout(5, break_when_any_done=False)
    assert first.batch_size == (*batch_size, 5)
    assert (first == second).all()
    env.set_seed(1)
    assert not torch.equal(env.reset()["grid"], first["grid"][..., 0, :, :, :])


def test_steps_match_jumanji_run_by_hand(snake):
    import jax.numpy as jnp

    snake.set_seed(7)
    data = snake.rollout(8, break_when_any_done=True, tensordict=TensorDict(batch_size=[3]))
    keys = jax.random.split(jax.random.PRNGKey(7), 4)[1:]
    state, timestep = jax.vmap(snake._env.reset)(keys)
    torch.testing.assert_close(
        data["grid"][:, 0], torch.tensor(np.asarray(timestep.observation.grid))
    )
    for t in range(data.shape[-1]):
        action = jnp.asarray(data["action"][:, t].numpy())
        state, timestep = jax.vmap(snake._env.step)(state, action)
        expected = torch.tensor(np.asarray(timestep.observation.grid))
        torch.testing.assert_close(data["next", "grid"][:, t], expected)
        reward = torch.tensor(np.asarray(timestep.reward)).unsqueeze(-1)
        torch.testing.assert_close(data["next", "reward"][:, t], reward)


def test_batch_unlocked_resets_any_batch_and_episodes_end(snake):
    snake.set_seed(0)
    start = snake.reset(TensorDict(batch_size=[6]))
    assert start.batch_size == (6,) and start["grid"].shape == (6, 12, 12, 5)
    data = snake.rollout(60, auto_reset=False, tensordict=start, break_when_any_done=False)
    assert data.batch_size == (6, 60)
    ended = data["next", "done"].squeeze(-1)
    assert ended.sum() >= 5  # random snakes crash quickly
    flags = data["next", "terminated"] | data["next", "truncated"]
    assert torch.equal(flags.squeeze(-1), ended)
    after = ended[:, :-1]  # the step after an episode's end starts a new one
    assert (data["next", "state", "step_count"][:, 1:][after] == 1).all()


@pytest.mark.slow
@pytest.mark.timeout(300)  # op-by-op JAX dispatch (jit=False) through two spec checks
def test_one_hot_and_multi_discrete_actions():
    one_hot = JumanjiEnv("Snake-v1", categorical_action_encoding=False, jit=False)
    assert isinstance(one_hot.action_spec, OneHot)
    check_env_specs(one_hot)
    multi = JumanjiEnv("Minesweeper-v0", jit=False)
    assert isinstance(multi.action_spec, MultiCategorical)
    check_env_specs(multi)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_batched_envs_and_a_collector(snake):
    def make():
        return JumanjiEnv("Minesweeper-v0", jit=False)

    check_env_specs(SerialEnv(2, make))
    # JAX's runtime threads do not survive a fork: the workers start from a fork server
    assert "JAX" in _start.fork_unsafe_reason()
    with ParallelEnv(2, make) as parallel:
        assert parallel.rollout(2, break_when_any_done=False).shape == (2, 2)
    collector = SyncDataCollector(
        JumanjiEnv("Snake-v1", batch_size=[2]), frames_per_batch=8, total_frames=16
    )
    batches = list(collector)
    collector.shutdown()
    assert [batch.shape for batch in batches] == [torch.Size([2, 4])] * 2


def test_wrapper_and_constructor_errors(monkeypatch):
    with pytest.raises(TypeError, match="expected a jumanji Environment"):
        JumanjiWrapper(object())
    with pytest.raises(ValueError, match="env_name: expected one of"):
        JumanjiEnv("NoSuchGame-v0")
    assert "Snake-v1" in JumanjiEnv.available_envs
    monkeypatch.setattr(jumanji_lib, "_HAS_JUMANJI", False)
    with pytest.raises(ImportError, match="pip install jumanji"):
        JumanjiEnv("Snake-v1")


def test_wrapper_of_a_built_env_equals_the_env(snake):
    wrapped = JumanjiWrapper(jumanji.make("Snake-v1"))
    rollouts = []
    for env in (wrapped, snake):
        env.set_seed(3)
        torch.manual_seed(0)
        rollouts.append(env.rollout(4))
    assert (rollouts[0] == rollouts[1]).all()
