"""Every caller runs the same step: one post-step, one input check, overrides always run."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import Compose, ParallelEnv, SerialEnv, StepCounter, TransformedEnv
from tdrl.envs.libs.gym import GymEnv
from tests.mocks import CountingEnv


def doubled_reward_cartpole() -> GymEnv:
    """A CartPole whose ``_step`` is replaced on the instance (as a monkeypatch would)."""
    env = GymEnv("CartPole-v1")
    original = env._step

    def doubled(tensordict):
        out = original(tensordict)
        out.set("reward", out.get("reward") * 2)
        return out

    env._step = doubled
    return env


def failing_cartpole() -> GymEnv:
    env = GymEnv("CartPole-v1")

    def failing(tensordict):
        raise RuntimeError("instance-level _step ran")

    env._step = failing
    return env


def _bad_action(env) -> TensorDict:
    td = env.reset()
    action = env.full_action_spec[env.action_key].rand()
    td.set(env.action_key, action.to(torch.float64))
    return td


@pytest.mark.parametrize("wrap", ["bare", "transformed", "serial"])
def test_run_type_checks_catches_the_same_bad_action_everywhere(wrap):
    if wrap == "bare":
        env = GymEnv("CartPole-v1", run_type_checks=True)
    elif wrap == "transformed":
        env = TransformedEnv(GymEnv("CartPole-v1", run_type_checks=True), StepCounter())
    else:
        env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
        env.run_type_checks = True
    with pytest.raises(TypeError, match=r"action spec mismatch at key 'action'.*torch.float64"):
        env.step(_bad_action(env))
    env.close()


def test_run_type_checks_of_the_base_env_run_inside_a_transformed_env():
    base = GymEnv("CartPole-v1", run_type_checks=True)
    env = TransformedEnv(base, Compose())
    assert not env.run_type_checks
    td = env.reset().set("action", torch.tensor([0.0, 1.0], dtype=torch.float64))
    with pytest.raises(TypeError, match="action spec mismatch"):
        env.step(td)


def test_a_step_returning_a_dict_is_a_type_error():
    env = CountingEnv()
    env._step = lambda td: {"observation": torch.zeros(1)}
    env.reset()
    with pytest.raises(
        TypeError, match=r"CountingEnv._step must return a TensorDictBase, got dict"
    ):
        env.rand_step()


@pytest.mark.parametrize("with_policy", [False, True])
def test_an_instance_step_override_runs_in_a_single_env_rollout(with_policy):
    env = doubled_reward_cartpole()
    assert env.step_path == "generic (_step set on the instance)"
    assert "step_path='generic (_step set on the instance)'" in repr(env)
    policy = env.rand_action if with_policy else None
    data = env.rollout(20, policy=policy, break_when_any_done=False)
    assert set(data["next", "reward"].unique().tolist()) == {2.0}


def test_an_instance_step_override_runs_in_a_transformed_env():
    env = TransformedEnv(doubled_reward_cartpole(), StepCounter())
    data = env.rollout(10, break_when_any_done=False)
    assert set(data["next", "reward"].unique().tolist()) == {2.0}


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_an_instance_step_override_runs_in_batched_workers(batched):
    env = batched(2, doubled_reward_cartpole)
    try:
        data = env.rollout(10, break_when_any_done=False)
        assert set(data["next", "reward"].unique().tolist()) == {2.0}
        data, _ = env.step_and_maybe_reset(env.rand_action(env.reset()))
        assert set(data["next", "reward"].unique().tolist()) == {2.0}
    finally:
        env.close()


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_an_error_raised_by_an_instance_step_surfaces_from_workers(batched):
    env = batched(2, failing_cartpole)
    try:
        with pytest.raises(RuntimeError, match="instance-level _step ran"):
            env.rollout(3)
    finally:
        env.close()


def test_the_repr_shows_the_active_step_path():
    env = GymEnv("CartPole-v1")
    assert env.step_path == "fast" and "step_path='fast'" in repr(env)
    env.run_type_checks = True
    assert env.step_path == "generic (run_type_checks)"
    env.run_type_checks = False
    env.reset = env.reset
    assert env.step_path == "generic (reset set on the instance)"


def _same_override(env: GymEnv) -> GymEnv:
    """The env with its own ``_step`` set on the instance: the generic path, same behaviour."""
    env._step = env._step
    return env


def test_the_columnar_rollout_equals_the_generic_path_bit_for_bit():
    runs = []
    for make in (lambda: GymEnv("CartPole-v1"), lambda: _same_override(GymEnv("CartPole-v1"))):
        env = make()
        env.set_seed(7)
        torch.manual_seed(3)
        runs.append((env.step_path, env.rollout(300, break_when_any_done=False)))
    (fast_path, fast), (generic_path, generic) = runs
    assert fast_path == "fast" and generic_path.startswith("generic")
    assert list(fast.keys(True, True)) == list(generic.keys(True, True))
    for key in generic.keys(True, True):
        assert fast[key].dtype == generic[key].dtype
        assert torch.equal(fast[key], generic[key]), key


def _seeded_cartpole(generic: bool) -> GymEnv:
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    return _same_override(env) if generic else env


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_in_place_batched_steps_equal_the_generic_path_bit_for_bit(batched):
    runs = []
    for generic in (False, True):
        env = batched(2, _seeded_cartpole, {"generic": generic})
        try:
            env.set_seed(11)
            td = env.reset()
            steps = []
            for i in range(40):
                td.set("action", torch.tensor([i % 2, (i // 3) % 2]))
                data, td = env.step_and_maybe_reset(td)
                steps.append((data.clone(), td.clone()))
            runs.append(steps)
        finally:
            env.close()
    for (data, td), (data_, td_) in zip(*runs):
        assert (data == data_).all() and (td == td_).all()
