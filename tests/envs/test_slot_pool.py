"""SlotPool: distinct one-element tensors from growing blocks."""

from __future__ import annotations

import copy
import pickle

import torch

from tdrl.envs._slot_pool import SlotPool


def test_slot_pool_hands_out_distinct_rows_from_growing_blocks():
    pool = SlotPool(torch.float32, max_block_size=64)
    assert pool._block_size == 0  # nothing allocated before the first value
    values = [pool.take(float(i)) for i in range(200)]
    assert [float(v) for v in values] == [float(i) for i in range(200)]
    assert all(v.shape == (1,) and v.dtype == torch.float32 for v in values)
    assert pool._block_size == 64
    values[0].fill_(-1.0)
    assert float(values[1]) == 1.0 and float(values[199]) == 199.0


def test_slot_pool_copies_start_empty():
    pool = SlotPool(torch.bool)
    pool.take(True)
    for clone in (pickle.loads(pickle.dumps(pool)), copy.deepcopy(pool)):
        assert clone._block_size == 0
        assert [bool(clone.take(v)) for v in (True, False, True)] == [True, False, True]
