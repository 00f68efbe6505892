"""DMControlEnv / DMControlWrapper against the real dm_control suite (and a tiny dm_env)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.collectors import SyncDataCollector
from tdrl.envs import ParallelEnv, SerialEnv, StepCounter, TransformedEnv, check_env_specs
from tdrl.envs.libs.dm_control import DMControlEnv, DMControlWrapper
from tests.envs.conformance import EnvConformance

dm_env = pytest.importorskip("dm_env")
suite = pytest.importorskip("dm_control.suite")


class TestDMControlConformance(EnvConformance):
    def make_env(self):
        return DMControlEnv("cheetah", "run")


class TestDMControlFrameSkipConformance(EnvConformance):
    def make_env(self):
        return DMControlEnv("walker", "walk", frame_skip=2)


class TestDMControlPixelsConformance(EnvConformance):
    rollout_steps = 2

    def make_env(self):
        return DMControlEnv("cartpole", "swingup", from_pixels=True, height=24, width=32)


def _rollout(env, seed, steps=20):
    env.set_seed(seed)
    torch.manual_seed(seed)
    return env.rollout(steps)


def test_specs_follow_dm_env_specs():
    env = DMControlEnv("walker", "walk")
    raw = env._env
    assert set(env.observation_spec.keys()) == set(raw.observation_spec())
    assert env.observation_spec["orientations"].shape == (14,)
    assert env.observation_spec["height"].shape == (1,)  # a scalar becomes (1,)
    assert env.observation_spec["height"].dtype == torch.float64
    bounds = raw.action_spec()
    assert env.action_spec.shape == bounds.shape
    assert env.action_spec.dtype == torch.float64
    torch.testing.assert_close(env.action_spec.space.low, torch.tensor(bounds.minimum))
    assert env.reward_spec.shape == (1,) and env.reward_spec.dtype == torch.float64
    assert set(env.done_keys) == {"done", "terminated", "truncated"}


def test_env_and_wrapper_give_the_same_seeded_rollouts():
    first = _rollout(DMControlEnv("cheetah", "run", frame_skip=2), seed=0)
    again = _rollout(DMControlEnv("cheetah", "run", frame_skip=2), seed=0)
    wrapped = _rollout(DMControlWrapper(suite.load("cheetah", "run"), frame_skip=2), seed=0)
    other = _rollout(DMControlEnv("cheetah", "run", frame_skip=2), seed=1)
    assert (first == again).all()
    assert (first == wrapped).all()
    assert not torch.equal(first["position"][0], other["position"][0])


def test_set_seed_returns_a_derived_seed():
    env = DMControlEnv("cheetah", "run")
    assert env.set_seed(0) == env.set_seed(0) != 0


def test_observations_are_copies_of_the_simulator_state():
    env = DMControlEnv("cheetah", "run")
    data = env.rollout(5)
    assert not torch.equal(data["next", "position"][0], data["next", "position"][-1])
    assert torch.equal(data["position"][1:], data["next", "position"][:-1])


def test_frame_skip_repeats_the_action_and_sums_rewards():
    env = DMControlEnv("cheetah", "run", frame_skip=3)
    env.set_seed(5)
    data = env.rollout(4)
    raw = suite.load("cheetah", "run")
    raw.task.random.seed(5)
    step = raw.reset()
    torch.testing.assert_close(data["position"][0], torch.from_numpy(step.observation["position"]))
    for action, reward in zip(data["action"], data["next", "reward"]):
        total = sum(raw.step(action.numpy()).reward for _ in range(3))
        assert reward.item() == pytest.approx(total)


def test_time_limit_is_a_truncation():
    env = DMControlEnv("cartpole", "balance", frame_skip=10)  # a 1000-step limit: 100 steps
    data = env.rollout(200)
    assert data.shape == (100,)
    assert data["next", "truncated"][-1].item() and data["next", "done"][-1].item()
    assert not data["next", "terminated"].any()


class _Countdown(dm_env.Environment):
    """A dm_env that terminates (discount 0) after three steps; no task, no random state."""

    def __init__(self):
        self.t = 0

    def reset(self):
        self.t = 0
        return dm_env.restart({"count": np.float32(self.t)})

    def step(self, action):
        self.t += 1
        observation = {"count": np.float32(self.t)}
        if self.t == 3:
            return dm_env.termination(float(action[0]), observation)
        return dm_env.transition(float(action[0]), observation)

    def observation_spec(self):
        return {"count": dm_env.specs.Array((), np.float32, "count")}

    def action_spec(self):
        return dm_env.specs.BoundedArray((1,), np.float32, -1.0, 1.0)

    def reward_spec(self):
        return dm_env.specs.Array((), np.float32)


def test_discount_zero_is_a_termination_and_dtypes_follow_the_specs():
    env = DMControlWrapper(_Countdown())
    check_env_specs(env)
    data = env.rollout(10)
    assert data.shape == (3,)
    assert data["next", "terminated"][-1].item() and not data["next", "truncated"].any()
    assert data["next", "reward"].dtype == torch.float32
    assert data["next", "count"].squeeze(-1).tolist() == [1.0, 2.0, 3.0]


def test_set_seed_without_a_random_state_raises():
    env = DMControlWrapper(_Countdown())
    with pytest.raises(RuntimeError, match="random state"):
        env.set_seed(0)


def test_random_rollout_path_matches_the_generic_loop():
    env = DMControlEnv("walker", "walk", frame_skip=5)
    for break_when_any_done in (False, True):
        for set_truncated in (False, True):
            env.set_seed(1)
            torch.manual_seed(0)
            fast = env.rollout(
                250, break_when_any_done=break_when_any_done, set_truncated=set_truncated
            )
            env.set_seed(1)
            torch.manual_seed(0)
            generic = env.rollout(
                250,
                policy=env.rand_action,
                break_when_any_done=break_when_any_done,
                set_truncated=set_truncated,
            )
            assert fast.names == generic.names == ["time"]
            assert set(fast.keys(True, True)) == set(generic.keys(True, True))
            assert (fast == generic).all()
    assert fast.shape == (200,)  # two episodes of 200 steps, reset in between


def test_pixels_are_rendered_with_the_render_kwargs():
    env = DMControlEnv("cartpole", "swingup", from_pixels=True, camera_id=0, height=24, width=32)
    assert env.render_kwargs == {"camera_id": 0, "height": 24, "width": 32}
    assert list(env.observation_spec.keys()) == ["pixels"]
    data = env.rollout(2)
    assert data["next", "pixels"].shape == (2, 24, 32, 3)
    assert data["next", "pixels"].dtype == torch.uint8
    assert data["next", "pixels"].float().std() > 0
    both = DMControlEnv(
        "cartpole", "swingup", from_pixels=True, pixels_only=False, height=24, width=32
    )
    assert set(both.observation_spec.keys()) == {"position", "velocity", "pixels"}


def test_pixels_wrapper_env_gives_the_same_data():
    from dm_control.suite.wrappers import pixels

    render_kwargs = {"camera_id": 0, "height": 24, "width": 32}
    wrapped = DMControlWrapper(
        pixels.Wrapper(suite.load("cartpole", "swingup"), render_kwargs=render_kwargs)
    )
    built = DMControlEnv("cartpole", "swingup", from_pixels=True, height=24, width=32)
    assert wrapped.observation_spec == built.observation_spec
    assert (_rollout(wrapped, 3, steps=3) == _rollout(built, 3, steps=3)).all()


def test_batched_envs_and_a_collector():
    def make():
        return DMControlEnv("cheetah", "run")

    serial = SerialEnv(2, make)
    check_env_specs(serial)
    with ParallelEnv(2, make) as parallel:
        check_env_specs(parallel)
        assert parallel.rollout(3).shape == (2, 3)
    env = TransformedEnv(make(), StepCounter(max_steps=4))
    collector = SyncDataCollector(env, frames_per_batch=8, total_frames=16)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and batches[0].numel() == 8
    assert batches[0]["next", "truncated"].sum() == 2


def test_num_workers_returns_a_started_parallel_env():
    env = DMControlEnv("cheetah", "run", num_workers=2)
    try:
        assert isinstance(env, ParallelEnv)
        assert env.num_workers == 2 and not env.is_closed
        assert env.reset().batch_size == (2,)
    finally:
        env.close()


def test_available_envs_lists_the_suite():
    available = DMControlEnv.available_envs
    assert "run" in available["cheetah"] and "walk" in available["walker"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"env_name": "nope", "task_name": "run"}, ValueError, "env_name: expected one of"),
        ({"env_name": "cheetah", "task_name": "fly"}, ValueError, "task_name: expected one of"),
        ({"env_name": "cheetah", "task_name": "run", "frame_skip": 0}, ValueError, "frame_skip"),
        ({"env_name": "cheetah", "task_name": "run", "frame_skip": 1.5}, TypeError, "frame_skip"),
        ({"env_name": "cheetah", "task_name": "run", "num_workers": 0}, ValueError, "num_workers"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        DMControlEnv(**kwargs)


def test_wrapper_rejects_non_dm_envs_and_batch_sizes():
    with pytest.raises(TypeError, match="expected a dm_env environment"):
        DMControlWrapper(object())
    with pytest.raises(ValueError, match="batch_size: expected"):
        DMControlWrapper(suite.load("cheetah", "run"), batch_size=[2])
