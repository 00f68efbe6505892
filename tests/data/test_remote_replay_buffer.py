"""RemoteTensorDictReplayBuffer: local behaviour, pickling of its methods, and real RPC processes."""

from __future__ import annotations

import pickle
import queue
import socket
import traceback

import pytest
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    RemoteTensorDictReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers import RemoteTensorDictReplayBuffer as FromSubpackage

_WAIT_S = 240


class _Node(RemoteTensorDictReplayBuffer):
    """A buffer node that picks its own storage and adds a method of its own."""

    def __init__(self, capacity: int) -> None:
        super().__init__(
            storage=LazyTensorStorage(capacity),
            sampler=SamplerWithoutReplacement(),
            batch_size=4,
        )

    def fill_level(self) -> float:
        return len(self) / self.storage.max_size


def _data(n: int) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3),
            ("next", "reward"): torch.linspace(-1.0, 1.0, n).unsqueeze(-1),
            "action": torch.arange(n) % 2 == 0,
        },
        [n],
    )


# -- local use ----------------------------------------------------------------------------------


def test_exported_from_data_and_replay_buffers():
    assert RemoteTensorDictReplayBuffer is FromSubpackage
    assert issubclass(RemoteTensorDictReplayBuffer, TensorDictReplayBuffer)


@pytest.mark.parametrize(
    "make_storage",
    [lambda: ListStorage(20), lambda: LazyTensorStorage(20)],
    ids=["list", "lazy-tensor"],
)
@pytest.mark.parametrize(
    "make_sampler",
    [RandomSampler, SamplerWithoutReplacement, lambda: PrioritizedSampler(20, 0.7, 0.9)],
    ids=["random", "without-replacement", "prioritized"],
)
def test_local_use_matches_tensordict_replay_buffer(make_storage, make_sampler):
    results = []
    for cls in (TensorDictReplayBuffer, RemoteTensorDictReplayBuffer):
        torch.manual_seed(3)
        rb = cls(storage=make_storage(), sampler=make_sampler(), batch_size=5, priority_key="err")
        data = _data(8)
        index = rb.extend(data)
        rb.add(_data(1)[0])
        sample = rb.sample()
        sample["err"] = sample["obs"][:, 0] + 1.0
        rb.update_tensordict_priority(sample)
        results.append((index, data["index"], len(rb), sample, rb.sample(), rb[2:4]))
    for ref, got in zip(*results):
        if isinstance(ref, TensorDict):
            assert (ref == got).all()
            assert set(ref.keys(True)) == set(got.keys(True))
        else:
            assert torch.equal(torch.as_tensor(ref), torch.as_tensor(got))


def test_local_use_with_memmap_storage_and_transform(tmp_path):
    rb = RemoteTensorDictReplayBuffer(
        storage=LazyMemmapStorage(10, scratch_dir=tmp_path),
        transform=lambda td: td.set("double", td["obs"] * 2),
        batch_size=3,
    )
    rb.extend(_data(4))
    sample = rb.sample()
    assert torch.equal(sample["double"], sample["obs"] * 2)
    assert any(tmp_path.iterdir())


def test_methods_called_on_the_class_take_the_buffer():
    rb = _Node(8)
    index = _Node.extend(rb, _data(6))
    assert index.tolist() == list(range(6))
    assert _Node.__len__(rb) == 6
    assert _Node.fill_level(rb) == 0.75
    assert _Node.sample(rb, 2).batch_size == torch.Size([2])
    assert torch.equal(_Node.__getitem__(rb, 1)["obs"], _data(6)["obs"][1])


def test_first_argument_that_is_not_a_buffer_is_a_type_error():
    with pytest.raises(TypeError, match=r"RemoteTensorDictReplayBuffer\.sample expects .* got int"):
        RemoteTensorDictReplayBuffer.sample(3, 4)
    with pytest.raises(TypeError, match=r"_Node\.fill_level expects .* got str"):
        _Node.fill_level("buffer")


def test_methods_pickle_by_reference():
    # RPC sends the function to run by name: each must resolve to itself
    for func in (
        RemoteTensorDictReplayBuffer.sample,
        RemoteTensorDictReplayBuffer.extend,
        RemoteTensorDictReplayBuffer.update_tensordict_priority,
        RemoteTensorDictReplayBuffer.__len__,
        _Node.add,
        _Node.fill_level,
    ):
        assert pickle.loads(pickle.dumps(func)) is func


def test_buffer_pickles_with_its_content():
    rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(_data(5))
    copy = pickle.loads(pickle.dumps(rb))
    assert type(copy) is RemoteTensorDictReplayBuffer
    assert len(copy) == 5
    assert torch.equal(copy[:]["obs"], rb[:]["obs"])


def test_bad_input_raises_the_buffer_error_locally():
    rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(_data(3))
    with pytest.raises(ValueError, match="no 'index' entry"):
        rb.update_tensordict_priority(TensorDict({"td_error": torch.ones(2)}, [2]))


class _PickyError(Exception):
    """An error that pickles but cannot be rebuilt from its pickle (two required arguments)."""

    def __init__(self, key, detail):
        super().__init__(f"{key}: {detail}")


class _Holder:
    """Stands for an owner RRef: ``local_value`` returns the buffer."""

    def __init__(self, buffer):
        self.buffer = buffer

    def local_value(self):
        return self.buffer


class _FailingNode(_Node):
    def fill_level(self) -> float:
        raise _PickyError("capacity", "not known yet")


def test_errors_on_the_owner_come_back_as_values_the_caller_can_rebuild():
    from tdrl.data.replay_buffers.remote import _call_on_owner

    rb = _Node(4)
    assert _call_on_owner(_Holder(rb), "extend", (_data(2),), {})[1].tolist() == [0, 1]
    ok, err = _call_on_owner(_Holder(rb), "__getitem__", (9,), {})
    assert not ok and isinstance(err, IndexError) and "index out of range" in str(err)
    ok, err = _call_on_owner(_Holder(_FailingNode(4)), "fill_level", (), {})
    assert not ok and type(err) is RuntimeError
    assert str(err) == "_PickyError: capacity: not known yet"
    pickle.loads(pickle.dumps(err))


# -- remote use: three real processes talking through torch.distributed.rpc ---------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write(rref, data):
    """Runs on the writer: extends the buffer node through an explicit RPC to the owner."""
    return rpc.rpc_sync(rref.owner(), _Node.extend, args=(rref, data))


def _trainer(expected_error_queue):
    rref = rpc.remote("buffer", _Node, args=(16,))
    assert type(rref) is rpc.PyRRef
    data = _data(6)
    index = rpc.rpc_sync("writer", _write, args=(rref, data))
    assert index.tolist() == list(range(6))
    assert rpc.rpc_sync("buffer", _Node.__len__, args=(rref,)) == 6
    # a call made here with the RRef is forwarded to the owner
    assert _Node.__len__(rref) == 6
    assert _Node.fill_level(rref) == 6 / 16
    # the whole content, sampled without replacement, round-trips exactly
    sample = rpc.rpc_sync("buffer", _Node.sample, args=(rref, 6))
    assert type(sample) is TensorDict
    order = sample["index"].argsort()
    assert sample["index"][order].tolist() == list(range(6))
    got = sample[order].exclude("index")
    assert set(got.keys(True, True)) == set(data.keys(True, True))
    for key in data.keys(True, True):
        assert got[key].dtype == data[key].dtype
        assert torch.equal(got[key], data[key]), key
    # the default batch size of the node, asynchronously and through the RRef proxies
    assert rpc.rpc_async("buffer", _Node.sample, args=(rref,)).wait().batch_size == (4,)
    assert rref.rpc_sync().add(_data(1)[0]) == 6
    assert rref.rpc_sync().__len__() == 7
    rpc.rpc_sync(
        "buffer",
        _Node.update_tensordict_priority,
        args=(rref, sample.set("td_error", torch.ones(6))),
    )
    # bad input: the buffer's own error, raised in this process
    try:
        rpc.rpc_sync(
            "buffer",
            _Node.update_tensordict_priority,
            args=(rref, TensorDict({"td_error": torch.ones(2)}, [2])),
        )
    except ValueError as err:
        expected_error_queue.append(str(err))
    try:
        _Node.__getitem__(rref, 100)
    except IndexError as err:  # a forwarded call keeps the error's type
        expected_error_queue.append(str(err))
    try:
        _Node.extend(rref, "not a tensordict")
    except (TypeError, ValueError) as err:
        expected_error_queue.append(f"{type(err).__name__}: {err}")


def _rpc_worker(rank, world_size, port, results):
    names = ["buffer", "trainer", "writer"]
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}", num_worker_threads=4, rpc_timeout=60
    )
    outcome = None
    try:
        rpc.init_rpc(names[rank], rank=rank, world_size=world_size, rpc_backend_options=options)
        if names[rank] == "trainer":
            errors = []
            _trainer(errors)
            outcome = ("errors", errors)
    except BaseException:
        outcome = ("failure", f"{names[rank]}: {traceback.format_exc()}")
    finally:
        if rpc.api._is_current_rpc_agent_set():
            rpc.shutdown(graceful=True, timeout=60)
        if outcome is not None:
            results.put(outcome)


def test_writer_and_trainer_share_a_buffer_node_over_rpc():
    try:
        _Node(4).extend("not a tensordict")
    except (TypeError, ValueError) as err:
        local_error = err
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rpc_worker, args=(rank, 3, port, results)) for rank in range(3)]
    for proc in procs:
        proc.start()
    try:
        outcome = results.get(timeout=_WAIT_S)
    except queue.Empty:
        outcome = ("failure", "no answer from the trainer")
    finally:
        for proc in procs:
            proc.join(timeout=60)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
    kind, detail = outcome
    assert kind == "errors", detail
    assert len(detail) == 3, detail
    assert "no 'index' entry" in detail[0]
    assert "index out of range" in detail[1]
    assert detail[2] == f"{type(local_error).__name__}: {local_error}"
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
