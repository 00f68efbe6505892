"""Checkpoints: dumps / loads of buffers and components, compact formats, atomic writes, damage."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from tensordict import MemoryMappedTensor, TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.checkpointers import (
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    ListStorageCheckpointer,
    NestedStorageCheckpointer,
    TensorStorageCheckpointer,
    checkpoint_bytes,
)
from tests.data.test_slice_samplers import MockCollector


def transitions(n, obs_dim=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "obs": torch.randn(n, obs_dim, generator=gen),
            "action": torch.randn(n, 2, generator=gen),
            "next": {
                "reward": torch.randn(n, 1, generator=gen),
                "obs": torch.randn(n, obs_dim, generator=gen),
            },
        },
        [n],
    )


def assert_same(a, b):
    assert a.batch_size == b.batch_size
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a.get(key), b.get(key)), key


def collected_buffer(storage, batches, **collector_kwargs):
    rb = TensorDictReplayBuffer(storage=storage)
    for _, data in zip(range(batches), MockCollector(**collector_kwargs)):
        rb.extend(data)
    return rb


def test_buffer_round_trip_is_exact(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50), batch_size=8)
    rb.extend(transitions(70))  # wraps
    rb.dumps(tmp_path / "ckpt")
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(50), batch_size=8)
    other.loads(tmp_path / "ckpt")
    assert_same(rb[:], other[:])
    assert other.writer.state_dict() == rb.writer.state_dict()
    assert rb.extend(transitions(3)).tolist() == other.extend(transitions(3)).tolist()
    files = {
        name.rsplit(".", 1)[-1] for _, _, names in os.walk(tmp_path / "ckpt") for name in names
    }
    assert files <= {"json", "memmap"}  # nothing pickled


def test_prioritized_trees_round_trip_bit_exact(tmp_path):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(300), batch_size=16
    )
    rb.extend(transitions(300))
    for _ in range(5):
        sample = rb.sample()
        rb.update_priority(sample["index"], torch.rand(16) * 10 + 0.01)
    rb.dumps(tmp_path / "ckpt")
    other = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(300), batch_size=16
    )
    other.loads(tmp_path / "ckpt")
    ours, theirs = rb.sampler._tree, other.sampler._tree
    assert torch.equal(ours.leaves(), theirs.leaves())
    for a, b in zip(ours._levels, theirs._levels):
        assert torch.equal(a, b)
    assert torch.equal(ours.total(), theirs.total()) and torch.equal(ours.min(), theirs.min())
    assert rb.sampler.max_priority == other.sampler.max_priority
    torch.manual_seed(3)
    first = rb.sample()
    torch.manual_seed(3)
    second = other.sample()
    assert torch.equal(first["index"], second["index"])
    assert torch.equal(first["priority_weight"], second["priority_weight"])


def test_max_value_writer_and_epoch_sampler_round_trip(tmp_path):
    def make():
        return TensorDictReplayBuffer(
            storage=LazyTensorStorage(20),
            writer=TensorDictMaxValueWriter(rank_key="score"),
            sampler=SamplerWithoutReplacement(),
            batch_size=5,
        )

    rb = make()
    data = TensorDict({"score": torch.randn(60), "x": torch.arange(60)}, [60])
    rb.extend(data[:40])
    rb.sample()
    rb.dumps(tmp_path / "ckpt")
    other = make()
    other.loads(tmp_path / "ckpt")
    assert torch.equal(rb.writer._ranks, other.writer._ranks)
    assert torch.equal(rb.sample()["x"], other.sample()["x"])  # same epoch order
    rb.extend(data[40:])
    other.extend(data[40:])
    assert_same(rb[:], other[:])


def test_component_dumps_and_state_dict_route(tmp_path):
    sampler = PrioritizedSampler(10, alpha=1.0, beta=1.0)
    sampler.update_priority(torch.arange(10), torch.arange(1.0, 11.0))
    sampler.dumps(tmp_path / "sampler")
    restored = PrioritizedSampler(10, alpha=1.0, beta=1.0)
    restored.loads(tmp_path / "sampler")
    assert torch.equal(sampler._tree.leaves(), restored._tree.leaves())
    with pytest.raises(ValueError, match="class mismatch.*SamplerWithoutReplacement"):
        SamplerWithoutReplacement().loads(tmp_path / "sampler")

    rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
    rb.extend(transitions(10))
    buffer = io.BytesIO()
    torch.save(rb.state_dict(), buffer)
    buffer.seek(0)
    other = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
    other.load_state_dict(torch.load(buffer, weights_only=True))
    assert_same(rb[:], other[:])
    rb.writer.dumps(tmp_path / "writer")
    other.writer.loads(tmp_path / "writer")
    rb.storage.dumps(tmp_path / "storage")
    other.storage.loads(tmp_path / "storage")


def test_memmap_and_ndim2_storages(tmp_path):
    rb = collected_buffer(
        LazyMemmapStorage(60, ndim=2, scratch_dir=tmp_path / "a"), 4, num_envs=3, frames_per_batch=7
    )
    rb.dumps(tmp_path / "ckpt")
    other = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(60, ndim=2, scratch_dir=tmp_path / "b")
    )
    other.loads(tmp_path / "ckpt")
    leaves = other.storage.content.values(include_nested=True, leaves_only=True)
    assert all(isinstance(leaf, MemoryMappedTensor) for leaf in leaves)
    assert_same(rb[:], other[:])
    assert len(other) == len(rb) == 60


def test_list_storage(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend(
        [torch.ones(2), TensorDict({"a": torch.zeros(3)}, [3]), {"k": [1, 2.5]}, "text", None]
    )
    rb.dumps(tmp_path / "ckpt")
    other = ReplayBuffer(storage=ListStorage(10))
    other.loads(tmp_path / "ckpt")
    items = other.storage._storage
    assert torch.equal(items[0], torch.ones(2)) and items[2:] == [{"k": [1, 2.5]}, "text", None]
    assert torch.equal(items[1]["a"], torch.zeros(3))
    rb.add(object())
    with pytest.raises(TypeError, match="item 5 is a object"):
        ListStorageCheckpointer().dumps(rb.storage, tmp_path / "bad")


@pytest.mark.parametrize("num_envs, batches", [(1, 13), (3, 5)])
def test_flat_checkpointer_round_trip(tmp_path, num_envs, batches):
    ndim = 1 if num_envs == 1 else 2
    rb = collected_buffer(
        LazyTensorStorage(90, ndim=ndim), batches, num_envs=num_envs, frames_per_batch=10
    )
    assert rb.writer._cursor != 0  # a wrapped buffer
    rb.storage.checkpointer = FlatStorageCheckpointer()
    rb.dumps(tmp_path / "ckpt")
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(90, ndim=ndim))
    other.storage.checkpointer = FlatStorageCheckpointer()
    other.loads(tmp_path / "ckpt")
    assert_same(rb[:], other[:])
    meta = json.loads((tmp_path / "ckpt" / "storage" / "checkpoint.json").read_text())
    roles = {tuple(e["key"]): e["role"] for e in meta["entries"]}
    assert roles[("next", "observation")] == "stops" and roles[("next", "reward")] == "full"


def test_flat_checkpointer_handles_discontinuous_data(tmp_path):
    storage = LazyTensorStorage(30)
    data = transitions(30)  # "next" obs never equal the following root obs
    storage.set(slice(0, 30), data)
    FlatStorageCheckpointer().dumps(storage, tmp_path / "ckpt")
    restored = LazyTensorStorage(30)
    FlatStorageCheckpointer().loads(restored, tmp_path / "ckpt")
    assert_same(restored.get(slice(None)), data)


def test_flat_checkpointer_writes_at_most_60_percent(tmp_path):
    collector = MockCollector(num_envs=1, frames_per_batch=200)
    data = collector.rollout()
    big = data.exclude("step_count", ("next", "step_count"), "collector")
    obs = torch.randn(201, 64)
    big["observation"] = obs[:-1]
    big["next", "observation"] = obs[1:]
    storage = LazyTensorStorage(200)
    storage.set(slice(0, 200), big)
    TensorStorageCheckpointer().dumps(storage, tmp_path / "ted")
    FlatStorageCheckpointer().dumps(storage, tmp_path / "flat")
    ratio = checkpoint_bytes(tmp_path / "flat") / checkpoint_bytes(tmp_path / "ted")
    assert ratio <= 0.6, ratio
    restored = LazyTensorStorage(200)
    FlatStorageCheckpointer().loads(restored, tmp_path / "flat")
    assert_same(restored.get(slice(None)), big)


def test_nested_checkpointer(tmp_path):
    rb = collected_buffer(LazyTensorStorage(50), 4, num_envs=1, frames_per_batch=10)
    rb.storage.checkpointer = NestedStorageCheckpointer()
    rb.dumps(tmp_path / "ckpt")
    nested = NestedStorageCheckpointer.read_nested(tmp_path / "ckpt" / "storage")
    for trajectory in nested["collector", "traj_ids"].unbind(0):
        assert (trajectory == trajectory[0]).all()
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(50))
    other.storage.checkpointer = NestedStorageCheckpointer()
    other.loads(tmp_path / "ckpt")
    assert_same(rb[:], other[:])


def test_h5_checkpointer_docs_loop(tmp_path):
    """data.rst: collect with 3 envs, dumps to HDF5, loads into another buffer, compare."""
    pytest.importorskip("h5py")
    rb = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2))
    rb_test = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2))
    rb.storage.checkpointer = H5StorageCheckpointer()
    rb_test.storage.checkpointer = H5StorageCheckpointer()
    collector = MockCollector(num_envs=3, frames_per_batch=7)
    for _, data in zip(range(10), collector):
        rb.extend(data)
        assert rb._storage.max_size == 102
        rb.dumps(tmp_path / "ckpt")
        rb_test.loads(tmp_path / "ckpt")
        assert_same(rb_test[:], rb[:])
    assert (tmp_path / "ckpt" / "storage" / "checkpoint.h5").is_file()


_KILLED_WRITER = """
import sys, time, torch
from tensordict import TensorDict
from tdrl.data.replay_buffers import ReplayBuffer, LazyTensorStorage, checkpointers
path, flag = sys.argv[1:3]
rb = ReplayBuffer(storage=LazyTensorStorage(1000))
rb.extend(TensorDict({"x": torch.full((500, 4), 2.0)}, [500]))
original = checkpointers.save_tensor
def stalled(*args, **kwargs):
    out = original(*args, **kwargs)
    open(flag, "w").close()
    time.sleep(60)
    return out
checkpointers.save_tensor = stalled
rb.dumps(path)
"""


def test_sigkill_during_dumps_keeps_previous_checkpoint(tmp_path):
    path, flag = tmp_path / "ckpt", tmp_path / "flag"
    rb = ReplayBuffer(storage=LazyTensorStorage(1000))
    rb.extend(TensorDict({"x": torch.ones(100, 4)}, [100]))
    rb.dumps(path)
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(path), str(flag)])
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert proc.poll() is None, "the writer exited early"
            assert time.monotonic() < deadline, "the writer never started dumping"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    other = ReplayBuffer(storage=LazyTensorStorage(1000))
    other.loads(path)
    assert len(other) == 100 and (other[:]["x"] == 1).all()
    rb.dumps(path)  # the next write cleans up what the dead writer left
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "flag"]


def test_crash_between_renames_recovers_backup(tmp_path):
    path = tmp_path / "ckpt"
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5))
    rb.dumps(path)
    os.replace(path, tmp_path / ".ckpt.tdrl-old")  # as if killed right after moving it aside
    other = ReplayBuffer(storage=LazyTensorStorage(10))
    other.loads(path)
    assert other[:].tolist() == [0, 1, 2, 3, 4]
    rb.extend(torch.arange(5, 7))
    rb.dumps(path)
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    other.loads(path)
    assert len(other) == 7


def test_damaged_or_foreign_folders_raise_clear_errors(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(transitions(10))
    rb.dumps(tmp_path / "ckpt")
    fresh = lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(10))  # noqa: E731
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        fresh().loads(tmp_path / "missing")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "data.bin").write_bytes(b"hello")
    with pytest.raises(ValueError, match="not a tdrl checkpoint: missing checkpoint.json"):
        fresh().loads(tmp_path / "foreign")
    with pytest.raises(
        ValueError, match="format mismatch.*expected tdrl.ReplayBuffer, got 'tdrl.state'"
    ):
        fresh().loads(tmp_path / "ckpt" / "sampler")
    leaf = next((tmp_path / "ckpt" / "storage").glob("leaf_*.memmap"))
    leaf.write_bytes(leaf.read_bytes()[:-4])
    with pytest.raises(ValueError, match=f"{leaf.name}.*expected"):
        fresh().loads(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "checkpoint.json").write_text("{not json")
    with pytest.raises(ValueError, match="damaged checkpoint metadata"):
        fresh().loads(tmp_path / "ckpt")


def test_structure_mismatch_on_allocated_storage(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(transitions(10))
    rb.dumps(tmp_path / "ckpt")
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    other.extend(TensorDict({"y": torch.zeros(2)}, [2]))
    with pytest.raises(ValueError, match="storage structure mismatch at key"):
        other.loads(tmp_path / "ckpt")


def test_buffer_checkpointer_argument_and_slice_sampler_state(tmp_path):
    from tdrl.data.replay_buffers.samplers import PrioritizedSliceSampler

    def make():
        return TensorDictReplayBuffer(
            storage=LazyTensorStorage(60),
            sampler=PrioritizedSliceSampler(
                60, alpha=0.8, beta=0.4, slice_len=5, traj_key=("collector", "traj_ids")
            ),
            checkpointer=FlatStorageCheckpointer(),
            batch_size=20,
        )

    rb = make()
    for _, data in zip(range(3), MockCollector(num_envs=1, frames_per_batch=25, min_len=6)):
        rb.extend(data)
    sample = rb.sample()
    rb.update_priority(sample["index"], torch.rand(20) + 0.5)
    rb.dumps(tmp_path / "ckpt")
    meta = json.loads((tmp_path / "ckpt" / "storage" / "checkpoint.json").read_text())
    assert meta["format"] == "tdrl.FlatStorage"
    other = make()
    other.loads(tmp_path / "ckpt")
    assert_same(rb[:], other[:])
    torch.manual_seed(5)
    first = rb.sample()
    torch.manual_seed(5)
    second = other.sample()
    assert_same(first, second)


# -- items with batch dims of their own -------------------------------------------------------------
def _ted_items(shape, seed=0):
    """TED data of the given batch shape (time last) with one-step-shifted observations."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(*shape[:-1], shape[-1] + 1, 2, generator=gen)
    done = torch.zeros(*shape, 1, dtype=torch.bool)
    done[..., -1, :] = True
    return TensorDict(
        {"obs": obs[..., :-1, :], "next": {"obs": obs[..., 1:, :], "done": done}}, list(shape)
    )


def _checkpointer(name):
    if name == "h5":
        pytest.importorskip("h5py")
        return H5StorageCheckpointer()
    return {
        "tensor": None,
        "flat": FlatStorageCheckpointer(),
        "nested": NestedStorageCheckpointer(),
    }[name]


@pytest.mark.parametrize("name", ["tensor", "flat", "nested", "h5"])
@pytest.mark.parametrize("ndim, shape, stored", [(1, (6, 5), (20, 5)), (2, (2, 8, 3), (10, 2, 3))])
def test_round_trip_keeps_item_batch_dims(tmp_path, name, ndim, shape, stored):
    """[N, T] items (ndim=1) and [B, T, K] data (ndim=2) keep their batch size through dumps."""
    rb = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(20, ndim=ndim, scratch_dir=tmp_path / "a"),
        checkpointer=_checkpointer(name),
    )
    for seed in range(3):  # the last extend wraps around
        rb.extend(_ted_items(shape, seed))
    assert rb.storage._storage.batch_size == stored
    rb.dumps(tmp_path / "ckpt")
    other = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(20, ndim=ndim, scratch_dir=tmp_path / "b"),
        checkpointer=_checkpointer(name),
    )
    other.loads(tmp_path / "ckpt")
    assert other.storage._storage.batch_size == stored
    assert_same(rb[:], other[:])
    assert other.sample(4).batch_size == (4, *stored[ndim:])


def _cut_checkpoint(folder, ndim=1):
    """Rewrite a storage checkpoint as versions that cut the root batch size to ``ndim`` dims."""
    meta_file = folder / "checkpoint.json"
    meta = json.loads(meta_file.read_text())
    meta.pop("full_batch_size")
    meta["layout"]["batch_size"] = meta["layout"]["batch_size"][:ndim]
    meta_file.write_text(json.dumps(meta))


@pytest.mark.parametrize("name", ["tensor", "flat"])
def test_checkpoint_with_a_cut_batch_size_loads_with_the_full_one(tmp_path, name):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), checkpointer=_checkpointer(name))
    rb.extend(_ted_items((6, 5)))
    rb.dumps(tmp_path / "ckpt")
    _cut_checkpoint(tmp_path / "ckpt" / "storage")
    lazy = TensorDictReplayBuffer(storage=LazyTensorStorage(10), checkpointer=_checkpointer(name))
    lazy.loads(tmp_path / "ckpt")  # the nested "next" kept [10, 5]: the root's is recovered
    assert lazy.storage._storage.batch_size == (10, 5)
    assert_same(rb[:], lazy[:])
    allocated = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), checkpointer=_checkpointer(name)
    )
    allocated.extend(_ted_items((1, 5), seed=3))
    allocated.loads(tmp_path / "ckpt")
    assert allocated.storage._storage.batch_size == (10, 5)
    assert_same(rb[:], allocated[:])
