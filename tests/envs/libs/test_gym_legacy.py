"""The wrappers over gym 0.26 (the pre-gymnasium package), when it is installed."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import SerialEnv, check_env_specs
from tdrl.envs.libs.gym import GymEnv, GymWrapper, gym_backend, set_gym_backend
from tests.envs.conformance import EnvConformance
from tests.envs.libs.test_gym_plan import assert_same_rollout, rollout_both_paths

gym = pytest.importorskip("gym")


def _make(env_id: str, **kwargs):
    with set_gym_backend(gym):
        return GymEnv(env_id, **kwargs)


class TestLegacyCartPoleConformance(EnvConformance):
    def make_env(self):
        return _make("CartPole-v1")


# gym 0.26's own Acrobot uses numpy aliases removed in numpy 2 (np.float_), so it is left out
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCar-v0"])
def test_classic_envs_under_gym(env_id):
    env = _make(env_id)
    assert type(env._env).__module__.startswith("gym.")
    check_env_specs(env)
    env.set_seed(0)
    torch.manual_seed(0)
    first = env.rollout(30, break_when_any_done=False)
    env.set_seed(0)
    torch.manual_seed(0)
    again = env.rollout(30, break_when_any_done=False)
    assert (first == again).all()


def test_backend_switch_is_scoped():
    with set_gym_backend(gym):
        assert gym_backend() is gym
    assert gym_backend().__name__ == "gymnasium"


def test_columnar_rollout_and_generic_loop_agree_under_gym():
    env = _make("CartPole-v1")
    assert_same_rollout(*rollout_both_paths(env, 100, break_when_any_done=False))


def test_wrapper_of_a_gym_env_and_pixels():
    # under numpy 2, gym 0.26's env checker fails (np.bool8): a user-built env turns it off
    raw = gym.make("Pendulum-v1", disable_env_checker=True)
    with set_gym_backend(gym):
        wrapped = GymWrapper(raw)
    check_env_specs(wrapped)
    # (gym 0.26's Pendulum renderer passes arrays where pygame-ce wants numbers: CartPole here)
    env = _make("CartPole-v1", from_pixels=True, pixels_only=False)
    data = env.rollout(3)
    assert data["next", "pixels"].dtype == torch.uint8
    assert data["next", "pixels"].shape[-1] == 3


def test_vector_env_under_gym():
    env = _make("CartPole-v1", num_envs=2, vectorization_mode="sync")
    assert env.batch_size == (2,)
    data = env.rollout(40, break_when_any_done=False)
    assert data.batch_size == (2, 40)
    check_env_specs(env)


def test_batched_gym_sub_envs():
    env = SerialEnv(2, lambda: _make("CartPole-v1"))
    env.set_seed(0)
    data = env.rollout(20, break_when_any_done=False)
    assert data.batch_size == (2, 20)
    env.close()
