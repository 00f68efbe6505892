"""VD4RLExperienceReplay on small npz episodes and HDF5 shards in the V-D4RL layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.data import ReplayBuffer
from tdrl.data.datasets import VD4RLExperienceReplay
from tdrl.envs import Compose, GrayScale, ToTensorImage

h5py = pytest.importorskip("h5py")

NPZ_ID = "main/walker_walk/random/64px"
H5_ID = "main/walker_walk/random/84px"


def write_npz(folder, episodes=2, frames=6, size=8):
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(episodes):
        image = np.full((frames, size, size, 3), 0, np.uint8)
        image[:, 0, 0, 0] = np.arange(frames) + 10 * number
        np.savez(
            folder / f"2023-{number}-{frames}.npz",
            image=image,
            action=np.arange(frames * 2, dtype=np.float32).reshape(frames, 2),
            reward=np.arange(frames, dtype=np.float32),
            discount=np.ones(frames, np.float32),
            is_first=np.arange(frames) == 0,
            is_last=np.arange(frames) == frames - 1,
            is_terminal=np.zeros(frames, bool),
        )


def write_h5(path, size=8):
    path.parent.mkdir(parents=True, exist_ok=True)
    step_type = np.array([0, 1, 1, 2, 0, 1, 2])
    observation = np.zeros((7, 3, size, size), np.uint8)
    observation[:, 0, 1, 2] = np.arange(7)
    discount = np.ones(7, np.float32)
    discount[6] = 0  # the second episode terminates
    with h5py.File(path, "w") as f:
        f["observation"] = observation
        f["action"] = np.arange(7, dtype=np.float32)[:, None].repeat(2, 1)
        f["reward"] = np.arange(7, dtype=np.float32)
        f["discount"] = discount
        f["step_type"] = step_type


def test_npz_episodes(tmp_path):
    write_npz(VD4RLExperienceReplay.raw_dir(NPZ_ID, tmp_path))
    data = VD4RLExperienceReplay(NPZ_ID, batch_size=4, root=tmp_path, download=False)
    assert len(data) == 10
    raw = data.storage[:]
    assert raw["pixels"].dtype == torch.uint8 and raw["pixels"].shape == (10, 8, 8, 3)
    assert raw["pixels"][:5, 0, 0, 0].tolist() == [0, 1, 2, 3, 4]
    assert raw["next", "pixels"][:5, 0, 0, 0].tolist() == [1, 2, 3, 4, 5]
    # the action and reward stored with frame t + 1 belong to the step from t
    assert raw["action"][:2, 0].tolist() == [2, 4]
    assert raw["next", "reward"][:2, 0].tolist() == [1, 2]
    assert ("state", "discount") in raw.keys(True) and ("next", "state", "discount") in raw.keys(
        True
    )
    assert raw["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [4, 9]
    sample = data.sample()
    assert sample["pixels"].shape == (4, 3, 8, 8) and sample["pixels"].dtype == torch.float32
    assert sample["pixels"].max() <= 1


def test_hdf5_shards_are_split_at_first_steps(tmp_path):
    write_h5(VD4RLExperienceReplay.raw_dir(H5_ID, tmp_path) / "shard.hdf5")
    data = VD4RLExperienceReplay(
        H5_ID, batch_size=2, root=tmp_path, download=False, image_size=(5, 3), totensor=True
    )
    raw = data.storage[:]
    assert len(data) == 5
    assert raw["pixels"].shape == (5, 8, 8, 3)  # channel-last, as the npz layout
    assert raw["pixels"][:, 1, 2, 0].tolist() == [0, 1, 2, 4, 5]
    assert raw["episode"].tolist() == [0, 0, 0, 1, 1]
    assert raw["next", "terminated"].squeeze(-1).tolist() == [False] * 4 + [True]
    assert raw["next", "truncated"].squeeze(-1).tolist() == [False, False, True, False, False]
    assert data.sample()["next", "pixels"].shape == (2, 3, 5, 3)


def test_preprocess_sees_stored_frames(tmp_path):
    write_npz(VD4RLExperienceReplay.raw_dir(NPZ_ID, tmp_path))
    data = VD4RLExperienceReplay(NPZ_ID, batch_size=4, root=tmp_path, download=False)
    keys = ["pixels", ("next", "pixels")]
    storage = data.preprocess(
        Compose(ToTensorImage(in_keys=keys), GrayScale(in_keys=keys)),
        num_frames=6,
        dest=tmp_path / "gray",
    )
    sample = ReplayBuffer(storage=storage, batch_size=3).sample()
    assert sample["next", "pixels"].shape == (3, 1, 8, 8)


def test_worker_processes_read_the_same_data(tmp_path):
    write_npz(VD4RLExperienceReplay.raw_dir(NPZ_ID, tmp_path / "a"), episodes=4)
    write_npz(VD4RLExperienceReplay.raw_dir(NPZ_ID, tmp_path / "b"), episodes=4)
    serial = VD4RLExperienceReplay(NPZ_ID, batch_size=2, root=tmp_path / "a", download=False)
    workers = VD4RLExperienceReplay(
        NPZ_ID, batch_size=2, root=tmp_path / "b", download=False, num_workers=2
    )
    assert torch.equal(serial.storage[:]["pixels"], workers.storage[:]["pixels"])


def test_bad_files_are_named(tmp_path):
    raw = VD4RLExperienceReplay.raw_dir(NPZ_ID, tmp_path)
    raw.mkdir(parents=True)
    np.savez(raw / "odd.npz", something=np.zeros(3))
    with pytest.raises(RuntimeError, match="odd.npz is not a V-D4RL episode"):
        VD4RLExperienceReplay(NPZ_ID, batch_size=2, root=tmp_path, download=False)
