"""Tests of the stateless frame-window function (tdrl/envs/transforms/functional.py)."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs.transforms import functional
from tdrl.envs.transforms.functional import cat_frames


def test_history_windows_constant_and_same_padding():
    frames = torch.arange(8.0).view(4, 2)
    constant = cat_frames(frames, N=3, dim=-1, time_dim=-2, padding="constant", padding_value=-1)
    assert constant.tolist() == [
        [-1, -1, -1, -1, 0, 1],
        [-1, -1, 0, 1, 2, 3],
        [0, 1, 2, 3, 4, 5],
        [2, 3, 4, 5, 6, 7],
    ]
    same = cat_frames(frames, N=3, dim=-1, time_dim=-2)
    assert same[0].tolist() == [0, 1, 0, 1, 0, 1]
    assert same[1].tolist() == [0, 1, 0, 1, 2, 3]


def test_future_windows_pad_after_the_end():
    frames = torch.arange(4.0).unsqueeze(-1)
    same = cat_frames(frames, N=3, dim=-1, time_dim=-2, future=True)
    assert same.tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 3], [3, 3, 3]]
    constant = cat_frames(frames, N=3, dim=-1, time_dim=-2, future=True, padding="constant")
    assert constant.tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 0], [3, 0, 0]]


def test_leading_dims_and_concatenation_dim():
    # [batch=2, T=3, C=1, W=2]: frames concatenated along C (dim=-2)
    x = torch.arange(12.0).view(2, 3, 1, 2)
    out = cat_frames(x, N=2, dim=-2, time_dim=-3, padding="constant")
    assert out.shape == (2, 3, 2, 2)
    torch.testing.assert_close(out[:, 1:, 0], x[:, :-1, 0])
    torch.testing.assert_close(out[:, :, 1], x[:, :, 0])
    assert bool((out[:, 0, 0] == 0).all())


def test_done_mask_pads_slots_of_previous_trajectory():
    x = torch.arange(5.0).unsqueeze(-1)  # steps 0-1 then 2-4
    # window slots [t-1, t]: step 2 starts a trajectory, so its first slot is padding
    mask = torch.zeros(5, 1, 2, dtype=torch.bool)
    mask[2, 0, 0] = True
    out = cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=mask)
    assert out.tolist() == [[0, 0], [0, 1], [2, 2], [2, 3], [3, 4]]
    out = cat_frames(
        x, N=2, dim=-1, time_dim=-2, padding="constant", padding_value=9, done_mask=mask
    )
    assert out[2].tolist() == [9, 2]


def test_dtype_and_device_kept():
    x = torch.arange(6, dtype=torch.int64).view(3, 2)
    out = cat_frames(x, N=2, dim=-1, time_dim=-2, padding="constant", padding_value=7)
    assert out.dtype == torch.int64
    assert out[0].tolist() == [7, 7, 0, 1]


def test_argument_errors_name_the_argument():
    x = torch.zeros(1, 5, 2)
    with pytest.raises(ValueError, match="dim must be < 0.*got dim=0"):
        cat_frames(x, N=2, dim=0, time_dim=-2)
    with pytest.raises(ValueError, match="time_dim must be < 0.*got time_dim=1"):
        cat_frames(x, N=2, dim=-1, time_dim=1)
    with pytest.raises(ValueError, match="padding must be one of.*'zeros'"):
        cat_frames(x, N=2, dim=-1, time_dim=-2, padding="zeros")
    with pytest.raises(ValueError, match="time_dim < dim"):
        cat_frames(x, N=2, dim=-2, time_dim=-1)
    with pytest.raises(ValueError, match="N: expected a positive int, got 0"):
        cat_frames(x, N=0, dim=-1, time_dim=-2)
    with pytest.raises(ValueError, match="done_mask.*got torch.bool of shape \\(1, 5, 3\\)"):
        cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=torch.zeros(1, 5, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.Tensor, got list"):
        cat_frames([1.0], N=2, dim=-1, time_dim=-2)


def test_module_is_reachable_from_the_transforms_package():
    from tdrl.envs import transforms

    assert transforms.functional is functional
