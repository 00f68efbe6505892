"""Sampled batches are what indexing the stored TensorDict and setting the sampler's extras give.

The storage builds sampled batches from a gather program compiled once per layout and per
set of given entries (a sampler's flags). Every test here runs two identical buffers over
the same data and seed: one samples as users do, the other draws the same indices with its
sampler and builds the batch by hand, by indexing the stored TensorDict and setting
``"index"`` and the sampler's extras on it; the two must agree in keys, key order, dtypes
and values.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.gather_program import GatherProgram
from tdrl.data.replay_buffers.utils import expand_to_items, tensordict_plan

STORAGES = [LazyTensorStorage, LazyMemmapStorage]


def episodes(lengths, first_id=0, stored_flags=("done", "terminated", "truncated")):
    """TED steps of consecutive episodes; the even ones terminate, the odd ones are cut."""
    ids, steps = [], []
    for number, length in enumerate(lengths):
        ids.append(torch.full((length,), first_id + number))
        steps.append(torch.arange(length))
    ids, steps = torch.cat(ids), torch.cat(steps)
    n = ids.numel()
    last = torch.ones(n, dtype=torch.bool)
    last[:-1] = ids[1:] != ids[:-1]
    terminated = (last & (ids % 2 == 0)).unsqueeze(-1)
    flags = {"done": last.unsqueeze(-1), "terminated": terminated}
    flags["truncated"] = flags["done"] & ~terminated
    nxt = {"observation": torch.randn(n, 3), "reward": torch.randn(n, 1)}
    nxt.update({key: flags[key] for key in stored_flags})
    return TensorDict(
        {"episode": ids, "step": steps, "observation": torch.randn(n, 3), "next": nxt}, [n]
    )


def by_hand(rb, batch_size):
    """The batch ``rb.sample()`` gives, built from the sampler's draw and the stored data."""
    storage = rb.storage
    index, info = rb.sampler.sample(storage, batch_size)
    expected = storage.content[index]
    batch = tuple(expected.batch_size)
    stored_index = torch.stack(index, -1) if isinstance(index, tuple) else index
    expected.set("index", expand_to_items(stored_index, batch))
    for key, value in info.items():
        if isinstance(key, str) or len(key) == 1:
            expected.set(key, expand_to_items(value, batch))
    for key, value in info.items():
        if isinstance(key, tuple) and len(key) > 1:
            expected.set(key, expand_to_items(value, batch))
    return expected


def assert_same(got, expected):
    assert list(got.keys(True, True)) == list(expected.keys(True, True))
    assert got.batch_size == expected.batch_size
    for key in expected.keys(True, True):
        assert got[key].dtype == expected[key].dtype, key
        assert torch.equal(got[key], expected[key]), key


def twins(make_sampler, storage_cls=LazyTensorStorage, capacity=200, batch_size=24, tmp=None):
    """Two identical buffers (memory-mapped ones in two folders under ``tmp``)."""
    buffers = []
    for i in range(2):
        kw = {"scratch_dir": tmp / str(i)} if storage_cls is LazyMemmapStorage else {}
        storage = storage_cls(capacity, **kw)
        buffers.append(
            TensorDictReplayBuffer(storage=storage, sampler=make_sampler(), batch_size=batch_size)
        )
    return buffers


def assert_samples_as_by_hand(buffers, draws=4, seed=0):
    ours, theirs = buffers
    for draw in range(draws):
        torch.manual_seed(seed + draw)
        got = ours.sample()
        torch.manual_seed(seed + draw)
        assert_same(got, by_hand(theirs, ours._batch_size))


SLICE_CASES = {
    "traj_key": {"slice_len": 4, "traj_key": "episode"},
    "end_key": {"slice_len": 4, "end_key": ("next", "done")},
    "non_strict": {"slice_len": 4, "traj_key": "episode", "strict_length": False},
    "span": {"num_slices": 6, "traj_key": "episode", "span": (True, 1)},
    "cached": {"slice_len": 4, "traj_key": "episode", "cache_values": True},
    "no_flags": {"slice_len": 4, "traj_key": "episode", "truncated_key": None},
}


@pytest.mark.parametrize("storage_cls", STORAGES)
@pytest.mark.parametrize("case", sorted(SLICE_CASES))
def test_slice_samples_as_by_hand(storage_cls, case, tmp_path):
    buffers = twins(lambda: SliceSampler(**SLICE_CASES[case]), storage_cls, tmp=tmp_path)
    data = episodes([9, 3, 12, 4, 7, 2, 30])
    for rb in buffers:
        rb.extend(data.clone())
    assert_samples_as_by_hand(buffers)


@pytest.mark.parametrize("storage_cls", STORAGES)
def test_without_replacement_as_by_hand(storage_cls, tmp_path):
    buffers = twins(
        lambda: SliceSamplerWithoutReplacement(num_slices=3, traj_key="episode"),
        storage_cls,
        tmp=tmp_path,
    )
    data = episodes([9, 8, 12, 9, 8, 8, 10, 11])
    for rb in buffers:
        rb.extend(data.clone())
    # eight trajectories, three per batch: the last batch of the epoch is shorter
    assert_samples_as_by_hand(buffers, draws=3)


def test_circular_overwrite_as_by_hand():
    buffers = twins(
        lambda: SliceSampler(slice_len=5, traj_key="episode"), capacity=60, batch_size=25
    )
    first = 0
    for round_ in range(6):
        lengths = [7 + round_, 11, 6 + 2 * round_]
        data = episodes(lengths, first_id=first)
        for rb in buffers:
            rb.extend(data.clone())
        first += len(lengths)
        assert_samples_as_by_hand(buffers, draws=2, seed=10 * round_)


def test_write_through_a_second_buffer_sharing_the_storage():
    storages = [LazyTensorStorage(120), LazyTensorStorage(120)]
    buffers = [
        TensorDictReplayBuffer(
            storage=storage,
            sampler=SliceSampler(slice_len=4, traj_key="episode", cache_values=True),
            batch_size=16,
        )
        for storage in storages
    ]
    writers = [TensorDictReplayBuffer(storage=storage) for storage in storages]
    data = episodes([20, 20, 20])
    for rb in buffers:
        rb.extend(data.clone())
    assert_samples_as_by_hand(buffers, draws=2)
    data = episodes([15, 15, 15, 15], first_id=10)
    for writer in writers:
        writer.extend(data.clone())
    assert_samples_as_by_hand(buffers, draws=3, seed=20)
    assert (buffers[0].sample()["episode"] >= 10).any()


@pytest.mark.parametrize("storage_cls", STORAGES)
def test_random_and_prioritized_samples_as_by_hand(storage_cls, tmp_path):
    samplers = {"random": RandomSampler, "prio": lambda: PrioritizedSampler(200, 0.7, 0.5)}
    for name, make in samplers.items():
        buffers = twins(make, storage_cls, tmp=tmp_path / name)
        data = episodes([50, 50])
        for rb in buffers:
            rb.extend(data.clone())
        assert_samples_as_by_hand(buffers)


def test_items_with_batch_dims_of_their_own_get_expanded_extras():
    buffers = twins(RandomSampler, capacity=20, batch_size=5)
    data = TensorDict({"obs": torch.randn(20, 3, 2), "next": {"r": torch.randn(20, 3)}}, [20, 3])
    for rb in buffers:
        rb.extend(data.clone())
    assert_samples_as_by_hand(buffers)
    assert buffers[0].sample()["index"].shape == (5, 3)


def test_flags_not_stored_are_added_after_the_stored_keys():
    def make():
        return SliceSampler(slice_len=4, traj_key="episode", truncated_key=("meta", "truncated"))

    # ("next", "truncated") is not stored: the sampler's flag goes after "next"'s stored keys
    buffers = twins(
        lambda: SliceSampler(slice_len=4, traj_key="episode"), batch_size=16, capacity=60
    )
    data = episodes([20, 20, 20], stored_flags=("done", "terminated"))
    for rb in buffers:
        rb.extend(data.clone())
    assert_samples_as_by_hand(buffers)
    assert list(buffers[0].sample()["next"].keys())[-1] == "truncated"
    # no "meta" node is stored: the flags are set at the root, after "index"
    buffers = twins(make, batch_size=16, capacity=60)
    data = episodes([20, 20, 20])
    for rb in buffers:
        rb.extend(data.clone())
    assert_samples_as_by_hand(buffers)
    assert list(buffers[0].sample().keys())[-2:] == ["index", "meta"]


def test_a_new_stored_entry_reaches_the_samples():
    buffers = twins(lambda: SliceSampler(slice_len=4, traj_key="episode"), capacity=100)
    data = episodes([20, 20])
    for rb in buffers:
        rb.extend(data.clone())
    assert_samples_as_by_hand(buffers, draws=2)
    more = episodes([20, 20], first_id=2)
    more["cost"] = torch.arange(40.0)
    for rb in buffers:
        rb.extend(more.clone())  # the storage adds "cost": its layout changes
    assert_samples_as_by_hand(buffers, draws=2, seed=5)
    assert "cost" in buffers[0].sample().keys()


class NestedExtras(RandomSampler):
    """A sampler returning a nested per-item extra of a given length."""

    def __init__(self, length=None):
        super().__init__()
        self.length = length

    def sample(self, storage, batch_size):
        index, info = super().sample(storage, batch_size)
        info[("next", "weight")] = torch.ones(self.length or index.shape[0], 1)
        return index, info


def test_a_given_entry_of_another_length_is_refused():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(50), sampler=NestedExtras(length=3), batch_size=8
    )
    rb.extend(episodes([25, 25]))
    with pytest.raises((RuntimeError, ValueError), match="shape|size"):
        rb.sample()
    buffers = [
        TensorDictReplayBuffer(storage=LazyTensorStorage(50), sampler=NestedExtras(), batch_size=8)
        for _ in range(2)
    ]
    data = episodes([25, 25])
    for rb in buffers:
        rb.extend(data.clone())
    assert_samples_as_by_hand(buffers)


def test_program_places_given_entries_and_lists_the_others():
    stored = TensorDict(
        {"a": torch.arange(6), "n": {"b": torch.arange(6.0), "c": torch.zeros(6, 1)}}, [6]
    )
    names = (("n", "c"), ("n", "d"), ("m", "e"), "a2")
    program = GatherProgram(tensordict_plan(stored, 1), names)
    assert program.leftover == (("m", "e"), "a2")
    given = {name: torch.full((2, 1), 9.0) for name in names}
    out = program.build(torch.tensor([1, 4]), given, torch.Size([2]), None)
    assert list(out.keys(True, True)) == ["a", ("n", "b"), ("n", "c"), ("n", "d")]
    assert out["a"].tolist() == [1, 4] and out["n", "b"].tolist() == [1.0, 4.0]
    assert (out["n", "c"] == 9).all() and out["n"].batch_size == (2,)
