"""Write generations (track_generations) and conditional updates (update_if_present)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


def _tracking(size: int = 4, storage=None) -> ReplayBuffer:
    return ReplayBuffer(
        storage=storage if storage is not None else LazyTensorStorage(size),
        writer=RoundRobinWriter(track_generations=True),
    )


def test_tracking_is_opt_in():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    index = rb.extend(torch.arange(4))
    assert not rb.writer.tracks_generations
    assert rb.writer.generations_of(index).tolist() == [-1] * 4
    assert rb.storage.slot_generations is None
    assert "index_generation" not in rb.sample(2, return_info=True)[1]


def test_generations_count_every_write_of_a_row():
    rb = _tracking(4)
    rb.extend(torch.arange(2))
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [0, 0, -1, -1]
    rb.extend(torch.arange(8))  # rows 2, 3 once more... then 0..3 again
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [2, 2, 1, 1]
    rb.add(torch.tensor(1))
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [2, 2, 2, 1]
    rb.writer.write_at(torch.tensor([0, 3]), torch.tensor([7, 8]))
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [3, 2, 2, 2]
    assert rb[0].item() == 7 and rb.writer._cursor == 3


def test_out_of_range_and_non_tracking_writers_report_minus_one():
    rb = _tracking(4)
    rb.extend(torch.arange(4))
    assert rb.writer.generations_of(torch.tensor([-5, -1, 4, 100])).tolist() == [-1] * 4
    assert (
        TensorDictMaxValueWriter(rank_key="r").generations_of(torch.arange(3)).tolist() == [-1] * 3
    )


def test_generations_live_on_the_storage():
    storage = LazyTensorStorage(4)
    tracking = _tracking(storage=storage)
    other = ReplayBuffer(storage=storage)  # does not track, but advances the storage's count
    index = tracking.extend(torch.arange(4))
    before = tracking.writer.generations_of(index)
    other.extend(torch.arange(2))
    assert (tracking.writer.generations_of(index) != before).tolist() == [True, True, False, False]
    other.empty()
    assert (tracking.writer.generations_of(index) != before).all()


def test_empty_invalidates_written_rows_only_and_stays_monotonic():
    rb = _tracking(4)
    rb.extend(torch.arange(2))
    rb.empty()
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [1, 1, -1, -1]
    rb.extend(torch.arange(4))
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [2, 2, 0, 0]


def test_samples_carry_their_generation_and_reveal_reuse():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8), writer=TensorDictRoundRobinWriter(track_generations=True)
    )
    rb.extend(TensorDict({"a": torch.arange(8)}, [8]))
    sample = rb.sample(8)
    assert torch.equal(sample["index_generation"], rb.writer.generations_of(sample["index"]))
    rb.extend(TensorDict({"a": torch.arange(3)}, [3]))
    stale = rb.writer.generations_of(sample["index"]) != sample["index_generation"]
    assert torch.equal(stale, sample["index"] < 3)


def test_generations_in_state_dict_and_dumps(tmp_path):
    rb = _tracking(4)
    rb.extend(torch.arange(5))
    state = rb.state_dict()
    restored = _tracking(4)
    restored.load_state_dict(state)
    assert restored.writer.generations_of(torch.arange(4)).tolist() == [1, 0, 0, 0]
    del state["_writer"]["_generation"]
    legacy = _tracking(4)
    legacy.load_state_dict(state)
    assert legacy.writer._cursor == 1
    writer = RoundRobinWriter(track_generations=True)
    writer._cursor, writer._write_count = 2, 9
    writer._generation = torch.tensor([3, 2, 2, 1])
    writer.dumps(tmp_path)
    loaded = RoundRobinWriter(track_generations=True)
    loaded.loads(tmp_path)
    assert (loaded._cursor, loaded._write_count) == (2, 9)
    assert loaded.generations_of(torch.arange(4)).tolist() == [3, 2, 2, 1]


def test_multidim_extend_returns_coordinates_in_data_order():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(12, ndim=2),
        writer=TensorDictRoundRobinWriter(track_generations=True),
    )
    data = TensorDict({"a": torch.arange(12).reshape(4, 3)}, [4, 3])
    index = rb.extend(data)
    assert index.shape == (12, 2)
    assert torch.equal(rb[index]["a"], data["a"].reshape(-1))
    assert rb.writer.generations_of(index).tolist() == [0] * 12
    assert rb.writer.generations_of(torch.tensor([1, 2])).shape == (2,)
    assert rb.writer.generations_of((torch.tensor(1), torch.tensor(2))).shape == ()


def _patchable(size: int = 10, storage=None):
    rb = TensorDictReplayBuffer(
        storage=storage if storage is not None else LazyTensorStorage(size),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    data = TensorDict(
        {
            "obs": torch.arange(size, dtype=torch.float32).unsqueeze(-1).expand(size, 3).clone(),
            "info": {"label": torch.zeros(size, dtype=torch.int64)},
            "version": torch.full((size,), 5, dtype=torch.int64),
        },
        [size],
    )
    index = rb.extend(data)
    return rb, data, index, rb.writer.generations_of(index)


def test_update_if_present_patches_live_records_only():
    rb, _, index, generation = _patchable()
    rb.extend(
        TensorDict(
            {
                "obs": -torch.ones(4, 3),
                "info": {"label": torch.ones(4, dtype=torch.int64)},
                "version": torch.zeros(4, dtype=torch.int64),
            },
            [4],
        )
    )
    order = torch.tensor([7, 0, 5, 2, 9, 1])
    result = rb.update_if_present(
        index=index[order], generation=generation[order], patch={"obs": torch.full((6, 3), 42.0)}
    )
    assert result.updated.tolist() == (order >= 4).tolist()
    assert (result.updated_count, result.stale_count) == (3, 3)
    assert result.version_rejected is None and result.version_rejected_count is None
    obs = rb[:]["obs"][:, 0]
    assert obs[[5, 7, 9]].tolist() == [42.0] * 3 and obs[:4].tolist() == [-1.0] * 4
    # a handle is not used up by an update
    again = rb.update_if_present(
        index=index[order],
        generation=generation[order],
        patch={("info", "label"): torch.full((6,), 7)},
    )
    assert again.updated_count == 3 and rb[:]["info", "label"][[5, 7, 9]].tolist() == [7] * 3


def test_update_if_present_validates_everything_before_writing():
    rb, data, index, generation = _patchable()
    with pytest.raises(KeyError, match="not_a_key"):
        rb.update_if_present(
            index=index, generation=generation, patch={"not_a_key": torch.zeros(10)}
        )
    with pytest.raises(ValueError, match="shape mismatch at key \\('info', 'label'\\)"):
        rb.update_if_present(
            index=index,
            generation=generation,
            patch={
                "obs": torch.full((10, 3), 1.0),
                ("info", "label"): torch.zeros(10, 5, dtype=torch.int64),
            },
        )
    with pytest.raises(ValueError, match="dtype mismatch at key 'obs'"):
        rb.update_if_present(
            index=index, generation=generation, patch={"obs": torch.zeros(10, 3, dtype=torch.int64)}
        )
    assert torch.equal(rb[:]["obs"], data["obs"])


def test_update_if_present_never_written_rows_are_stale():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), writer=TensorDictRoundRobinWriter(track_generations=True)
    )
    rb.extend(TensorDict({"obs": torch.zeros(5, 3)}, [5]))
    index = torch.tensor([7])
    result = rb.update_if_present(
        index=index, generation=rb.writer.generations_of(index), patch={"obs": torch.ones(1, 3)}
    )
    assert not result.updated.item() and result.stale_count == 1 and len(rb) == 5


def test_update_if_present_capability_errors():
    listed = ReplayBuffer(storage=ListStorage(10))
    listed.extend([torch.zeros(3) for _ in range(4)])
    with pytest.raises(TypeError, match="conditional") as err:
        listed.update_if_present(index=torch.arange(4), generation=torch.zeros(4), patch={})
    assert isinstance(err.value, RuntimeError)
    untracked = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    index = untracked.extend(TensorDict({"obs": torch.zeros(10, 3)}, [10]))
    with pytest.raises(RuntimeError, match="conditional"):
        untracked.update_if_present(
            index=index, generation=torch.zeros(10), patch={"obs": torch.ones(10, 3)}
        )


def test_versions_order_concurrent_patches():
    rb, data, index, generation = _patchable()
    common = {"index": index, "generation": generation, "version_key": "version"}
    newer = rb.update_if_present(
        patch={"obs": torch.full((10, 3), 2.0)}, version=7, require_newer=True, **common
    )
    assert newer.updated.all() and newer.version_rejected_count == 0
    assert (rb[:]["version"] == 7).all()
    older = rb.update_if_present(patch={"obs": torch.full((10, 3), 1.0)}, version=6, **common)
    assert older.version_rejected.all() and (rb[:]["obs"] == 2.0).all()
    equal = rb.update_if_present(
        patch={"obs": torch.full((10, 3), 3.0)}, version=7, require_newer=True, **common
    )
    assert equal.version_rejected_count == 10
    equal = rb.update_if_present(patch={"obs": torch.full((10, 3), 3.0)}, version=7, **common)
    assert equal.updated.all()
    per_record = torch.tensor([8] * 5 + [6] * 5)
    mixed = rb.update_if_present(
        patch={"obs": torch.zeros(10, 3)}, version=per_record, require_newer=True, **common
    )
    assert mixed.updated.tolist() == [True] * 5 + [False] * 5
    assert rb[:]["version"].tolist() == [8] * 5 + [7] * 5


def test_versions_duplicates_and_staleness():
    rb, _, index, generation = _patchable()
    for versions, winner in (([7, 6], 0), ([6, 7], 1)):
        result = rb.update_if_present(
            index=index[[0, 0]],
            generation=generation[[0, 0]],
            patch={"obs": torch.tensor(versions, dtype=torch.float32).unsqueeze(-1).expand(2, 3)},
            version_key=("version",),
            version=torch.tensor(versions) + 10 * (winner + 1),
            require_newer=True,
        )
        assert result.updated.tolist() == [i == winner for i in range(2)]
        assert result.version_rejected.tolist() == [i != winner for i in range(2)]
    rb.extend(
        TensorDict(
            {
                "obs": torch.zeros(4, 3),
                "info": {"label": torch.zeros(4, dtype=torch.int64)},
                "version": torch.zeros(4, dtype=torch.int64),
            },
            [4],
        )
    )
    result = rb.update_if_present(
        index=index,
        generation=generation,
        patch={"obs": torch.ones(10, 3)},
        version_key="version",
        version=1,
    )
    assert result.stale_count == 4 and result.version_rejected.tolist() == [False] * 4 + [True] * 6


def test_version_argument_errors():
    rb, _, index, generation = _patchable()
    base = {"index": index, "generation": generation}
    with pytest.raises(ValueError, match="both version_key and version"):
        rb.update_if_present(patch={"obs": torch.zeros(10, 3)}, version_key="version", **base)
    with pytest.raises(KeyError, match="not_a_key"):
        rb.update_if_present(
            patch={"obs": torch.zeros(10, 3)}, version_key="not_a_key", version=6, **base
        )
    with pytest.raises(ValueError, match="may not appear in patch"):
        rb.update_if_present(
            patch={"version": torch.zeros(10, dtype=torch.int64)},
            version_key=("version",),
            version=6,
            **base,
        )
    with pytest.raises(ValueError, match="one number per item"):
        rb.update_if_present(
            patch={"version": torch.zeros(10, dtype=torch.int64)},
            version_key="obs",
            version=6,
            **base,
        )
    with pytest.raises(ValueError, match="Dotted-string"):
        rb.update_if_present(
            patch={"obs": torch.zeros(10, 3)}, version_key="info.label", version=6, **base
        )


def test_multidim_storage_roundtrip_and_checkpoint(tmp_path):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(6, ndim=2),
        writer=TensorDictRoundRobinWriter(track_generations=True),
    )
    data = TensorDict(
        {"obs": torch.arange(6.0).reshape(2, 3), "version": torch.full((2, 3), 5)}, [2, 3]
    )
    index = rb.extend(data)
    generation = rb.writer.generations_of(index)
    patch = {"obs": torch.arange(6.0).reshape(2, 3) + 100}
    result = rb.update_if_present(
        index=index, generation=generation, patch=patch, version_key="version", version=6
    )
    assert result.updated.all()
    # the patch is in the data's layout, aligned with the handles extend returned
    assert torch.equal(rb[:]["obs"], patch["obs"])
    result = rb.update_if_present(
        index=index,
        generation=generation,
        patch=patch,
        version_key="version",
        version=6,
        require_newer=True,
    )
    assert result.version_rejected.all()
    rb, _, index, generation = _patchable(storage=LazyMemmapStorage(10))
    restored = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(10), writer=TensorDictRoundRobinWriter(track_generations=True)
    )
    restored.load_state_dict(rb.state_dict())
    result = restored.update_if_present(
        index=index, generation=generation, patch={"obs": torch.ones(10, 3)}
    )
    assert result.updated.all()
