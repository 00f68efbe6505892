import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    ImmutableDatasetWriter,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorStorage,
)


def test_round_robin_writer_state_dict():
    writer = RoundRobinWriter()
    writer.register_storage(LazyTensorStorage(5))
    writer.extend(torch.arange(7))
    assert writer.state_dict() == {"_cursor": 2, "_write_count": 7}
    other = RoundRobinWriter()
    other.load_state_dict(writer.state_dict())
    assert other._cursor == 2 and other._write_count == 7


def test_round_robin_add_wraps_on_list_storage():
    rb = ReplayBuffer(storage=ListStorage(3))
    assert [rb.add(i) for i in range(5)] == [0, 1, 2, 0, 1]
    assert rb[:].tolist() == [3, 4, 2]


def test_max_value_writer_keeps_best():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4),
        writer=TensorDictMaxValueWriter(rank_key="score"),
        batch_size=2,
    )
    rb.extend(TensorDict({"score": torch.tensor([5.0, 1.0, 3.0])}, [3]))
    rb.extend(TensorDict({"score": torch.tensor([0.5, 4.0, 9.0, 2.0])}, [4]))
    assert sorted(rb[:]["score"].tolist()) == [3.0, 4.0, 5.0, 9.0]
    index = rb.extend(TensorDict({"score": torch.tensor([0.1])}, [1]))
    assert index.numel() == 0
    assert rb.add(TensorDict({"score": torch.tensor(10.0)}, [])) is not None
    assert sorted(rb[:]["score"].tolist()) == [4.0, 5.0, 9.0, 10.0]
    assert len(rb) == 4


def test_max_value_writer_default_rank_key_and_reduction():
    writer = TensorDictMaxValueWriter(reduction="max")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1), writer=writer)
    data = TensorDict({"next": {"reward": torch.tensor([[1.0, 7.0], [5.0, 5.0]])}}, [2])
    rb.extend(data)
    assert rb[0]["next", "reward"].tolist() == [1.0, 7.0]
    with pytest.raises(ValueError, match="reduction"):
        TensorDictMaxValueWriter(reduction="bad")


def test_max_value_writer_missing_key():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="score")
    )
    with pytest.raises(ValueError, match="score"):
        rb.extend(TensorDict({"other": torch.zeros(2)}, [2]))


def test_max_value_writer_state_and_empty():
    writer = TensorDictMaxValueWriter(rank_key="r")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2), writer=writer)
    rb.extend(TensorDict({"r": torch.tensor([1.0, 2.0])}, [2]))
    state = writer.state_dict()
    assert sorted(state["_ranks"].tolist()) == [1.0, 2.0]
    rb.empty()
    rb.extend(TensorDict({"r": torch.tensor([0.5])}, [1]))
    assert rb[:]["r"].tolist() == [0.5]


def test_immutable_writer_refuses():
    container = torch.arange(4)
    rb = ReplayBuffer(storage=TensorStorage(container), writer=ImmutableDatasetWriter())
    rb.storage.set_len_along_dim0(4)
    assert len(rb) == 4 and rb.sample(2).shape == (2,)
    with pytest.raises(RuntimeError, match="immutable"):
        rb.extend(torch.arange(2))
    with pytest.raises(RuntimeError, match="immutable"):
        rb.add(torch.tensor(1))


def test_max_value_writer_keeps_item_batch_dims():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter(rank_key="score")
    )
    score = torch.tensor([1.0, 5.0, 3.0, 4.0, 0.0]).unsqueeze(-1).expand(5, 6)
    rb.extend(TensorDict({"score": score.clone(), "x": torch.randn(5, 6, 2)}, [5, 6]))
    assert rb.storage._storage.batch_size == (3, 6)
    assert sorted(rb[:]["score"][:, 0].tolist()) == [3.0, 4.0, 5.0]
    assert rb.sample(2).batch_size == (2, 6)


@pytest.mark.parametrize("data", [torch.zeros(3, 1), {"a": torch.zeros(3, 1)}])
def test_max_value_writer_refuses_plain_data(data):
    writer = TensorDictMaxValueWriter(rank_key="a")
    writer.register_storage(LazyTensorStorage(5))
    with pytest.raises(TypeError, match="expects data to be a tensor collection") as err:
        writer.extend(data)
    # also a RuntimeError, as the reference API raises
    assert isinstance(err.value, RuntimeError)
    rb = ReplayBuffer(storage=LazyTensorStorage(5), writer=TensorDictMaxValueWriter(rank_key="a"))
    with pytest.raises(TypeError, match="tensor collection"):
        rb.add(data[0] if isinstance(data, torch.Tensor) else {"a": data["a"][0]})


def test_max_value_writer_refuses_multidim_storages():
    with pytest.raises(ValueError, match="not compatible with storages with more than one"):
        ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), writer=TensorDictMaxValueWriter())


@pytest.mark.parametrize("size, cursor", [(3, 0), (5, 0), (8, 5)])
def test_max_value_writer_cursor_wraps_when_full(size, cursor):
    writer = TensorDictMaxValueWriter(rank_key="r")
    writer.register_storage(LazyTensorStorage(size))
    writer.extend(TensorDict({"r": torch.arange(5.0)}, [5]))
    assert writer._cursor == cursor
