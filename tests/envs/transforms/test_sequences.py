"""Tests of RandomCropTensorDict and BurnInTransform (tdrl/envs/transforms/sequences.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.data import LazyMemmapStorage, TensorDictReplayBuffer
from tdrl.envs import BurnInTransform, RandomCropTensorDict, TransformedEnv
from tests.mocks import CountingEnv


# ------------------------------------------------------------------ RandomCropTensorDict
def test_random_crop_data_rst_example(tmp_path):
    obs = torch.randn(100, 50, 1)
    data = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:]}}, [99])
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(1000, scratch_dir=tmp_path))
    rb.extend(data)
    rb.append_transform(RandomCropTensorDict(sub_seq_len=10))
    sample = rb.sample(128)
    assert sample.batch_size == (10,)
    assert sample["obs"].shape == (10, 50, 1) and sample["next", "obs"].shape == (10, 50, 1)


def test_random_crop_windows_are_contiguous_per_sequence():
    steps = torch.arange(20.0).expand(8, 20)
    td = TensorDict({"t": steps, "other": steps * 2}, [8, 20])
    out = RandomCropTensorDict(5)(td)
    assert out.batch_size == (8, 5)
    diffs = out["t"].diff(dim=-1)
    assert bool((diffs == 1).all())
    assert torch.equal(out["other"], out["t"] * 2)
    starts = {int(s) for s in out["t"][:, 0]}
    assert starts <= set(range(16))
    seen = {int(s) for _ in range(30) for s in RandomCropTensorDict(5)(td)["t"][:, 0]}
    assert seen == set(range(16))  # every start can be drawn, the last one included


def test_random_crop_sample_dim():
    td = TensorDict({"t": torch.arange(12.0).reshape(12, 1).expand(12, 3)}, [12, 3])
    out = RandomCropTensorDict(4, sample_dim=0)(td)
    assert out.batch_size == (4, 3)
    assert bool((out["t"].diff(dim=0) == 1).all())


def test_random_crop_mask_key():
    mask = torch.zeros(4, 10, dtype=torch.bool)
    lengths = [3, 5, 10, 4]
    for row, length in enumerate(lengths):
        mask[row, :length] = True
    td = TensorDict({"t": torch.arange(10.0).expand(4, 10), "mask": mask}, [4, 10])
    for _ in range(20):
        out = RandomCropTensorDict(3, mask_key="mask")(td)
        assert bool(out["mask"].all())
        assert out["t"][0].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="valid steps"):
        RandomCropTensorDict(4, mask_key="mask")(td)


def test_random_crop_errors():
    td = TensorDict({"t": torch.zeros(3)}, [3])
    with pytest.raises(ValueError, match="at least 5 steps"):
        RandomCropTensorDict(5)(td)
    # code written for the reference API catches the same error as a RuntimeError
    with pytest.raises(RuntimeError, match="Cannot sample trajectories of length 5"):
        RandomCropTensorDict(5)(td)
    with pytest.raises(ValueError, match="positive"):
        RandomCropTensorDict(0)
    with pytest.raises(ValueError, match="batch size"):
        RandomCropTensorDict(1)(TensorDict({"t": torch.zeros(3)}, []))
    with pytest.raises(RuntimeError, match="cannot be part of an env"):
        TransformedEnv(CountingEnv(), RandomCropTensorDict(2))


# ------------------------------------------------------------------ BurnInTransform
def _running_sum(obs, hidden):
    """A toy recurrent cell: the hidden state is the running sum of observations."""
    return hidden[..., :1, :] + obs.cumsum(-2)


def _sequence() -> TensorDict:
    obs = torch.arange(1.0, 9.0).reshape(1, 8, 1).expand(2, 8, 1).clone()
    return TensorDict({"obs": obs, "hidden": torch.zeros(2, 8, 1)}, [2, 8])


def test_burn_in_refreshes_the_state():
    module = TensorDictModule(_running_sum, ["obs", "hidden"], [("next", "hidden")])
    transform = BurnInTransform([module], burn_in=3)
    assert transform.out_keys == ["hidden"]
    data = _sequence()
    out = transform(data)
    assert out.batch_size == (2, 5)
    assert out["hidden"][:, 0, 0].tolist() == [6.0, 6.0]  # 1 + 2 + 3
    assert out["hidden"][:, 1:].eq(0).all()
    torch.testing.assert_close(out["obs"], data["obs"][:, 3:])
    assert data["hidden"].eq(0).all()  # the input is left alone


def test_burn_in_creates_missing_state_and_runs_without_grad():
    linear = torch.nn.Linear(1, 2)

    def cell(obs):
        return linear(obs)

    module = TensorDictModule(cell, ["obs"], [("next", "state")])
    data = _sequence().exclude("hidden")
    out = BurnInTransform([module], burn_in=2, out_keys=["state"])(data)
    assert out["state"].shape == (2, 6, 2)
    assert not out["state"].requires_grad
    expected = linear(data["obs"][:, 1]).detach()
    torch.testing.assert_close(out["state"][:, 0], expected)
    assert out["state"][:, 1:].eq(0).all()


def test_burn_in_errors():
    module = TensorDictModule(_running_sum, ["obs", "hidden"], [("next", "hidden")])
    with pytest.raises(ValueError, match="longer than burn_in"):
        BurnInTransform([module], burn_in=8)(_sequence())
    with pytest.raises(ValueError, match="positive"):
        BurnInTransform([module], burn_in=0)
    plain = TensorDictModule(_running_sum, ["obs", "hidden"], ["out"])
    with pytest.raises(ValueError, match="out_keys"):
        BurnInTransform([plain], burn_in=2)
    with pytest.raises(KeyError, match="hidden"):
        BurnInTransform([plain], burn_in=2, out_keys=["hidden"])(_sequence())
    with pytest.raises(RuntimeError, match="cannot be part of an env"):
        TransformedEnv(CountingEnv(), BurnInTransform([module], burn_in=2))
