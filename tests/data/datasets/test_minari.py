"""MinariExperienceReplay on datasets written by minari itself (no network)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from tdrl.data import SliceSampler

minari = pytest.importorskip("minari")
gymnasium = pytest.importorskip("gymnasium")

from minari.data_collector import EpisodeBuffer  # noqa: E402

from tdrl.data.datasets import MinariExperienceReplay  # noqa: E402

LENGTHS = (5, 7, 4)


def episodes(dict_obs=False):
    out = []
    for number, length in enumerate(LENGTHS):
        frames = (np.arange((length + 1) * 4).reshape(length + 1, 4) + 100 * number) / 1000
        frames = frames.astype(np.float32)
        observations = (
            {"position": frames[:, :2], "velocity": frames[:, 2:], "mission": ["go"] * (length + 1)}
            if dict_obs
            else frames
        )
        out.append(
            EpisodeBuffer(
                observations=observations,
                actions=np.arange(length) % 2,
                rewards=np.ones(length),
                terminations=np.arange(length) == length - 1
                if number != 1
                else np.zeros(length, bool),
                truncations=np.zeros(length, bool),
                infos={"step": np.arange(length + 1)},
            )
        )
    return out


@pytest.fixture
def minari_home(tmp_path, monkeypatch):
    home = tmp_path / "minari_home"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(home))
    return home


def create(dataset_id, dict_obs=False):
    kwargs = {}
    if dict_obs:
        kwargs = {
            "observation_space": gymnasium.spaces.Dict(
                {
                    "position": gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                    "velocity": gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                    "mission": gymnasium.spaces.Text(16),
                }
            ),
            "action_space": gymnasium.spaces.Discrete(2),
        }
    else:
        kwargs = {"env": "CartPole-v1"}
    minari.create_dataset_from_buffers(
        dataset_id, episodes(dict_obs), algorithm_name="random", **kwargs
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_local_dataset_in_ted_layout(minari_home, tmp_path):
    create("cartpole/test-v0")
    data = MinariExperienceReplay(
        "cartpole/test-v0",
        batch_size=6,
        root=tmp_path / "root",
        load_from_local_minari=True,
        sampler=SliceSampler(slice_len=3),
    )
    assert len(data) == sum(LENGTHS)
    td = data[:]
    frames = torch.as_tensor(episodes()[0].observations)
    assert torch.equal(td["observation"][:5], frames[:-1])
    assert torch.equal(td["next", "observation"][:5], frames[1:])
    assert td["episode"].tolist() == [0] * 5 + [1] * 7 + [2] * 4
    ends = td["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist()
    assert ends == [4, 11, 15]
    # the middle episode ended without termination: truncated
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [11]
    assert td["info", "step"][:5].tolist() == [0, 1, 2, 3, 4]
    assert td["next", "info", "step"][:5].tolist() == [1, 2, 3, 4, 5]
    sample = data.sample()
    assert data.metadata["action_space"].is_in(sample["action"])
    assert data.metadata["observation_space"].is_in(sample["observation"])
    pairs = sample.reshape(2, 3)
    assert (pairs["episode"] == pairs["episode"][:, :1]).all()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_dict_observations_and_text(minari_home, tmp_path):
    create("grid/text-v0", dict_obs=True)
    data = MinariExperienceReplay(
        "grid/text-v0", batch_size=2, root=tmp_path, load_from_local_minari=True, split_trajs=True
    )
    td = data[:]
    assert td.shape == (3, 7)
    assert td["mask"].sum(-1).tolist() == list(LENGTHS)
    assert td["observation", "position"].shape == (3, 7, 2)
    assert data.metadata["text_values"]["observation/mission"] == ["go"]
    assert data.storage[:]["observation", "mission"].dtype == torch.int64  # stored as ids
    sample = data.sample()  # sampled as text
    assert sample.get(("observation", "mission")).tolist()[0][0] == "go"
    assert sample.get(("next", "observation", "mission")).tolist()[0][0] == "go"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_download_goes_to_root_raw(minari_home, tmp_path, monkeypatch):
    """A download lands in ``root/raw`` even when MINARI_DATASETS_PATH points elsewhere."""
    create("cartpole/remote-v0")
    source = minari_home
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(empty))
    calls = []

    def fake_download(dataset_id, force_download=False):
        import os

        calls.append(dataset_id)
        shutil.copytree(source, os.environ["MINARI_DATASETS_PATH"], dirs_exist_ok=True)

    monkeypatch.setattr(minari, "download_dataset", fake_download)
    data = MinariExperienceReplay("cartpole/remote-v0", batch_size=4, root=tmp_path / "root")
    assert calls == ["cartpole/remote-v0"]
    assert (tmp_path / "root" / "raw" / "cartpole" / "remote-v0").is_dir()
    assert data.sample().shape == (4,)
    assert not any(empty.iterdir())


def test_missing_dataset_is_named(minari_home, tmp_path):
    with pytest.raises(FileNotFoundError, match="'cartpole/none-v0' not found at .*minari_home"):
        MinariExperienceReplay(
            "cartpole/none-v0", batch_size=2, root=tmp_path, load_from_local_minari=True
        )
    with pytest.raises(FileNotFoundError, match="download=False"):
        MinariExperienceReplay("cartpole/none-v0", batch_size=2, root=tmp_path, download=False)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_reopening_does_not_need_minari_files(minari_home, tmp_path):
    create("cartpole/again-v0")
    first = MinariExperienceReplay(
        "cartpole/again-v0", batch_size=2, root=tmp_path, load_from_local_minari=True
    )
    shutil.rmtree(minari_home)
    again = MinariExperienceReplay(
        "cartpole/again-v0", batch_size=2, root=tmp_path, load_from_local_minari=True
    )
    assert torch.equal(again[:]["action"], first[:]["action"])
