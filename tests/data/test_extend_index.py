"""The indices ``extend()`` returns: fresh int64 tensors of the rows written, wrapping around."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer


def test_extend_returns_fresh_long_indices_of_the_rows_written():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    first = rb.extend(torch.arange(4.0))
    second = rb.extend(torch.arange(4.0))
    assert first.dtype == torch.long and first.tolist() == [0, 1, 2, 3]
    assert second.tolist() == [4, 5, 6, 7]
    first.add_(100)  # the caller owns them: a later write is not affected
    assert rb.extend(torch.arange(2.0)).tolist() == [8, 9]
    assert second.tolist() == [4, 5, 6, 7]
    assert rb.extend(torch.arange(3.0)).tolist() == [0, 1, 2]  # wrapped around


def test_tensordict_extend_sets_the_index_entry():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6))
    data = TensorDict({"obs": torch.randn(4, 2)}, [4])
    index = rb.extend(data)
    assert torch.equal(data["index"], index) and data["index"].dtype == torch.long
    assert torch.equal(rb[index]["obs"], data["obs"])
