"""any_true / all_true: every size class (one element, small, numpy-reduced) agrees with torch."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import PendulumEnv
from tdrl.envs._td_fast import _NUMPY_REDUCE_MIN, all_true, any_true


def _masks(numel: int):
    """Masks of ``numel`` elements: none, one (first / last), all set; contiguous or not."""
    base = [
        torch.zeros(numel, dtype=torch.bool),
        torch.ones(numel, dtype=torch.bool),
    ]
    for index in (0, numel - 1):
        mask = torch.zeros(numel, dtype=torch.bool)
        mask[index] = True
        base.append(mask)
        base.append(~mask)
    out = []
    for mask in base:
        out.append(mask.reshape(numel, 1))
        # a strided view: every other element of a longer mask
        wide = torch.zeros(2 * numel, dtype=torch.bool)
        wide[::2] = mask
        out.append(wide[::2])
    return out


@pytest.mark.parametrize("numel", [1, 2, 7, _NUMPY_REDUCE_MIN - 1, _NUMPY_REDUCE_MIN, 4096])
def test_reductions_match_torch(numel):
    for mask in _masks(numel):
        assert any_true(mask) is bool(mask.any())
        assert all_true(mask) is bool(mask.all())


def test_expanded_mask():
    mask = torch.tensor([False, True]).expand(1024, 2)
    assert any_true(mask) and not all_true(mask)
    assert not any_true(mask[:, 0]) and all_true(mask[:, 1])


def test_empty_mask():
    mask = torch.zeros(0, 3, dtype=torch.bool)
    assert not any_true(mask)
    assert all_true(mask)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.int64])
@pytest.mark.parametrize("numel", [3, 2048])
def test_non_bool_masks_use_truthiness(dtype, numel):
    mask = torch.zeros(numel, dtype=dtype)
    assert not any_true(mask) and not all_true(mask)
    mask[-1] = 2
    assert any_true(mask) and not all_true(mask)
    mask.fill_(1)
    assert any_true(mask) and all_true(mask)


def test_partial_reset_of_large_batch_uses_mask():
    """A partial reset over a batch above the numpy threshold resets exactly the masked rows."""
    env = PendulumEnv(seed=0)
    batch = 2 * _NUMPY_REDUCE_MIN
    td = env.reset(TensorDict(batch_size=[batch]))
    td = env.rand_step(td)
    state = td["next"].exclude("reward").clone()
    state["_reset"] = torch.zeros(batch, 1, dtype=torch.bool)
    state["_reset"][-1] = True
    out = env.reset(state.clone())
    kept = slice(0, batch - 1)
    assert torch.equal(out["th"][kept], state["th"][kept])
    assert not torch.equal(out["th"][-1], state["th"][-1])
    assert "_reset" not in out.keys()
