from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import split_trajectories


def _data_with_ids(ids, batch_size):
    ids = torch.tensor(ids).reshape(batch_size)
    return TensorDict(
        {
            "obs": torch.arange(ids.numel(), dtype=torch.float32).reshape(*batch_size, 1),
            "collector": {"traj_ids": ids},
            "next": {"done": torch.zeros(*batch_size, 1, dtype=torch.bool)},
        },
        batch_size=batch_size,
    )


def test_split_from_traj_ids_pads_and_masks():
    data = _data_with_ids([[0, 0, 0, 1], [2, 2, 3, 3]], [2, 4])
    out = split_trajectories(data)
    assert out.batch_size == (4, 3)
    assert out["collector", "mask"].tolist() == [
        [True, True, True],
        [True, False, False],
        [True, True, False],
        [True, True, False],
    ]
    assert out["obs"].squeeze(-1).tolist() == [[0, 1, 2], [3, 0, 0], [4, 5, 0], [6, 7, 0]]
    assert out["collector", "traj_ids"][:, 0].tolist() == [0, 1, 2, 3]
    # the input is not modified
    assert ("collector", "mask") not in data.keys(include_nested=True)


def test_split_single_trajectory_adds_a_leading_dim():
    out = split_trajectories(_data_with_ids([5, 5, 5], [3]))
    assert out.batch_size == (1, 3)
    assert out["collector", "mask"].all()


def test_split_from_done_and_truncated():
    done = torch.tensor([False, True, False, False, False, False])
    truncated = torch.tensor([False, False, False, True, False, False])
    data = TensorDict(
        {
            "obs": torch.arange(6.0),
            "next": {"done": done.unsqueeze(-1), "truncated": truncated.unsqueeze(-1)},
        },
        batch_size=[6],
    )
    out = split_trajectories(data)
    assert out["obs"].tolist() == [[0, 1], [2, 3], [4, 5]]
    assert out["traj_ids"][:, 0].tolist() == [0, 1, 2]
    assert out["mask"].all()


def test_split_from_done_batched_ids_do_not_collide():
    done = torch.zeros(2, 3, 1, dtype=torch.bool)
    done[0, 0] = True
    data = TensorDict({"x": torch.ones(2, 3), "next": {"done": done}}, batch_size=[2, 3])
    out = split_trajectories(data)
    assert out.batch_size == (3, 3)
    assert out["mask"].sum(-1).tolist() == [1, 2, 3]


def test_split_with_prefix_trajectory_key_and_done_key():
    data = TensorDict({"x": torch.arange(4.0), "ids": torch.tensor([0, 0, 1, 1])}, [4])
    out = split_trajectories(data, trajectory_key="ids")
    assert out.batch_size == (2, 2) and out["mask"].all()
    nested = TensorDict(
        {"x": torch.arange(4.0), "meta": {"traj_ids": torch.tensor([0, 1, 1, 1])}}, [4]
    )
    assert split_trajectories(nested, prefix="meta")["meta", "mask"].sum().item() == 4
    custom = TensorDict(
        {
            "x": torch.arange(4.0),
            "next": {"end": torch.tensor([[True], [False], [False], [False]])},
        },
        [4],
    )
    assert split_trajectories(custom, done_key="end").batch_size == (2, 3)


def test_split_as_nested_keeps_lengths():
    data = _data_with_ids([0, 0, 0, 1], [4])
    out = split_trajectories(data, as_nested=True)
    assert out.batch_size == (2, -1)
    assert out["collector", "traj_ids"].is_nested
    assert [len(row) for row in out["collector", "traj_ids"].unbind(0)] == [3, 1]
    padded = out.to_padded_tensor(mask_key=("collector", "mask"))
    assert (padded == split_trajectories(data)).all()


def test_split_errors():
    with pytest.raises(TypeError, match="TensorDictBase"):
        split_trajectories({"x": 1})
    with pytest.raises(KeyError, match="traj_ids"):
        split_trajectories(TensorDict({"x": torch.zeros(3)}, [3]))
    with pytest.raises(ValueError, match="batch shape"):
        split_trajectories(TensorDict({"x": torch.zeros(3), "traj_ids": torch.zeros(3, 2)}, [3]))
    with pytest.raises(ValueError, match="time dim"):
        split_trajectories(TensorDict({"x": torch.zeros(())}, []))
