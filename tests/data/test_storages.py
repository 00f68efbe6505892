import io
import multiprocessing as mp
import os

import pytest
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)


def _worker_extend(rb):
    rb.extend(TensorDict({"a": torch.ones(10)}, [10]))


def _worker_extend_many(rb, value, rounds):
    for _ in range(rounds):
        rb.extend(TensorDict({"a": torch.full((5,), float(value))}, [5]))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_seed_sharing_example(tmp_path, method):
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(21, scratch_dir=tmp_path / "s"))
    rb.extend(TensorDict({"a": torch.zeros(10)}, [10]))
    proc = mp.get_context(method).Process(target=_worker_extend, args=(rb,))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert len(rb) == 20
    assert (rb["_data", "a"][:10] == 0).all()
    assert (rb["_data", "a"][10:20] == 1).all()


def test_concurrent_extends_lose_no_item(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(1000, scratch_dir=tmp_path / "c"))
    rb.extend(TensorDict({"a": torch.zeros(5)}, [5]))
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_worker_extend_many, args=(rb, i + 1, 40)) for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert len(rb) == 5 + 4 * 40 * 5
    assert rb.write_count == 5 + 4 * 40 * 5
    values = rb[:]["a"]
    for i in range(4):
        assert int((values == i + 1).sum()) == 40 * 5


def test_memmap_files_in_scratch_dir(tmp_path):
    storage = LazyMemmapStorage(10, scratch_dir=tmp_path / "files")
    assert not (tmp_path / "files").exists()
    storage.set(slice(0, 2), TensorDict({"x": torch.ones(2, 3), "y": {"z": torch.zeros(2)}}, [2]))
    files = sorted(os.listdir(tmp_path / "files"))
    assert len(files) == 2 and all(name.endswith(".memmap") for name in files)
    assert isinstance(storage._storage["y", "z"], MemoryMappedTensor)
    with pytest.raises(RuntimeError, match="exists"):
        LazyMemmapStorage(10, scratch_dir=tmp_path / "files").set(
            slice(0, 1), TensorDict({"x": torch.ones(1, 3)}, [1])
        )


def test_memmap_temporary_dir_is_removed():
    storage = LazyMemmapStorage(10)
    storage.set(slice(0, 2), torch.ones(2, 3))
    folder = os.path.dirname(storage.content.get("_tensor").filename)
    assert os.path.isdir(folder)
    del storage
    import gc

    gc.collect()
    assert not os.path.exists(folder)


def test_list_storage_any_object():
    storage = ListStorage(3)
    storage.set(0, {"a": 1})
    storage.set(slice(1, 3), ["x", None])
    assert len(storage) == 3
    assert storage.get(0) == {"a": 1}
    assert storage.get(torch.tensor([2, 1])) == [None, "x"]
    assert storage.state_dict() == {"_storage": [{"a": 1}, "x", None]}
    other = ListStorage(3)
    other.load_state_dict(storage.state_dict())
    assert other.get(1) == "x"
    storage._empty()
    assert len(storage) == 0
    with pytest.raises(IndexError, match="out of range"):
        storage.get(0)


def test_list_storage_unbounded_default():
    rb = ReplayBuffer(storage=ListStorage())
    rb.extend(list(range(3000)))
    assert len(rb) == 3000


def test_tensor_storage_given_container_is_written():
    container = TensorDict({"obs": torch.zeros(6, 2)}, [6])
    rb = ReplayBuffer(storage=TensorStorage(container))
    rb.extend(TensorDict({"obs": torch.ones(3, 2)}, [3]))
    assert container["obs"][:3].eq(1).all() and container["obs"][3:].eq(0).all()
    assert rb.storage.max_size == 6
    with pytest.raises(ValueError, match="max_size"):
        TensorStorage(torch.zeros(4), max_size=5)


def test_tensor_storage_state_dict_roundtrip():
    storage = LazyTensorStorage(8)
    storage.set(
        slice(0, 3), TensorDict({"a": torch.arange(3.0), "b": {"c": torch.ones(3, 2)}}, [3])
    )
    state = storage.state_dict()
    other = LazyTensorStorage(8)
    other.load_state_dict(state)
    assert len(other) == 3
    assert torch.equal(other.get(slice(None))["a"], torch.arange(3.0))
    assert other.get(0)["b", "c"].shape == (2,)
    same = LazyTensorStorage(8)
    same.set(slice(0, 1), TensorDict({"a": torch.zeros(1), "b": {"c": torch.zeros(1, 2)}}, [1]))
    same.load_state_dict(state)
    assert len(same) == 3 and torch.equal(same.get(2)["a"], torch.tensor(2.0))


def _holds_tensordict(value):
    if isinstance(value, TensorDictBase):
        return True
    if isinstance(value, dict):
        return any(_holds_tensordict(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensordict(v) for v in value)
    return False


def test_tensor_storage_state_dict_loads_with_weights_only():
    """The state holds plain containers, so weights_only loading works on any tensordict."""
    storage = LazyTensorStorage(6)
    data = TensorDict(
        {"a": torch.arange(4.0), "b": {"c": torch.ones(4, 2, dtype=torch.int64)}}, [4]
    )
    storage.set(slice(0, 4), data)
    state = storage.state_dict()
    assert not _holds_tensordict(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    other = LazyTensorStorage(6)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    assert len(other) == 4
    assert (other.get(slice(0, 4)) == data).all()
    assert other.get(0)["b", "c"].dtype == torch.int64


def test_tensor_storage_loads_state_holding_a_tensordict():
    """States whose content is a tensordict (older format, non-tensor leaves) still load."""
    storage = LazyTensorStorage(3)
    storage.set(slice(0, 2), TensorDict({"a": torch.ones(2)}, [2]))
    state = storage.state_dict()
    state["_storage"] = TensorDict({"a": torch.tensor([1.0, 2.0, 0.0])}, [3])
    other = LazyTensorStorage(3)
    other.load_state_dict(state)
    assert torch.equal(other.get(slice(0, 2))["a"], torch.tensor([1.0, 2.0]))


def test_pytree_storage_state_dict_roundtrip():
    storage = LazyTensorStorage(5)
    storage.set(slice(0, 2), {"a": torch.ones(2), "b": (torch.zeros(2, 3),)})
    other = LazyTensorStorage(5)
    other.load_state_dict(storage.state_dict())
    out = other.get(slice(None))
    assert set(out) == {"a", "b"} and out["b"][0].shape == (2, 3)


def test_storage_shape_and_len_ndim():
    storage = LazyTensorStorage(10, ndim=2)
    storage.set(slice(0, 2), torch.zeros(2, 3, 4))
    assert storage.max_size == 12
    assert len(storage) == 6
    assert storage.shape == (2, 3)
    assert storage.total_shape == (4, 3)


def test_lazy_storage_device_argument():
    storage = LazyTensorStorage(4, device="cpu")
    storage.set(slice(0, 1), torch.zeros(1, 2))
    assert storage.get(0).device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_lazy_storage_cuda():
    storage = LazyTensorStorage(4, device="cuda")
    storage.set(slice(0, 2), TensorDict({"a": torch.zeros(2, 2)}, [2]))
    assert storage._storage["a"].device.type == "cuda"


def test_non_tensor_data_rejected_by_tensor_storage():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    with pytest.raises(TypeError, match="tensors"):
        rb.add({"a": "text"})


def _worker_add(rb):
    rb.extend(torch.full((3,), 7.0))


def test_shared_lazy_tensor_storage_across_fork():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), shared=True)
    rb.extend(torch.zeros(2))
    proc = mp.get_context("fork").Process(target=_worker_add, args=(rb,))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert rb[:].tolist() == [0.0, 0.0, 7.0, 7.0, 7.0]


def test_explicit_dim_extend():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), dim_extend=1)
    rb.extend(torch.arange(6).reshape(2, 3))
    assert len(rb) == 3
    assert rb[0].tolist() == [0, 3]


# -- items with batch dims of their own ------------------------------------------------------------
def _trajectories(n=100, time=49):
    return TensorDict({"obs": torch.randn(n, time, 3)}, [n, time])


@pytest.mark.parametrize("buffer_cls", [ReplayBuffer, TensorDictReplayBuffer])
@pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
def test_stored_tensordict_keeps_batch_dims_after_the_first(buffer_cls, storage_cls):
    rb = buffer_cls(storage=storage_cls(1000))
    data = _trajectories()
    rb.extend(data)
    assert rb.storage._storage.batch_size == (1000, 49)
    assert rb.storage.shape == (100, 49)
    assert len(rb) == 100
    assert rb[:2].batch_size == (2, 49)
    assert rb[3].batch_size == (49,)
    sample = rb.sample(16)
    assert sample.batch_size == (16, 49)
    assert sample["obs"].shape == (16, 49, 3)
    stored = rb[torch.arange(100)]
    assert torch.equal(stored["obs"], data["obs"])


def test_tensor_storage_keeps_the_batch_size_given():
    container = TensorDict({"obs": torch.zeros(10, 49, 3)}, [10, 49])
    rb = ReplayBuffer(storage=TensorStorage(container))
    assert rb.storage._storage.batch_size == (10, 49)
    rb.extend(TensorDict({"obs": torch.ones(4, 49, 3)}, [4, 49]))
    assert container["obs"][:4].eq(1).all()
    assert rb.sample(5).batch_size == (5, 49)


def test_ndim2_keeps_the_dims_after_ndim():
    rb = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    data = TensorDict({"obs": torch.randn(2, 5, 4, 3)}, [2, 5, 4])
    rb.extend(data)  # time (dim 1) goes first in the storage: rows of 2 streams
    assert rb.storage._storage.batch_size == (50, 2, 4)
    assert len(rb) == 10
    sample, info = rb.sample(3, return_info=True)
    assert sample.batch_size == (3, 4)
    rows, streams = info["index"]
    assert torch.equal(sample["obs"], data["obs"][streams, rows])


def test_nested_tensordicts_keep_their_own_batch_dims():
    data = TensorDict(
        {"obs": torch.randn(6, 5, 2), "agents": TensorDict({"x": torch.randn(6, 5, 3)}, [6, 5, 3])},
        [6, 5],
    )
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 6), data)
    out = storage.get(torch.tensor([5, 0]))
    assert out.batch_size == (2, 5) and out["agents"].batch_size == (2, 5, 3)
    assert torch.equal(out["agents", "x"], data["agents", "x"][[5, 0]])


def test_state_dict_keeps_the_full_batch_size():
    data = TensorDict({"obs": torch.randn(4, 7), "next": {"obs": torch.randn(4, 7)}}, [4, 7])
    storage = LazyTensorStorage(6)
    storage.set(slice(0, 4), data)
    other = LazyTensorStorage(6)
    other.load_state_dict(storage.state_dict())
    assert other._storage.batch_size == (6, 7)
    assert (other.get(slice(None)) == data).all()


def _cut_state(state, ndim=1):
    """A state as versions that cut the stored batch size to ``ndim`` dims wrote it."""
    state = dict(state)
    state.pop("full_batch_size")
    content = dict(state["_storage"])
    content["batch_size"] = content["batch_size"][:ndim]
    state["_storage"] = content
    return state


def test_state_dict_written_with_a_cut_batch_size_loads():
    data = TensorDict({"obs": torch.randn(4, 7, 2), "next": {"obs": torch.randn(4, 7, 2)}}, [4, 7])
    storage = LazyTensorStorage(6)
    storage.set(slice(0, 4), data)
    old = _cut_state(storage.state_dict())
    assert old["_storage"]["batch_size"] == [6]
    # the nested "next" kept its [6, 7] batch size: the root's is recovered from it
    lazy = LazyTensorStorage(6)
    lazy.load_state_dict(old)
    assert lazy._storage.batch_size == (6, 7)
    assert (lazy.get(slice(None)) == data).all()
    allocated = LazyTensorStorage(6)
    allocated.set(slice(0, 1), data[:1])
    allocated.load_state_dict(old)
    assert allocated._storage.batch_size == (6, 7) and len(allocated) == 4
    assert (allocated.get(slice(None)) == data).all()
    # without nested TensorDicts the cut dims cannot be told apart from feature dims
    flat = LazyTensorStorage(6)
    flat.set(slice(0, 4), data.exclude("next"))
    kept = LazyTensorStorage(6)
    kept.load_state_dict(_cut_state(flat.state_dict()))
    assert kept._storage.batch_size == (6,)
    assert torch.equal(kept.get(slice(None))["obs"], data["obs"])


# -- writing at multi-dimensional indices -----------------------------------------------------------
def test_storage_set_at_coordinates():
    storage = LazyTensorStorage(20, ndim=2)
    storage.set(slice(0, 5), TensorDict({"a": torch.zeros(5, 2, 3)}, [5, 2]))
    rows, streams = torch.tensor([4, 0, 2]), torch.tensor([1, 1, 0])
    storage.set((rows, streams), TensorDict({"a": torch.ones(3, 3)}, [3]), set_cursor=False)
    written = storage.get(slice(None))["a"].sum(-1).eq(3)
    assert written.nonzero().tolist() == [[0, 1], [2, 0], [4, 1]]
    coords = torch.stack([rows, streams], -1)
    storage.set(coords, TensorDict({"a": torch.full((3, 3), 2.0)}, [3]), set_cursor=False)
    assert storage.get(coords)["a"].eq(2).all()
    assert storage.get((rows, streams))["a"].eq(2).all()
    assert len(storage) == 10
    with pytest.raises(ValueError, match=r"mismatch at key \('a',\): expected shape \(3, 3\)"):
        storage.set((rows, streams), TensorDict({"a": torch.ones(3, 4)}, [3]))


def test_list_storage_set_grows_in_position_order():
    storage = ListStorage(10)
    storage.set(torch.tensor([2, 3, 0, 1]), ["c", "d", "a", "b"])
    assert storage.get(slice(None)) == ["a", "b", "c", "d"]
    with pytest.raises(IndexError, match="out of range"):
        storage.set(torch.tensor([6]), ["x"])
