"""Actions and sub-env outputs of another layout are errors naming the key, never guesses."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import ParallelEnv, SerialEnv
from tdrl.envs.libs.gym import GymEnv
from tests.mocks import CountingEnv


class ShrinkingObservationEnv(CountingEnv):
    """A counting env whose third step returns an observation of another shape."""

    def __init__(self, size: int = 1):
        super().__init__(max_steps=100)
        self.size = size

    def _step(self, tensordict):
        out = super()._step(tensordict)
        if int(self.count.item()) == 3:
            out.set("observation", torch.zeros(self.size))
        return out


class FloatRewardEnv(CountingEnv):
    """A counting env whose second step returns a float64 reward."""

    def _step(self, tensordict):
        out = super()._step(tensordict)
        if int(self.count.item()) == 2:
            out.set("reward", out.get("reward").double())
        return out


def cartpole() -> GymEnv:
    return GymEnv("CartPole-v1")


@pytest.fixture(params=[SerialEnv, ParallelEnv])
def batched_cartpole(request):
    env = request.param(2, cartpole)
    yield env
    env.close()


def test_a_batched_env_does_not_broadcast_an_action(batched_cartpole):
    td = batched_cartpole.reset().set("action", torch.ones(2, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"key 'action': expected shape \(2, 2\), got \(2, 1\)"):
        batched_cartpole.step(td)


def test_a_batched_env_does_not_cast_an_action_that_a_cast_would_change(batched_cartpole):
    # [0.3, 0.7] would become [0, 0] and step left where a single env steps right
    td = batched_cartpole.reset().set("action", torch.tensor([[0.3, 0.7], [0.3, 0.7]]))
    with pytest.raises(
        TypeError, match=r"key 'action': expected dtype torch.int64, got torch.float32, with values"
    ):
        batched_cartpole.step(td)
    with pytest.raises(TypeError, match="key 'action'"):
        batched_cartpole.step_and_maybe_reset(td)


def test_a_batched_env_casts_an_action_whose_values_survive_the_cast(batched_cartpole):
    env = batched_cartpole
    action = torch.tensor([[0, 1], [1, 0]])
    env.set_seed(0)
    expected = env.step(env.reset().set("action", action))["next", "observation"]
    env.set_seed(0)
    got = env.step(env.reset().set("action", action.float()))["next", "observation"]
    assert torch.equal(got, expected)


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
@pytest.mark.parametrize("size", [1, 5])
def test_a_sub_env_output_is_checked_at_every_write(batched, size):
    env = batched(2, ShrinkingObservationEnv, {"size": size})
    try:
        td = env.reset()
        for _ in range(2):
            td = env.step_mdp(env.step(env.rand_action(td)))
        with pytest.raises(ValueError, match=r"'observation'.*shape.*\(4,\).*\(" + str(size)):
            env.step(env.rand_action(td))
    finally:
        env.close()


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_a_sub_env_output_of_another_dtype_is_an_error(batched):
    env = batched(2, FloatRewardEnv, {"max_steps": 100})
    try:
        td = env.step_mdp(env.step(env.rand_action(env.reset())))
        with pytest.raises(TypeError, match=r"'reward'.*dtype.*torch.float32.*torch.float64"):
            env.step(env.rand_action(td))
    finally:
        env.close()


@pytest.mark.parametrize(
    "action, error, message",
    [
        (torch.tensor([0, 1, 0]), ValueError, r"expected shape \(2,\), got \(3,\)"),
        (torch.tensor([0.5, 1.0]), TypeError, r"expected dtype torch.int64, got torch.float32"),
        ([0, 1], TypeError, "expected a tensor, got list"),
    ],
)
def test_gym_env_checks_the_action_layout_at_every_step(action, error, message):
    env = GymEnv("CartPole-v1")
    td = env.reset()
    td._tensordict["action"] = action  # what a careless policy could leave there
    with pytest.raises(error, match=r"action spec mismatch at key 'action': " + message):
        env.step(td)


@pytest.mark.parametrize("action", [[1, 1], [0, 0]], ids=["two-hot", "all-zero"])
def test_gym_env_checks_one_hot_values_under_run_type_checks(action):
    env = GymEnv("CartPole-v1", run_type_checks=True)
    td = env.reset().set("action", torch.tensor(action))
    with pytest.raises(ValueError, match=r"action value out of spec at key 'action'.*OneHot"):
        env.step(td)


def test_gym_env_casts_an_action_whose_values_survive_the_cast():
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    expected = env.step(env.reset().set("action", torch.tensor([0, 1])))["next", "observation"]
    env.set_seed(0)
    got = env.step(env.reset().set("action", torch.tensor([0.0, 1.0])))["next", "observation"]
    assert torch.equal(got, expected)


def test_gym_env_names_a_missing_action():
    env = GymEnv("CartPole-v1")
    with pytest.raises(KeyError, match=r"expected an 'action' entry in the input, got the keys"):
        env.step(env.reset())


def test_a_bad_action_leaves_the_batched_env_usable():
    env = SerialEnv(2, cartpole)
    try:
        td = env.reset()
        with pytest.raises(ValueError):
            env.step(td.clone().set("action", torch.ones(2, 1, dtype=torch.int64)))
        data = env.step(env.rand_action(td))
        assert data["next", "observation"].shape == (2, 4)
    finally:
        env.close()


@pytest.mark.parametrize(
    "mask, got",
    [(torch.tensor([[1.0], [0.0]]), "torch.float32"), (torch.tensor([[1], [0]]), "torch.int64")],
)
def test_a_reset_mask_that_is_not_boolean_is_a_type_error(mask, got):
    env = CountingEnv(batch_size=(2,))
    td = env.reset().set("_reset", mask)
    with pytest.raises(
        TypeError, match=rf"reset mask at key '_reset': expected a torch.bool.*{got}"
    ):
        env.reset(td)
