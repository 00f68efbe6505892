"""Whole-slice sampling from a cached per-trajectory table gives what the generic path gives.

``SliceSampler`` draws slices of exactly ``slice_len`` steps of a flat storage from a table
built once per storage state. Every test here runs two buffers over the same data and
seed, one with the sampler as shipped and one with the table disabled (the generic
computation), and asks for the same samples bit for bit; the circular-buffer tests also
check that the table follows writes.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.slice_samplers import SliceSampler, SliceSamplerWithoutReplacement


class GenericSlices(SliceSampler):
    """The sampler with its whole-slice table switched off."""

    def _fixed_plan(self, storage, segments, valid, slice_len):
        return None


class GenericSlicesWithoutReplacement(SliceSamplerWithoutReplacement):
    """The sampler without replacement with its whole-slice table switched off."""

    def _fixed_plan(self, storage, segments, valid, slice_len):
        return None


def make_episodes(lengths, terminated_every=2, first_id=0, is_init=False):
    """TED steps of consecutive episodes; every ``terminated_every``-th one terminates."""
    ids, steps, term, done = [], [], [], []
    for number, length in enumerate(lengths):
        ids.append(torch.full((length,), first_id + number))
        steps.append(torch.arange(length))
        ends = torch.zeros(length, 1, dtype=torch.bool)
        ends[-1] = True
        done.append(ends)
        term.append(ends & ((first_id + number) % terminated_every == 0))
    ids, steps = torch.cat(ids), torch.cat(steps)
    n = ids.numel()
    data = {
        "episode": ids,
        "step": steps,
        "observation": torch.randn(n, 3),
        "next": {
            "observation": torch.randn(n, 3),
            "done": torch.cat(done),
            "terminated": torch.cat(term),
            "truncated": torch.cat(done) & ~torch.cat(term),
        },
    }
    if is_init:
        data["is_init"] = (steps == 0).unsqueeze(-1)
    return TensorDict(data, [n])


def pair(sampler_kwargs, capacity=200, without_replacement=False, batch_size=24):
    if without_replacement:
        fast = SliceSamplerWithoutReplacement(**sampler_kwargs)
        generic = GenericSlicesWithoutReplacement(**sampler_kwargs)
    else:
        fast = SliceSampler(**sampler_kwargs)
        generic = GenericSlices(**sampler_kwargs)
    return [
        TensorDictReplayBuffer(
            storage=LazyTensorStorage(capacity), sampler=sampler, batch_size=batch_size
        )
        for sampler in (fast, generic)
    ]


def assert_same_samples(buffers, draws=6, seed=0):
    fast, generic = buffers
    for draw in range(draws):
        torch.manual_seed(seed + draw)
        got = fast.sample()
        torch.manual_seed(seed + draw)
        expected = generic.sample()
        assert set(got.keys(True, True)) == set(expected.keys(True, True))
        for key in expected.keys(True, True):
            assert got[key].dtype == expected[key].dtype, key
            assert torch.equal(got[key], expected[key]), key


def assert_consistent(sample, slice_len):
    """Each slice is consecutive steps of one episode (the table is not stale)."""
    slices = sample.reshape(-1, slice_len)
    assert (slices["episode"] == slices["episode"][:, :1]).all()
    assert (slices["step"].diff(dim=1) == 1).all()


@pytest.mark.parametrize(
    "keys",
    [{"traj_key": "episode"}, {"end_key": ("next", "done")}, {}],
    ids=["traj_key", "end_key", "auto"],
)
@pytest.mark.parametrize("strict_length", [True, False])
def test_same_samples_as_generic(keys, strict_length):
    buffers = pair({"slice_len": 4, "strict_length": strict_length, **keys})
    data = make_episodes([9, 3, 12, 4, 7, 2, 30])  # some shorter than a slice
    for rb in buffers:
        rb.extend(data.clone())
    assert_same_samples(buffers)


@pytest.mark.parametrize("span", [True, 1, (True, False), (0, 2)])
def test_span_same_samples_as_generic(span):
    buffers = pair({"num_slices": 6, "traj_key": "episode", "span": span})
    data = make_episodes([9, 5, 12, 6, 7])
    for rb in buffers:
        rb.extend(data.clone())
    assert_same_samples(buffers)


@pytest.mark.parametrize("cache_values", [True, False])
def test_flags_match_the_stored_terminations(cache_values):
    buffers = pair({"slice_len": 6, "traj_key": "episode", "cache_values": cache_values})
    data = make_episodes([6, 6, 7, 6, 8, 6], terminated_every=2)
    for rb in buffers:
        rb.extend(data.clone())
    assert_same_samples(buffers, draws=10)
    torch.manual_seed(3)
    sample = buffers[0].sample(600).reshape(-1, 6)
    last = sample[:, -1]
    # a slice ending its episode ends as the data says; one cut short is truncated
    ends_episode = last["step"] == torch.tensor([6, 6, 7, 6, 8, 6])[last["episode"]] - 1
    at_end = ends_episode & (last["episode"] % 2 == 0)
    assert torch.equal(last["next", "terminated"].squeeze(-1), at_end)
    assert torch.equal(last["next", "truncated"].squeeze(-1), ~at_end)
    assert last["next", "done"].all()
    assert not sample[:, :-1]["next", "done"].any()
    assert ends_episode.any() and (~ends_episode).any()


def test_truncated_key_none_and_is_init():
    buffers = pair({"slice_len": 4, "traj_key": "episode", "truncated_key": None})
    data = make_episodes([9, 5, 12], is_init=True)
    for rb in buffers:
        rb.extend(data.clone())
    assert_same_samples(buffers)
    sample = buffers[0].sample().reshape(-1, 4)
    assert sample["is_init"][:, 0].all() and not sample["is_init"][:, 1:].any()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [True, False])
def test_without_replacement_same_epochs(drop_last, shuffle):
    kwargs = {"num_slices": 3, "traj_key": "episode", "drop_last": drop_last, "shuffle": shuffle}
    buffers = pair(kwargs, without_replacement=True)
    data = make_episodes([9, 3, 12, 9, 8, 8, 10, 11])  # 7 of at least 8 steps
    for rb in buffers:
        rb.extend(data.clone())
    fast, generic = buffers
    for seed in range(2):
        torch.manual_seed(seed)
        got = list(fast)
        torch.manual_seed(seed)
        expected = list(generic)
        assert len(got) == len(expected) > 1
        for a, b in zip(got, expected):
            assert (a == b).all()
    # a partial last batch (fewer trajectories left than num_slices) keeps its flags
    if not drop_last:
        assert got[-1].shape[0] < got[0].shape[0]
        assert got[-1]["next", "done"].reshape(-1, 8)[:, -1].all()


def test_circular_buffer_table_follows_writes():
    buffers = pair(
        {"slice_len": 5, "traj_key": "episode", "cache_values": True}, capacity=60, batch_size=25
    )
    first = 0
    for round_ in range(8):
        lengths = [7 + round_, 11, 6 + 2 * round_]
        data = make_episodes(lengths, first_id=first)
        for rb in buffers:
            rb.extend(data.clone())
        first += len(lengths)
        assert_same_samples(buffers, draws=3, seed=10 * round_)
        torch.manual_seed(round_)
        sample = buffers[0].sample(500)
        assert_consistent(sample, 5)


def test_overwrite_in_place_rebuilds_the_table():
    buffers = pair({"slice_len": 4, "traj_key": "episode", "cache_values": True}, capacity=40)
    data = make_episodes([10, 10, 10, 10])
    for rb in buffers:
        rb.extend(data.clone())
    assert_same_samples(buffers, draws=2)
    # rows 0..19 now hold one long episode: slices may start anywhere in it
    data = make_episodes([20], first_id=7)
    for rb in buffers:
        rb[torch.arange(20)] = data.clone()
    torch.manual_seed(1)
    sample = buffers[0].sample(800)
    assert_consistent(sample, 4)
    starts = sample.reshape(-1, 4)[:, 0]
    assert (starts["step"][starts["episode"] == 7] > 6).any()
    assert_same_samples(buffers, draws=3, seed=5)


def test_memmap_storage_same_samples(tmp_path):
    buffers = [
        TensorDictReplayBuffer(
            storage=LazyMemmapStorage(100, scratch_dir=tmp_path / name),
            sampler=sampler,
            batch_size=16,
        )
        for name, sampler in (
            ("fast", SliceSampler(slice_len=8, cache_values=True)),
            ("generic", GenericSlices(slice_len=8, cache_values=True)),
        )
    ]
    data = make_episodes([20, 30, 25, 40])  # the last one wraps around the end
    for rb in buffers:
        rb.extend(data.clone())
    assert_same_samples(buffers)


def test_static_ends_same_samples():
    ends = torch.zeros(40, dtype=torch.bool)
    ends[[9, 14, 29, 39]] = True
    buffers = pair({"slice_len": 4, "ends": ends, "cache_values": True})
    data = make_episodes([10, 5, 15, 10])
    for rb in buffers:
        rb.extend(data.clone())
    assert_same_samples(buffers)


def test_table_follows_writes_the_sampler_is_not_told_of():
    # a second buffer over the same storage writes: the first one's sampler must see it
    storage = LazyTensorStorage(50)
    sampler = SliceSampler(slice_len=4, traj_key="episode", cache_values=True)
    reader = TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=400)
    writer = TensorDictReplayBuffer(storage=storage, batch_size=4)
    writer.extend(make_episodes([10, 10, 10, 10, 10]))
    torch.manual_seed(0)
    assert_consistent(reader.sample(), 4)
    writer.extend(make_episodes([25], first_id=5))  # overwrites rows 0..24
    torch.manual_seed(0)
    sample = reader.sample()
    assert_consistent(sample, 4)
    assert (sample["episode"] == 5).any()
