"""Replay-buffer transforms: MultiStepTransform, NextStateReconstructor, PolicyAgeFilter."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler, TensorDictReplayBuffer
from tdrl.data.postprocs import MultiStep
from tdrl.envs import NextStateReconstructor, PolicyAgeFilter, TransformedEnv
from tdrl.envs.transforms.rb_transforms import MultiStepTransform
from tests.data.test_slice_samplers import MockCollector
from tests.mocks import CountingEnv


def test_matches_multistep_on_the_whole_stream():
    collector = MockCollector(num_envs=2, frames_per_batch=6, min_len=3, max_len=7)
    batches = [collector.rollout() for _ in range(4)]
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100, ndim=2), transform=MultiStepTransform(n_steps=3, gamma=0.9)
    )
    for batch in batches:
        rb.extend(batch)
    whole = MultiStep(0.9, 3)(torch.cat(batches, dim=1))
    expected = whole[:, :-3]
    stored = rb[:]
    assert stored.shape == expected.shape == (2, 21)
    for key in ("steps_to_next_obs", ("next", "reward"), ("next", "observation"), ("next", "done")):
        assert torch.allclose(stored[key].float(), expected[key].float()), key


def test_first_batch_holds_back_n_steps_and_sampling_is_unchanged():
    transform = MultiStepTransform(n_steps=2, gamma=0.5)
    rb = ReplayBuffer(storage=LazyTensorStorage(20), transform=transform, batch_size=3)
    data = MockCollector(num_envs=1, frames_per_batch=5).rollout()
    rb.extend(data)
    assert len(rb) == 3
    assert "steps_to_next_obs" in rb.sample().keys()
    transform.empty_cache()
    rb.extend(data)
    assert len(rb) == 6


def test_shape_mismatch_between_batches():
    transform = MultiStepTransform(n_steps=2, gamma=0.5)
    transform.inv(MockCollector(num_envs=2, frames_per_batch=4).rollout())
    with pytest.raises(ValueError, match="batch shape mismatch"):
        transform.inv(MockCollector(num_envs=3, frames_per_batch=4).rollout())


# ------------------------------------------------------------ NextStateReconstructor
def _trajectories(n_traj=3, length=4):
    n = n_traj * length
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[length - 1 :: length] = True
    return TensorDict(
        {
            "observation": torch.arange(float(n)).unsqueeze(-1),
            ("next", "done"): done,
            ("collector", "traj_ids"): torch.arange(n_traj).repeat_interleave(length),
        },
        [n],
    )


def test_next_state_rebuilt_within_slices():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(12),
        sampler=SliceSampler(slice_len=4, traj_key=("collector", "traj_ids")),
        transform=NextStateReconstructor(),
        batch_size=8,
    )
    rb.extend(_trajectories())
    sample = rb.sample()
    obs, next_obs = sample["observation"], sample["next", "observation"]
    for start in (0, 4):
        torch.testing.assert_close(next_obs[start : start + 3], obs[start + 1 : start + 4])
        assert bool(next_obs[start + 3].isnan().all())


def test_next_state_checks_done_traj_and_step_count():
    data = _trajectories(n_traj=2, length=3)
    # same trajectory id everywhere: the done flag alone separates the two episodes
    data["collector", "traj_ids"] = torch.zeros(6, dtype=torch.long)
    out = NextStateReconstructor(fill_value=-1.0)(data.clone())
    assert out["next", "observation"].flatten().tolist() == [1, 2, -1, 4, 5, -1]
    data["step"] = torch.tensor([0, 1, 5, 0, 1, 2])
    del data["next", "done"]
    checked = NextStateReconstructor(done_key=None, step_count_key="step", fill_value=-1.0)
    assert checked(data.clone())["next", "observation"].flatten().tolist() == [1, -1, -1, 4, 5, -1]
    # random neighbours from different trajectories are never paired
    shuffled = _trajectories().clone()[torch.tensor([0, 5, 9, 1])]
    assert bool(NextStateReconstructor()(shuffled)["next", "observation"].isnan().all())


def test_next_state_missing_entries_and_errors():
    bare = TensorDict({"observation": torch.arange(4.0).unsqueeze(-1)}, [4])
    with pytest.raises(KeyError, match="trajectory key"):
        NextStateReconstructor()(bare.clone())
    with pytest.raises(KeyError, match="done key"):
        NextStateReconstructor(traj_key="observation")(bare.clone())
    lenient = NextStateReconstructor(strict=False)(bare.clone())["next", "observation"]
    assert lenient.flatten().tolist()[:3] == [1.0, 2.0, 3.0]
    integers = TensorDict({"observation": torch.arange(4).unsqueeze(-1)}, [4])
    with pytest.raises(TypeError, match="non-floating dtype torch.int64"):
        NextStateReconstructor(strict=False)(integers.clone())
    assert (
        NextStateReconstructor(strict=False, fill_value=-1)(integers)["next", "observation"][
            -1
        ].item()
        == -1
    )
    with pytest.raises(ValueError, match="flat batch"):
        NextStateReconstructor(strict=False)(bare.reshape(2, 2))
    nested = TensorDict({("agents", "pos"): torch.arange(3.0).unsqueeze(-1)}, [3])
    out = NextStateReconstructor([("agents", "pos")], traj_key=None, done_key=None)(nested)
    assert out["next", "agents", "pos"].flatten().tolist()[:2] == [1.0, 2.0]


def test_next_state_is_a_no_op_in_an_env():
    env = TransformedEnv(CountingEnv(max_steps=10), NextStateReconstructor())
    rollout = env.rollout(3)
    torch.testing.assert_close(rollout["next", "observation"][:, 0], torch.tensor([1.0, 2.0, 3.0]))


# ------------------------------------------------------------ PolicyAgeFilter
def _versioned(versions):
    versions = torch.as_tensor(versions)
    return TensorDict(
        {"observation": torch.randn(versions.shape[0], 2), "policy_version": versions},
        [versions.shape[0]],
    )


def test_policy_age_filter_on_write_and_on_sample():
    current = {"version": 3}
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        transform=PolicyAgeFilter(lambda: current["version"], max_policy_lag=1),
    )
    rb.extend(_versioned([0, 2, 2, 3]))
    assert len(rb) == 3  # version 0 is 3 versions old
    current["version"] = 4
    assert bool((rb.sample(6)["policy_version"] == 3).all())
    current["version"] = 9
    assert rb.sample(6).batch_size == (0,)


def test_policy_age_filter_rows_nested_key_and_missing_key():
    rows = TensorDict(
        {("meta", "version"): torch.tensor([[3, 5], [5, 1]]), "x": torch.zeros(2, 2)}, [2, 2]
    )
    kept = PolicyAgeFilter(5, max_policy_lag=2, policy_version_key=("meta", "version"))(rows)
    assert kept.batch_size == (1, 2) and kept["meta", "version"].tolist() == [[3, 5]]
    bare = TensorDict({"x": torch.zeros(3)}, [3])
    with pytest.warns(UserWarning, match="'policy_version'"):
        assert PolicyAgeFilter(1)(bare).batch_size == (3,)
    with pytest.raises(KeyError, match="PolicyAgeFilter"):
        PolicyAgeFilter(1, strict=True)(bare)
    with pytest.raises(ValueError, match="non-negative"):
        PolicyAgeFilter(1, max_policy_lag=-1)
    with pytest.raises(TypeError, match="policy_version"):
        PolicyAgeFilter("v1")


def test_policy_age_filter_is_a_no_op_in_an_env():
    env = TransformedEnv(CountingEnv(max_steps=10), PolicyAgeFilter(0))
    assert env.rollout(3).batch_size == (3,)
