"""OpenXExperienceReplay on a local ``datasets`` dataset of RLDS episodes (no hub access)."""

from __future__ import annotations

import numpy as np
import pytest

from tdrl.data.datasets import OpenXExperienceReplay

datasets = pytest.importorskip("datasets")

LENGTHS = (6, 9, 4, 12)
INSTRUCTIONS = ("pick the cube", "open the drawer")


def rlds_episode(number: int, length: int) -> dict:
    steps = []
    for t in range(length):
        steps.append(
            {
                "observation": {
                    "image": np.full((4, 4, 3), 10 * number + t, np.uint8).tolist(),
                    "state": [float(100 * number + t), 0.5],
                },
                "action": [float(t), -float(t), 1.0],
                "reward": float(t == length - 1),
                "discount": 1.0,
                "is_first": t == 0,
                "is_last": t == length - 1,
                "is_terminal": t == length - 1 and number % 2 == 0,
                "language_instruction": INSTRUCTIONS[number % 2],
            }
        )
    return {"data.pickle": {"steps": steps}}


@pytest.fixture
def hub(monkeypatch):
    """``datasets.load_dataset`` serving the rows of a local dataset for the OpenX repository."""
    rows = datasets.Dataset.from_list([rlds_episode(i, n) for i, n in enumerate(LENGTHS)])
    calls = []

    def load_dataset(path, name, *, split, streaming, cache_dir):
        calls.append((path, name, split, streaming))
        return rows.to_iterable_dataset() if streaming else rows

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_download_converts_episodes_to_ted(hub, tmp_path):
    data = OpenXExperienceReplay("cmu_stretch", batch_size=4, download=True, root=tmp_path)
    assert hub == [("jxu124/OpenX-Embodiment", "cmu_stretch", "train", False)]
    assert len(data) == sum(n - 1 for n in LENGTHS)
    stored = data.storage[:]
    assert stored["observation", "image"].shape == (len(data), 4, 4, 3)
    assert stored["observation", "state"][:5, 0].tolist() == [0, 1, 2, 3, 4]
    assert stored["next", "observation", "state"][:5, 0].tolist() == [1, 2, 3, 4, 5]
    assert stored["next", "reward"][:5].squeeze(-1).tolist() == [0, 0, 0, 0, 0]
    assert stored["episode"].tolist()[:6] == [0] * 5 + [1]
    ends = stored["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist()
    assert ends == [4, 12, 15, 26]
    # episode 1 and 3 end without termination: truncated
    assert stored["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [12, 26]
    sample = data.sample()
    assert sample.get("language_instruction").tolist()[0] in INSTRUCTIONS
    again = OpenXExperienceReplay("cmu_stretch", batch_size=4, download=True, root=tmp_path)
    assert len(hub) == 1 and len(again) == len(data)


def test_downloaded_slices(hub, tmp_path):
    data = OpenXExperienceReplay(
        "cmu_stretch", batch_size=12, download=True, root=tmp_path, num_slices=3
    )
    sample = data.sample().reshape(3, 4)
    assert (sample["episode"] == sample["episode"][:, :1]).all()
    assert (sample["next", "done"][:, -1]).all()
    padded = OpenXExperienceReplay(
        "cmu_stretch", batch_size=20, download=True, root=tmp_path, slice_len=10, pad=0.0
    )
    out = padded.sample().reshape(2, 10)
    assert out["mask"].shape == (2, 10) and not out["mask"].all()  # some episodes are short
    assert (out["observation", "state"][~out["mask"]] == 0).all()


def test_streaming_reads_episodes_from_the_stream(hub):
    data = OpenXExperienceReplay("cmu_stretch", batch_size=6, slice_len=3, shuffle=False)
    assert hub == []  # the stream opens at the first sample
    sample = data.sample()
    assert hub[0][3] is True
    assert sample.shape == (6,)
    pairs = sample.reshape(2, 3)
    assert (pairs["next", "done"][:, -1]).all()
    first_state = pairs["observation", "state"][:, 0, 0]
    assert first_state[0] < 100 <= first_state[1]  # one slice from each of the first episodes
    assert isinstance(sample.get("language_instruction").tolist()[0], str)
    whole = OpenXExperienceReplay("cmu_stretch", shuffle=False)
    episodes = list(whole)
    assert [episode.shape[0] for episode in episodes] == [n - 1 for n in LENGTHS]


def test_streaming_short_trajectories(hub):
    strict = OpenXExperienceReplay("cmu_stretch", batch_size=10, slice_len=10, shuffle=False)
    with pytest.raises(RuntimeError, match=r"trajectory length \(5\) is shorter than the slice"):
        strict.sample()
    padded = OpenXExperienceReplay(
        "cmu_stretch", batch_size=10, slice_len=10, shuffle=False, pad=-1.0
    )
    out = padded.sample()
    assert out["mask"].tolist() == [True] * 5 + [False] * 5
    assert (out["observation", "state"][5:] == -1).all()


def test_argument_errors():
    with pytest.raises(RuntimeError, match="replacement=True is not available with streamed"):
        OpenXExperienceReplay("cmu_stretch", streaming=True, replacement=True)
    with pytest.raises(RuntimeError, match="replacement=True needs shuffle=True"):
        OpenXExperienceReplay("cmu_stretch", download=True, shuffle=False, replacement=True)
    with pytest.raises(ValueError, match="at most one of num_slices and slice_len"):
        OpenXExperienceReplay("cmu_stretch", num_slices=2, slice_len=3)
