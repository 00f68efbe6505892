"""MOGymEnv / MOGymWrapper against the real mo-gymnasium (vector rewards, pixels, vector envs)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.envs import GymEnv, ParallelEnv, SerialEnv, TransformedEnv, check_env_specs
from tdrl.envs.libs import mo_gym
from tdrl.envs.libs.mo_gym import MOGymEnv, MOGymWrapper
from tests.envs.conformance import EnvConformance

mo_gymnasium = pytest.importorskip("mo_gymnasium")
# mo-gymnasium's own envs declare float64 bounds on float32 boxes
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered by casting:UserWarning")


class TestMOGymConformance(EnvConformance):
    def make_env(self):
        return MOGymEnv("minecart-v0")


class TestMOGymVectorConformance(EnvConformance):
    def make_env(self):
        return MOGymEnv("mo-mountaincarcontinuous-v0", num_envs=2)


@pytest.mark.parametrize("num_envs", [0, 1, 3])
def test_reward_has_one_entry_per_objective(num_envs):
    env = MOGymEnv("mo-mountaincarcontinuous-v0", num_envs=num_envs)
    expected = (num_envs, 2) if num_envs else (2,)
    assert env.reward_spec.shape == expected and env.reward_spec.dtype == torch.float32
    assert isinstance(env, TransformedEnv) == bool(num_envs)
    data = env.rand_step(env.reset())
    assert data["next", "reward"].shape == expected
    env.close()


def test_rewards_are_the_simulator_vectors():
    env = MOGymEnv("minecart-v0", categorical_action_encoding=True)
    env.set_seed(3)
    data = env.rollout(15, break_when_any_done=False)
    raw = mo_gymnasium.make("minecart-v0")
    observation, _ = raw.reset(seed=3)
    torch.testing.assert_close(data["observation"][0], torch.from_numpy(observation))
    for action, reward in zip(data["action"], data["next", "reward"]):
        _, expected, *_ = raw.step(int(action))
        torch.testing.assert_close(reward, torch.from_numpy(np.asarray(expected, np.float32)))


def test_frame_skip_sums_reward_vectors():
    env = MOGymEnv("mo-mountaincarcontinuous-v0", frame_skip=4)
    env.set_seed(0)
    data = env.rollout(3)
    raw = mo_gymnasium.make("mo-mountaincarcontinuous-v0")
    raw.reset(seed=0)
    for action, reward in zip(data["action"], data["next", "reward"]):
        total = sum(raw.step(action.numpy())[1] for _ in range(4))
        torch.testing.assert_close(reward, torch.from_numpy(total.astype(np.float32)))


def test_pixel_rollout_renders_frames():
    env = MOGymEnv("minecart-v0", from_pixels=True, pixels_only=False)
    check_env_specs(env)
    data = env.rollout(3)
    assert data["next", "pixels"].shape == (3, 480, 480, 3)
    assert data["next", "pixels"].dtype == torch.uint8
    assert data["next", "pixels"].float().std() > 0
    assert "observation" in data.keys()


def test_gymnasium_rendering_still_works_next_to_mo_gymnasium():
    # installing mo-gymnasium brings pygame next to pygame-ce: classic-control frames still render
    env = GymEnv("CartPole-v1", from_pixels=True)
    frames = env.rollout(2)["next", "pixels"]
    assert frames.shape[-1] == 3 and frames.float().std() > 0


def test_batched_envs_and_a_collector():
    def make():
        return MOGymEnv("minecart-v0")

    serial = SerialEnv(2, make)
    check_env_specs(serial)
    assert serial.rollout(3)["next", "reward"].shape == (2, 3, 3)
    with ParallelEnv(2, make) as parallel:
        check_env_specs(parallel)
    collector = SyncDataCollector(make(), frames_per_batch=5, total_frames=10)
    batches = list(collector)
    collector.shutdown()
    assert [tuple(batch["next", "reward"].shape) for batch in batches] == [(5, 3), (5, 3)]


def test_wrapper_rejects_single_objective_envs():
    with pytest.raises(TypeError, match="reward_space"):
        MOGymWrapper(gymnasium.make("CartPole-v1"))


def test_missing_backend_names_the_package(monkeypatch):
    monkeypatch.setattr(mo_gym, "_HAS_MO_GYM", False)
    with pytest.raises(ImportError, match="pip install mo-gymnasium"):
        MOGymEnv("minecart-v0")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"env_name": 3}, TypeError), ({"env_name": "x", "num_envs": -1}, ValueError)],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        MOGymEnv(**kwargs)
