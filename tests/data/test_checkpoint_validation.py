"""loads checks the whole checkpoint before it changes the buffer; damaged metadata raises."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest
import torch

from tdrl.data.replay_buffers import LazyTensorStorage, PrioritizedReplayBuffer


def _buffer(values: torch.Tensor) -> PrioritizedReplayBuffer:
    rb = PrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        storage=LazyTensorStorage(10),
        batch_size=2,
        generator=torch.Generator(),
    )
    rb.extend(values)
    return rb


@pytest.fixture
def saved(tmp_path) -> str:
    rb = _buffer(torch.arange(10.0, 16.0))
    rb.update_priority(torch.arange(6), torch.arange(1.0, 7.0))
    rb.dumps(tmp_path / "ckpt")
    return str(tmp_path / "ckpt")


def _edit(folder: str, part: str, change) -> None:
    path = os.path.join(folder, part, "checkpoint.json") if part else f"{folder}/checkpoint.json"
    with open(path) as file:
        meta = json.load(file)
    change(meta)
    with open(path, "w") as file:
        json.dump(meta, file)


def _set_state(name: str, value):
    def change(meta):
        meta["state"]["__dict__"][name] = value

    return change


def _assert_untouched(rb: PrioritizedReplayBuffer, before: dict) -> None:
    assert rb[:].tolist() == [0.0, 1.0, 2.0]
    assert rb.write_count == 3
    assert torch.equal(rb.sampler.state_dict()["_priorities"], before["_priorities"])
    assert rb.sampler.alpha == 0.7


@pytest.mark.parametrize(
    ("part", "change", "message"),
    [
        ("writer", _set_state("_cursor", 10**9), r"_cursor must be in \[0, 10\]"),
        ("writer", _set_state("_cursor", -1), "_cursor must be a non-negative integer"),
        ("writer", _set_state("_write_count", "abc"), "_write_count must be a non-negative"),
        ("sampler", _set_state("_alpha", -1.0), "_alpha must be a finite number >= 0"),
        ("sampler", _set_state("_eps", -1e-3), "_eps must be a finite number >= 0"),
        ("sampler", _set_state("_max_capacity", 4), r"_priorities: expected shape \(4,\)"),
        ("", lambda meta: meta.update(batch_size="abc"), "batch_size must be a positive integer"),
        ("", lambda meta: meta.update(batch_size=-2), "batch_size must be a positive integer"),
    ],
)
def test_damaged_metadata_raises_before_the_buffer_changes(saved, part, change, message) -> None:
    _edit(saved, part, change)
    rb = _buffer(torch.arange(3.0))
    before = rb.sampler.state_dict()
    with pytest.raises(ValueError, match=message):
        rb.loads(saved)
    _assert_untouched(rb, before)


@pytest.mark.parametrize("bad", [math.nan, -1.0])
def test_nan_or_negative_stored_priorities_are_refused(saved, bad) -> None:
    priorities = torch.from_file(
        os.path.join(saved, "sampler", "state_1.memmap"), shared=True, size=10, dtype=torch.float64
    )
    priorities[2] = bad
    rb = _buffer(torch.arange(3.0))
    before = rb.sampler.state_dict()
    with pytest.raises(ValueError, match="_priorities must be finite and >= 0"):
        rb.loads(saved)
    _assert_untouched(rb, before)


@pytest.mark.parametrize("length", [9, -1, "3"])  # 6 rows saved
def test_storage_length_beyond_the_saved_rows_is_refused(saved, length) -> None:
    path = os.path.join(saved, "storage", "checkpoint.json")
    with open(path) as file:
        meta = json.load(file)
    meta["len"] = length
    with open(path, "w") as file:
        json.dump(meta, file)
    rb = _buffer(torch.arange(3.0))
    before = rb.sampler.state_dict()
    with pytest.raises(
        ValueError, match=r"damaged checkpoint .* len must be an integer in \[0, 6\]"
    ):
        rb.loads(saved)
    _assert_untouched(rb, before)


def test_damaged_storage_restores_sampler_and_writer(saved) -> None:
    os.truncate(os.path.join(saved, "storage", "leaf_0.memmap"), 3)
    rb = _buffer(torch.arange(3.0))
    before = rb.sampler.state_dict()
    with pytest.raises(ValueError, match="damaged checkpoint"):
        rb.loads(saved)
    _assert_untouched(rb, before)


def test_symlinked_leaf_outside_the_folder_is_refused(saved, tmp_path) -> None:
    leaf = os.path.join(saved, "storage", "leaf_0.memmap")
    outside = tmp_path / "outside.bin"
    shutil.copy(leaf, outside)
    os.remove(leaf)
    os.symlink(outside, leaf)
    rb = _buffer(torch.arange(3.0))
    with pytest.raises(ValueError, match="symbolic link"):
        rb.loads(saved)


def test_a_sound_checkpoint_still_loads(saved) -> None:
    rb = _buffer(torch.arange(3.0))
    rb.loads(saved)
    assert rb[:].tolist() == [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    assert rb.write_count == 6 and rb.batch_size == 2


def _dump_versions(path: str, rounds: int) -> None:
    torch.set_num_threads(1)
    buffers = []
    for version in (1, 2):
        rb = PrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(10), batch_size=version
        )
        rb.extend(torch.full((4 * version,), float(version)))
        rb.update_priority(torch.arange(4 * version), float(version))
        buffers.append(rb)
    for round_ in range(rounds):
        buffers[round_ % 2].dumps(path)


def test_loads_reads_one_version_while_another_process_dumps(tmp_path) -> None:
    import multiprocessing as mp

    path = str(tmp_path / "ckpt")
    _dump_versions(path, 1)
    proc = mp.get_context("fork").Process(target=_dump_versions, args=(path, 400))
    proc.start()
    loads = mixed = 0
    try:
        while proc.is_alive() and loads < 200:
            rb = PrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(10))
            rb.loads(path)
            loads += 1
            version = rb.batch_size
            priorities = rb.sampler.state_dict()["_priorities"]
            consistent = (
                rb[:].eq(version).all()
                and len(rb) == 4 * version
                and rb.write_count == 4 * version
                and priorities[: 4 * version].sub(version).abs().max() < 1e-6
            )
            mixed += not bool(consistent)
    finally:
        proc.join(timeout=120)
    assert proc.exitcode == 0
    assert loads >= 10
    assert mixed == 0, f"{mixed} of {loads} loads mixed two versions"
