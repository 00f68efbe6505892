"""Every path of the gym step plan gives the generic loop's data, and overrides always run."""

from __future__ import annotations

import gc

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Unbounded
from tdrl.envs import Compose, StepCounter, TransformedEnv
from tdrl.envs.libs._gym_plan import GymStepPlan
from tdrl.envs.libs.gym import GymEnv, GymWrapper, default_info_dict_reader
from tests.td_checks import assert_identical

CLASSIC = ["CartPole-v1", "Pendulum-v1", "MountainCar-v0", "Acrobot-v1"]
BREAKS = [
    {"break_when_any_done": False},
    {},
    {"break_when_any_done": False, "set_truncated": True},
]


@pytest.fixture
def columnar_calls(monkeypatch):
    """Counts the calls of the columnar path."""
    calls = []
    original = GymStepPlan.columnar_rollout

    def counting(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(GymStepPlan, "columnar_rollout", counting)
    return calls


def rollout_both_paths(env, steps: int, **kwargs) -> tuple[TensorDict, TensorDict]:
    """The rollout without a policy and the same one forced through the generic loop."""
    env.set_seed(3)
    torch.manual_seed(1)
    columnar = env.rollout(steps, **kwargs)
    env.set_seed(3)
    torch.manual_seed(1)
    generic = env.rollout(steps, policy=lambda td: env.rand_action(td), **kwargs)
    return columnar, generic


def assert_same_rollout(columnar: TensorDict, generic: TensorDict) -> None:
    assert generic.names == ["time"]
    assert_identical(columnar, generic)


@pytest.mark.parametrize("env_id", CLASSIC)
@pytest.mark.parametrize("kwargs", BREAKS)
def test_columnar_rollout_equals_generic_loop(env_id, kwargs, columnar_calls):
    env = GymEnv(env_id)
    columnar, generic = rollout_both_paths(env, 250, **kwargs)
    assert len(columnar_calls) == 1
    assert_same_rollout(columnar, generic)
    if kwargs.get("break_when_any_done", True):
        assert bool(columnar["next", "done"][-1]) or len(columnar) == 250
    else:
        assert len(columnar) == 250
    if kwargs.get("set_truncated"):
        assert bool(columnar["next", "truncated"][-1]) and bool(columnar["next", "done"][-1])


def test_columnar_rollout_crosses_episode_ends():
    env = GymEnv("CartPole-v1")
    columnar, generic = rollout_both_paths(env, 400, break_when_any_done=False)
    assert_same_rollout(columnar, generic)
    ends = columnar["next", "done"].squeeze(-1).nonzero().squeeze(-1)
    assert len(ends) >= 2
    # each episode end is followed by a reset observation, not the terminal one
    first = int(ends[0])
    assert not torch.equal(
        columnar["observation"][first + 1], columnar["next", "observation"][first]
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: GymEnv("CartPole-v1", frame_skip=3),
        lambda: GymEnv("CartPole-v1", categorical_action_encoding=True),
        lambda: GymEnv("Pendulum-v1", from_pixels=True, pixels_only=False),
        lambda: GymWrapper(gymnasium.make("MountainCarContinuous-v0")),
    ],
    ids=["frame_skip", "categorical", "pixels", "wrapper"],
)
def test_columnar_rollout_options(make, columnar_calls):
    env = make()
    columnar, generic = rollout_both_paths(env, 30, break_when_any_done=False)
    assert len(columnar_calls) == 1
    assert_same_rollout(columnar, generic)
    env.close()


class _CustomStep(GymWrapper):
    def _step(self, tensordict):
        out = super()._step(tensordict)
        out.set("reward", out.get("reward") * 2)
        return out


@pytest.mark.parametrize(
    "case",
    [
        "policy",
        "callback",
        "tensordict",
        "lazy",
        "out",
        "all_done",
        "info_reader",
        "transformed",
        "vector",
        "subclass",
        "type_checks",
    ],
)
def test_generic_loop_is_used_when_the_columns_would_differ(case, columnar_calls):
    env = GymEnv("CartPole-v1")
    kwargs = {"break_when_any_done": False}
    if case == "policy":
        kwargs["policy"] = env.rand_action
    elif case == "callback":
        kwargs["callback"] = lambda env, td: None
    elif case == "tensordict":
        kwargs["tensordict"] = TensorDict(extra=torch.zeros(()))
    elif case == "lazy":
        kwargs["return_contiguous"] = False
    elif case == "out":
        kwargs["out"] = env.rollout(5, policy=env.rand_action).clone()
    elif case == "all_done":
        kwargs = {"break_when_all_done": True}
    elif case == "info_reader":
        env = GymEnv("Pendulum-v1").set_info_dict_reader(
            default_info_dict_reader(["x"], spec=[Unbounded(())])
        )
    elif case == "transformed":
        env = TransformedEnv(GymEnv("CartPole-v1"), Compose(StepCounter()))
    elif case == "vector":
        env = GymEnv("CartPole-v1", num_envs=2, vectorization_mode="sync")
    elif case == "subclass":
        env = _CustomStep(gymnasium.make("CartPole-v1"))
    elif case == "type_checks":
        env = GymEnv("CartPole-v1", run_type_checks=True)
    steps = 5
    data = env.rollout(steps, **kwargs)
    assert columnar_calls == []
    assert data.shape[-1] <= steps
    if case == "subclass":
        # the subclass's own _step ran
        assert set(data["next", "reward"].unique().tolist()) == {2.0}
    env.close()


def test_columnar_rollout_keeps_garbage_collection_setting():
    env = GymEnv("CartPole-v1")
    assert gc.isenabled()
    env.rollout(20, break_when_any_done=False)
    assert gc.isenabled()
    gc.disable()
    try:
        env.rollout(20, break_when_any_done=False)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_columnar_rollout_data_owns_its_memory():
    env = GymEnv("CartPole-v1")
    data = env.rollout(10, break_when_any_done=False)
    before = data.clone()
    env.rollout(10, break_when_any_done=False)
    assert (data == before).all()
    data["next", "done"].fill_(True)
    assert not bool(data["done"].any())


# --------------------------------------------------------------------------- in-place steps


class _TwoBoxEnv(gymnasium.Env):
    """Dict observations of two boxes, one given as float64 for a float32 space."""

    def __init__(self):
        self.observation_space = gymnasium.spaces.Dict(
            {
                "a": gymnasium.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
                "b": gymnasium.spaces.Box(-1.0, 1.0, shape=(), dtype=np.float64),
            }
        )
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.t = 0

    def _obs(self):
        return {"a": np.full(2, self.t / 7, dtype=np.float64), "b": np.float64(self.t / 3)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action[0]), self.t % 5 == 0, False, {}


def _info_env():
    from tests.envs.libs.test_gym import InfoEnv

    return GymWrapper(InfoEnv(episode_len=3))


@pytest.mark.parametrize(
    "make, in_place",
    [
        (lambda: GymWrapper(_TwoBoxEnv()), True),
        (lambda: GymEnv("Pendulum-v1", frame_skip=2), True),
        (lambda: GymEnv("CartPole-v1", categorical_action_encoding=True), True),
        (lambda: GymEnv("CartPole-v1", from_pixels=True, pixels_only=False), True),
        # nested action / observation entries: the sub-env takes the generic step
        (_info_env, False),
    ],
    ids=["box_dict", "frame_skip", "categorical", "pixels", "nested_entries"],
)
def test_in_place_steps_of_batched_envs_equal_the_generic_step(make, in_place):
    from tdrl.envs import SerialEnv

    runs, direct = [], []
    for wrap in (False, True):
        env = SerialEnv(2, (lambda: TransformedEnv(make(), Compose())) if wrap else make)
        env.set_seed(5)
        torch.manual_seed(0)
        td = env.reset()
        direct.append([runner.direct_step is not None for runner in env._runners])
        seq = []
        for _ in range(12):
            data, td = env.step_and_maybe_reset(env.rand_action(td))
            seq.append((data.clone(), td.clone()))
        env.close()
        runs.append(seq)
    assert direct == [[in_place, in_place], [False, False]]
    for (data, td), (data_, td_) in zip(*runs):
        assert (data == data_).all() and (td == td_).all()


class _ArrayRewardEnv(gymnasium.Env):
    """Rewards as 0-d arrays, numpy scalars, floats and ints in turn."""

    def __init__(self):
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        reward = [np.array(0.1 * self.t), np.float32(0.2), 0.3 * self.t, 1][self.t % 4]
        return np.full(2, self.t / 10, dtype=np.float32), reward, self.t % 4 == 0, False, {}


def test_columnar_rollout_takes_any_reward_scalar(columnar_calls):
    env = GymWrapper(_ArrayRewardEnv())
    columnar, generic = rollout_both_paths(env, 9, break_when_any_done=False)
    assert len(columnar_calls) == 1
    assert_same_rollout(columnar, generic)


def test_columnar_random_actions_draw_the_same_random_numbers_as_the_spec():
    # the columnar loop draws one-hot actions without the spec's defensive copy: same values
    # and the same random-number stream as action_spec.rand, so what follows is unchanged
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    torch.manual_seed(5)
    columnar = env.rollout(300, break_when_any_done=False)
    after_columnar = torch.rand(4)
    env.set_seed(0)
    torch.manual_seed(5)
    generic = env.rollout(300, policy=env.rand_action, break_when_any_done=False)
    after_generic = torch.rand(4)
    assert_same_rollout(columnar, generic)
    assert torch.equal(after_columnar, after_generic)
    # every action is a row of its own: writing into one changes no other
    actions = columnar["action"]
    actions[0].zero_()
    assert int(actions[1:].sum()) == len(actions) - 1


def test_columnar_random_actions_follow_a_mask_or_a_replaced_sampler(columnar_calls):
    env = GymEnv("CartPole-v1")
    env.action_spec.update_mask(torch.tensor([False, True]))
    columnar, generic = rollout_both_paths(env, 50, break_when_any_done=False)
    assert_same_rollout(columnar, generic)
    assert bool((columnar["action"][:, 1] == 1).all())
    env.action_spec.update_mask(None)
    spec = env.full_action_spec["action"]
    spec.rand = lambda shape=None: torch.tensor([1, 0], dtype=spec.dtype)
    data = env.rollout(20, break_when_any_done=False)
    assert bool((data["action"][:, 0] == 1).all())
    assert len(columnar_calls) == 2
