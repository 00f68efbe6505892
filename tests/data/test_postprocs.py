"""MultiStep: n-step returns, shifted next entries, steps_to_next_obs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.postprocs import DensifyReward, MultiStep


def rollout(rewards, dones, batch=()):
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    time = rewards.shape[-1]
    obs = torch.arange(time + 1.0).expand(*batch, time + 1)
    return TensorDict(
        {
            "obs": obs[..., :-1],
            "next": {
                "obs": obs[..., 1:].clone(),
                "reward": rewards.expand(*batch, time).unsqueeze(-1).clone(),
                "done": torch.as_tensor(dones).expand(*batch, time).unsqueeze(-1).clone(),
                "terminated": torch.as_tensor(dones).expand(*batch, time).unsqueeze(-1).clone(),
            },
        },
        [*batch, time],
    )


def reference(rewards, dones, gamma, n):
    time = len(rewards)
    out, steps, last = [], [], []
    for t in range(time):
        total, k = 0.0, 0
        while k < n and t + k < time:
            total += gamma**k * rewards[t + k]
            k += 1
            if dones[t + k - 1]:
                break
        out.append(total)
        steps.append(k)
        last.append(t + k - 1)
    return out, steps, last


@pytest.mark.parametrize("n_steps", [1, 3, 5])
def test_matches_python_reference(n_steps):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(20, generator=gen).tolist()
    dones = [t in (4, 11, 12) for t in range(20)]
    out = MultiStep(gamma=0.9, n_steps=n_steps)(rollout(rewards, dones))
    expected, steps, last = reference(rewards, dones, 0.9, n_steps)
    assert torch.allclose(out["next", "reward"].squeeze(-1), torch.tensor(expected), atol=1e-5)
    assert out["steps_to_next_obs"].squeeze(-1).tolist() == steps
    assert out["next", "obs"].tolist() == [float(t + 1) for t in last]
    assert out["next", "done"].squeeze(-1).tolist() == [dones[t] for t in last]
    assert torch.equal(out["next", "original_reward"].squeeze(-1), torch.tensor(rewards))


def test_batched_time_last_and_shifted_obs_check():
    data = rollout([1.0] * 6, [False] * 6, batch=(3,))
    out = MultiStep(gamma=1.0, n_steps=2)(data)
    assert out["next", "reward"].shape == (3, 6, 1)
    assert out["next", "reward"][:, :5].eq(2).all() and out["next", "reward"][:, 5].eq(1).all()
    # as the docs note, consecutive obs no longer chain once shifted by n steps
    assert not (out[..., 1:]["obs"] == out[..., :-1]["next", "obs"]).all()


def test_mask_key_stops_windows():
    data = rollout([1.0] * 4, [False] * 4)
    data["mask"] = torch.tensor([True, True, False, False])
    out = MultiStep(gamma=1.0, n_steps=3, mask_key="mask")(data)
    assert out["steps_to_next_obs"].squeeze(-1).tolist()[:2] == [2, 1]


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_steps"):
        MultiStep(0.9, 0)
    with pytest.raises(ValueError, match="gamma"):
        MultiStep(1.5, 2)
    with pytest.raises(KeyError, match="expected key \\('next', 'done'\\)"):
        MultiStep(0.9, 2)(TensorDict({"next": {"reward": torch.zeros(3, 1)}}, [3]))
    with pytest.raises(TypeError, match="expects a TensorDict"):
        MultiStep(0.9, 2)(torch.zeros(3))


def test_gamma_and_nonterminal_entries():
    dones = [False, False, True, False, False]
    data = rollout([1.0] * 5, dones)
    # step 3 is truncated, not terminated: the bootstrap value is kept there
    data["next", "done"][3] = True
    out = MultiStep(gamma=0.5, n_steps=2)(data)
    steps = out["steps_to_next_obs"]
    assert torch.allclose(out["gamma"], 0.5**steps)
    assert out["nonterminal"].shape == (5,)
    assert out["nonterminal"].tolist() == [True, False, False, True, True]


def test_input_is_left_unchanged():
    data = rollout([1.0, 2.0, 3.0], [False, False, False])
    before = data.clone()
    out = MultiStep(gamma=0.9, n_steps=2)(data)
    assert (data == before).all()
    assert set(data.keys()) == set(before.keys())
    assert not torch.equal(out["next", "obs"], data["next", "obs"])
    # unchanged entries are shared, not copied
    assert out["obs"].data_ptr() == data["obs"].data_ptr()


def test_collector_mask_used_by_default():
    data = rollout([1.0] * 4, [False] * 4)
    data["collector", "mask"] = torch.tensor([True, True, False, False])
    out = MultiStep(gamma=1.0, n_steps=3)(data)
    assert out["steps_to_next_obs"].squeeze(-1).tolist()[:2] == [2, 1]
    assert out["nonterminal"].tolist() == [True, True, False, False]


def test_explicit_mask_key_must_exist():
    with pytest.raises(KeyError, match="my_mask"):
        MultiStep(gamma=0.9, n_steps=2, mask_key="my_mask")(rollout([1.0] * 3, [False] * 3))


def test_reference_module_path():
    from tdrl.data.postprocs import postprocs

    assert postprocs.MultiStep is MultiStep
    assert postprocs.DensifyReward is DensifyReward


def test_densify_reward_spreads_final_reward():
    done = torch.tensor([0, 0, 1, 0, 1, 0], dtype=torch.bool).reshape(1, 6, 1).expand(2, 6, 1)
    reward = torch.tensor([0.0, 0.0, 3.0, 0.0, 7.0, 2.0]).reshape(1, 6, 1).expand(2, 6, 1)
    data = TensorDict({"next": {"reward": reward.clone(), "done": done.clone()}}, [2, 6])
    out = DensifyReward()(data)
    assert out is data
    expected = [3.0, 3.0, 3.0, 7.0, 7.0, 2.0]
    assert out["next", "reward"].squeeze(-1).tolist() == [expected, expected]


def test_densify_reward_to_another_key_and_errors():
    data = TensorDict(
        {"next": {"r": torch.tensor([0.0, 5.0]), "done": torch.tensor([False, True])}}, [2]
    )
    DensifyReward(reward_key="r", reward_key_out="dense")(data)
    assert data["next", "dense"].tolist() == [5.0, 5.0]
    assert data["next", "r"].tolist() == [0.0, 5.0]
    with pytest.raises(KeyError, match="reward"):
        DensifyReward()(data)
    with pytest.raises(TypeError, match="TensorDict"):
        DensifyReward()({"next": {}})
