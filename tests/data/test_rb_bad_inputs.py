"""Bad inputs to replay buffers raise clear errors instead of being stored or sampled silently."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
)


@pytest.fixture
def rb() -> ReplayBuffer:
    buffer = ReplayBuffer(storage=LazyTensorStorage(10))
    buffer.extend(torch.arange(5))
    return buffer


@pytest.mark.parametrize("size", [-3, -1])
def test_negative_sample_size_names_batch_size(rb: ReplayBuffer, size: int) -> None:
    with pytest.raises(ValueError, match=rf"batch_size must be >= 0, got {size}"):
        rb.sample(size)


@pytest.mark.parametrize("size", [2.5, "4", True])
def test_non_integer_sample_size_is_a_type_error(rb: ReplayBuffer, size: object) -> None:
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        rb.sample(size)


def test_integer_like_sample_sizes_still_work(rb: ReplayBuffer) -> None:
    assert rb.sample(0).shape == (0,)
    assert rb.sample(torch.tensor(3)).shape == (3,)


def test_float_priority_index_is_rejected_not_truncated() -> None:
    rb = PrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5))
    before = rb.sampler.state_dict()["_priorities"].clone()
    with pytest.raises(TypeError, match=r"priority index must hold integers.*float32.*1\.7"):
        rb.update_priority(torch.tensor([1.7]), torch.tensor([5.0]))
    with pytest.raises(TypeError, match="priority index must hold integers"):
        rb.update_priority([0.5, 2.0], 3.0)
    assert torch.equal(rb.sampler.state_dict()["_priorities"], before)
    rb.update_priority([1], [5.0])  # integer lists still work
    assert rb.sampler.state_dict()["_priorities"][1] > before[1]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"alpha": math.nan, "beta": 0.5}, "alpha"),
        ({"alpha": math.inf, "beta": 0.5}, "alpha"),
        ({"alpha": 0.5, "beta": math.nan}, "beta"),
        ({"alpha": 0.5, "beta": 0.5, "eps": math.nan}, "eps"),
        ({"alpha": 0.5, "beta": 0.5, "eps": -1e-3}, "eps"),
    ],
)
def test_prioritized_sampler_rejects_nan_and_infinite_parameters(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name} must be a finite number >= 0"):
        PrioritizedSampler(10, **kwargs)


def test_prioritized_sampler_beta_setter_checks_too() -> None:
    sampler = PrioritizedSampler(10, alpha=0.5, beta=0.5)
    with pytest.raises(ValueError, match="beta must be a finite number >= 0, got nan"):
        sampler.beta = math.nan
    sampler.beta = 0.7
    assert sampler.beta == 0.7


def test_nan_rank_is_refused_and_keeps_the_best_items() -> None:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r")
    )
    rb.extend(TensorDict({"r": torch.tensor([1.0, 2.0])}, [2]))
    with pytest.raises(ValueError, match=r"rank 'r' is NaN for item 1"):
        rb.extend(TensorDict({"r": torch.tensor([5.0, math.nan])}, [2]))
    assert sorted(rb[:]["r"].tolist()) == [1.0, 2.0]
    rb.extend(TensorDict({"r": torch.tensor([3.0])}, [1]))
    assert sorted(rb[:]["r"].tolist()) == [2.0, 3.0]


def test_list_of_tensordicts_with_different_keys_is_refused() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    items = [TensorDict({"a": torch.ones(1)}), TensorDict({"b": torch.ones(1)})]
    with pytest.raises(ValueError, match=r"same keys.*item 1 has \['b'\].*lacks \['a'\]"):
        rb.extend(items)
    assert len(rb) == 0
    rb.extend([TensorDict({"a": torch.ones(1)}), TensorDict({"a": torch.zeros(1)})])
    assert rb[:]["a"].tolist() == [[1.0], [0.0]]


def test_list_mixing_tensordicts_and_tensors_is_a_type_error() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(TypeError, match="item 1 is a Tensor"):
        rb.extend([TensorDict({"a": torch.ones(1)}), torch.ones(1)])


def test_dumps_onto_an_existing_regular_file_raises_and_keeps_it(
    rb: ReplayBuffer, tmp_path
) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    with pytest.raises(FileExistsError, match="notes.txt.*not a folder"):
        rb.dumps(target)
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    rb.dumps(tmp_path / "ckpt")  # a folder path still works, and can be overwritten
    rb.dumps(tmp_path / "ckpt")


def _text_data() -> TensorDict:
    data = TensorDict({"obs": torch.arange(3.0), "nested": {"x": torch.ones(3)}}, [3])
    data.set_non_tensor(("nested", "fen"), "8/8/8/8/8/8/8/8 w - - 0 1")
    return data


@pytest.mark.parametrize("storage_type", ["LazyTensorStorage", "LazyMemmapStorage"])
def test_non_tensor_entry_names_key_and_where_it_can_go(storage_type: str, tmp_path) -> None:
    from tdrl.data import replay_buffers

    kwargs = {"scratch_dir": tmp_path} if storage_type == "LazyMemmapStorage" else {}
    rb = ReplayBuffer(storage=getattr(replay_buffers, storage_type)(10, **kwargs))
    with pytest.raises(TypeError, match=r"entry \('nested', 'fen'\) holds non-tensor data") as err:
        rb.extend(_text_data())
    assert "LazyStackStorage" in str(err.value)
    assert len(rb) == 0
    # the entry left out, the same data is stored
    rb.extend(_text_data().exclude(("nested", "fen")))
    assert len(rb) == 3


def test_non_tensor_entry_in_a_later_write_leaves_the_buffer_unchanged() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(_text_data().exclude(("nested", "fen")))
    with pytest.raises(TypeError, match=r"entry \('nested', 'fen'\) holds non-tensor data"):
        rb.extend(_text_data())
    assert len(rb) == 3


def test_non_tensor_entries_are_stored_by_a_lazy_stack_storage() -> None:
    from tdrl.data.replay_buffers import LazyStackStorage

    rb = ReplayBuffer(storage=LazyStackStorage(10))
    rb.extend(_text_data())
    assert rb[1]["nested", "fen"] == "8/8/8/8/8/8/8/8 w - - 0 1"
