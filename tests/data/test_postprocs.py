"""MultiStep: n-step returns, shifted next entries, steps_to_next_obs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.postprocs import MultiStep


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
