"""The collector worker process itself: what it does to the state it inherits from the parent."""

from __future__ import annotations

import gc

from tdrl.collectors import MultiSyncDataCollector
from tests.mocks import CountingEnv


def env_in_frozen_worker():
    """A CountingEnv that can only be built where the inherited objects were frozen."""
    if gc.get_freeze_count() == 0:
        raise RuntimeError("the worker's garbage collector still walks the objects it inherited")
    return CountingEnv(max_steps=4)


def test_worker_moves_inherited_objects_out_of_garbage_collection():
    assert gc.get_freeze_count() == 0  # the worker cannot have inherited a frozen state
    collector = MultiSyncDataCollector(
        [env_in_frozen_worker], frames_per_batch=4, total_frames=8, mp_start_method="fork"
    )
    try:
        assert [data.numel() for data in collector] == [4, 4]
    finally:
        collector.shutdown()
    assert gc.get_freeze_count() == 0  # the parent's collector is left alone
