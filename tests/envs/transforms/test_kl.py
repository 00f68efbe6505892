"""Tests of KLRewardTransform (tdrl/envs/transforms/kl.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn
from torch.distributions import Normal

from tdrl.envs import GymEnv, KLRewardTransform, TransformedEnv, check_env_specs


def _actor() -> ProbabilisticTensorDictSequential:
    net = TensorDictModule(
        nn.Sequential(nn.Linear(3, 2), NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    return ProbabilisticTensorDictSequential(
        net,
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=Normal,
            return_log_prob=True,
        ),
    )


def _shift(actor: nn.Module, amount: float = 0.5) -> None:
    with torch.no_grad():
        for parameter in actor.parameters():
            parameter.add_(amount)


def test_kl_is_zero_while_the_actor_matches_the_reference():
    actor = _actor()
    env = TransformedEnv(GymEnv("Pendulum-v1"), KLRewardTransform(actor, out_keys="reward_kl"))
    with torch.no_grad():
        rollout = env.rollout(4, actor)
    torch.testing.assert_close(rollout["next", "reward_kl"], rollout["next", "reward"])


def test_kl_matches_the_log_ratio():
    actor = _actor()
    transform = KLRewardTransform(actor, coef=0.5, out_keys="reward_kl")
    reference = _actor()
    reference.load_state_dict(actor.state_dict())
    _shift(actor)
    env = TransformedEnv(GymEnv("Pendulum-v1"), transform)
    with torch.no_grad():
        rollout = env.rollout(4, actor)
        log_ref = reference.get_dist(rollout.clone()).log_prob(rollout["action"])
    expected = rollout["next", "reward"] + 0.5 * (rollout["action_log_prob"] - log_ref)
    torch.testing.assert_close(rollout["next", "reward_kl"], expected)
    assert rollout["reward_kl"][0].eq(0).all()  # zero at reset


def test_kl_in_place_reward_and_specs():
    base = GymEnv("Pendulum-v1")
    before = base.output_spec.clone()
    actor = _actor()
    env = TransformedEnv(base, KLRewardTransform(actor))
    assert env.reward_spec.shape == (1,)
    assert base.output_spec == before
    _shift(actor)
    check_env_specs(env)  # random actions: the current log-prob is computed with the actor
    with torch.no_grad():
        rollout = env.rollout(3, actor)
    assert rollout["next", "reward"].shape == (3, 1)


def test_kl_observation_entry_passes_check_env_specs():
    env = TransformedEnv(GymEnv("Pendulum-v1"), KLRewardTransform(_actor(), out_keys="reward_kl"))
    assert "reward_kl" in env.observation_spec.keys()
    check_env_specs(env)


def test_kl_forward_on_buffer_data_and_frozen_reference():
    actor = _actor()
    transform = KLRewardTransform(actor, coef=2.0)
    assert all(not p.requires_grad for p in transform.reference_actor.parameters())
    _shift(actor)
    data = TensorDict({"observation": torch.randn(5, 3)}, [5])
    with torch.no_grad():
        data = actor(data)
    data.set(("next", "reward"), torch.ones(5, 1))
    out = transform(data.clone())
    with torch.no_grad():
        log_ref = transform.reference_actor.get_dist(data.clone()).log_prob(data["action"])
    expected = 1 + 2.0 * (data["action_log_prob"] - log_ref)
    torch.testing.assert_close(out["next", "reward"], expected)


def test_kl_requires_grad():
    actor = _actor()
    transform = KLRewardTransform(actor, requires_grad=True)
    assert all(p.requires_grad for p in transform.reference_actor.parameters())
    data = TensorDict({"observation": torch.randn(4, 3)}, [4])
    with torch.no_grad():
        data = actor(data)
    data.set(("next", "reward"), torch.zeros(4, 1))
    transform(data)["next", "reward"].sum().backward()
    assert any(p.grad is not None for p in transform.reference_actor.parameters())


def test_kl_errors():
    with pytest.raises(TypeError, match="get_dist"):
        KLRewardTransform(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="one reward"):
        KLRewardTransform(_actor(), in_keys=["a", "b"])
    with pytest.raises(KeyError, match="reward spec"):
        TransformedEnv(GymEnv("Pendulum-v1"), KLRewardTransform(_actor(), in_keys=["bonus"]))
    with pytest.raises(KeyError, match="action"):
        KLRewardTransform(_actor())(
            TensorDict({"observation": torch.zeros(3), "next": {"reward": torch.zeros(1)}}, [])
        )
