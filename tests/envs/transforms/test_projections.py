"""Tests of the action projections (tdrl/envs/transforms/projections.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot
from tdrl.envs import (
    ActionDiscretizer,
    Compose,
    DiscreteActionProjection,
    GymEnv,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
    gSDENoise,
)
from tests.mocks import CountingEnv

Strategy = ActionDiscretizer.SamplingStrategy


# ------------------------------------------------------------------ ActionDiscretizer
def _pendulum(**kwargs) -> TransformedEnv:
    return TransformedEnv(GymEnv("Pendulum-v1"), ActionDiscretizer(**kwargs))


@pytest.mark.parametrize(
    ("sampling", "expected"),
    [
        (Strategy.MEDIAN, [-1.6, 0.0, 1.6]),
        (Strategy.LOW, [-2.0, -0.4, 1.2]),
        ("high", [-1.2, 0.4, 2.0]),
    ],
)
def test_action_discretizer_sampling(sampling, expected):
    env = _pendulum(num_intervals=5, sampling=sampling)
    td = TensorDict({"action": torch.tensor([[0], [2], [4]])}, [3])
    out = env.transform.inv(td)
    torch.testing.assert_close(out["action"].squeeze(-1), torch.tensor(expected))
    assert td["action"].dtype == torch.int64  # the input is left alone


def test_action_discretizer_random_stays_in_bin():
    env = _pendulum(num_intervals=4, sampling=Strategy.RANDOM)
    out = env.transform.inv(TensorDict({"action": torch.full((200, 1), 1)}, [200]))["action"]
    assert bool(((out >= -1.0) & (out <= 0.0)).all()) and out.std() > 0


def test_action_discretizer_specs_and_rollout():
    base = GymEnv("Pendulum-v1")
    before = base.action_spec.clone()
    env = TransformedEnv(base, ActionDiscretizer(num_intervals=7))
    assert isinstance(env.action_spec, Categorical) and env.action_spec.n == 7
    assert base.action_spec == before
    check_env_specs(env)
    env = TransformedEnv(GymEnv("Pendulum-v1"), ActionDiscretizer(7, categorical=False))
    assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (7,)
    check_env_specs(env)


def test_action_discretizer_multi_dim():
    env = TransformedEnv(
        CountingEnv(batch_size=(2,)), ActionDiscretizer(num_intervals=torch.tensor([3]))
    )
    check_env_specs(env)
    base = CountingEnv()
    spec_env = TransformedEnv(base, ActionDiscretizer(3))
    assert spec_env.action_spec.shape == (1,)


def test_action_discretizer_vector_intervals():
    from tdrl.data import Bounded, Composite, Unbounded
    from tdrl.envs.common import EnvBase

    class TwoActions(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded((2,)))
            self.action_spec = Bounded(torch.tensor([0.0, -1.0]), torch.tensor([1.0, 1.0]))
            self.reward_spec = Unbounded((1,))

        def _reset(self, tensordict=None, **kwargs):
            return TensorDict(
                {"observation": torch.zeros(2), "done": torch.zeros(1, dtype=torch.bool)}, []
            )

        def _step(self, tensordict):
            action = tensordict["action"]
            return TensorDict(
                {
                    "observation": action.clone(),
                    "reward": torch.zeros(1),
                    "done": torch.zeros(1, dtype=torch.bool),
                },
                [],
            )

        def _set_seed(self, seed):
            pass

    env = TransformedEnv(TwoActions(), ActionDiscretizer(torch.tensor([2, 4])))
    assert isinstance(env.action_spec, MultiCategorical)
    check_env_specs(env)
    td = env.step(env.reset().set("action", torch.tensor([1, 0])))
    torch.testing.assert_close(td["next", "observation"], torch.tensor([0.75, -0.75]))
    onehot = TransformedEnv(
        TwoActions(), ActionDiscretizer(torch.tensor([2, 4]), categorical=False)
    )
    assert isinstance(onehot.action_spec, MultiOneHot) and onehot.action_spec.shape == (6,)
    check_env_specs(onehot)
    action = torch.tensor([0, 1, 0, 0, 0, 1], dtype=torch.bool)
    td = onehot.step(onehot.reset().set("action", action))
    torch.testing.assert_close(td["next", "observation"], torch.tensor([0.75, 0.75]))
    with pytest.raises(ValueError, match="counts"):
        TransformedEnv(TwoActions(), ActionDiscretizer(torch.tensor([2, 3, 4])))


def test_action_discretizer_out_action_key():
    env = TransformedEnv(
        GymEnv("Pendulum-v1"),
        Compose(StepCounter(), ActionDiscretizer(5, out_action_key="action_disc")),
    )
    assert list(env.full_action_spec.keys()) == ["action_disc"]
    assert "action" in env.full_state_spec.keys()
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["action"].dtype == torch.float32
    assert rollout["action_disc"].dtype == torch.int64
    median = -2.0 + (rollout["action_disc"].float() + 0.5) * 0.8
    torch.testing.assert_close(rollout["action"], median)


def test_action_discretizer_errors():
    with pytest.raises(ValueError, match="positive"):
        ActionDiscretizer(0)
    with pytest.raises(TypeError, match="int or a tensor"):
        ActionDiscretizer(2.5)
    with pytest.raises(ValueError, match="sampling"):
        ActionDiscretizer(3, sampling="middle")
    with pytest.raises(TypeError, match="Bounded"):
        TransformedEnv(GymEnv("CartPole-v1"), ActionDiscretizer(3))


class ScalarActionEnv(CountingEnv):
    """A counting env whose action has no feature dim (one float per env)."""

    def __init__(self, batch_size=()):
        super().__init__(max_steps=100, batch_size=batch_size)
        self.action_spec = Bounded(-1.0, 1.0, self.batch_size)

    def _step(self, tensordict):
        action = tensordict.get("action").unsqueeze(-1)
        return super()._step(tensordict.clone(False).set("action", action))


@pytest.mark.parametrize("categorical", [True, False])
@pytest.mark.parametrize("batch_size", [(), (2,)])
def test_action_discretizer_scalar_actions(categorical, batch_size):
    env = TransformedEnv(
        ScalarActionEnv(batch_size), ActionDiscretizer(num_intervals=4, categorical=categorical)
    )
    check_env_specs(env)
    spec = env.action_spec
    if categorical:
        assert isinstance(spec, Categorical) and spec.shape == batch_size
        action = torch.full(batch_size, 3)
    else:
        assert isinstance(spec, OneHot) and spec.shape == (*batch_size, 4)
        action = torch.nn.functional.one_hot(torch.full(batch_size, 3), 4).bool()
    inner = env.transform.inv(env.reset().set("action", action))["action"]
    assert inner.shape == batch_size
    assert torch.allclose(inner, torch.full(batch_size, 0.75))


def test_action_discretizer_bins_need_an_env():
    with pytest.raises(RuntimeError, match="Cannot execute transform ActionDiscretizer"):
        ActionDiscretizer(num_intervals=5)._init()
    t = ActionDiscretizer(num_intervals=5)
    TransformedEnv(GymEnv("Pendulum-v1"), t)
    t._nvec = None  # forget the bins: the next action recomputes them from the parent
    action = t.inv(TensorDict({"action": torch.tensor([0])}))["action"]
    assert torch.allclose(action, torch.tensor([-1.6]))


# ------------------------------------------------------------------ DiscreteActionProjection
def test_discrete_action_projection_env():
    env = TransformedEnv(GymEnv("CartPole-v1"), DiscreteActionProjection(2, 5))
    assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (5,)
    check_env_specs(env)
    rollout = env.rollout(4)
    assert rollout["action"].shape == (4, 5)


def test_discrete_action_projection_maps_out_of_range_actions():
    transform = DiscreteActionProjection(num_actions_effective=3, max_actions=6)
    actions = torch.nn.functional.one_hot(torch.tensor([0, 2, 4, 5] * 50), 6)
    out = transform.inv(TensorDict({"action": actions}, [200]))["action"]
    assert out.shape == (200, 3) and bool((out.sum(-1) == 1).all())
    index = out.argmax(-1)
    assert index[:2].tolist() == [0, 2]
    assert set(index[2::4].tolist()) <= {0, 1, 2} and len(set(index[2::4].tolist())) > 1


def test_discrete_action_projection_forward_and_errors():
    transform = DiscreteActionProjection(2, 4)
    out = transform(TensorDict({"action": torch.tensor([[0, 1], [1, 0]])}, [2]))["action"]
    assert out.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    off = DiscreteActionProjection(2, 4, include_forward=False)
    assert off(TensorDict({"action": torch.tensor([0, 1])}, []))["action"].shape == (2,)
    with pytest.raises(ValueError, match="max_actions >= num_actions_effective"):
        DiscreteActionProjection(5, 3)
    with pytest.raises(ValueError, match="size 4"):
        transform.inv(TensorDict({"action": torch.tensor([0, 1, 0])}, []))
    with pytest.raises(ValueError, match="OneHot"):
        TransformedEnv(GymEnv("CartPole-v1"), DiscreteActionProjection(3, 5))


# ------------------------------------------------------------------ gSDENoise
def test_gsde_noise_random_and_partial_reset():
    env = TransformedEnv(
        CountingEnv(batch_size=(3,)), gSDENoise(state_dim=4, action_dim=1, shape=(3,))
    )
    check_env_specs(env)
    td = env.reset()
    assert td["_eps_gSDE"].shape == (3, 1, 4) and td["_eps_gSDE"].std() > 0
    first = td["_eps_gSDE"].clone()
    td = env.reset(td.set("_reset", torch.tensor([[True], [False], [False]])))
    assert torch.equal(td["_eps_gSDE"][1:], first[1:])
    assert not torch.equal(td["_eps_gSDE"][0], first[0])


def test_gsde_noise_placeholder_in_serial_env():
    env = SerialEnv(2, lambda: TransformedEnv(CountingEnv(), gSDENoise()))
    try:
        check_env_specs(env)
        assert env.reset()["_eps_gSDE"].eq(0).all()
    finally:
        env.close()
