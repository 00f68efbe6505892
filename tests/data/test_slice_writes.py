"""Slice writes of tensor storages: the shape check cached per layout and write length.

Writers write ``start:stop`` slices; the storage compares the leaves' shapes to those it
expects for that length with one comparison. These tests check the stored content against
values built by hand, that every bad write still raises the error naming the key, the
expected shape and the shape received, and that a change of layout (a new key, new
content) is seen by the next write.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, TensorStorage


def transitions(n: int, start: int = 0, obs: int = 3) -> TensorDict:
    values = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "obs": values[:, None] + torch.arange(obs) / 10,
            "next": {
                "reward": values[:, None] * 2,
                "done": (values[:, None] % 3 == 0),
            },
        },
        [n],
    )


def test_round_robin_extends_store_the_values_built_by_hand():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    expected_obs = torch.zeros(10, 3)
    expected_reward = torch.zeros(10, 1)
    cursor = 0
    written = 0
    for n in (4, 4, 1, 3, 7, 4, 13):
        data = transitions(n, start=written)
        rb.extend(data)
        for i in range(n):
            row = (cursor + i) % 10
            expected_obs[row] = data["obs"][i]
            expected_reward[row] = data["next", "reward"][i]
        cursor = (cursor + n) % 10
        written += n
    content = rb.storage.content
    assert torch.equal(content["obs"], expected_obs)
    assert torch.equal(content["next", "reward"], expected_reward)
    assert torch.equal(content["next", "done"], expected_reward.div(2) % 3 == 0)


def test_a_wrong_trailing_shape_names_the_key_expected_and_received():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 4), transitions(4))
    storage.set(slice(4, 8), transitions(4))  # the cached shapes of 4-row writes
    with pytest.raises(ValueError, match=r"key \('obs',\): expected shape \(4, 3\), got \(4, 5\)"):
        storage.set(slice(4, 8), transitions(4, obs=5))
    bad = transitions(4)
    bad.set(("next", "reward"), torch.zeros(4, 1, 2))
    with pytest.raises(
        ValueError, match=r"key \('next', 'reward'\): expected shape \(4, 1\), got \(4, 1, 2\)"
    ):
        storage.set(slice(0, 4), bad)


def test_a_broadcastable_leaf_is_refused_not_broadcast():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 4), transitions(4))
    bad = transitions(4)
    bad.set("obs", torch.ones(4, 1))
    with pytest.raises(ValueError, match=r"expected shape \(4, 3\), got \(4, 1\)"):
        storage.set(slice(0, 4), bad)


def test_a_slice_longer_than_the_data_or_past_the_rows_raises():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 4), transitions(4))
    with pytest.raises(ValueError, match=r"key \('obs',\): expected shape \(5, 3\), got \(4, 3\)"):
        storage.set(slice(0, 5), transitions(4))
    with pytest.raises(ValueError, match=r"key \('obs',\): expected shape \(2, 3\), got \(4, 3\)"):
        storage.set(slice(8, 12), transitions(4))


def test_stepped_and_open_slices_write_through_the_general_path():
    storage = TensorStorage(TensorDict({"obs": torch.zeros(6, 3)}, [6]))
    storage.set(slice(0, 6, 2), TensorDict({"obs": torch.ones(3, 3)}, [3]))
    assert storage.content["obs"][:, 0].tolist() == [1, 0, 1, 0, 1, 0]
    storage.set(
        slice(-2, None), TensorDict({"obs": torch.full((2, 3), 7.0)}, [2]), set_cursor=False
    )
    assert storage.content["obs"][:, 0].tolist() == [1, 0, 1, 0, 7, 7]


def test_a_leaf_of_another_dtype_is_cast_as_before():
    storage = LazyTensorStorage(4)
    storage.set(slice(0, 2), TensorDict({"obs": torch.zeros(2, 3)}, [2]))
    storage.set(slice(2, 4), TensorDict({"obs": torch.full((2, 3), 1.5, dtype=torch.float64)}, [2]))
    assert storage.content["obs"].dtype == torch.float32
    assert storage.content["obs"][2:].eq(1.5).all()


def test_a_new_key_changes_the_shapes_the_next_writes_expect():
    storage = LazyTensorStorage(8)
    storage.set(slice(0, 2), transitions(2))
    wider = transitions(2)
    wider.set("extra", torch.full((2, 4), 5.0))
    storage.set(slice(2, 4), wider)  # allocates "extra", zero-filled elsewhere
    assert storage.content["extra"][:4, 0].tolist() == [0, 0, 5, 5]
    again = transitions(2)
    again.set("extra", torch.full((2, 4), 6.0))
    storage.set(slice(0, 2), again)
    assert storage.content["extra"][:4, 0].tolist() == [6, 6, 5, 5]
    # the old structure now lacks a stored key
    with pytest.raises(ValueError, match=r"key \('extra',\).*lacks it"):
        storage.set(slice(4, 6), transitions(2))
    bad = transitions(2)
    bad.set("extra", torch.ones(2, 3))
    with pytest.raises(
        ValueError, match=r"key \('extra',\): expected shape \(2, 4\), got \(2, 3\)"
    ):
        storage.set(slice(4, 6), bad)


def test_new_content_changes_the_shapes_the_next_writes_expect():
    storage = LazyTensorStorage(6)
    storage.set(slice(0, 2), transitions(2))
    td = transitions(6, obs=5).empty(recurse=True)
    template = [
        (key if isinstance(key, tuple) else (key,), (6, *leaf.shape[1:]), leaf.dtype)
        for key, leaf in transitions(1, obs=5).items(True, True)
    ]
    for (key, _, _), tensor in zip(template, storage.allocate_leaves(template)):
        td.set(key, tensor.zero_())
    storage.adopt_content(td, kind="tensordict")
    storage.set(slice(0, 2), transitions(2, obs=5))
    assert storage.content["obs"].shape == (6, 5)
    assert torch.equal(storage.content["obs"][:2], transitions(2, obs=5)["obs"])
    with pytest.raises(ValueError, match=r"expected shape \(2, 5\), got \(2, 3\)"):
        storage.set(slice(0, 2), transitions(2))


def test_many_write_lengths_all_land_where_they_should():
    storage = LazyTensorStorage(200)
    start = 0
    for n in range(1, 20):  # more lengths than the cache keeps
        storage.set(slice(start, start + n), transitions(n, start=start))
        start += n
    assert torch.equal(storage.content["obs"][:start], transitions(start)["obs"])
    assert len(storage) == start


def test_a_multi_dim_storage_checks_the_whole_item_shape():
    storage = LazyTensorStorage(12, ndim=2)
    data = TensorDict({"obs": torch.arange(24.0).reshape(2, 3, 4)}, [2, 3])
    storage.set(slice(0, 2), data)
    assert torch.equal(storage.content["obs"][:2], data["obs"])
    with pytest.raises(ValueError, match=r"expected shape \(2, 3, 4\), got \(2, 2, 4\)"):
        storage.set(slice(2, 4), TensorDict({"obs": torch.zeros(2, 2, 4)}, [2, 2]))


def test_a_copied_storage_writes_with_its_own_shapes():
    storage = LazyTensorStorage(6)
    storage.set(slice(0, 2), transitions(2))
    copy = pickle.loads(pickle.dumps(storage))
    copy.set(slice(2, 4), transitions(2, start=2))
    assert torch.equal(copy.content["obs"][:4], transitions(4)["obs"])
    assert len(copy) == 4 and len(storage) == 2
    with pytest.raises(ValueError, match=r"key \('obs',\): expected shape \(2, 3\), got \(2, 5\)"):
        copy.set(slice(0, 2), transitions(2, obs=5))


def adopt_rows(storage: LazyTensorStorage, rows: int) -> None:
    """Give ``storage`` new zero-filled content of ``rows`` rows."""
    td = transitions(rows).empty(recurse=True)
    template = [
        (key if isinstance(key, tuple) else (key,), (rows, *leaf.shape[1:]), leaf.dtype)
        for key, leaf in transitions(1).items(True, True)
    ]
    for (key, _, _), tensor in zip(template, storage.allocate_leaves(template)):
        td.set(key, tensor.zero_())
    storage.adopt_content(td, kind="tensordict")


def test_content_with_more_rows_takes_writes_past_the_old_end():
    storage = LazyTensorStorage(4)
    storage.set(slice(0, 2), transitions(2))
    adopt_rows(storage, 8)
    storage.set(slice(4, 8), transitions(4, start=4))
    assert torch.equal(storage.content["obs"][4:], transitions(4, start=4)["obs"])
    assert len(storage) == 8


def test_content_with_fewer_rows_refuses_writes_past_its_end():
    storage = LazyTensorStorage(8)
    storage.set(slice(4, 8), transitions(4))  # caches the shapes of 4-row writes
    adopt_rows(storage, 4)
    with pytest.raises(
        ValueError, match=r"data shape mismatch at key .*: expected shape \(0, \d\), got \(4, \d\)"
    ):
        storage.set(slice(4, 8), transitions(4))
