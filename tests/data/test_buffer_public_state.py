"""The buffer's public state used by checkpoint loaders: batch size, generator, storage_replaced."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyTensorStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SliceSampler,
    TensorDictReplayBuffer,
)


def test_batch_size_setter_checks_its_value():
    buffer = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    buffer.extend(torch.arange(10))
    buffer.batch_size = 5
    assert buffer.sample().shape == (5,)
    with pytest.raises(ValueError, match="batch_size"):
        buffer.batch_size = 0
    with pytest.raises(TypeError, match="batch_size"):
        buffer.batch_size = "3"
    buffer.batch_size = None
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample()


def test_generator_is_the_one_given():
    generator = torch.Generator().manual_seed(3)
    buffer = ReplayBuffer(storage=LazyTensorStorage(10), generator=generator)
    assert buffer.generator is generator
    other = torch.Generator()
    buffer.set_rng(other)
    assert buffer.generator is other
    assert ReplayBuffer(storage=LazyTensorStorage(10)).generator is None


def _episodes(traj_ids: list[int]) -> TensorDict:
    ids = torch.tensor(traj_ids)
    return TensorDict({"traj": ids, "obs": ids.float()}, [len(traj_ids)])


class _RevisionlessStorage(LazyTensorStorage):
    """A storage that keeps no write count (allowed by the storage contract)."""

    @property
    def mutation_revision(self) -> None:
        return None


def test_storage_replaced_drops_cached_trajectories():
    sampler = SliceSampler(slice_len=4, traj_key="traj", cache_values=True)
    buffer = TensorDictReplayBuffer(storage=_RevisionlessStorage(8), sampler=sampler, batch_size=8)
    buffer.extend(_episodes([0] * 8))
    buffer.sample()  # caches one 8-step trajectory
    replacement = LazyTensorStorage(8)
    replacement.set(torch.arange(8), _episodes([5] * 4 + [6] * 4))
    buffer.storage.load_state_dict(replacement.state_dict())
    buffer.storage_replaced()
    for _ in range(10):
        slices = buffer.sample()["traj"].reshape(2, 4)
        # every slice lies in one of the two new 4-step trajectories
        assert (slices == slices[:, :1]).all()


def test_storage_resized_keeps_priorities():
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0)
    sampler.extend(torch.arange(4))
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    before = sampler.state_dict()
    sampler.storage_resized(6)
    after = sampler.state_dict()
    assert after["_max_capacity"] == 6
    assert torch.equal(after["_priorities"][:4], before["_priorities"])
    assert torch.equal(after["_priorities"][4:], torch.zeros(2, dtype=after["_priorities"].dtype))
