"""TED converters: flat (deduplicated), nested and HDF5 layouts, round trips."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.ted import Flat2TED, H5Combine, H5Split, Nested2TED, TED2Flat, TED2Nested
from tests.data.test_slice_samplers import MockCollector


def assert_same(a, b):
    assert a.batch_size == b.batch_size
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a.get(key), b.get(key)), key


@pytest.mark.parametrize("num_envs", [1, 3])
def test_flat_round_trip_drops_duplicates(num_envs):
    data = MockCollector(num_envs=num_envs, frames_per_batch=30, min_len=3, max_len=8).rollout()
    flat = TED2Flat()(data)
    kept = flat["data"]
    assert ("next", "observation") not in kept.keys(True)
    assert ("next", "step_count") not in kept.keys(True)
    assert ("next", "reward") in kept.keys(True) and ("next", "done") not in kept.keys(True)
    assert ("next", "terminated") in kept.keys(True)  # no root copy: kept in full
    stops = flat["stops", "index"]
    done = data["next", "done"].reshape(-1)
    assert done[stops].sum() == done.sum()  # every episode end is kept
    assert stops.numel() < data.numel() // 2
    assert_same(Flat2TED()(flat), data)


def test_flat_keeps_steps_that_differ():
    obs = torch.arange(6.0)
    data = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:].clone()}}, [5])
    data["next", "obs"][1] = 100.0  # not the following root obs
    flat = TED2Flat()(data)
    assert flat["stops", "index"].tolist() == [1, 4]
    assert_same(Flat2TED()(flat), data)


def test_flat_to_out_and_errors():
    data = TensorDict({"obs": torch.zeros(3), "next": {"obs": torch.zeros(3)}}, [3])
    out = data.clone().zero_()
    Flat2TED()(TED2Flat()(data), out=out)
    assert_same(out, data)
    with pytest.raises(TypeError, match="expects a TensorDict"):
        TED2Flat()(torch.zeros(3))
    with pytest.raises(ValueError, match="output of TED2Flat"):
        Flat2TED()(data)
    with pytest.raises(ValueError, match="at least one batch dimension"):
        TED2Flat()(data[0])


def test_nested_round_trip_one_row_per_trajectory():
    data = MockCollector(num_envs=1, frames_per_batch=40, min_len=3, max_len=9).rollout()
    nested = TED2Nested()(data)
    count = int(data["next", "done"].sum()) + (0 if data["next", "done"][-1] else 1)
    assert nested.batch_size == (count,)
    for trajectory in nested["collector", "traj_ids"].unbind(0):
        assert (trajectory == trajectory[0]).all()
    assert_same(Nested2TED()(nested), data)
    with pytest.raises(TypeError, match="expects nested tensors"):
        Nested2TED()(data)


def test_h5_split_and_combine(tmp_path):
    pytest.importorskip("h5py")
    data = MockCollector(num_envs=2, frames_per_batch=25).rollout()
    path = H5Split(h5_kwargs={"compression": "gzip", "compression_opts": 9})(
        data, tmp_path / "data.h5", metadata={"source": "mock"}
    )
    assert_same(H5Combine()(path), data)
    flat = H5Combine(flat=True)(path)
    assert set(flat.keys()) == {"data", "stops"}
    assert H5Combine.read_metadata(path) == {"source": "mock"}
    (tmp_path / "other.h5").write_bytes(b"")
    import h5py

    with h5py.File(tmp_path / "other.h5", "w") as handle:
        handle.create_dataset("x", data=[1, 2])
    with pytest.raises(ValueError, match="not a flat TED HDF5 file"):
        H5Combine()(tmp_path / "other.h5")
