"""Sampled batches whose flags the sampler sets: those stored entries are not gathered, and
the batch is the one a full gather with the flags set afterwards gives."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    SliceSampler,
    TensorDictReplayBuffer,
)


def _episodes(n: int = 200) -> TensorDict:
    episode = torch.arange(n) // 23
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[22::23] = True
    return TensorDict(
        {
            "episode": episode,
            "observation": torch.randn(n, 3),
            "next": {
                "observation": torch.randn(n, 3),
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
                "reward": torch.randn(n, 1),
            },
        },
        [n],
    )


@pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
@pytest.mark.parametrize("strict_length", [True, False])
def test_a_sample_equals_a_full_gather_with_the_sampler_flags_set(storage_cls, strict_length):
    rb = TensorDictReplayBuffer(
        storage=storage_cls(200),
        sampler=SliceSampler(slice_len=8, traj_key="episode", strict_length=strict_length),
        batch_size=32,
    )
    rb.extend(_episodes())
    for seed in range(5):
        torch.manual_seed(seed)
        sample = rb.sample()
        torch.manual_seed(seed)
        index, info = rb.sampler.sample(rb.storage, 32)
        expected = rb.storage.get(index)
        for key, value in info.items():
            if isinstance(key, tuple) and len(key) > 1:
                expected.set(key, value)
        assert set(sample.keys(True, True)) == set(expected.keys(True, True)) | {"index"}
        for key in expected.keys(True, True):
            assert torch.equal(sample.get(key), expected.get(key)), key
        # the sampler's flags are in the sample, not the stored ones
        truncated = sample.get(("next", "truncated"))
        assert truncated.any()


def test_the_entries_the_sampler_sets_are_not_gathered(monkeypatch):
    storage = LazyTensorStorage(200)
    rb = TensorDictReplayBuffer(
        storage=storage, sampler=SliceSampler(slice_len=8, traj_key="episode"), batch_size=32
    )
    rb.extend(_episodes())
    rb.sample()  # the sampler reads the trajectories once
    calls = []
    inside = []
    index_select = torch.Tensor.index_select
    gather = LazyTensorStorage.gather

    def counting(self, dim, index):
        if inside:
            calls.append(tuple(self.shape[1:]))
        return index_select(self, dim, index)

    def gathering(self, *args, **kwargs):
        inside.append(True)
        try:
            return gather(self, *args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(torch.Tensor, "index_select", counting)
    monkeypatch.setattr(LazyTensorStorage, "gather", gathering)
    rb.sample()
    monkeypatch.undo()
    # episode, observation, next observation and reward; not next done/terminated/truncated
    assert sorted(calls) == [(), (1,), (3,), (3,)], calls
