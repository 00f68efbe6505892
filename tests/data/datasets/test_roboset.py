"""RobosetExperienceReplay on small HDF5 traces in RoboHive's schema."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.data.datasets import RobosetExperienceReplay, _files
from tdrl.data.datasets.roboset import _REPO

h5py = pytest.importorskip("h5py")

DATASET = "FK1-v4(expert)/FK1_Test_v2d-v4"


def write_trace(path, trials=3, rows=5, terminate_last=True):
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for trial in range(trials):
            group = f.create_group(f"Trial{trial}")
            group["time"] = np.arange(rows) * 0.1
            group["observations"] = np.arange(rows * 3).reshape(rows, 3) + 100 * trial
            actions = np.ones((rows, 2))
            actions[-1] = np.nan  # the last row has no action
            group["actions"] = actions
            group["rewards"] = np.arange(rows, dtype=np.float64)
            group["done"] = (np.arange(rows) == rows - 1) & (terminate_last or trial != 1)
            group["env_infos/obs_dict/qp"] = np.arange(rows)[:, None] * np.ones((1, 4))


def test_rollouts_become_ted_steps(tmp_path):
    write_trace(
        RobosetExperienceReplay.raw_dir(DATASET, tmp_path) / "trace.h5", terminate_last=False
    )
    data = RobosetExperienceReplay(DATASET, batch_size=4, root=tmp_path, download=False)
    assert len(data) == 3 * 4
    td = data[:]
    assert td["observation"][:4, 0].tolist() == [0, 3, 6, 9]
    assert td["next", "observation"][:4, 0].tolist() == [3, 6, 9, 12]
    # row t + 1 holds the reward and done flag of the step from t
    assert td["next", "reward"][:4].squeeze(-1).tolist() == [1, 2, 3, 4]
    assert not torch.isnan(td["action"]).any()
    assert td["info", "obs_dict", "qp"][:4, 0].tolist() == [0, 1, 2, 3]
    assert td["next", "info", "obs_dict", "qp"][:4, 0].tolist() == [1, 2, 3, 4]
    assert td["next", "time"].shape == (12,)
    assert td["next", "terminated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [3, 11]
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [7]
    assert td["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist() == [3, 7, 11]
    assert td["episode"].tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_trials_are_read_in_numeric_order_and_split(tmp_path):
    write_trace(RobosetExperienceReplay.raw_dir(DATASET, tmp_path) / "trace.h5", trials=11, rows=3)
    data = RobosetExperienceReplay(
        DATASET, batch_size=2, root=tmp_path, download=False, split_trajs=True
    )
    td = data[:]
    assert td.shape == (11, 2)
    assert td["observation"][:, 0, 0].tolist() == [100 * trial for trial in range(11)]


def test_download_from_the_hub(tmp_path, monkeypatch):
    calls = []

    def fake_snapshot(repo_id, patterns, local_dir, *, force, purpose):
        calls.append((repo_id, patterns, local_dir))
        write_trace(local_dir / DATASET / "trace.h5")
        return local_dir

    monkeypatch.setattr(_files, "hub_snapshot", fake_snapshot)
    data = RobosetExperienceReplay(DATASET, batch_size=2, root=tmp_path)
    assert calls == [(_REPO, [f"{DATASET}/*.h5"], tmp_path / "raw")]
    assert len(data) == 12


def test_available_datasets_come_from_the_hub_listing(monkeypatch):
    files = [f"{DATASET}/a.h5", f"{DATASET}/b.h5", "DAPG(expert)/door/c.h5", "README.md"]
    monkeypatch.setattr(_files, "hub_listing", lambda repo_id, purpose: files)
    listing = _files.HubDatasets(_REPO, ".h5")
    monkeypatch.setattr(RobosetExperienceReplay, "available_datasets", listing)
    assert RobosetExperienceReplay.available_datasets == ["DAPG(expert)/door", DATASET]


def test_errors_name_the_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no .h5 file in .*FK1_Test_v2d-v4"):
        RobosetExperienceReplay(DATASET, batch_size=2, root=tmp_path, download=False)
    raw = RobosetExperienceReplay.raw_dir(DATASET, tmp_path)
    raw.mkdir(parents=True)
    (raw / "broken.h5").write_bytes(b"garbage")
    with pytest.raises(RuntimeError, match="broken.h5 is not a readable HDF5 file"):
        RobosetExperienceReplay(DATASET, batch_size=2, root=tmp_path, download=False)
    (raw / "broken.h5").unlink()
    with h5py.File(raw / "other.h5", "w") as f:
        f["Trial0/actions"] = np.zeros((3, 2))
    with pytest.raises(RuntimeError, match="no rollout group with an 'observations' dataset"):
        RobosetExperienceReplay(DATASET, batch_size=2, root=tmp_path, download=False)
