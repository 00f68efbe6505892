"""find_start_stop_traj, storage timelines and the storage write counters they rely on."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import DEFAULT_DONE_KEYS, TED2Flat, find_start_stop_traj
from tdrl.data.replay_buffers import LazyTensorStorage, ListStorage, ReplayBuffer
from tdrl.data.replay_buffers.trajectories import storage_timeline


def _flat(result):
    start, stop, lengths = result
    return start.squeeze(-1).tolist(), stop.squeeze(-1).tolist(), lengths.tolist()


def _ends(n, *positions):
    end = torch.zeros(n, dtype=torch.bool)
    end[list(positions)] = True
    return end


@pytest.mark.parametrize("cursor", [4, torch.tensor(4), torch.tensor([2, 3, 4]), range(2, 5)])
def test_full_storage_wraps_at_the_last_row_written(cursor):
    result = find_start_stop_traj(end=_ends(10, 2, 7), at_capacity=True, cursor=cursor)
    assert _flat(result) == ([8, 3, 5], [2, 4, 7], [5, 2, 3])


def test_ids_give_the_same_boundaries_and_join_across_the_wrap():
    ids = torch.tensor([5, 5, 5, 0, 0, 1, 1, 1, 5, 5])
    assert _flat(find_start_stop_traj(trajectory=ids, at_capacity=True)) == (
        [8, 3, 5],
        [2, 4, 7],
        [5, 2, 3],
    )
    # not full: the last row ends a trajectory and nothing wraps
    assert _flat(find_start_stop_traj(trajectory=ids, at_capacity=False)) == (
        [0, 3, 5, 8],
        [2, 4, 7, 9],
        [3, 2, 3, 2],
    )


def test_partial_storage_ends_at_the_write_head_without_touching_the_input():
    end = _ends(6, 2)
    assert _flat(find_start_stop_traj(end=end, at_capacity=False)) == ([0, 3], [2, 5], [3, 3])
    assert end.tolist() == [False, False, True, False, False, False]


def test_full_stream_without_end_is_one_trajectory():
    assert _flat(find_start_stop_traj(end=_ends(4), at_capacity=True)) == ([0], [3], [4])
    assert _flat(find_start_stop_traj(trajectory=torch.tensor([7]), at_capacity=True)) == (
        [0],
        [0],
        [1],
    )


def test_time_first_multidimensional_content():
    ids = torch.tensor([[0, 3], [0, 3], [1, 3], [1, 4], [1, 4]])
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=False)
    assert start.tolist() == [[0, 0], [2, 0], [0, 1], [3, 1]]
    assert stop.tolist() == [[1, 0], [4, 0], [2, 1], [4, 1]]
    assert lengths.tolist() == [2, 3, 3, 2]
    three_dims = torch.zeros(4, 2, 3, dtype=torch.bool)
    start, stop, lengths = find_start_stop_traj(end=three_dims, at_capacity=False)
    assert start.shape == (6, 3) and lengths.tolist() == [4] * 6
    assert stop[:, 0].tolist() == [3] * 6 and stop[:, 1:].tolist() == [
        [0, 0],
        [0, 1],
        [0, 2],
        [1, 0],
        [1, 1],
        [1, 2],
    ]


def test_bad_arguments():
    with pytest.raises(TypeError, match="Exactly one of trajectory or end"):
        find_start_stop_traj(at_capacity=True)
    with pytest.raises(TypeError, match="Exactly one of trajectory or end"):
        find_start_stop_traj(trajectory=torch.zeros(3), end=_ends(3), at_capacity=True)
    with pytest.raises(RuntimeError, match="empty input"):
        find_start_stop_traj(end=torch.zeros(0, dtype=torch.bool), at_capacity=True)
    for cursor in (torch.tensor([], dtype=torch.long), range(0)):
        with pytest.raises(RuntimeError, match="cursor must not be empty"):
            find_start_stop_traj(end=_ends(5, 1), at_capacity=True, cursor=cursor)


def test_default_done_keys():
    assert DEFAULT_DONE_KEYS == ("done", "truncated", "terminated")
    assert TED2Flat().done_keys == set(DEFAULT_DONE_KEYS)


def test_storage_counts_writes_and_remembers_the_last_row():
    storage = LazyTensorStorage(4)
    rb = ReplayBuffer(storage=storage)
    assert storage._mutation_revision == 0 and storage._last_cursor_index == -1
    rb.extend(torch.arange(3))
    assert storage._mutation_revision == 1 and storage._last_cursor_index == 2
    rb.extend(torch.arange(3))  # wraps: rows 3, 0, 1
    assert storage._mutation_revision == 2 and storage._last_cursor_index == 1
    rb[2] = torch.tensor(9)  # an in-place write is a mutation, not a cursor move
    assert storage._mutation_revision == 3 and storage._last_cursor_index == 1
    rb.empty()
    assert storage._mutation_revision == 4 and storage._last_cursor_index == -1
    listed = ListStorage(4)
    ReplayBuffer(storage=listed).extend([1, 2, 3])
    assert listed._mutation_revision == 1 and listed._last_cursor_index == 2


def _revision_in_child(rb, queue):
    rb.extend(TensorDict({"x": torch.arange(2)}, [2]))
    queue.put(rb.storage._mutation_revision)


def test_write_counters_are_shared_with_other_processes():
    import torch.multiprocessing as mp

    storage = LazyTensorStorage(8)
    rb = ReplayBuffer(storage=storage).share(True)
    rb.extend(TensorDict({"x": torch.arange(2)}, [2]))
    context = mp.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_revision_in_child, args=(rb, queue))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == 2
    assert storage._mutation_revision == 2 and storage._last_cursor_index == 3


def test_timeline_of_a_bare_storage_uses_its_last_row():
    storage = LazyTensorStorage(5)
    storage.set(slice(0, 5), torch.arange(5))
    storage.set(torch.tensor([0, 1]), torch.tensor([5, 6]))
    timeline = storage_timeline(storage)
    assert timeline.offset == 2
    assert storage.get(timeline.all_flat()).tolist() == [2, 3, 4, 5, 6]
