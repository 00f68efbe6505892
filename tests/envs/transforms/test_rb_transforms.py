"""MultiStepTransform: n-step transitions written into a buffer across batches."""

from __future__ import annotations

import pytest
import torch

from tdrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer
from tdrl.data.postprocs import MultiStep
from tdrl.envs.transforms.rb_transforms import MultiStepTransform
from tests.data.test_slice_samplers import MockCollector


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
    stored = rb[:].transpose(0, 1) if rb[:].batch_dims == 2 else rb[:]
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
