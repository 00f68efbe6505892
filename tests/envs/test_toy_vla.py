"""ToyVLAEnv: the VLA key layout, the state echo and the tracking task."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import ParallelEnv, SerialEnv, ToyVLAEnv, check_env_specs


@pytest.mark.parametrize("batch_size", [(), (2,)])
@pytest.mark.parametrize("tracking", [{}, {"success_steps": 2, "action_dim": 2, "state_dim": 4}])
def test_specs_match_the_data(batch_size, tracking):
    env = ToyVLAEnv(batch_size=batch_size, **tracking)
    check_env_specs(env)
    data = env.reset()
    assert data["observation", "image"].dtype == torch.uint8
    assert data["observation", "image"].shape == (*batch_size, 3, 16, 16)
    assert ("success" in data.keys()) == bool(tracking)


def test_state_echoes_the_action_and_reward_is_its_negative_norm():
    env = ToyVLAEnv(action_dim=3, state_dim=5, batch_size=[2])
    data = env.reset()
    data["action"] = torch.tensor([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]])
    out = env.step(data)["next"]
    assert torch.equal(out["observation", "state"][:, :3], data["action"])
    assert (out["observation", "state"][:, 3:] == 0).all()
    torch.testing.assert_close(out["reward"], -data["action"].norm(dim=-1, keepdim=True))
    assert not out["done"].any()
    assert out["language_instruction"] == "reach the target"


def test_the_seed_decides_the_images():
    first = ToyVLAEnv(seed=3).reset()["observation", "image"]
    assert torch.equal(first, ToyVLAEnv(seed=3).reset()["observation", "image"])
    assert not torch.equal(first, ToyVLAEnv(seed=4).reset()["observation", "image"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"action_dim": 5, "state_dim": 3}, "state_dim: expected at least action_dim"),
        ({"action_dim": 3, "state_dim": 5, "success_steps": 2}, r"2 \* action_dim = 6"),
        ({"action_dim": 2, "state_dim": 4, "success_steps": 0}, "success_steps: expected"),
        ({"success_steps": 2, "success_tol": 0.7}, r"success_tol: expected a value in \(0, 0.5\]"),
        ({"group_repeats": 2}, "pass success_steps too"),
        ({"success_steps": 2, "group_repeats": 0}, "group_repeats must be >= 1"),
        ({"success_steps": 2, "group_repeats": 2, "batch_size": [2]}, "single environment"),
        ({"from_pixels": True, "render_size": 0}, "render_size: expected a positive"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ToyVLAEnv(**kwargs)


def _oracle(data):
    return data.set("action", data["observation", "state"][..., 2:4].clone())


def test_an_oracle_succeeds_in_success_steps_steps_and_a_random_policy_does_not():
    env = ToyVLAEnv(action_dim=2, state_dim=4, success_steps=3, seed=0)
    rollout = env.rollout(10, _oracle)
    assert rollout.batch_size == (3,)
    assert rollout["next", "success"].squeeze(-1).tolist() == [False, False, True]
    assert rollout["next", "terminated"][-1].all()
    assert (rollout["next", "reward"] == 0).all()
    torch.manual_seed(0)
    random_env = ToyVLAEnv(action_dim=4, state_dim=8, success_steps=2, seed=0)
    assert not random_env.rollout(100)["next", "success"].any()


def test_a_miss_restarts_the_streak():
    env = ToyVLAEnv(action_dim=2, state_dim=4, success_steps=2, seed=0)
    data = env.reset()
    target = data["observation", "state"][2:4].clone()
    hits = []
    for offset in (0.0, 0.4, 0.0, 0.0):
        data["action"] = target + offset
        data = env.step(data)["next"]
        hits.append(bool(data["success"]))
    assert hits == [False, False, False, True]


def test_a_partial_reset_keeps_the_other_targets_and_streaks():
    env = ToyVLAEnv(action_dim=2, state_dim=4, success_steps=3, batch_size=[2], seed=1)
    data = env.reset()
    target = data["observation", "state"][:, 2:4].clone()
    data["action"] = target.clone()
    data = env.step(data)["next"]
    data["_reset"] = torch.tensor([[True], [False]])
    data = env.reset(data)
    new_target = data["observation", "state"][:, 2:4].clone()
    assert torch.equal(new_target[1], target[1]) and not torch.equal(new_target[0], target[0])
    for _ in range(2):
        data["action"] = new_target.clone()
        data = env.step(data)["next"]
    assert data["success"].squeeze(-1).tolist() == [False, True]


def test_a_step_mask_freezes_the_elements_it_leaves_out():
    env = ToyVLAEnv(action_dim=2, state_dim=4, success_steps=1, batch_size=[2], seed=0)
    data = env.reset()
    data["action"] = data["observation", "state"][:, 2:4].clone()
    data["_step"] = torch.tensor([True, False])
    out = env.step(data)["next"]
    assert out["success"].squeeze(-1).tolist() == [True, False]
    assert out["reward"][1].item() == 0.0
    # a success stays: a masked-in element that already succeeded keeps it, unpaid
    data["action"] = -data["action"]
    data["_step"] = torch.tensor([True, True])
    out = env.step(data)["next"]
    assert out["done"].squeeze(-1).tolist() == [True, False]
    assert out["reward"][0].item() == 0.0 and out["reward"][1].item() != 0.0


def test_grouped_episodes_share_their_target_and_group_id():
    env = ToyVLAEnv(
        action_dim=2, state_dim=4, success_steps=2, group_repeats=2, group_id_offset=5, seed=0
    )
    check_env_specs(env)
    env = ToyVLAEnv(
        action_dim=2, state_dim=4, success_steps=2, group_repeats=2, group_id_offset=5, seed=0
    )
    ids, targets = [], []
    for _ in range(4):
        data = env.reset()
        ids.append(data["group_id"].item())
        targets.append(data["observation", "state"][2:4].clone())
    assert ids == [5, 5, 6, 6]
    assert torch.equal(targets[0], targets[1]) and torch.equal(targets[2], targets[3])
    assert not torch.equal(targets[0], targets[2])
    assert env.step(_oracle(data))["next", "group_id"].item() == 6


def test_the_episode_state_lives_in_buffers_that_are_not_saved():
    env = ToyVLAEnv(action_dim=2, state_dim=4, success_steps=2)
    env.step(_oracle(env.reset()))
    assert {"_target", "_streak"} <= set(dict(env.named_buffers()))
    assert not env.state_dict()


def test_pixels_show_the_action_and_target_markers():
    env = ToyVLAEnv(action_dim=2, state_dim=4, success_steps=2, from_pixels=True, render_size=20)
    data = env.reset()
    assert data["pixels"].shape == (20, 20, 3) and data["pixels"].dtype == torch.uint8
    data["action"] = torch.tensor([-1.0, -1.0])
    corner = env.step(data)["next", "pixels"]
    assert (corner[:2, :2, 0] == 255).all() and (corner[..., 1] == 255).any()
    data["action"] = torch.tensor([1.0, 1.0])
    other = env.step(data)["next", "pixels"]
    assert not (other[:2, :2, 0] == 255).any() and (other[-2:, -2:, 0] == 255).all()
    assert "pixels" not in ToyVLAEnv().reset().keys()


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_batched_envs_keep_each_sub_env_instruction(cls):
    makers = [
        lambda: ToyVLAEnv(action_dim=2, state_dim=2, instruction="pick the apple"),
        lambda: ToyVLAEnv(action_dim=2, state_dim=2, instruction="pick the pear"),
    ]
    with cls(2, makers) as env:
        rollout = env.rollout(3)
    assert rollout[0, 0]["language_instruction"] == "pick the apple"
    assert rollout[1, 2]["language_instruction"] == "pick the pear"
