"""A storage written against the public Storage contract works with buffers, samplers and checkpoints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tdrl.data.replay_buffers as rb_package
from tdrl.data.replay_buffers import (
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    Storage,
)
from tdrl.data.replay_buffers.checkpointers import StorageStateCheckpointer, default_checkpointer


class RowStorage(Storage):
    """Rows of a preallocated float tensor; only the contract's required methods."""

    def __init__(self, max_size: int, width: int) -> None:
        super().__init__(max_size)
        self.rows = torch.zeros(max_size, width)
        self.filled = 0

    def set(self, cursor, data, *, set_cursor: bool = True) -> None:
        index = torch.as_tensor(
            range(cursor.start, cursor.stop) if isinstance(cursor, slice) else cursor
        )
        self.rows[index] = torch.as_tensor(data, dtype=self.rows.dtype)
        if set_cursor and index.numel():
            self.filled = max(self.filled, int(index.max()) + 1)

    def get(self, index):
        if isinstance(index, slice):
            return self.rows[: self.filled][index]
        index = torch.as_tensor(index)
        if index.numel() and int(index.max()) >= self.filled:
            raise IndexError(f"index {index} past the {self.filled} stored rows")
        return self.rows[index]

    def __len__(self) -> int:
        return self.filled

    def empty(self) -> None:
        self.filled = 0

    def state_dict(self) -> dict:
        return {"rows": self.rows.clone(), "filled": self.filled}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows.copy_(state_dict["rows"])
        self.filled = int(state_dict["filled"])


class LegacyEmptyStorage(RowStorage):
    """Implements the reference API's ``_empty`` instead of ``empty``."""

    empty = Storage.empty

    def _empty(self) -> None:
        self.filled = 0


def _items(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32).unsqueeze(1).expand(n, 3).contiguous()


@pytest.mark.parametrize(
    "sampler",
    [RandomSampler, SamplerWithoutReplacement, lambda: PrioritizedSampler(8, alpha=0.7, beta=0.5)],
    ids=["random", "without_replacement", "prioritized"],
)
def test_user_storage_with_samplers_and_writer(sampler):
    rb = ReplayBuffer(
        storage=RowStorage(8, 3), sampler=sampler(), writer=RoundRobinWriter(), batch_size=4
    )
    assert rb.extend(_items(6)).tolist() == list(range(6))
    sample, info = rb.sample(return_info=True)
    # each sampled row is the item written at its index
    assert torch.equal(sample[:, 0], info["index"].float())
    # the writer cycles over max_size: items 8 and 9 overwrite rows 0 and 1
    rb.extend(_items(10)[6:])
    assert len(rb) == 8
    assert rb.storage.rows[:2, 0].tolist() == [8.0, 9.0]
    if isinstance(rb.sampler, PrioritizedSampler):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([5.0, 0.5]))
        assert "priority_weight" in rb.sample(return_info=True)[1]


def test_user_storage_draws_every_item_once_per_epoch():
    rb = ReplayBuffer(storage=RowStorage(6, 3), sampler=SamplerWithoutReplacement(), batch_size=3)
    rb.extend(_items(6))
    drawn = torch.cat([rb.sample()[:, 0], rb.sample()[:, 0]])
    assert sorted(drawn.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_user_storage_checkpoint_round_trip(tmp_path):
    rb = ReplayBuffer(storage=RowStorage(8, 3), batch_size=2)
    rb.extend(_items(5))
    assert isinstance(default_checkpointer(rb.storage), StorageStateCheckpointer)
    rb.dumps(tmp_path / "buffer")
    other = ReplayBuffer(storage=RowStorage(8, 3), batch_size=2)
    other.loads(tmp_path / "buffer")
    assert len(other) == 5
    assert torch.equal(other.storage.get(slice(None)), _items(5))
    # the storage alone, through Storage.dumps / loads
    rb.storage.dumps(tmp_path / "storage")
    alone = RowStorage(8, 3)
    alone.loads(tmp_path / "storage")
    assert torch.equal(alone.get(slice(None)), _items(5))


def test_state_checkpoint_refuses_another_storage_class(tmp_path):
    storage = RowStorage(4, 3)
    storage.set(slice(0, 2), _items(2))
    StorageStateCheckpointer().dumps(storage, tmp_path / "ckpt")
    with pytest.raises(ValueError, match="expected a LegacyEmptyStorage state, got 'RowStorage'"):
        StorageStateCheckpointer().loads(LegacyEmptyStorage(4, 3), tmp_path / "ckpt")


def test_empty_through_either_name():
    for cls in (RowStorage, LegacyEmptyStorage):
        rb = ReplayBuffer(storage=cls(4, 3), batch_size=2)
        rb.extend(_items(3))
        rb.empty()
        assert len(rb) == 0
        rb.extend(_items(2))
        rb.storage._empty()
        assert len(rb.storage) == 0


def test_contract_defaults_of_a_flat_storage():
    storage = RowStorage(4, 3)
    with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
        storage.random_index(2)
    storage.set(slice(0, 3), _items(3))
    assert storage.len_along_dim0 == 3 and storage.max_rows() == 4
    assert storage.ravel_index([2, 0]).tolist() == [2, 0]
    assert storage.unravel_index(torch.tensor([1])).tolist() == [1]
    assert storage.slot_generations is None and storage.item_index(torch.zeros(2, 2)) is None
    assert torch.equal(storage.gather(torch.tensor([2])), _items(3)[2:])
    assert int(storage.random_index(16, torch.Generator().manual_seed(0)).max()) < 3


def test_missing_required_method_names_the_storage():
    class NoEmpty(Storage):
        pass

    with pytest.raises(NotImplementedError, match="NoEmpty must implement empty"):
        NoEmpty(3).empty()
    with pytest.raises(NotImplementedError, match="NoEmpty must implement get"):
        NoEmpty(3).get(0)


def test_no_private_storage_reads_outside_storage_modules():
    folder = Path(rb_package.__file__).parent
    storage_modules = {"storages.py", "storage_base.py", "list_storage.py", "memmap_storage.py"}
    pattern = re.compile(r"storage\._[a-z][a-z_]*")
    offenders = {
        path.name: pattern.findall(path.read_text())
        for path in folder.glob("*.py")
        if path.name not in storage_modules
    }
    assert {name: found for name, found in offenders.items() if found} == {}
