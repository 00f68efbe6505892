"""Whole-buffer reads, write-backs and key-wise in-place writes; storages gaining keys."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SliceSampler,
    TensorDictReplayBuffer,
    TensorStorage,
)


def _filled(storage, n=5):
    rb = TensorDictReplayBuffer(storage=storage)
    rb.extend(TensorDict({"obs": torch.arange(n), "x": torch.zeros(n, 2)}, [n]))
    return rb


@pytest.mark.parametrize(
    "make", [lambda tmp: LazyTensorStorage(8), lambda tmp: LazyMemmapStorage(8, scratch_dir=tmp)]
)
def test_write_back_with_a_new_key(tmp_path, make):
    rb = _filled(make(tmp_path / "mm"))
    data = rb.read_all_in_order()
    assert data["obs"].tolist() == list(range(5))
    data["target"] = data["obs"] * 10
    rb.write_all(data)
    assert rb["target"].tolist() == [0, 10, 20, 30, 40]
    assert rb.storage.get(slice(None, None))["target"].shape == (5,)
    # rows past the filled ones were allocated zero-filled
    rb.extend(
        TensorDict(
            {"obs": torch.tensor([9]), "x": torch.ones(1, 2), "target": torch.tensor([7])}, [1]
        )
    )
    assert rb["target"].tolist() == [0, 10, 20, 30, 40, 7]


def test_read_and_write_a_prefix():
    rb = _filled(LazyTensorStorage(10), n=6)
    part = rb.read_all_in_order(end=3)
    assert part["obs"].tolist() == [0, 1, 2]
    part["obs"] += 10
    rb.write_all(part, end=3)
    assert rb["obs"].tolist() == [10, 11, 12, 3, 4, 5]


def test_read_all_is_a_copy():
    rb = _filled(LazyTensorStorage(8))
    data = rb.read_all_in_order()
    data["obs"].fill_(-1)
    assert rb["obs"].tolist() == list(range(5))


def test_multi_dim_storage_in_data_layout():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6, ndim=2))
    rb.extend(TensorDict({"obs": torch.arange(6).reshape(2, 3)}, [2, 3]))
    data = rb.read_all_in_order()
    assert data.shape == (2, 3)
    data["next_obs"] = data["obs"] + 1
    rb.write_all(data)
    assert torch.equal(rb[:]["next_obs"], torch.arange(1, 7).reshape(2, 3))


def test_single_item_write_with_a_new_key_and_nested_key():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict({"a": torch.arange(4), ("b", "c"): torch.arange(4)}, [4]))
    rb[1:2] = TensorDict(
        {"a": torch.tensor([0]), ("b", "c"): torch.tensor([0]), ("b", "d"): torch.ones(1, 3)}, [1]
    )
    assert rb[1]["b", "d"].tolist() == [1.0, 1.0, 1.0]
    assert rb[2]["b", "d"].tolist() == [0.0, 0.0, 0.0]


def test_add_entries_leaves_known_keys_and_given_storages():
    storage = TensorStorage(TensorDict({"a": torch.zeros(3)}, [3]))
    assert not storage.add_entries(TensorDict({"a": torch.ones(3)}, [3]))
    assert storage.add_entries(TensorDict({"a": torch.ones(3), "z": torch.ones(3, 2)}, [3]))
    assert storage.get(slice(None))["z"].shape == (3, 2)
    assert not LazyTensorStorage(3).add_entries(
        TensorDict({"a": torch.ones(3)}, [3])
    )  # nothing stored yet


def test_missing_key_is_still_an_error():
    rb = _filled(LazyTensorStorage(8))
    with pytest.raises(ValueError, match=r"\('x',\).*lacks it"):
        rb[0:1] = TensorDict({"obs": torch.tensor([3])}, [1])


def test_set_set_at_and_update_in_place():
    rb = _filled(LazyTensorStorage(8))
    revision = rb.storage._mutation_revision
    rb.set_at_("obs", torch.tensor([99, 98]), torch.tensor([1, 3]))
    assert rb["obs"].tolist() == [0, 99, 2, 98, 4]
    rb.set_("x", torch.ones(5, 2))
    assert bool((rb["x"] == 1).all())
    rb.update_(TensorDict({"obs": torch.full((5,), 7)}, [5]))
    assert rb["obs"].tolist() == [7] * 5 and bool((rb["x"] == 1).all())
    assert rb.storage._mutation_revision == revision + 3
    assert len(rb) == 5 and rb.writer._cursor == 5


def test_in_place_writes_keep_priorities():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8), sampler=PrioritizedSampler(8, 1.0, 1.0)
    )
    rb.extend(TensorDict({"obs": torch.arange(4)}, [4]))
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    before = rb.sampler.state_dict()["_priorities"][:4].clone()
    rb.set_("obs", torch.zeros(4, dtype=torch.long))
    after = rb.sampler.state_dict()["_priorities"][:4]
    torch.testing.assert_close(after, before)
    assert after[3] > after[0]


def test_in_place_writes_refresh_slice_sampler_trajectories():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8), sampler=SliceSampler(slice_len=2, traj_key="ep"), batch_size=4
    )
    rb.extend(TensorDict({"ep": torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])}, [8]))
    rb.sample()
    rb.set_("ep", torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    sample = rb.sample()
    ep = sample["ep"].reshape(2, 2)
    assert bool((ep[:, 0] == ep[:, 1]).all())


def test_in_place_write_errors():
    with pytest.raises(TypeError, match="tensor storage, got ListStorage"):
        rb = ReplayBuffer(storage=ListStorage(4))
        rb.extend([torch.zeros(2)])
        rb.set_("a", torch.zeros(1))
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    with pytest.raises(RuntimeError, match="the storage is empty"):
        rb.set_("a", torch.zeros(1))
    rb.extend(torch.zeros(3))
    with pytest.raises(TypeError, match="holds Tensor items"):
        rb.set_("a", torch.zeros(3))
    with pytest.raises(TypeError, match="update_ expects a TensorDict"):
        rb.update_({"a": torch.zeros(3)})
