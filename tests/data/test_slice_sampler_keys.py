"""SliceSampler: which keys delimit trajectories, is_init marks, padding mask, flags."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.samplers import (
    PrioritizedSliceSampler,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)


def _ids(lengths: list[int]) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))


def _rb(data: TensorDict, sampler: SliceSampler, batch_size: int) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(data.shape[0]), sampler=sampler, batch_size=batch_size
    )
    rb.extend(data)
    return rb


def _reset_flags(ids: torch.Tensor) -> torch.Tensor:
    is_init = torch.ones(ids.shape[0], 1, dtype=torch.bool)
    is_init[1:, 0] = ids[1:] != ids[:-1]
    return is_init


def test_importable_where_the_reference_documentation_points():
    from tdrl.data import replay_buffers
    from tdrl.data.replay_buffers import samplers

    for name in ("SliceSampler", "SliceSamplerWithoutReplacement", "PrioritizedSliceSampler"):
        assert getattr(samplers, name) is getattr(replay_buffers, name)


def test_collector_ids_are_preferred_over_episode():
    data = TensorDict(
        {
            ("collector", "traj_ids"): _ids([3, 3, 2]),
            "episode": torch.zeros(8, dtype=torch.long),
            "x": torch.arange(8),
        },
        [8],
    )
    rb = _rb(data, SliceSampler(num_slices=2), batch_size=4)
    assert rb.sampler.traj_key is None
    for _ in range(20):
        sample = rb.sample().reshape(2, 2)
        assert sample["collector", "traj_ids"].unique(dim=1).shape[1] == 1
    assert rb.sampler.traj_key == ("collector", "traj_ids")


def test_traj_key_and_end_key_together_use_what_is_stored():
    data = TensorDict({"x": torch.arange(10)}, [10])
    data["next", "done"] = torch.zeros(10, 1, dtype=torch.bool)
    data["next", "done"][4] = True
    sampler = SliceSampler(slice_len=5, traj_key="episode", end_key=("next", "done"))
    rb = _rb(data, sampler, batch_size=10)
    starts = rb.sample()["x"].reshape(2, 5)[:, 0]
    assert set(starts.tolist()) <= {0, 5}
    data["episode"] = _ids([2, 8])
    rb = _rb(data, SliceSampler(slice_len=2, traj_key="episode", end_key=("next", "done")), 8)
    # with ids stored, they win: [0, 1] and [2..9] are the trajectories
    assert all(start in (0, 2, 3, 4, 5, 6, 7, 8) for start in rb.sample()["x"][::2].tolist())


def test_end_keys_union_and_fallback_to_ids():
    truncated = torch.zeros(10, 1, dtype=torch.bool)
    truncated[4] = True
    data = TensorDict(
        {"x": torch.arange(10), "next": {"done": torch.zeros(10, 1, dtype=torch.bool)}}, [10]
    )
    data["next", "truncated"] = truncated
    keys = [("next", "done"), ("next", "truncated"), ("next", "terminated")]
    rb = _rb(data, SliceSampler(slice_len=2, end_keys=keys), batch_size=40)
    pairs = rb.sample()["x"].reshape(-1, 2)
    assert (pairs[:, 1] == pairs[:, 0] + 1).all() and not (pairs[:, 0] == 4).any()
    # with only the default end key, the truncation at 4 is not seen: slices cross it
    rb = _rb(data, SliceSampler(slice_len=2), batch_size=400)
    assert (rb.sample()["x"].reshape(-1, 2)[:, 0] == 4).any()
    ids_only = TensorDict({"x": torch.arange(10), "episode": _ids([5, 5])}, [10])
    rb = _rb(ids_only, SliceSampler(slice_len=2, end_keys=keys), batch_size=40)
    assert not (rb.sample()["x"].reshape(-1, 2)[:, 0] == 4).any()


def test_key_errors():
    with pytest.raises(RuntimeError, match="exclusive"):
        SliceSampler(slice_len=2, end_key=("next", "done"), end_keys=[("next", "truncated")])
    rb = _rb(TensorDict({"x": torch.arange(4)}, [4]), SliceSampler(num_slices=1), 2)
    with pytest.raises(KeyError, match="collector.*episode.*done.*got keys \\['x'\\]"):
        rb.sample()


def test_end_flag_must_be_one_value_per_item():
    data = TensorDict({"x": torch.arange(10)}, [10])
    data["next", "done"] = torch.zeros(10, 5, 1, dtype=torch.bool)
    rb = _rb(data, SliceSampler(num_slices=2), batch_size=4)
    with pytest.raises(ValueError, match="1-dimensional.*shape \\(10, 5, 1\\)") as err:
        rb.sample()
    assert isinstance(err.value, RuntimeError)


def test_list_storage_is_refused_with_a_type_error():
    rb = ReplayBuffer(storage=ListStorage(10), sampler=SliceSampler(num_slices=1), batch_size=2)
    rb.extend([TensorDict({"episode": torch.tensor(0)}) for _ in range(4)])
    with pytest.raises(TypeError, match="TensorStorage holding TensorDicts") as err:
        rb.sample()
    assert isinstance(err.value, RuntimeError)


def test_slice_ends_are_truncated_unless_terminated_is_stored():
    data = TensorDict({"episode": _ids([4, 4]), "t": torch.arange(8) % 4}, [8])
    rb = _rb(data, SliceSampler(num_slices=2), batch_size=8)
    sample = rb.sample().reshape(2, 4)
    # whole trajectories: a boundary read from ids may be a time limit, so it is truncated
    assert sample["next", "truncated"][:, -1].all() and not sample["next", "terminated"].any()
    data["next", "terminated"] = torch.tensor([0, 0, 0, 1, 0, 0, 0, 1], dtype=torch.bool)
    data["next", "terminated"] = data["next", "terminated"].unsqueeze(-1)
    rb = _rb(data, SliceSampler(num_slices=2), batch_size=8)
    sample = rb.sample().reshape(2, 4)
    assert sample["next", "terminated"][:, -1].all() and not sample["next", "truncated"].any()


@pytest.mark.parametrize(
    "make",
    [
        lambda: SliceSampler(slice_len=3, traj_key="episode"),
        lambda: SliceSampler(slice_len=3, traj_key="episode", strict_length=False),
        lambda: SliceSampler(slice_len=3, traj_key="episode", strict_length=False, pad_output=True),
        lambda: SliceSamplerWithoutReplacement(slice_len=3, traj_key="episode"),
        lambda: PrioritizedSliceSampler(40, 0.7, 0.5, slice_len=3, traj_key="episode"),
    ],
)
def test_is_init_marks_the_first_step_of_every_slice(make):
    ids = _ids([2, 9, 5, 7, 3, 6, 8])
    data = TensorDict({"episode": ids, "is_init": _reset_flags(ids)}, [ids.numel()])
    sampler = make()
    rb = _rb(data, sampler, batch_size=12)
    for _ in range(10):
        sample = rb.sample()
        is_init = sample["is_init"]
        assert is_init.shape == (sample.shape[0], 1)
        if sampler.pad_output:
            # padded slices keep their length: they start every slice_len steps
            starts = torch.arange(12) % 3 == 0
        else:
            # a slice starts at 0 and right after every slice end (where done is set)
            ends = sample["next", "done"].squeeze(-1)
            starts = torch.zeros_like(ends)
            starts[0] = True
            starts[1:] = ends[:-1]
        assert torch.equal(is_init.squeeze(-1), starts)


def test_is_init_is_not_invented():
    data = TensorDict({"episode": _ids([4, 4])}, [8])
    rb = _rb(data, SliceSampler(num_slices=2), batch_size=4)
    assert "is_init" not in rb.sample().keys()


def test_padding_mask_only_when_a_slice_is_padded():
    ids = _ids([8, 8])
    rb = _rb(
        TensorDict({"episode": ids}, [16]),
        SliceSampler(slice_len=4, traj_key="episode", strict_length=False, pad_output=True),
        batch_size=8,
    )
    assert ("collector", "mask") not in rb.sample().keys(True)
    ids = _ids([2, 6])
    rb = _rb(
        TensorDict({"episode": ids, "t": torch.arange(8)}, [8]),
        SliceSampler(slice_len=5, traj_key="episode", strict_length=False, pad_output=True),
        batch_size=500,
    )
    sample = rb.sample()
    mask = sample["collector", "mask"]
    assert mask.shape == (500,) and mask.dtype == torch.bool
    rows = mask.reshape(100, 5)
    lengths = rows.sum(-1)
    assert (rows == (torch.arange(5) < lengths.unsqueeze(-1))).all()
    truncated = sample["next", "truncated"].reshape(100, 5)
    assert truncated[torch.arange(100), lengths - 1].all()
    assert truncated.sum() == 100


def test_replacement_false_builds_the_without_replacement_variant():
    sampler = SliceSampler(replacement=False, slice_len=5, drop_last=True, traj_key="ep")
    assert type(sampler) is SliceSamplerWithoutReplacement
    assert sampler.drop_last and sampler.slice_len == 5 and sampler.traj_key == "ep"
    assert type(SliceSampler(replacement=True, slice_len=5)) is SliceSampler
    with pytest.raises(TypeError, match="no without-replacement variant"):
        PrioritizedSliceSampler(10, 0.5, 0.5, slice_len=5, replacement=False)
