"""Partial resets: the flat and one-element-per-worker shortcuts give the generic result."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import SerialEnv
from tdrl.envs._partial import update_during_reset
from tdrl.envs.libs.gym import GymEnv


def test_a_flat_partial_reset_merges_like_the_generic_update():
    torch.manual_seed(0)
    mask = torch.tensor([[True], [False], [True]])
    previous = TensorDict(
        observation=torch.randn(3, 4),
        done=torch.ones(3, 1, dtype=torch.bool),
        count=torch.arange(3).unsqueeze(-1),
        _reset=mask,
        batch_size=[3],
    )
    reset = TensorDict(
        observation=torch.randn(3, 4),
        done=torch.zeros(3, 1, dtype=torch.bool),
        fresh=torch.ones(3, 2),
        batch_size=[3],
    )
    expected_obs = torch.where(mask.expand(3, 4), reset["observation"], previous["observation"])
    expected_done = torch.where(mask, reset["done"], previous["done"])
    out = update_during_reset(reset, previous, ["_reset"])
    assert out is previous
    assert list(out.keys()) == ["observation", "done", "count", "fresh"]
    assert torch.equal(out["observation"], expected_obs)
    assert torch.equal(out["done"], expected_done)
    assert torch.equal(out["count"], torch.arange(3).unsqueeze(-1))
    assert out["fresh"] is reset["fresh"]


def test_a_nested_partial_reset_keeps_the_generic_update():
    mask = torch.tensor([True, False])
    previous = TensorDict(
        agent=TensorDict(obs=torch.zeros(2, 3), batch_size=[2]), _reset=mask, batch_size=[2]
    )
    reset = TensorDict(agent=TensorDict(obs=torch.ones(2, 3), batch_size=[2]), batch_size=[2])
    out = update_during_reset(reset, previous, ["_reset"])
    assert torch.equal(out["agent", "obs"][:, 0], torch.tensor([1.0, 0.0]))


@pytest.mark.parametrize("reset_mask", [[True, False, False], [False, True, True], [False] * 3])
def test_a_serial_partial_reset_resets_the_masked_workers_only(reset_mask):
    env = SerialEnv(3, lambda: GymEnv("CartPole-v1"))
    env.set_seed(0)
    td = env.reset()
    for _ in range(3):
        td = env.step_mdp(env.rand_step(td))
    before = td["observation"].clone()
    mask = torch.tensor(reset_mask).unsqueeze(-1)
    td.set("_reset", mask)
    out = env.reset(td)
    for w, flag in enumerate(reset_mask):
        if flag:
            assert not torch.equal(out["observation"][w], before[w])
        else:
            assert torch.equal(out["observation"][w], before[w])
    assert "_reset" not in out.keys()
    env.close()


class OneHotArgmax(torch.nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1])


@pytest.mark.parametrize("make_policy", [False, True], ids=["random", "module"])
def test_a_batched_rollout_fusing_step_and_resets_equals_the_unfused_loop(monkeypatch, make_policy):
    from tensordict.nn import TensorDictModule
    from torch import nn

    from tdrl.envs import rollout as rollout_module

    def run():
        env = SerialEnv(3, lambda: GymEnv("CartPole-v1"))
        env.set_seed(1)
        torch.manual_seed(0)
        policy = None
        if make_policy:
            net = nn.Sequential(nn.Linear(4, 2), OneHotArgmax())
            policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
        else:
            policy = env.rand_action
        data = env.rollout(80, policy, break_when_any_done=False)
        env.close()
        return data

    fused = run()
    assert fused["next", "done"].any(), "the rollout must cross episode ends"
    monkeypatch.setattr(rollout_module, "_fused_step_reset", lambda env: None)
    unfused = run()
    assert set(fused.keys(True, True)) == set(unfused.keys(True, True))
    for key in fused.keys(True, True):
        assert torch.equal(fused[key], unfused[key]), key


def test_a_batched_rollout_with_a_callback_steps_then_resets(monkeypatch):
    from tdrl.envs import rollout as rollout_module

    calls = []
    monkeypatch.setattr(rollout_module, "_fused_step_reset", lambda env: calls.append(env) or None)
    env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
    env.rollout(5, callback=lambda env, td: None, break_when_any_done=False)
    env.rollout(5, break_when_any_done=True)
    assert calls == []
    env.rollout(5, break_when_any_done=False)
    assert len(calls) == 1
    env.close()
