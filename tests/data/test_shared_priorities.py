"""Prioritized buffers shared by several processes: one set of priorities, seen by every process."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    TensorDictReplayBuffer,
)

_ITEMS = 100


def _write_with_priority(rb: TensorDictReplayBuffer, proc: int) -> None:
    # a forked child must not enter the OpenMP pool its parent used (libgomp is not fork-safe)
    torch.set_num_threads(1)
    for start in range(0, _ITEMS, 25):
        data = TensorDict(
            {"proc": torch.full((25,), proc), "step": torch.arange(start, start + 25)}, [25]
        )
        index = rb.extend(data)
        rb.update_priority(index, torch.full((25,), float(proc + 1)))


def _run(ctx: mp.context.BaseContext, target, args_list) -> None:
    procs = [ctx.Process(target=target, args=args) for args in args_list]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0, f"writer exited with {proc.exitcode}"


def _buffer(storage) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=storage, sampler=PrioritizedSampler(4 * _ITEMS, alpha=1.0, beta=1.0), shared=True
    )
    # allocate in the parent, so that the children write into shared memory
    rb.extend(
        TensorDict({"proc": torch.full((1,), -1), "step": torch.zeros(1, dtype=torch.long)}, [1])
    )
    rb.empty()
    return rb


@pytest.mark.parametrize("storage", ["tensor", "memmap"])
def test_four_writer_processes_are_sampled_in_proportion_to_their_priorities(
    storage: str, tmp_path
) -> None:
    store = (
        LazyTensorStorage(4 * _ITEMS)
        if storage == "tensor"
        else LazyMemmapStorage(4 * _ITEMS, scratch_dir=tmp_path / "m")
    )
    rb = _buffer(store)
    _run(mp.get_context("fork"), _write_with_priority, [(rb, k) for k in range(4)])
    assert len(rb) == 4 * _ITEMS
    stored = rb[:]
    for k in range(4):
        assert sorted(stored["step"][stored["proc"] == k].tolist()) == list(range(_ITEMS))
    draws = torch.cat([rb.sample(4000)["proc"] for _ in range(10)])
    share = torch.bincount(draws, minlength=4).double() / draws.numel()
    # priorities 1, 2, 3, 4 for 100 items each: shares 0.1, 0.2, 0.3, 0.4 (std ~0.0025)
    expected = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    assert torch.allclose(share, expected, atol=0.015), share.tolist()
    # importance weights use the minimum over all processes' priorities: (p_i / 1) ** -1
    sample, info = rb.sample(64, return_info=True)
    assert torch.allclose(info["priority_weight"].double(), 1.0 / (sample["proc"] + 1).double())


def _update_then_sample(rb: TensorDictReplayBuffer, queue) -> None:
    torch.set_num_threads(1)
    rb.update_priority(torch.tensor([0]), torch.tensor([1000.0]))
    queue.put(rb.sample(200)["step"].tolist())


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_priorities_flow_both_ways_between_parent_and_child(method: str) -> None:
    rb = _buffer(LazyTensorStorage(8))
    rb.extend(TensorDict({"proc": torch.zeros(8, dtype=torch.long), "step": torch.arange(8)}, [8]))
    rb.update_priority(torch.arange(8), torch.full((8,), 1e-3))
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=_update_then_sample, args=(rb, queue))
    proc.start()
    child_draws = queue.get(timeout=60)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    # the child saw the parent's small priorities, and the parent sees the child's update
    assert child_draws.count(0) > 190
    assert (rb.sample(200)["step"] == 0).sum() > 190


def test_unshared_sampler_copies_stay_independent() -> None:
    import copy

    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0).share()
    twin = copy.deepcopy(sampler)
    assert sampler.is_shared and not twin.is_shared


def _update_and_stall(rb: TensorDictReplayBuffer, flag: str) -> None:
    import time

    from tdrl.data.replay_buffers import sum_tree

    def stalled(self, index, value):
        open(flag, "w").close()
        time.sleep(120)

    sum_tree.PriorityTree._write = stalled  # only in this child
    rb.update_priority(torch.tensor([0]), torch.tensor([5.0]))


def test_a_process_killed_inside_update_priority_does_not_block_the_others(tmp_path) -> None:
    import os
    import signal
    import time

    rb = _buffer(LazyTensorStorage(8))
    rb.extend(TensorDict({"proc": torch.zeros(8, dtype=torch.long), "step": torch.arange(8)}, [8]))
    flag = str(tmp_path / "flag")
    proc = mp.get_context("fork").Process(target=_update_and_stall, args=(rb, flag))
    proc.start()
    deadline = time.monotonic() + 60
    while not os.path.exists(flag):
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL
    start = time.monotonic()
    rb.update_priority(torch.tensor([3]), torch.tensor([1000.0]))
    assert (rb.sample(100)["step"] == 3).sum() > 90
    assert time.monotonic() - start < 5
