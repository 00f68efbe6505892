"""HabitatEnv against a small fake of habitat-lab's gym registration (habitat cannot install here).

The fake follows habitat-lab 0.3's documented behaviour: ``import habitat.gym`` registers
``Habitat<Task>-v0`` / ``HabitatRender<Task>-v0`` ids in gym's registry; ``gym.make`` passes
``override_options`` and ``use_render_mode``; envs use gym's four-value ``step`` and
``render(mode="rgb_array")``.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.envs import ParallelEnv, SerialEnv, batched, check_env_specs
from tdrl.envs.libs import habitat as habitat_lib
from tdrl.envs.libs.habitat import HabitatEnv
from tests.envs.conformance import EnvConformance

gym = pytest.importorskip("gym")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


class FakeTask(gym.Env):
    """A pick task: an 8x8 head camera and 7 joints; 5 steps, the last one cut by a time limit."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, override_options=None, use_render_mode=False):
        self.observation_space = gym.spaces.Dict(
            {
                "head_rgb": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "joint": gym.spaces.Box(-np.inf, np.inf, (7,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.override_options = list(override_options or [])
        self.use_render_mode = use_render_mode
        self.rng = np.random.default_rng(0)
        self.t = 0

    def _obs(self):
        joint = self.rng.standard_normal(7).astype(np.float32)
        return {"head_rgb": np.full((8, 8, 3), self.t, np.uint8), "joint": joint}

    def reset(self, seed=None, **kwargs):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._obs()

    def step(self, action):
        self.t += 1
        done = self.t >= 5
        return self._obs(), float(np.sum(action)), done, {"TimeLimit.truncated": done}

    def render(self, mode="rgb_array"):
        if not self.use_render_mode:
            raise RuntimeError("the task was built without its render sensor")
        return np.full((12, 16, 3), 10 * self.t, np.uint8)


@pytest.fixture(autouse=True)
def fake_habitat(monkeypatch):
    registry = gym.envs.registration.registry
    for name, kwargs in (
        ("HabitatPick-v0", {}),
        ("HabitatRenderPick-v0", {"use_render_mode": True}),
    ):
        if name not in registry:
            gym.register(name, entry_point=FakeTask, kwargs=kwargs, disable_env_checker=True)
    package = types.ModuleType("habitat")
    package.gym = types.ModuleType("habitat.gym")
    monkeypatch.setitem(sys.modules, "habitat", package)
    monkeypatch.setitem(sys.modules, "habitat.gym", package.gym)
    monkeypatch.setattr(habitat_lib, "_HAS_HABITAT", True)


class TestHabitatConformance(EnvConformance):
    def make_env(self):
        return HabitatEnv("HabitatPick-v0")


class TestHabitatPixelsConformance(EnvConformance):
    def make_env(self):
        return HabitatEnv("HabitatPick-v0", from_pixels=True, pixels_only=True)


def test_specs_and_a_rollout():
    env = HabitatEnv("HabitatPick-v0")
    assert set(env.observation_spec.keys()) == {"head_rgb", "joint"}
    assert env.action_spec.shape == (4,)
    data = env.rollout(10)
    assert data.shape == (5,)
    assert data["next", "truncated"][-1].item() and not data["next", "terminated"].any()
    torch.testing.assert_close(data["next", "reward"].squeeze(-1), data["action"].sum(-1))


def test_pixels_come_from_the_render_sensor():
    env = HabitatEnv("HabitatPick-v0", from_pixels=True)
    assert env._env.unwrapped.use_render_mode  # the render sensor was requested
    data = env.rollout(3)
    assert data["next", "pixels"].shape == (3, 12, 16, 3)
    assert data["next", "pixels"][:, 0, 0, 0].tolist() == [10, 20, 30]
    assert "joint" in data["next"].keys()


def test_gpu_devices_select_the_simulator_gpu():
    assert habitat_lib._gpu_index("cuda:1") == 1 and habitat_lib._gpu_index(0) == 0
    assert habitat_lib._gpu_index("cpu") is None and habitat_lib._gpu_index(None) is None
    env = HabitatEnv("HabitatPick-v0", override_options=["habitat.seed=3"])
    assert env._env.unwrapped.override_options == ["habitat.seed=3"]


def test_seeding():
    env = HabitatEnv("HabitatPick-v0")
    env.set_seed(1)
    first = env.reset()["joint"]
    env.set_seed(1)
    assert torch.equal(first, env.reset()["joint"])


def test_available_envs_and_errors(monkeypatch):
    assert {"HabitatPick-v0", "HabitatRenderPick-v0"} <= set(HabitatEnv.available_envs)
    with pytest.raises(ValueError, match="env_name: expected one of"):
        HabitatEnv("HabitatFly-v0")
    monkeypatch.setattr(habitat_lib, "_HAS_HABITAT", False)
    with pytest.raises(ImportError, match="habitat-lab"):
        HabitatEnv("HabitatPick-v0")


def test_num_workers_builds_one_copy_per_worker(monkeypatch):
    built = {}

    def fake_parallel_env(num_workers, create_env_fn, create_env_kwargs, device=None):
        built.update(n=num_workers, fn=create_env_fn, kwargs=create_env_kwargs, device=device)
        return types.SimpleNamespace(start=lambda: None)

    monkeypatch.setattr(batched, "ParallelEnv", fake_parallel_env)
    HabitatEnv("HabitatPick-v0", num_workers=2, device=["cpu", "cpu"], from_pixels=True)
    assert built["n"] == 2 and built["device"] == "cpu"
    assert built["kwargs"] == [{"device": "cpu"}, {"device": "cpu"}]
    assert built["fn"].func is HabitatEnv and built["fn"].keywords == {"from_pixels": True}
    with pytest.raises(ValueError, match="one device per worker"):
        HabitatEnv("HabitatPick-v0", num_workers=2, device=["cpu"])


def test_batched_envs_and_a_collector():
    def make():
        return HabitatEnv("HabitatPick-v0")

    check_env_specs(SerialEnv(2, make))
    # forked workers inherit the fake backend (a fork server's would not see it)
    with ParallelEnv(2, make, mp_start_method="fork") as env:
        assert env.rollout(3).shape == (2, 3)
    collector = SyncDataCollector(HabitatEnv("HabitatPick-v0"), frames_per_batch=4, total_frames=8)
    assert [batch.numel() for batch in collector] == [4, 4]
    collector.shutdown()
