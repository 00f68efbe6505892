"""Replay-buffer life cycle: delayed initialization, component factories, stats, empty, errors."""

from __future__ import annotations

import functools
import json
import pickle
import warnings

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    ImmutableDatasetWriter,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
)


def test_components_from_factories_initialize_at_once():
    rb = ReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10),
        sampler=RandomSampler,
        writer=functools.partial(RoundRobinWriter),
    )
    assert rb.initialized
    assert isinstance(rb.storage, LazyTensorStorage) and rb.storage.max_size == 10
    assert rb._init_storage is None


def _times_ten(data):
    return data * 10


def _times_ten_factory():
    return _times_ten


def test_transform_factory_delays_initialization():
    built = []

    def factory():
        built.append(True)
        return _times_ten

    rb = ReplayBuffer(storage=functools.partial(ListStorage, 5), transform_factory=factory)
    assert not rb.initialized and not built
    assert not hasattr(rb, "_storage") and len(rb) == 0
    rb.extend([1, 2])
    assert rb.initialized and built == [True]
    assert rb[0] == 10


def test_delayed_buffer_pickles_before_its_components_exist():
    rb = ReplayBuffer(
        storage=functools.partial(ListStorage, 5), transform_factory=_times_ten_factory
    )
    copy = pickle.loads(pickle.dumps(rb))
    assert not copy.initialized
    copy.extend([1, 2])
    assert copy[1] == 20 and not rb.initialized


def test_delayed_init_with_instances_waits_for_first_use():
    storage = LazyTensorStorage(10)
    rb = ReplayBuffer(storage=storage, delayed_init=True, batch_size=2)
    assert not rb.initialized
    assert rb.stats()["initialized"] is False and not rb.initialized
    assert rb.batch_size == 2 and rb.write_count == 0 and not rb.initialized
    rb.extend(torch.arange(3))
    assert rb.initialized and rb.storage is storage and len(rb) == 3


@pytest.mark.parametrize("entry", ["sample", "getitem", "storage", "state_dict", "iter"])
def test_every_entry_point_initializes(entry):
    rb = ReplayBuffer(storage=LazyTensorStorage(10), delayed_init=True, batch_size=2)
    if entry in ("sample", "getitem", "iter"):
        with pytest.raises(RuntimeError, match="empty storage"):
            if entry == "sample":
                rb.sample()
            elif entry == "getitem":
                rb[0]
            else:
                next(iter(rb))
    elif entry == "storage":
        assert rb.storage is not None
    else:
        rb.state_dict()
    assert rb.initialized


def test_component_factory_type_errors():
    with pytest.raises(TypeError, match="storage must be a Storage or a callable"):
        ReplayBuffer(storage=3)
    with pytest.raises(TypeError, match="the sampler factory must return a Sampler"):
        ReplayBuffer(sampler=lambda: "not a sampler")
    with pytest.raises(ValueError, match="at most one of transform and transform_factory"):
        ReplayBuffer(transform=lambda x: x, transform_factory=lambda: lambda x: x)


def test_prioritized_buffer_builds_a_storage_factory_now():
    rb = PrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=functools.partial(LazyTensorStorage, 20)
    )
    assert rb.sampler._max_capacity == 20


def test_stats_follow_writes_and_are_json():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    assert rb.stats() == {
        "size": 0,
        "capacity": 10,
        "utilization": 0.0,
        "write_count": 0,
        "prefetch_queue_size": 0,
        "initialized": True,
    }
    rb.extend(torch.arange(15))
    stats = json.loads(json.dumps(rb.stats()))
    assert (stats["size"], stats["write_count"], stats["utilization"]) == (10, 15, 1.0)
    before = rb.stats()
    rb.sample()
    assert rb.stats() == before


def test_stats_with_a_writer_that_does_not_write():
    storage = LazyTensorStorage(10)
    rb = ReplayBuffer(storage=storage, writer=ImmutableDatasetWriter())
    storage.set(torch.arange(10), torch.zeros(10))
    assert (rb.stats()["size"], rb.stats()["write_count"]) == (10, 0)


def test_empty_can_keep_the_write_count():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(6))
    rb.empty(empty_write_count=False)
    assert len(rb) == 0 and rb.write_count == 6 and rb.writer._cursor == 0
    rb.empty()
    assert rb.write_count == 0


def test_batch_size_errors():
    rb = ReplayBuffer(storage=ListStorage(10), sampler=SamplerWithoutReplacement())
    rb.extend(torch.zeros(10))
    with pytest.raises(ValueError, match="Batch_size was not specified") as err:
        for _ in rb:
            pass
    # also a RuntimeError, as the reference API raises
    assert isinstance(err.value, RuntimeError)
    with pytest.raises(RuntimeError, match="batch_size not specified"):
        rb.sample()
    with pytest.raises(
        ValueError,
        match="drop_last=True must work with a predictable batch-size.*got batch_size=None",
    ):
        ReplayBuffer(storage=ListStorage(10), sampler=SamplerWithoutReplacement(drop_last=True))


def test_add_warns_for_a_batch_of_one():
    rb = ReplayBuffer(storage=ListStorage(10))
    with pytest.warns(
        UserWarning, match=r"Using `add\(\)` with a TensorDict that has batch_size \[1\]"
    ):
        rb.add(TensorDict(batch_size=[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rb.add(TensorDict(batch_size=[]))
        rb.add(TensorDict({"traj": torch.zeros(5)}, batch_size=[5]))


def test_add_warning_can_be_switched_off(monkeypatch):
    from tdrl import _utils

    monkeypatch.setenv("RL_WARNINGS", "0")
    assert not _utils.rl_warnings()
    rb = ReplayBuffer(storage=ListStorage(10))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rb.add(TensorDict(batch_size=[1]))


def test_prefetched_buffers_cannot_be_shared():
    with pytest.raises(ValueError, match="Cannot share prefetched replay buffers.*prefetch=0"):
        ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=1, shared=True)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=1)
    with pytest.raises(ValueError, match="shared=False"):
        rb.share()


def test_reads_are_snapshots():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict({"a": torch.zeros(4)}, [4]))
    everything, first = rb[:], rb[0]
    everything["a"] += 1
    first["a"] += 1
    assert rb[:]["a"].tolist() == [0.0] * 4
    rb.extend(TensorDict({"a": torch.ones(4)}, [4]))
    assert everything.shape == (4,)


def test_reads_do_not_tear_under_a_concurrent_writer():
    import threading

    rb = ReplayBuffer(storage=LazyTensorStorage(64))
    rb.extend(TensorDict({"a": torch.zeros(64), "b": torch.zeros(64)}, [64]))
    stop = threading.Event()

    def write():
        value = 1.0
        while not stop.is_set():
            rb.extend(TensorDict({"a": torch.full((8,), value), "b": torch.full((8,), value)}, [8]))
            value += 1.0

    thread = threading.Thread(target=write)
    thread.start()
    try:
        for _ in range(200):
            content = rb[:]
            assert torch.equal(content["a"], content["b"])
    finally:
        stop.set()
        thread.join(timeout=10)
