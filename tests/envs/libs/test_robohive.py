"""RoboHiveEnv against a small fake of RoboHive's documented API (RoboHive cannot install here).

The fake follows RoboHive 0.6: ``import robohive`` registers tasks in gym's registry; a task
is built with ``visual_keys`` (``"rgb:<camera>:<H>x<W>:2d"``, ``"d:<camera>:<H>x<W>:2d"``),
uses gym's four-value ``step`` and returns its images from ``get_exteroception()``.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tdrl.envs.libs import robohive as robohive_lib
from tdrl.envs.libs.robohive import RoboHiveEnv
from tests.envs.conformance import EnvConformance

gym = pytest.importorskip("gym")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


class _Model:
    ncam = 2

    def id2name(self, index, kind):
        assert kind == "camera"
        return ["left", "top"][index]


class FakeReachTask(gym.Env):
    """Reach a target: 6 observations, 3 actions, 4 steps per episode."""

    def __init__(self, visual_keys=()):
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (6,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.visual_keys = list(visual_keys)
        self.sim = types.SimpleNamespace(model=_Model())
        self.rng = np.random.default_rng(0)
        self.t = 0

    def seed(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self, **kwargs):
        self.t = 0
        return self.rng.uniform(-1, 1, 6).astype(np.float32)

    def step(self, action):
        self.t += 1
        observation = self.rng.uniform(-1, 1, 6).astype(np.float32)
        return observation, float(-np.abs(action).sum()), self.t >= 4, {}

    def get_exteroception(self):
        images = {}
        for key in self.visual_keys:
            kind, camera, size, _ = key.split(":")
            height, width = map(int, size.split("x"))
            value = 10 * self.t + (camera == "top")
            if kind == "rgb":
                images[key] = np.full((height, width, 3), value, np.uint8)
            else:
                images[key] = np.full((height, width, 1), value / 10, np.float32)
        return images


@pytest.fixture(autouse=True)
def fake_robohive(monkeypatch):
    package = types.ModuleType("robohive")
    package.__path__ = []
    tasks = types.ModuleType("robohive.fake_tasks")
    tasks.FakeReachTask = FakeReachTask
    monkeypatch.setitem(sys.modules, "robohive", package)
    monkeypatch.setitem(sys.modules, "robohive.fake_tasks", tasks)
    if "FakeReach-v0" not in gym.envs.registration.registry:
        gym.register(
            "FakeReach-v0",
            entry_point="robohive.fake_tasks:FakeReachTask",
            disable_env_checker=True,
        )
    monkeypatch.setattr(robohive_lib, "_HAS_ROBOHIVE", True)


class TestRoboHiveConformance(EnvConformance):
    def make_env(self):
        return RoboHiveEnv("FakeReach-v0")


class TestRoboHiveImagesConformance(EnvConformance):
    def make_env(self):
        return RoboHiveEnv("FakeReach-v0", from_pixels=True, from_depths=True, image_size=(4, 5))


def test_state_observations():
    env = RoboHiveEnv("FakeReach-v0")
    assert list(env.observation_spec.keys()) == ["observation"]
    data = env.rollout(10)
    assert data.shape == (4,) and data["next", "terminated"][-1].item()


def test_images_of_every_camera():
    assert RoboHiveEnv.get_available_cams("FakeReach-v0") == ["left", "top"]
    env = RoboHiveEnv("FakeReach-v0", from_pixels=True, from_depths=True, image_size=(4, 5))
    assert env._env.unwrapped.visual_keys == [
        "rgb:left:4x5:2d",
        "rgb:top:4x5:2d",
        "d:left:4x5:2d",
        "d:top:4x5:2d",
    ]
    data = env.rollout(2)
    assert data["next", "pixels"].shape == (2, 2, 4, 5, 3)
    assert data["next", "pixels"][:, :, 0, 0, 0].tolist() == [[10, 11], [20, 21]]
    assert data["next", "depths"].dtype == torch.float32
    only = RoboHiveEnv(
        "FakeReach-v0", from_pixels=True, pixels_only=True, cameras=["top"], image_size=(4, 5)
    )
    assert list(only.observation_spec.keys()) == ["pixels"]
    assert only.observation_spec["pixels"].shape == (1, 4, 5, 3)


def test_seeding_and_errors(monkeypatch):
    env = RoboHiveEnv("FakeReach-v0")
    env.set_seed(2)
    first = env.reset()["observation"]
    env.set_seed(2)
    assert torch.equal(first, env.reset()["observation"])
    assert "FakeReach-v0" in RoboHiveEnv.available_envs
    with pytest.raises(ValueError, match="env_name: expected one of"):
        RoboHiveEnv("CartPole-v1")
    monkeypatch.setattr(robohive_lib, "_HAS_ROBOHIVE", False)
    with pytest.raises(ImportError, match="pip install robohive"):
        RoboHiveEnv("FakeReach-v0")


def test_batched_envs_and_a_collector():
    def make():
        return RoboHiveEnv("FakeReach-v0", from_pixels=True, image_size=(4, 5))

    check_env_specs(SerialEnv(2, make))
    # forked workers inherit the fake backend (a fork server's would not see it)
    with ParallelEnv(2, make, mp_start_method="fork") as env:
        assert env.rollout(3).shape == (2, 3)
    collector = SyncDataCollector(make(), frames_per_batch=4, total_frames=8)
    assert [batch.numel() for batch in collector] == [4, 4]
    collector.shutdown()
