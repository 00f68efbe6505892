"""Save / load hooks: content transformed on its way to disk and back (e.g. TED2Flat / Flat2TED)."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Flat2TED, TED2Flat
from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
)
from tdrl.data.replay_buffers.checkpointers import (
    FlatStorageCheckpointer,
    TensorStorageCheckpointer,
    checkpoint_bytes,
)
from tdrl.data.replay_buffers.ensemble import StorageEnsemble
from tests.data.test_checkpointers import assert_same
from tests.data.test_slice_samplers import MockCollector


def _storage_meta(path):
    return json.loads((path / "storage" / "checkpoint.json").read_text())


def _saved_keys(meta):
    return {tuple(entry["key"]) for entry in meta["hooked"]["tensordict"]["entries"]}


def _flat_buffer(storage):
    rb = ReplayBuffer(storage=storage)
    rb.register_save_hook(TED2Flat())
    rb.register_load_hook(Flat2TED())
    return rb


@pytest.mark.parametrize("storage_cls", [LazyMemmapStorage, LazyTensorStorage])
def test_ted2flat_hooks_write_the_flat_layout_and_load_ted(tmp_path, storage_cls):
    """The data.rst loop: collect with 3 envs, dumps flat, loads as TED, compare each time."""
    rb = _flat_buffer(storage_cls(100, ndim=2))
    rb_test = _flat_buffer(storage_cls(100, ndim=2))
    collector = MockCollector(num_envs=3, frames_per_batch=8, min_len=3, max_len=12)
    for _, data in zip(range(6), collector):  # 144 frames: the buffer wraps around
        rb.extend(data)
        rb.dumps(tmp_path / "ckpt")
        rb_test.loads(tmp_path / "ckpt")
        assert_same(rb_test[:], rb[:])
    assert rb.writer._cursor != 0
    meta = _storage_meta(tmp_path / "ckpt")
    keys = _saved_keys(meta)
    # what TED2Flat makes: "data" without the duplicated "next" entries, "stops" with them
    assert ("data", "observation") in keys and ("data", "next", "reward") in keys
    assert ("data", "next", "observation") not in keys
    assert {("stops", "index"), ("stops", "next", "observation")} <= keys
    layout = meta["hooked"]["tensordict"]["layout"]
    assert layout["batch_size"] == [] and layout["nodes"]["data"] == [3, 34]
    # the same content written without hooks takes more room
    plain = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    plain.extend(rb[:].transpose(0, 1))
    plain.dumps(tmp_path / "plain")
    assert checkpoint_bytes(tmp_path / "ckpt") < checkpoint_bytes(tmp_path / "plain")


def test_ted2flat_hooks_on_a_gymnasium_rollout(tmp_path):
    pytest.importorskip("gymnasium")
    from tdrl.envs import GymEnv

    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    data = env.rollout(60, break_when_any_done=False)
    rb = _flat_buffer(LazyMemmapStorage(100, scratch_dir=tmp_path / "a"))
    rb.extend(data)
    rb.dumps(tmp_path / "ckpt")
    keys = _saved_keys(_storage_meta(tmp_path / "ckpt"))
    assert ("data", "next", "observation") not in keys and ("stops", "index") in keys
    restored = _flat_buffer(LazyMemmapStorage(100, scratch_dir=tmp_path / "b"))
    restored.loads(tmp_path / "ckpt")
    assert_same(restored[:], data)


def test_save_hooks_get_chronological_content_time_last(tmp_path):
    seen = []

    def record(content):
        seen.append(content.clone())
        return content

    rb = ReplayBuffer(storage=LazyTensorStorage(6))
    rb.extend(TensorDict({"t": torch.arange(8)}, [8]))  # wrapped: rows hold 6 7 2 3 4 5
    rb.register_save_hook(record)
    rb.dumps(tmp_path / "ckpt")
    assert seen[0]["t"].tolist() == [2, 3, 4, 5, 6, 7]
    other = ReplayBuffer(storage=LazyTensorStorage(6))
    other.loads(tmp_path / "ckpt")
    assert other[:]["t"].tolist() == [6, 7, 2, 3, 4, 5]
    streams = ReplayBuffer(storage=LazyTensorStorage(12, ndim=2))
    streams.extend(TensorDict({"t": torch.arange(8).reshape(2, 4)}, [2, 4]))
    streams.register_save_hook(record)
    streams.dumps(tmp_path / "streams")
    assert seen[1].batch_size == (2, 4) and seen[1]["t"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_hooks_on_tensor_and_pytree_storages(tmp_path):
    folders = []

    def to_half(content, path=None):
        folders.append(path)
        return content.half()

    storage = LazyTensorStorage(10)
    storage.set(slice(0, 4), torch.arange(4.0).unsqueeze(-1))
    storage.register_save_hook(to_half)
    storage.dumps(tmp_path / "ckpt")
    meta = json.loads((tmp_path / "ckpt" / "checkpoint.json").read_text())
    assert meta["hooked"]["tensor"]["dtype"] == "float16"
    assert folders[0] is not None and folders[0].startswith(str(tmp_path))
    restored = LazyTensorStorage(10)
    restored.register_load_hook(lambda content: content.float())
    restored.loads(tmp_path / "ckpt")
    assert restored.get(slice(None)).dtype == torch.float32
    assert restored.get(slice(None)).squeeze(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
    tree = LazyTensorStorage(10)
    tree.set(slice(0, 3), {"a": torch.ones(3), "b": (torch.zeros(3, 2),)})
    tree.register_save_hook(lambda content: {"a": content["a"] * 2, "b": content["b"]})
    tree.register_load_hook(lambda content: {"a": content["a"] / 2, "b": content["b"]})
    tree.dumps(tmp_path / "tree")
    other = LazyTensorStorage(10)
    other.register_load_hook(lambda content: {"a": content["a"] / 2, "b": content["b"]})
    other.loads(tmp_path / "tree")
    assert torch.equal(other.get(slice(None))["a"], torch.ones(3))


def test_list_storage_hooks(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend(["a", "b", "c"])
    rb.register_save_hook(lambda items: [item.upper() for item in items])
    rb.dumps(tmp_path / "ckpt")
    meta = _storage_meta(tmp_path / "ckpt")
    assert [item["json"] for item in meta["items"]] == ["A", "B", "C"]
    other = ReplayBuffer(storage=ListStorage(10))
    other.register_load_hook(lambda items: [item.lower() for item in items])
    other.loads(tmp_path / "ckpt")
    assert other.storage._storage == ["a", "b", "c"]
    bad = ReplayBuffer(storage=ListStorage(10))
    bad.extend([1])
    bad.register_save_hook(lambda items: tuple(items))
    with pytest.raises(TypeError, match="must return a list of items, got tuple"):
        bad.dumps(tmp_path / "bad")


def test_ensemble_hooks_reach_every_storage(tmp_path):
    ensemble = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
    ensemble[0].set(slice(0, 2), torch.ones(2))
    ensemble[1].set(slice(0, 1), torch.full((1,), 3.0))
    ensemble.register_save_hook(lambda content: content * 10)
    ensemble.dumps(tmp_path / "ckpt")
    other = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
    other.register_load_hook(lambda content: content / 10)
    other.loads(tmp_path / "ckpt")
    assert other[0].get(slice(None)).tolist() == [1.0, 1.0]
    assert other[1].get(slice(None)).tolist() == [3.0]


def test_hook_mismatches_raise_clear_errors(tmp_path):
    data = MockCollector(num_envs=1, frames_per_batch=10).rollout()
    rb = _flat_buffer(LazyTensorStorage(20))
    rb.extend(data)
    rb.dumps(tmp_path / "flat")
    no_hooks = ReplayBuffer(storage=LazyTensorStorage(20))
    with pytest.raises(ValueError, match="content keys mismatch after the load hooks.*undo"):
        no_hooks.loads(tmp_path / "flat")
    plain = ReplayBuffer(storage=LazyTensorStorage(20))
    plain.extend(data)
    plain.dumps(tmp_path / "plain")
    with pytest.raises(ValueError, match="written without save hooks"):
        _flat_buffer(LazyTensorStorage(20)).loads(tmp_path / "plain")
    wrong = ReplayBuffer(storage=LazyTensorStorage(20))
    wrong.register_load_hook(lambda content: Flat2TED()(content)[:3])
    with pytest.raises(ValueError, match=r"content shape mismatch at key .*expected \(10,"):
        wrong.loads(tmp_path / "flat")
    flat_layout = _flat_buffer(LazyTensorStorage(20))
    flat_layout.storage.checkpointer = FlatStorageCheckpointer()
    flat_layout.extend(data)
    with pytest.raises(ValueError, match="FlatStorageCheckpointer .* runs no save / load hooks"):
        flat_layout.dumps(tmp_path / "refused")
    odd = ReplayBuffer(storage=LazyTensorStorage(20))
    odd.extend(data)
    odd.register_save_hook(lambda content: "not a tensor")
    with pytest.raises(TypeError, match="cannot save what the save hooks returned"):
        TensorStorageCheckpointer().dumps(odd.storage, tmp_path / "odd")
    with pytest.raises(TypeError, match="must be callable"):
        odd.register_load_hook("Flat2TED")
