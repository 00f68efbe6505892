"""Shared lazy buffers first written in child processes: every item reaches every process."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import pickle
import tempfile
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
    shared_init,
)

_CHILDREN = 4
_ITEMS = 100


def _write(rb: TensorDictReplayBuffer, proc: int) -> None:
    # a forked child must not enter the OpenMP pool its parent used (libgomp is not fork-safe)
    torch.set_num_threads(1)
    for start in range(0, _ITEMS, 20):
        step = torch.arange(start, start + 20)
        rb.extend(
            TensorDict(
                {
                    "proc": torch.full((20,), proc),
                    "step": step,
                    "obs": {"x": step.float()[:, None]},
                },
                [20],
            )
        )


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Temporary and shared-memory folders of this test go to folders of its own.

    Other programs create folders in the machine-wide ones while the test runs, so the test
    checks its own folders are left empty.
    """
    folder = tmp_path / "tmp"
    shm = tmp_path / "shm"
    folder.mkdir()
    shm.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setattr(shared_init, "SHARED_ROOT", str(shm))
    return folder, shm


def _storage(kind: str, tmp_path) -> LazyTensorStorage:
    size = _CHILDREN * _ITEMS
    if kind == "tensor":
        return LazyTensorStorage(size)
    if kind == "memmap":
        return LazyMemmapStorage(size)
    return LazyMemmapStorage(size, scratch_dir=tmp_path / "scratch")


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("kind", ["tensor", "memmap", "scratch"])
def test_children_write_an_empty_shared_buffer_and_the_parent_reads_every_item(
    kind: str, method: str, tmp_path, private_tmp
) -> None:
    rb = TensorDictReplayBuffer(storage=_storage(kind, tmp_path), batch_size=8, shared=True)
    ctx = mp.get_context(method)
    procs = [ctx.Process(target=_write, args=(rb, proc)) for proc in range(_CHILDREN)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0, f"writer exited with {proc.exitcode}"
    assert len(rb) == _CHILDREN * _ITEMS
    assert rb.write_count == _CHILDREN * _ITEMS
    content = rb[:]
    pairs = sorted(zip(content["proc"].tolist(), content["step"].tolist()))
    assert pairs == [(p, s) for p in range(_CHILDREN) for s in range(_ITEMS)]
    assert torch.equal(content["obs", "x"][:, 0], content["step"].float())
    assert rb.sample()["step"].shape == (8,)
    # the parent writes into the same allocation
    rb.storage.set(0, content[5])
    assert rb.storage[0]["step"] == content["step"][5]
    folder, shm = private_tmp
    if kind == "tensor":  # a shared tensor storage keeps its files in shared memory
        assert len(os.listdir(shm)) == 1
    del rb, content, procs
    gc.collect()
    assert os.listdir(folder) == [], "a temporary folder was left behind"
    assert os.listdir(shm) == [], "a shared-memory folder was left behind"


def test_a_copy_sent_before_the_first_write_maps_what_the_parent_allocates_later() -> None:
    storage = LazyTensorStorage(10, shared_init=True)
    # what a spawned child receives
    copy = pickle.loads(ForkingPickler.dumps(storage))
    assert len(copy) == 0 and not copy.initialized
    storage.set(slice(0, 3), torch.arange(3))
    assert len(copy) == 3 and copy.initialized
    copy.set(slice(3, 5), torch.arange(10, 12))
    assert storage.get(slice(None)).tolist() == [0, 1, 2, 10, 11]


def test_a_shared_scratch_dir_reused_does_not_map_the_old_content(tmp_path) -> None:
    first = ReplayBuffer(storage=LazyMemmapStorage(4, scratch_dir=tmp_path), shared=True)
    first.extend(torch.arange(4))
    del first
    second = ReplayBuffer(
        storage=LazyMemmapStorage(8, scratch_dir=tmp_path, existsok=True), shared=True
    )
    assert len(second) == 0 and not second.storage.initialized
    second.extend(torch.arange(8) * 2)
    assert second[:].tolist() == [0, 2, 4, 6, 8, 10, 12, 14]


def test_cleanup_removes_the_folder_of_a_shared_storage_never_written() -> None:
    storage = LazyMemmapStorage(4, shared_init=True)
    folder = storage._folder
    assert os.path.isdir(folder)
    assert storage.cleanup()
    assert not os.path.exists(folder)
