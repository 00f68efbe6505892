from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from tdrl.data import Bounded, Categorical, Composite, OneHot
from tdrl.envs import SerialEnv
from tdrl.envs.libs.gym import (
    GymEnv,
    GymWrapper,
    VecGymEnvTransform,
    default_info_dict_reader,
    set_gym_backend,
)
from tdrl.envs.utils import check_env_specs
from tests.envs.conformance import EnvConformance
from tests.envs.libs.test_gym_plan import assert_same_rollout, rollout_both_paths

gymnasium = pytest.importorskip("gymnasium")
spaces = gymnasium.spaces

CLASSIC_ENVS = ["CartPole-v1", "Pendulum-v1", "MountainCar-v0", "Acrobot-v1"]


class InfoEnv(gymnasium.Env):
    """A tiny gymnasium env with dict observations, a tuple action and a rich info dict."""

    def __init__(self, episode_len: int = 4):
        self.episode_len = episode_len
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32),
                "mode": spaces.Discrete(3),
                "pair": spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))),
            }
        )
        self.action_space = spaces.Tuple((spaces.Discrete(2), spaces.Box(-1.0, 1.0, shape=(1,))))
        self.t = 0

    def _obs(self):
        return {
            "position": np.full(2, self.t, dtype=np.float32),
            "mode": self.t % 3,
            "pair": (self.t % 2, 1),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"x_position": 0.0, "success": False}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        terminated = self.t >= self.episode_len
        info = {"x_position": float(self.t) / 2, "success": terminated, "_private": 1}
        return self._obs(), float(action[0]), terminated, False, info


# --------------------------------------------------------------------------- conformance


class TestCartPoleConformance(EnvConformance):
    def make_env(self):
        return GymEnv("CartPole-v1")


class TestPendulumConformance(EnvConformance):
    def make_env(self):
        return GymEnv("Pendulum-v1")


class TestMountainCarConformance(EnvConformance):
    def make_env(self):
        return GymEnv("MountainCar-v0", categorical_action_encoding=True)


class TestAcrobotConformance(EnvConformance):
    def make_env(self):
        return GymEnv("Acrobot-v1")


class TestVectorCartPoleConformance(EnvConformance):
    rollout_steps = 30

    def make_env(self):
        return GymEnv("CartPole-v1", num_envs=3, vectorization_mode="sync")


class TestVectorNextStepConformance(EnvConformance):
    rollout_steps = 30

    def make_env(self):
        next_step = gymnasium.vector.AutoresetMode.NEXT_STEP
        return GymEnv(
            "CartPole-v1",
            num_envs=2,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": next_step},
        )


class TestDictSpacesConformance(EnvConformance):
    def make_env(self):
        env = GymWrapper(InfoEnv(episode_len=3), categorical_action_encoding=True)
        return env.set_info_dict_reader(default_info_dict_reader(["x_position", "success"]))


# --------------------------------------------------------------------------- classic control


@pytest.mark.parametrize("env_id", CLASSIC_ENVS)
def test_classic_envs_pass_check_env_specs(env_id):
    env = GymEnv(env_id)
    check_env_specs(env)
    env.set_seed(0)
    data = env.rollout(12, break_when_any_done=False)
    assert data.batch_size == torch.Size([12])
    assert data["next", "reward"].dtype == torch.float32
    assert data["next", "reward"].shape == torch.Size([12, 1])
    for key in ("done", "terminated", "truncated"):
        assert data["next", key].dtype == torch.bool
    assert data["observation"].dtype == torch.float32
    env.close()
    assert env.is_closed


def test_cartpole_specs():
    env = GymEnv("CartPole-v1")
    assert isinstance(env.action_spec, OneHot)
    assert env.action_spec.dtype == torch.int64
    obs_spec = env.observation_spec["observation"]
    assert isinstance(obs_spec, Bounded)
    assert obs_spec.shape == torch.Size([4])
    assert obs_spec.high[0].item() == pytest.approx(4.8)
    assert set(env.done_keys) == {"done", "terminated", "truncated"}


def test_categorical_action_encoding():
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    assert isinstance(env.action_spec, Categorical)
    data = env.rollout(5)
    assert data["action"].dtype == torch.int64
    assert data["action"].shape == torch.Size([5])
    check_env_specs(env)


def test_make_kwargs_and_attribute_fallthrough():
    env = GymEnv("Pendulum-v1", g=9.81)
    assert env.g == 9.81
    assert env.env_name == "Pendulum-v1"
    assert env.lib is gymnasium
    with pytest.raises(AttributeError, match="no attribute 'not_an_attribute'"):
        env.not_an_attribute  # noqa: B018


def test_device_and_available_envs():
    env = GymEnv("CartPole-v1", device="cpu")
    assert env.device == torch.device("cpu")
    data = env.rollout(3)
    assert data.device == torch.device("cpu")
    assert data["next", "observation"].device == torch.device("cpu")
    assert "CartPole-v1" in GymEnv.available_envs


def test_gym_wrapper_wraps_a_built_env():
    raw = gymnasium.make("Acrobot-v1")
    env = GymWrapper(raw)
    assert env._env is raw
    assert isinstance(env.action_spec, OneHot)
    assert env.action_spec.shape == torch.Size([3])
    check_env_specs(env)


def test_terminated_and_truncated_come_from_the_five_value_api():
    env = GymEnv("MountainCar-v0", max_episode_steps=5)
    env.set_seed(0)
    data = env.rollout(20)
    assert data.batch_size == torch.Size([5])
    last = data[-1]["next"]
    assert last["truncated"].item() and not last["terminated"].item() and last["done"].item()
    cartpole = GymEnv("CartPole-v1")
    cartpole.set_seed(0)
    policy_push_right = _constant_action(cartpole, 1)
    episode = cartpole.rollout(100, policy_push_right)
    end = episode[-1]["next"]
    assert end["terminated"].item() and not end["truncated"].item() and end["done"].item()
    assert not episode["next", "done"][:-1].any()


def _constant_action(env, index):
    def policy(td):
        action = torch.zeros(env.action_spec.shape, dtype=env.action_spec.dtype)
        action[..., index] = 1
        td.set("action", action)
        return td

    return policy


def test_seeding_is_reproducible_across_instances():
    rollouts = []
    for _ in range(2):
        env = GymEnv("CartPole-v1")
        env.set_seed(7)
        torch.manual_seed(0)
        rollouts.append(env.rollout(50, break_when_any_done=False))
    torch.testing.assert_close(rollouts[0]["observation"], rollouts[1]["observation"])
    torch.testing.assert_close(rollouts[0]["next", "reward"], rollouts[1]["next", "reward"])
    other = GymEnv("CartPole-v1")
    other.set_seed(8)
    torch.manual_seed(0)
    different = other.rollout(50, break_when_any_done=False)
    assert not torch.equal(different["observation"], rollouts[0]["observation"])


def test_set_seed_matches_gymnasium_seeding_and_frame_skip_sums_rewards():
    env = GymEnv("Pendulum-v1", frame_skip=3)
    env.set_seed(0)
    td = env.reset()
    raw = gymnasium.make("Pendulum-v1")
    raw.reset(seed=0)
    observation, _ = raw.reset()
    torch.testing.assert_close(td["observation"], torch.from_numpy(observation))
    td["action"] = torch.tensor([0.5])
    env.step(td)
    total = 0.0
    for _ in range(3):
        observation, reward, *_ = raw.step(np.array([0.5], dtype=np.float32))
        total += reward
    torch.testing.assert_close(td["next", "observation"], torch.from_numpy(observation))
    assert td["next", "reward"].item() == pytest.approx(total, rel=1e-5)


def test_frame_skip_stops_at_episode_end():
    env = GymEnv("MountainCar-v0", max_episode_steps=4, frame_skip=3)
    data = env.rollout(10)
    assert data.batch_size == torch.Size([2])
    assert data[-1]["next", "truncated"].item()


def test_observations_share_memory_with_numpy():
    env = GymEnv("CartPole-v1")
    td = env.reset()
    td["observation"].data_ptr()
    out = env._step_plan.read_observation(np.zeros(4, dtype=np.float32))
    assert out["observation"].dtype == torch.float32
    array = np.ones(4, dtype=np.float32)
    assert env._step_plan.read_observation(array)["observation"].data_ptr() == array.ctypes.data


# --------------------------------------------------------------------------- pixels


def test_from_pixels_only():
    env = GymEnv("CartPole-v1", from_pixels=True)
    assert set(env.observation_keys) == {"pixels"}
    spec = env.observation_spec["pixels"]
    assert spec.dtype == torch.uint8
    assert spec.shape[-1] == 3
    data = env.rollout(3)
    assert data["pixels"].dtype == torch.uint8
    assert data["pixels"].shape == torch.Size([3, *spec.shape])
    assert data["next", "pixels"].float().std() > 0
    check_env_specs(env)


def test_from_pixels_with_state():
    env = GymEnv("Pendulum-v1", from_pixels=True, pixels_only=False)
    assert set(env.observation_keys) == {"pixels", "observation"}
    data = env.rollout(2)
    assert data["next", "observation"].shape == torch.Size([2, 3])


def test_from_pixels_requires_rgb_array():
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        GymWrapper(gymnasium.make("CartPole-v1"), from_pixels=True)
    with pytest.raises(ValueError, match="render_mode"):
        GymEnv("CartPole-v1", from_pixels=True, render_mode="human")


# --------------------------------------------------------------------------- custom spaces, info


def test_dict_observations_tuple_actions_and_info_reader():
    env = GymWrapper(InfoEnv(), categorical_action_encoding=True)
    assert set(env.observation_keys) == {"position", "mode", "pair"}
    assert env.observation_spec["pair"].shape == torch.Size([2])
    assert isinstance(env.full_action_spec["action"], Composite)
    reader = default_info_dict_reader(["x_position", "success"])
    env = env.set_info_dict_reader(reader)
    assert "x_position" in env.observation_spec.keys()
    data = env.rollout(10)
    assert data.batch_size == torch.Size([4])
    torch.testing.assert_close(
        data["next", "x_position"].reshape(-1), torch.tensor([0.5, 1.0, 1.5, 2.0])
    )
    assert data["next", "success"].reshape(-1).tolist() == [False, False, False, True]
    assert data["next", "position"][:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
    check_env_specs(env)


def test_info_reader_for_all_keys_skips_private():
    env = GymWrapper(InfoEnv()).set_info_dict_reader()
    keys = set(env.observation_spec.keys())
    assert {"x_position", "success"} <= keys
    assert "_private" not in keys


def test_info_reader_with_spec():
    from tdrl.data import Unbounded

    reader = default_info_dict_reader(["x_position"], spec=[Unbounded((), dtype=torch.float64)])
    env = GymWrapper(InfoEnv()).set_info_dict_reader(reader)
    assert env.observation_spec["x_position"].dtype == torch.float64
    data = env.rollout(2)
    assert data["next", "x_position"].dtype == torch.float64


class TextEnv(gymnasium.Env):
    def __init__(self):
        self.observation_space = spaces.Dict(
            {"text": spaces.Text(8), "x": spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)}
        )
        self.action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"text": "", "x": np.zeros(1, np.float32)}, {}

    def step(self, action):
        observation = {"text": "abc"[: int(action) + 1], "x": np.ones(1, np.float32)}
        return observation, 1.0, False, False, {}


def test_text_observations_are_non_tensor():
    from tdrl.data import NonTensor

    env = GymWrapper(TextEnv(), categorical_action_encoding=True)
    assert isinstance(env.observation_spec["text"], NonTensor)
    td = env.reset()
    td["action"] = torch.tensor(1)
    env.step(td)
    assert td["next", "text"] == "ab"
    data = env.rollout(3)
    assert data.batch_size == torch.Size([3])
    assert len(data["next", "text"]) == 3


# --------------------------------------------------------------------------- errors


def test_wrapper_argument_errors():
    with pytest.raises(TypeError, match="expected a gym environment"):
        GymWrapper(None)
    with pytest.raises(TypeError, match="reset\\(\\) and step\\(\\)"):
        GymWrapper(object())
    with pytest.raises(ValueError, match="frame_skip: expected a positive int, got 0"):
        GymEnv("CartPole-v1", frame_skip=0)
    with pytest.raises(TypeError, match="frame_skip"):
        GymEnv("CartPole-v1", frame_skip=1.5)
    with pytest.raises(ValueError, match=r"batch_size: expected \(\)"):
        GymEnv("CartPole-v1", batch_size=[2])
    with pytest.raises(TypeError, match="env_name: expected a str"):
        GymEnv(3)
    with pytest.raises(ValueError, match="num_envs: expected an int >= 0"):
        GymEnv("CartPole-v1", num_envs=-1)


# --------------------------------------------------------------------------- vector envs


def _check_ted_boundaries(data):
    """After each episode end, 'next' holds the last obs and the next root a fresh reset."""
    done = data["next", "done"].squeeze(-1)
    ends = done.nonzero().tolist()
    assert ends, "the rollout should contain at least one episode end"
    for env_index, t in ends:
        last = data["next", "observation"][env_index, t]
        terminated = data["next", "terminated"][env_index, t].item()
        if terminated:
            # CartPole ends when the pole angle or cart position leaves its range.
            assert last[2].abs() > 0.2094 or last[0].abs() > 2.4
        if t + 1 < data.shape[1]:
            reset_obs = data["observation"][env_index, t + 1]
            assert reset_obs.abs().max() <= 0.05
        if t > 0:
            torch.testing.assert_close(
                data["observation"][env_index, t], data["next", "observation"][env_index, t - 1]
            )


def test_vector_env_same_step_is_ted_correct():
    env = GymEnv("CartPole-v1", num_envs=3, vectorization_mode="sync")
    assert type(env.transform) is VecGymEnvTransform
    # also importable with the other transforms
    from tdrl.envs.transforms import VecGymEnvTransform as FromTransforms

    assert FromTransforms is VecGymEnvTransform
    assert env.batch_size == torch.Size([3])
    assert env.base_env._autoreset == "SameStep"
    assert "final" not in env.observation_spec.keys()
    check_env_specs(env)
    env.set_seed(0)
    torch.manual_seed(0)
    data = env.rollout(60, break_when_any_done=False)
    assert data.batch_size == torch.Size([3, 60])
    _check_ted_boundaries(data)
    env.close()


def test_vector_env_next_step_matches_same_step():
    next_step = gymnasium.vector.AutoresetMode.NEXT_STEP
    results = []
    for vector_kwargs in ({}, {"autoreset_mode": next_step}):
        env = GymEnv(
            "CartPole-v1", num_envs=2, vectorization_mode="sync", vector_kwargs=vector_kwargs
        )
        env.set_seed(3)
        torch.manual_seed(0)
        results.append(env.rollout(60, break_when_any_done=False))
    assert results[1].batch_size == torch.Size([2, 60])
    _check_ted_boundaries(results[1])
    torch.testing.assert_close(results[0]["observation"], results[1]["observation"])
    torch.testing.assert_close(results[0]["next", "observation"], results[1]["next", "observation"])
    assert torch.equal(results[0]["next", "done"], results[1]["next", "done"])


def test_vector_env_async_with_pixels():
    env = GymEnv("CartPole-v1", num_envs=2, from_pixels=True, pixels_only=False)
    assert env.base_env._autoreset == "NextStep"
    env.set_seed(1)
    data = env.rollout(30, break_when_any_done=False)
    assert data["pixels"].shape[:2] == torch.Size([2, 30])
    _check_ted_boundaries(data)
    env.close()


def test_gym_wrapper_of_a_vector_env():
    raw = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 2)
    env = GymWrapper(raw)
    assert env.batch_size == torch.Size([2])
    check_env_specs(env)
    native = gymnasium.make_vec("CartPole-v1", 2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="cannot reset a subset"):
        GymWrapper(native)


@pytest.mark.parametrize("final_key", ["final_obs", "final_observation"])
def test_final_observation_keys_and_missing_value(final_key):
    env = GymEnv("CartPole-v1", num_envs=2, vectorization_mode="sync", missing_obs_value=-7.0)
    base = env.base_env
    source = {"observation": torch.zeros(2, 4)}
    done = np.array([True, False])
    last = np.arange(4, dtype=np.float32)
    finals = np.array([last, None], dtype=object)
    info = {final_key: finals, f"_{final_key}": done}
    final = base._final_obs(source, done, np.zeros(2, bool), info)
    assert final["observation"][0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert final["observation"][1].tolist() == [0.0] * 4
    assert source["observation"].abs().sum() == 0
    missing = base._final_obs(source, done, np.zeros(2, bool), {})
    assert missing["observation"][0].tolist() == [-7.0] * 4
    env.close()


def test_vec_transform_validates_final_name():
    with pytest.raises(TypeError, match="final_name: expected a str"):
        VecGymEnvTransform(final_name=1)


# --------------------------------------------------------------------------- auto-resetting envs


class AutoResettingGymEnv(GymEnv):
    def _step(self, tensordict):
        tensordict = super()._step(tensordict)
        if tensordict["done"].any():
            td_reset = super().reset()
            tensordict.update(td_reset.exclude(*self.done_keys))
        return tensordict

    def _reset(self, tensordict=None):
        if tensordict is not None and "_reset" in tensordict:
            return tensordict.copy()
        return super()._reset(tensordict)


def test_auto_resetting_gym_env_example_runs_and_masks_last_observation():
    torch.manual_seed(0)
    with set_gym_backend("gymnasium"):
        env = AutoResettingGymEnv("CartPole-v1", auto_reset=True, auto_reset_replace=True)
        env.set_seed(0)
        data = env.rollout(30, break_when_any_done=False)
    done = data["next", "done"].squeeze(-1)
    assert done.sum() >= 1
    next_obs = data["next", "observation"]
    assert torch.isnan(next_obs[done]).all()
    assert not torch.isnan(next_obs[~done]).any()
    assert not torch.isnan(data["observation"]).any()
    for t in done.nonzero().flatten().tolist():
        if t + 1 < 30:
            assert data["observation"][t + 1].abs().max() <= 0.05


# --------------------------------------------------------------------------- optional backends


def test_mujoco_env():
    pytest.importorskip("mujoco")
    env = GymEnv("InvertedPendulum-v5")
    check_env_specs(env)
    data = env.rollout(5)
    assert data["next", "observation"].dtype == torch.float64
    # the columnar random rollout and the generic loop agree on a MuJoCo env too
    assert_same_rollout(*rollout_both_paths(env, 40, break_when_any_done=False))
    env.close()


def test_mujoco_pixels_and_batched_sub_envs():
    pytest.importorskip("mujoco")
    env = GymEnv("InvertedPendulum-v5", from_pixels=True, pixels_only=False)
    pixels = env.rollout(2)["next", "pixels"]
    env.close()
    assert pixels.dtype == torch.uint8 and pixels.shape[-1] == 3 and pixels.float().std() > 0
    batched = SerialEnv(2, partial(GymEnv, "InvertedPendulum-v5"))
    data = batched.rollout(10, break_when_any_done=False)
    batched.close()
    assert data.batch_size == (2, 10)


def test_gym_backend_when_installed():
    gym = pytest.importorskip("gym")
    with set_gym_backend(gym):
        env = GymEnv("CartPole-v1")
        check_env_specs(env)


def test_a_copied_env_still_reports_rewards_and_flags():
    import copy

    env = GymEnv("CartPole-v1")
    env.rollout(3)
    clone = copy.deepcopy(env)
    data = clone.rollout(50, break_when_any_done=False, policy=clone.rand_action)
    assert (data["next", "reward"] == 1.0).all()
    assert bool(data["next", "done"].any())
