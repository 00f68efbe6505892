"""AtariDQNExperienceReplay on small replay logs in dopamine's gzip layout."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import ReplayBufferEnsemble
from tdrl.data.datasets import AtariDQNExperienceReplay, _files

CAPACITY = 12


def write_logs(folder, checkpoints=2, add_count=None, game_offset=0):
    """Each checkpoint holds CAPACITY frames; frame value = chronological step number."""
    folder.mkdir(parents=True, exist_ok=True)
    for checkpoint in range(checkpoints):
        steps = np.arange(CAPACITY) + checkpoint * CAPACITY
        oldest = 0 if add_count is None else add_count % CAPACITY
        stored = np.roll(steps, oldest)  # element ``oldest`` holds the oldest step
        frames = np.zeros((CAPACITY, 84, 84), np.uint8)
        frames[:, 0, 0] = stored + game_offset
        arrays = {
            "observation": frames,
            "action": (stored % 4).astype(np.int32),
            "reward": stored.astype(np.float32),
            "terminal": (stored % 5 == 4).astype(np.uint8),
        }
        for field, array in arrays.items():
            with gzip.open(folder / f"$store${field}_ckpt.{checkpoint}.gz", "wb") as f:
                np.save(f, array, allow_pickle=False)
        if add_count is not None:
            with gzip.open(folder / f"add_count_ckpt.{checkpoint}.gz", "wb") as f:
                np.save(f, np.array(add_count))


def test_logs_in_chronological_order_with_lazy_next_frames(tmp_path):
    write_logs(AtariDQNExperienceReplay.raw_dir("Pong/1", tmp_path), add_count=5 * CAPACITY + 7)
    data = AtariDQNExperienceReplay("Pong/1", batch_size=8, root=tmp_path, download=False)
    assert len(data) == 2 * CAPACITY
    td = data[:]
    steps = torch.arange(2 * CAPACITY)
    assert torch.equal(td["observation"][:, 0, 0].long(), steps)
    assert torch.equal(td["next", "reward"].squeeze(-1), steps.float())
    # frames are stored once: the next one is read from the following step
    assert torch.equal(td["next", "observation"][:-1, 0, 0].long(), steps[1:])
    assert td["next", "observation"][-1, 0, 0] == 2 * CAPACITY - 1
    stored = TensorDict.load_memmap(data.data_path)
    assert ("next", "observation") not in stored.keys(True)
    assert td["next", "terminated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [4, 9, 14, 19]
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [23]
    sample = data.sample()
    assert (
        torch.equal(sample["next", "observation"][:, 0, 0], sample["observation"][:, 0, 0] + 1)
        or (sample["index"] == 2 * CAPACITY - 1).any()
    )
    assert sample.get_non_tensor("metadata")["dataset_id"] == "Pong/1"
    one = data[3]
    assert one["next", "observation"][0, 0] == 4


def test_slices_and_max_runs(tmp_path, monkeypatch):
    write_logs(AtariDQNExperienceReplay.raw_dir("Pong/2", tmp_path), checkpoints=3)
    monkeypatch.setattr(AtariDQNExperienceReplay, "_max_runs", 2)
    data = AtariDQNExperienceReplay("Pong/2", root=tmp_path, download=False, slice_len=3)
    assert len(data) == 2 * CAPACITY
    sample = data.sample(9).reshape(3, 3)
    assert (sample["episode"] == sample["episode"][:, :1]).all()
    assert (sample["observation"][:, 1:, 0, 0] == sample["next", "observation"][:, :-1, 0, 0]).all()


def test_ensemble_of_two_games(tmp_path):
    write_logs(AtariDQNExperienceReplay.raw_dir("Pong/1", tmp_path), checkpoints=1)
    write_logs(
        AtariDQNExperienceReplay.raw_dir("Asterix/1", tmp_path), checkpoints=1, game_offset=100
    )
    pong = AtariDQNExperienceReplay("Pong/1", root=tmp_path, download=False, num_procs=2)
    asterix = AtariDQNExperienceReplay("Asterix/1", root=tmp_path, download=False)
    both = ReplayBufferEnsemble(pong, asterix, sample_from_all=True, batch_size=8)
    sample = both.sample()
    assert sample.shape == (2, 4)
    assert sample[0].get_non_tensor("metadata")["dataset_id"] == "Pong/1"
    assert sample[1].get_non_tensor("metadata")["dataset_id"] == "Asterix/1"
    assert (sample[1]["observation"][:, 0, 0] >= 100).all()


def test_download_fetches_every_log_file(tmp_path, monkeypatch):
    source = tmp_path / "source"
    write_logs(source, checkpoints=1, add_count=CAPACITY)
    fetched = []

    def fake_download(url, dest):
        fetched.append(url.rsplit("/", 1)[-1])
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((source / dest.name).read_bytes())
        return dest

    monkeypatch.setattr(_files, "download_url", fake_download)
    monkeypatch.setattr(AtariDQNExperienceReplay, "_max_runs", 1)
    data = AtariDQNExperienceReplay("Breakout/3", root=tmp_path / "root")
    assert sorted(fetched) == sorted(
        ["add_count_ckpt.0.gz"]
        + [f"%24store%24{f}_ckpt.0.gz" for f in ("observation", "action", "reward", "terminal")]
    )
    assert len(data) == CAPACITY


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="expected '<Game>/<run>'"):
        AtariDQNExperienceReplay("Pong", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no replay log in .*Pong/1/replay_logs"):
        AtariDQNExperienceReplay("Pong/1", root=tmp_path, download=False)
    logs = AtariDQNExperienceReplay.raw_dir("Pong/1", tmp_path)
    write_logs(logs, checkpoints=1)
    (logs / "$store$reward_ckpt.0.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"checkpoint 0 has no \$store\$reward_ckpt.0.gz"):
        AtariDQNExperienceReplay("Pong/1", root=tmp_path, download=False)
    (logs / "$store$reward_ckpt.0.gz").write_bytes(b"not gzip")
    with pytest.raises(RuntimeError, match="is not a gzip-compressed .npy array"):
        AtariDQNExperienceReplay("Pong/1", root=tmp_path, download=False)
