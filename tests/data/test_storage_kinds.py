"""Storages: range indices, pre-filled containers, tensorclasses, lazy stacks, memmap cleanup."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict, tensorclass

from tdrl.data.replay_buffers import (
    ImmutableDatasetWriter,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorStorage,
)
from tdrl.data.replay_buffers.utils import tree_iter


@tensorclass
class Inner:
    value: torch.Tensor


@tensorclass
class Step:
    obs: torch.Tensor
    inner: Inner


def _steps(n: int, fill: float = 1.0) -> Step:
    return Step(
        obs=torch.full((n, 3), fill),
        inner=Inner(value=torch.full((n,), fill), batch_size=[n]),
        batch_size=[n],
    )


@pytest.mark.parametrize("kind", ["tensor", "tensordict", "pytree"])
def test_range_index_reads_and_writes(kind):
    if kind == "tensor":
        data = torch.randn(10, 2)
    elif kind == "tensordict":
        data = TensorDict({"a": torch.randn(10, 2)}, [10])
    else:
        data = {"a": torch.randn(10, 2), "b": (torch.randn(10),)}
    storage = TensorStorage(data)
    zeros = (
        torch.zeros_like(data)
        if kind != "pytree"
        else {
            "a": torch.zeros(10, 2),
            "b": (torch.zeros(10),),
        }
    )
    storage.set(range(10), zeros)
    assert all((leaf == 0).all() for leaf in tree_iter(storage.get(range(10))))


def test_backward_range_index():
    storage = TensorStorage(torch.arange(5.0))
    assert storage.get(range(2, -1, -1)).tolist() == [2.0, 1.0, 0.0]
    storage.set(range(4, 2, -1), torch.tensor([40.0, 30.0]))
    assert storage.get(range(5)).tolist() == [0.0, 1.0, 2.0, 30.0, 40.0]


def test_list_storage_range_index():
    storage = ListStorage(5)
    storage.set(range(3), ["a", "b", "c"])
    assert storage.get(range(1, 3)) == ["b", "c"]


def test_container_storage_holds_all_its_rows():
    container = TensorDict({"obs": torch.arange(6.0)}, [6])
    rb = ReplayBuffer(
        storage=TensorStorage(container), writer=ImmutableDatasetWriter(), batch_size=3
    )
    assert len(rb) == 6
    assert rb[:]["obs"].tolist() == container["obs"].tolist()
    assert rb.sample()["obs"].shape == (3,)
    with pytest.raises(RuntimeError, match="immutable"):
        rb.extend(container)


def test_container_storage_length_with_ndim2():
    storage = TensorStorage(torch.zeros(4, 3, 2), ndim=2)
    assert len(storage) == 12


@pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
def test_tensorclass_items_read_back_as_tensorclasses(storage_cls):
    rb = ReplayBuffer(storage=storage_cls(10), batch_size=4)
    rb.extend(_steps(3, 1.0))
    rb.extend(_steps(2, 2.0))
    assert len(rb) == 5
    sample = rb.sample()
    assert isinstance(sample, Step) and isinstance(sample.inner, Inner)
    assert sample.shape == (4,) and sample.obs.shape == (4, 3)
    everything = rb[:]
    assert isinstance(everything, Step)
    assert everything.inner.value.tolist() == [1.0, 1.0, 1.0, 2.0, 2.0]
    one = rb[4]
    assert isinstance(one, Step) and one.obs.tolist() == [2.0, 2.0, 2.0]


def test_tensorclass_container_and_single_item_init():
    storage = TensorStorage(_steps(4))
    assert len(storage) == 4 and isinstance(storage.get(range(2)), Step)
    lazy = LazyTensorStorage(100)
    # one item (unbatched): the storage holds 100 of them
    lazy._init(
        Step(
            obs=torch.zeros(2, 3), inner=Inner(value=torch.zeros(2), batch_size=[2]), batch_size=[2]
        )
    )
    assert lazy._storage.shape == (100, 2)
    assert isinstance(lazy._storage, Step)


def test_tensorclass_structure_mismatch_names_the_key():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 2), _steps(2))
    with pytest.raises(ValueError, match="inner"):
        storage.set(slice(2, 4), TensorDict({"obs": torch.zeros(2, 3)}, [2]))


@pytest.mark.parametrize("max_size", [None, 100])
@pytest.mark.parametrize("stack_dim", [0, -1])
def test_lazy_stack_storage_reads_ragged_items(max_size, stack_dim):
    rb = ReplayBuffer(storage=LazyStackStorage(max_size, stack_dim=stack_dim), batch_size=6)
    rb.add(TensorDict(tokens=torch.arange(4), score=torch.ones(2), text="short"))
    rb.add(TensorDict(tokens=torch.arange(7), score=torch.zeros(2), text="a longer one"))
    sample = rb.sample()
    assert isinstance(sample, LazyStackedTensorDict)
    assert sample["score"].shape == (6, 2)
    assert all(text in ("short", "a longer one") for text in sample["text"])
    nested = sample.densify(layout=torch.jagged)
    assert nested["tokens"].is_nested and nested["tokens"].shape[0] == 6
    assert isinstance(rb[1], TensorDict) and rb[1]["tokens"].shape == (7,)
    assert rb[0:2][1]["tokens"].shape == (7,)


def test_list_storage_load_state_dict_copies_tensors():
    storage = ListStorage(4)
    storage.set(0, torch.ones(3))
    storage.set(1, TensorDict({"a": torch.ones(3)}, [3]))
    state = storage.state_dict()
    restored = ListStorage(4)
    restored.load_state_dict(state)
    state["_storage"][0].zero_()
    state["_storage"][1]["a"].zero_()
    assert restored.get(0).tolist() == [1.0, 1.0, 1.0]
    assert restored.get(1)["a"].tolist() == [1.0, 1.0, 1.0]


def test_tree_iter_leaves():
    data = {"a": torch.zeros(2), "b": [torch.ones(1), (torch.ones(3),)]}
    assert [leaf.numel() for leaf in tree_iter(data)] == [2, 1, 3]
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2, 4)}}, [2])
    assert sorted(leaf.numel() for leaf in tree_iter(td)) == [2, 8]


def _memmap_rb(**kwargs) -> tuple[LazyMemmapStorage, ReplayBuffer]:
    storage = LazyMemmapStorage(20, **kwargs)
    rb = ReplayBuffer(storage=storage)
    rb.extend(TensorDict(a=torch.randn(5), batch_size=[5]))
    return storage, rb


def test_memmap_cleanup_removes_a_chosen_folder(tmp_path):
    folder = tmp_path / "files"
    storage, _ = _memmap_rb(scratch_dir=folder)
    assert storage._auto_cleanup is False and os.listdir(folder)
    assert storage.cleanup() is True
    assert not folder.exists()
    assert storage.cleanup() is False


def test_memmap_cleanup_of_temp_folder_and_unused_storage():
    storage, _ = _memmap_rb()
    files = [t.filename for t in storage._storage.values(True, True)]
    assert storage._auto_cleanup is True and all(os.path.exists(f) for f in files)
    assert storage.cleanup() is True
    assert not any(os.path.exists(f) for f in files)
    assert LazyMemmapStorage(10).cleanup() is False


def test_memmap_cleanup_after_folder_vanished(tmp_path):
    folder = tmp_path / "gone"
    storage, _ = _memmap_rb(scratch_dir=folder, auto_cleanup=True)
    for name in os.listdir(folder):
        os.remove(folder / name)
    os.rmdir(folder)
    assert storage.cleanup() is False


_EXIT_SCRIPT = """
import sys, torch
from tensordict import TensorDict
from tdrl.data import LazyMemmapStorage, ReplayBuffer
storage = LazyMemmapStorage(10, scratch_dir=sys.argv[1], auto_cleanup=sys.argv[2] == "1")
ReplayBuffer(storage=storage).extend(TensorDict(a=torch.zeros(3), batch_size=[3]))
if sys.argv[3] == "interrupt":
    raise KeyboardInterrupt
"""


@pytest.mark.parametrize("ending", ["exit", "interrupt"])
@pytest.mark.parametrize("auto_cleanup", [True, False])
def test_memmap_auto_cleanup_at_interpreter_exit(tmp_path, auto_cleanup, ending):
    folder = tmp_path / "files"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    args = [sys.executable, "-c", _EXIT_SCRIPT, str(folder), str(int(auto_cleanup)), ending]
    result = subprocess.run(args, env=env, capture_output=True, timeout=120)
    assert (result.returncode == 0) == (ending == "exit"), result.stderr.decode()
    assert folder.exists() != auto_cleanup


def test_shared_init_on_another_device_warns_and_uses_cpu():
    storage = LazyTensorStorage(8, device="meta", shared_init=True)
    rb = ReplayBuffer(storage=storage, batch_size=2)
    with pytest.warns(UserWarning, match="cannot be honored"):
        rb.extend(TensorDict({"x": torch.arange(4.0)}, [4]))
    assert storage.device.type == "cpu"
    assert rb.sample()["x"].device.type == "cpu"
    assert storage._storage["x"].is_shared()


def test_extend_with_a_list_that_cannot_be_stacked():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(
        ValueError, match="Stacking the elements of the list resulted in an error"
    ) as err:
        rb.extend([torch.zeros(4), torch.zeros(1)])
    assert isinstance(err.value, RuntimeError)
    assert "equal size" in str(err.value)
    assert len(rb) == 0
    rb.extend([(torch.zeros(2), {"a": torch.ones(3)}) for _ in range(4)])
    assert len(rb) == 4


@pytest.mark.parametrize("storage_type", ["LazyTensorStorage", "LazyMemmapStorage"])
def test_empty_nested_levels_are_stored_and_read_back(storage_type, tmp_path):
    from tdrl.data import replay_buffers

    def make():
        return getattr(replay_buffers, storage_type)(20)

    data = TensorDict({"a": {"b": {"c": {}}}, "x": torch.arange(20)}, [20])
    rb = replay_buffers.TensorDictReplayBuffer(storage=make())
    rb.extend(data)
    sample = rb.sample(4)
    assert sample["a", "b", "c"].batch_size == (4,) and sample["x"].shape == (4,)
    rb.dumps(tmp_path)
    loaded = replay_buffers.TensorDictReplayBuffer(storage=make())
    loaded.loads(tmp_path)
    assert ("a", "b", "c") in loaded[:3].keys(True)
    # data made of empty levels only
    only_empty = replay_buffers.ReplayBuffer(storage=make())
    only_empty.extend(TensorDict({"a": {"b": {}}}, [5]))
    assert only_empty.sample(2)["a", "b"].batch_size == (2,)
