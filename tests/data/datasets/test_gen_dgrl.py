"""GenDGRLExperienceReplay on small episode files in the gen_dgrl layout."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from tdrl.data.datasets import GenDGRLExperienceReplay, _files

DATASET = "bigfish-1M_E"


def write_episodes(folder, lengths=(4, 6)):
    folder.mkdir(parents=True, exist_ok=True)
    for number, length in enumerate(lengths):
        frames = np.zeros((length + 1, 3, 64, 64), np.uint8)
        frames[:, 0, 0, 0] = np.arange(length + 1) + 20 * number
        np.savez(
            folder / f"20240101_{number}_{length}_{number}_1.00.npz",
            observations=frames,
            actions=np.arange(length)[:, None] % 15,
            rewards=np.ones((length, 1)),
            dones=np.arange(length) == length - 1,
        )


def test_episodes_in_ted_layout(tmp_path):
    write_episodes(GenDGRLExperienceReplay.raw_dir(DATASET, tmp_path))
    data = GenDGRLExperienceReplay(DATASET, batch_size=4, root=tmp_path, download=False)
    assert len(data) == 10
    td = data[:]
    assert td["observation"].shape == (10, 3, 64, 64)
    assert td["observation"][:4, 0, 0, 0].tolist() == [0, 1, 2, 3]
    assert td["next", "observation"][:4, 0, 0, 0].tolist() == [1, 2, 3, 4]
    assert td["action"].dtype == torch.int64 and td["action"].shape == (10,)
    for key in ("done", "terminated", "truncated", ("next", "done"), ("next", "reward")):
        assert td[key].shape == (10, 1)
    assert td["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist() == [3, 9]
    assert td["episode"].tolist() == [0] * 4 + [1] * 6


def test_download_unpacks_the_archive(tmp_path, monkeypatch):
    source = tmp_path / "source" / "bigfish"
    write_episodes(source)
    archive = shutil.make_archive(str(tmp_path / "bigfish"), "gztar", source.parent)
    urls = []

    def fake_download(url, dest):
        urls.append(url)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(archive, dest.with_name(dest.name))
        return dest

    monkeypatch.setattr(_files, "download_url", fake_download)
    monkeypatch.setattr(
        GenDGRLExperienceReplay, "url", staticmethod(lambda dataset_id: "file:///bigfish.tar.gz")
    )
    data = GenDGRLExperienceReplay(DATASET, batch_size=2, root=tmp_path / "root")
    assert urls == ["file:///bigfish.tar.gz"]
    assert len(data) == 10


def test_addresses_and_errors(tmp_path):
    assert GenDGRLExperienceReplay.url("bigfish-1M_E").endswith("DGRL/1M/expert/bigfish.tar.xz")
    assert GenDGRLExperienceReplay.url("maze-level_1_S").endswith(
        "DGRL/100k_procgen_dataset_1_suboptimal.tar"
    )
    assert "starpilot-25M" in GenDGRLExperienceReplay.available_datasets
    with pytest.raises(ValueError, match="unknown gen_dgrl dataset 'pong-1M_E'"):
        GenDGRLExperienceReplay("pong-1M_E", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no episode file in .*bigfish-1M_E"):
        GenDGRLExperienceReplay(DATASET, root=tmp_path, download=False)
