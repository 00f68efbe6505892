"""Prefetching replay buffers: ordered draws, and the queue saved and restored with the buffer."""

from __future__ import annotations

import pickle
import threading

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, ListStorage, ReplayBuffer, TensorDictReplayBuffer


def _buffer(seed: int = 0, prefetch: int = 2, storage=None, **kwargs) -> ReplayBuffer:
    buffer = ReplayBuffer(
        storage=ListStorage(30) if storage is None else storage,
        batch_size=4,
        prefetch=prefetch,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )
    buffer.extend(torch.arange(30))
    return buffer


def _draws(buffer: ReplayBuffer, count: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for _ in range(count):
        data, info = buffer.sample(return_info=True)
        out.append((data, info["index"]))
    return out


def _assert_same(left: list, right: list) -> None:
    for (data_a, index_a), (data_b, index_b) in zip(left, right, strict=True):
        assert torch.equal(data_a, data_b)
        assert torch.equal(torch.as_tensor(index_a), torch.as_tensor(index_b))


@pytest.mark.parametrize("prefetch", [1, 3])
def test_prefetched_draws_equal_direct_draws(prefetch):
    # the batches drawn ahead come in the order they were asked for: same as no prefetch
    for _ in range(10):
        _assert_same(_draws(_buffer(prefetch=0), 8), _draws(_buffer(prefetch=prefetch), 8))


def test_state_dict_carries_the_prefetched_batches():
    for _ in range(20):
        source = _buffer(seed=0)
        source.sample()
        state = source.state_dict()
        restored = _buffer(seed=1)
        restored.sample()  # its own batches drawn ahead must not leak after the load
        restored.load_state_dict(state)
        _assert_same(_draws(source), _draws(restored))


def test_pickled_buffer_hands_out_the_same_batches():
    source = _buffer()
    source.sample()
    restored = pickle.loads(pickle.dumps(source))
    assert restored.stats()["prefetch_queue_size"] == 2
    _assert_same(_draws(source), _draws(restored))


def test_saved_batches_are_copies():
    source = _buffer()
    source.sample()
    state = source.state_dict()
    saved = state["_prefetch_state"]["queue"][0][0]
    saved.fill_(-1)
    expected = source.sample()
    assert not torch.equal(expected, saved)
    assert (expected >= 0).all()


def test_capacity_mismatch_raises_and_changes_nothing():
    source = _buffer(prefetch=2)
    source.sample()
    state = source.state_dict()
    target = _buffer(seed=1, prefetch=1)
    target.sample()
    untouched = pickle.loads(pickle.dumps(target))
    with pytest.raises(RuntimeError, match="capacity 2.*prefetch=1"):
        target.load_state_dict(state)
    _assert_same(_draws(untouched), _draws(target))


def test_state_without_queue_leaves_it_empty():
    source = _buffer()
    source.sample()
    state = source.state_dict()
    del state["_prefetch_state"]
    target = _buffer(seed=1)
    target.sample()
    target.load_state_dict(state)
    assert target.stats()["prefetch_queue_size"] == 0


def test_no_prefetch_saves_no_queue():
    buffer = _buffer(prefetch=0)
    buffer.sample()
    assert "_prefetch_state" not in buffer.state_dict()


@pytest.mark.parametrize("tensordict", [False, True])
def test_restored_batches_are_fresh_leaves(tensordict):
    def make(seed):
        cls = TensorDictReplayBuffer if tensordict else ReplayBuffer
        buffer = cls(
            storage=ListStorage(20),
            batch_size=3,
            prefetch=2,
            generator=torch.Generator().manual_seed(seed),
        )
        values = torch.arange(20.0, requires_grad=True) * 2
        buffer.extend(TensorDict({"value": values}, [20]) if tensordict else values)
        return buffer

    source = make(0)
    source.sample()
    from_state = make(1)
    from_state.load_state_dict(source.state_dict())
    for restored in (pickle.loads(pickle.dumps(source)), from_state):
        queued = restored.sample()  # the oldest batch drawn ahead by the source
        value = queued["value"] if tensordict else queued
        assert value.is_leaf and value.requires_grad


def test_failed_draw_cannot_be_saved():
    calls = []

    def collate(items):
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("broken collate")
        return torch.stack(items)

    buffer = _buffer(collate_fn=collate)
    buffer.sample()
    with pytest.raises(RuntimeError, match="prefetch queue") as info:
        buffer.state_dict()
    assert isinstance(info.value.__cause__, ValueError)


def test_empty_waits_for_draws_in_flight():
    release = threading.Event()

    def slow_collate(items):
        release.wait(5)
        return torch.stack(items)

    buffer = _buffer(collate_fn=slow_collate)
    release.set()
    buffer.sample()
    release.clear()
    timer = threading.Timer(0.2, release.set)
    timer.start()
    buffer.empty()  # must neither deadlock on the draws in flight nor keep their batches
    timer.join()
    assert buffer.stats()["prefetch_queue_size"] == 0
    buffer.extend(torch.arange(100, 110))
    release.set()
    assert (buffer.sample() >= 100).all()


def test_loads_after_dumps_draws_from_the_saved_state(tmp_path):
    # dumps/loads keep the storage, sampler, writer and rng state; the queue restarts empty
    source = _buffer(storage=LazyTensorStorage(30), prefetch=0)
    source.sample()
    source.dumps(tmp_path / "rb")
    restored = _buffer(seed=1, storage=LazyTensorStorage(30), prefetch=2)
    restored.sample()
    restored.loads(tmp_path / "rb")
    assert restored.stats()["prefetch_queue_size"] == 0
    _assert_same(_draws(source), _draws(restored))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_epoch_iteration_hands_out_the_batches_drawn_ahead(prefetch):
    from tdrl.data import SamplerWithoutReplacement

    buffer = ReplayBuffer(
        storage=ListStorage(10),
        sampler=SamplerWithoutReplacement(drop_last=False),
        batch_size=3,
        prefetch=prefetch,
        generator=torch.Generator().manual_seed(0),
    )
    buffer.extend(torch.arange(10))
    first = buffer.sample()
    rest = list(buffer)  # the rest of the epoch, including what was drawn ahead
    assert torch.equal(torch.cat([first, *rest]).sort().values, torch.arange(10))
    assert [len(batch) for batch in rest] == [3, 3, 1]
    # the next epoch starts with the batches drawn ahead past the end of this one
    assert torch.equal(torch.cat(list(buffer)).sort().values, torch.arange(10))
