"""IsaacGymWrapper / IsaacGymEnv and IsaacLabWrapper against small fakes of their documented APIs.

Neither Isaac Gym nor Isaac Lab can be installed here (they need NVIDIA's simulators). The
fakes follow the documented behaviour: an IsaacGymEnvs ``VecTask`` returns
``(obs_dict, rewards, resets, extras)`` from ``step``, resets finished envs at its next step
and offers ``reset_idx``; an Isaac Lab env returns gymnasium's five values as tensors and
resets finished envs within the same step.
"""

from __future__ import annotations

import sys
import types

import gymnasium
import numpy as np
import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tdrl.envs.libs import isaacgym as isaacgym_lib
from tdrl.envs.libs.isaac_lab import IsaacLabWrapper
from tdrl.envs.libs.isaacgym import IsaacGymEnv, IsaacGymWrapper
from tests.envs.conformance import EnvConformance

pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered by casting:UserWarning")


class FakeVecTask:
    """A VecTask: position += action sum; an episode lasts ``max_len`` steps (a time limit)."""

    def __init__(self, num_envs=4, num_states=0, max_len=3):
        self.num_envs = num_envs
        self.num_states = num_states
        self.device = self.rl_device = "cpu"
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (5,))
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))
        self.max_len = max_len
        self.position = torch.zeros(num_envs)
        self.progress = torch.zeros(num_envs, dtype=torch.long)
        self.reset_buf = torch.ones(num_envs, dtype=torch.long)
        self.obs_dict = {}
        self.reset_calls = []
        self._compute()

    def _compute(self):
        obs = self.position.unsqueeze(-1).expand(-1, 5) + torch.arange(5.0)
        self.obs_dict = {"obs": obs.clone()}
        if self.num_states:
            self.obs_dict["states"] = torch.zeros(self.num_envs, self.num_states)

    def reset_idx(self, env_ids):
        self.reset_calls.append(env_ids.tolist())
        self.position[env_ids] = torch.rand(len(env_ids))
        self.progress[env_ids] = 0
        self.reset_buf[env_ids] = 0

    def reset(self):
        return self.obs_dict

    def step(self, actions):
        actions = torch.clamp(actions, -1.0, 1.0)
        self.position += actions.sum(-1)
        self.progress += 1
        finished = self.reset_buf.nonzero().squeeze(-1)  # reset at the start of post-physics
        if len(finished):
            self.reset_idx(finished)
        self._compute()
        reward = self.position.clone()
        self.reset_buf = (self.progress >= self.max_len).long()
        extras = {"time_outs": self.reset_buf.bool()}
        return self.obs_dict, reward, self.reset_buf.clone(), extras


class FakeIsaacLabEnv:
    """A ManagerBasedRLEnv: counts steps per env; terminates after ``length`` steps, resets in step."""

    def __init__(self, num_envs=3, length=(2, 3, 4)):
        self.num_envs = num_envs
        self.device = "cpu"
        self.unwrapped = self
        self.single_observation_space = gymnasium.spaces.Dict(
            {
                "policy": gymnasium.spaces.Box(-np.inf, np.inf, (3,)),
                "critic": gymnasium.spaces.Box(-np.inf, np.inf, (4,)),
            }
        )
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))
        self.length = torch.tensor(length)
        self.count = torch.zeros(num_envs)
        self.generator = torch.Generator().manual_seed(0)
        self.offset = torch.zeros(num_envs)
        self.closed = False

    def _obs(self):
        policy = (self.count + self.offset).unsqueeze(-1).expand(-1, 3).clone()
        return {"policy": policy, "critic": torch.zeros(self.num_envs, 4)}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.generator.manual_seed(seed)
        self.count.zero_()
        self.offset = torch.rand(self.num_envs, generator=self.generator)
        return self._obs(), {}

    def step(self, action):
        self.count += 1
        terminated = self.count >= self.length
        reward = action.sum(-1)
        self.count[terminated] = 0  # Isaac Lab resets finished envs in the same step
        return self._obs(), reward, terminated, torch.zeros_like(terminated), {}

    def close(self):
        self.closed = True


# ----------------------------------------------------------------------------- Isaac Gym
class TestIsaacGymConformance(EnvConformance):
    # a reset returns the task's last observation buffer (Isaac Gym computes observations in
    # its steps only), so two seeded rollouts differ in their first root observation
    seeded = False

    def make_env(self):
        return IsaacGymWrapper(FakeVecTask(num_states=3))


def test_isaacgym_specs_and_time_limits():
    env = IsaacGymWrapper(FakeVecTask(num_states=3))
    assert env.batch_size == (4,)
    assert set(env.observation_spec.keys()) == {"obs", "states"}
    assert env.action_spec.shape == (4, 2) and env.action_spec.space.high.max() == 1.0
    data = env.rollout(5)
    assert data.shape == (4, 3)
    assert data["next", "truncated"][:, -1].all() and not data["next", "terminated"].any()
    torch.testing.assert_close(
        data["next", "reward"][:, 0].squeeze(-1), data["next", "obs"][:, 0, 0]
    )


def test_isaacgym_partial_reset_calls_reset_idx():
    task = FakeVecTask()
    env = IsaacGymWrapper(task)
    data = env.rand_step(env.reset())["next"].clone()
    assert task.reset_calls[0] == [0, 1, 2, 3]  # a full reset resets every env
    data.set("_reset", torch.tensor([[False], [True], [False], [True]]))
    env.reset(data)
    assert task.reset_calls[-1] == [1, 3]


def test_isaacgym_seeding_seeds_the_resets():
    env = IsaacGymWrapper(FakeVecTask())
    positions = []
    for _ in range(2):
        env.set_seed(3)
        data = env.rollout(6, break_when_any_done=False)
        positions.append(data["next", "obs"])
    assert torch.equal(positions[0], positions[1])


def test_isaacgym_env_builds_through_isaacgymenvs(monkeypatch):
    made = {}

    def make(seed, task, num_envs, sim_device, rl_device, headless, **kwargs):
        made.update(seed=seed, task=task, sim_device=sim_device, headless=headless, **kwargs)
        return FakeVecTask(num_envs=num_envs)

    monkeypatch.setitem(sys.modules, "isaacgymenvs", types.SimpleNamespace(make=make))
    monkeypatch.setattr(isaacgym_lib, "_HAS_ISAACGYM", True)
    env = IsaacGymEnv(task="Ant", num_envs=6, device="cpu", seed=7, graphics_device_id=-1)
    assert made == {
        "seed": 7,
        "task": "Ant",
        "sim_device": "cpu",
        "headless": True,
        "graphics_device_id": -1,
    }
    assert env.batch_size == (6,) and "Ant" in repr(env)
    check_env_specs(env)
    with pytest.raises(ValueError, match="num_envs"):
        IsaacGymEnv(task="Ant", num_envs=0, device="cpu")
    monkeypatch.setattr(isaacgym_lib, "_HAS_ISAACGYM", False)
    with pytest.raises(ImportError, match="isaacgymenvs"):
        IsaacGymEnv(task="Ant", num_envs=2)


def test_isaacgym_wrapper_rejects_other_envs():
    with pytest.raises(TypeError, match="VecTask"):
        IsaacGymWrapper(gymnasium.make("CartPole-v1"))


# ----------------------------------------------------------------------------- Isaac Lab
class TestIsaacLabConformance(EnvConformance):
    def make_env(self):
        # episodes outlast the mixin's rollouts: the NaN-filled last steps are tested below
        return IsaacLabWrapper(FakeIsaacLabEnv(length=(50, 50, 50)))


def test_isaaclab_specs_and_renamed_policy():
    env = IsaacLabWrapper(FakeIsaacLabEnv(), rename_policy=True)
    assert set(env.observation_spec.keys()) == {"observation", "critic"}
    assert env.auto_reset and env.batch_size == (3,)
    check_env_specs(env)


def test_isaaclab_same_step_resets_are_handed_to_the_next_reset():
    env = IsaacLabWrapper(FakeIsaacLabEnv(length=(2, 10, 10)))
    env.set_seed(0)
    data = env.rollout(4, break_when_any_done=False)
    policy = data["next", "policy"][0, :, 0]
    assert data["next", "done"][0, :, 0].tolist() == [False, True, False, True]
    assert torch.isnan(policy[1]) and torch.isnan(policy[3])  # the last observations are unknown
    # the episode that starts after the end begins at count 0 (only the offset)
    offset = data["policy"][0, 0, 0]
    torch.testing.assert_close(data["policy"][0, 2, 0], offset)
    torch.testing.assert_close(
        data["next", "policy"][1, :, 0], offset.new_tensor([1.0, 2, 3, 4]) + data["policy"][1, 0, 0]
    )


def test_isaaclab_close_and_errors():
    fake = FakeIsaacLabEnv()
    env = IsaacLabWrapper(fake)
    env.close()
    assert fake.closed
    with pytest.raises(TypeError, match="Isaac Lab env"):
        IsaacLabWrapper(gymnasium.make("CartPole-v1"))


# ----------------------------------------------------------------------------- batched
@pytest.mark.parametrize(
    "make", [lambda: IsaacGymWrapper(FakeVecTask()), lambda: IsaacLabWrapper(FakeIsaacLabEnv())]
)
def test_batched_envs_and_a_collector(make):
    check_env_specs(SerialEnv(2, make))
    with ParallelEnv(2, make, mp_start_method="fork") as env:
        assert env.rollout(3, break_when_any_done=False).shape[-1] == 3
    collector = SyncDataCollector(make(), frames_per_batch=12, total_frames=24)
    assert [batch.numel() for batch in collector] == [12, 12]
    collector.shutdown()
