"""BraxEnv / BraxWrapper against the real brax (JAX on the CPU), gradients included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tdrl.envs.libs import brax as brax_lib
from tdrl.envs.libs.brax import BraxEnv, BraxWrapper
from tests.envs.conformance import EnvConformance

jax = pytest.importorskip("jax")
envs = pytest.importorskip("brax.envs")
# JAX compilation: slow, left out of `make test-min`
pytestmark = pytest.mark.slow
jnp = jax.numpy


class TestBraxConformance(EnvConformance):
    def make_env(self):
        return BraxEnv("fast", batch_size=[2])


class _Glide(envs.Env):
    """A differentiable brax env: the position moves by the action; reward = -position**2."""

    def reset(self, rng):
        position = jax.random.uniform(rng, (2,))
        pipeline = {"position": position}
        return envs.State(pipeline, position, jnp.zeros(()), jnp.zeros(()), {}, {})

    def step(self, state, action):
        position = state.pipeline_state["position"] + 0.5 * action
        reward = -(position**2).sum()
        return state.replace(pipeline_state={"position": position}, obs=position, reward=reward)

    @property
    def observation_size(self):
        return 2

    @property
    def action_size(self):
        return 2

    @property
    def backend(self):
        return "none"


def test_specs_and_state_entries():
    env = BraxEnv("fast")
    assert env.observation_spec["observation"].shape == (2,)
    assert env.action_spec.shape == (1,) and env.action_spec.space.high.item() == 1.0
    assert ("state", "pipeline_state", "x", "pos") in env.observation_spec.keys(True, True)
    assert "state" in env.state_spec.keys()
    assert not env.batch_locked


@pytest.mark.parametrize("batch_size", [(), (3,), (2, 2)])
def test_batch_sizes_and_seeding(batch_size):
    env = BraxEnv("fast", batch_size=batch_size)
    runs = []
    for _ in range(2):
        env.set_seed(0)
        torch.manual_seed(0)
        runs.append(env.rollout(4))
    assert runs[0].batch_size == (*batch_size, 4)
    assert (runs[0] == runs[1]).all()


def test_steps_match_brax_run_by_hand():
    env = BraxEnv("fast", batch_size=[3])
    env.set_seed(1)
    data = env.rollout(5)
    keys = jax.random.split(jax.random.PRNGKey(1), 4)[1:]
    state = jax.vmap(env._env.reset)(keys)
    for t in range(5):
        state = jax.vmap(env._env.step)(state, jnp.asarray(data["action"][:, t].numpy()))
        torch.testing.assert_close(
            data["next", "observation"][:, t], torch.tensor(np.asarray(state.obs))
        )
        torch.testing.assert_close(
            data["next", "reward"][:, t], torch.tensor(np.asarray(state.reward)).unsqueeze(-1)
        )


def test_gradients_flow_to_actions_and_initial_states():
    env = BraxWrapper(_Glide(), batch_size=[3], requires_grad=True)
    env.set_seed(0)
    start = env.reset()
    position0 = start["state", "pipeline_state", "position"].clone().requires_grad_(True)
    start["state", "pipeline_state", "position"] = position0
    action = torch.full((3, 2), 0.2, requires_grad=True)
    out = env.step(start.set("action", action))
    out["next", "reward"].sum().backward()
    expected = position0.detach() + 0.5 * action.detach()
    torch.testing.assert_close(action.grad, -expected)  # d(-sum(p**2))/da = -2p * 0.5
    torch.testing.assert_close(position0.grad, -2 * expected)
    # through two steps: the second step's observation depends on the first action
    action = torch.zeros((3, 2), requires_grad=True)
    first = env.step(env.reset().set("action", action))
    second = env.step(first["next"].set("action", torch.ones(3, 2)))
    second["next", "observation"].sum().backward()
    torch.testing.assert_close(action.grad, torch.full((3, 2), 0.5))


def test_without_requires_grad_nothing_is_tracked():
    env = BraxWrapper(_Glide(), batch_size=[2])
    action = torch.zeros((2, 2), requires_grad=True)
    out = env.step(env.reset().set("action", action))
    assert not out["next", "reward"].requires_grad


def test_dict_observations_get_one_entry_each():
    env = BraxEnv("fast", obs_mode="dict_pixels_state")
    keys = set(env.observation_spec["observation"].keys())
    assert keys == {"state", "pixels/view_0", "pixels/view_1"}
    check_env_specs(env)


def test_batch_unlocked_reset():
    env = BraxEnv("fast")
    data = env.reset(TensorDict(batch_size=[5]))
    assert data["observation"].shape == (5, 2)
    assert env.rand_step(data)["next", "reward"].shape == (5, 1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_batched_envs_num_workers_and_a_collector():
    def make():
        return BraxEnv("fast", batch_size=[2])

    check_env_specs(SerialEnv(2, make))
    with ParallelEnv(2, make) as parallel:
        assert parallel.rollout(3).shape == (2, 2, 3)
    env = BraxEnv("fast", num_workers=2)
    try:
        assert isinstance(env, ParallelEnv) and env.reset().batch_size == (2,)
    finally:
        env.close()
    collector = SyncDataCollector(make(), frames_per_batch=6, total_frames=12)
    batches = list(collector)
    collector.shutdown()
    assert [batch.shape for batch in batches] == [torch.Size([2, 3])] * 2


def test_errors(monkeypatch):
    with pytest.raises(TypeError, match="expected a brax Env"):
        BraxWrapper(object())
    with pytest.raises(ValueError, match="env_name: expected one of"):
        BraxEnv("no_such_env")
    assert "ant" in BraxEnv.available_envs
    monkeypatch.setattr(brax_lib, "_HAS_BRAX", False)
    with pytest.raises(ImportError, match="pip install brax"):
        BraxEnv("fast")
