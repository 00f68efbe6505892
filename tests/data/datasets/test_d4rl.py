"""D4RLExperienceReplay on small HDF5 files written in D4RL's layout."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tdrl.data import (
    ImmutableDatasetWriter,
    LazyTensorStorage,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictReplayBuffer,
)
from tdrl.data.datasets import D4RLExperienceReplay, _files
from tdrl.data.datasets.d4rl import d4rl_url

h5py = pytest.importorskip("h5py")

DATASET = "hopper-medium-v2"
# 3 trajectories: steps 0-3 end by termination, 4-8 and 9-11 by timeout
TERMINALS = [3]
TIMEOUTS = [8, 11]
ROWS = 12


def write_d4rl(path, *, next_observations=False, extra=True, rows=ROWS):
    path.parent.mkdir(parents=True, exist_ok=True)
    obs = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    with h5py.File(path, "w") as f:
        f["observations"] = obs
        f["actions"] = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        f["rewards"] = np.arange(rows, dtype=np.float64)
        f["terminals"] = np.isin(np.arange(rows), TERMINALS)
        f["timeouts"] = np.isin(np.arange(rows), TIMEOUTS)
        if next_observations:
            f["next_observations"] = obs + 1000
        if extra:
            f["infos/qpos"] = np.arange(rows, dtype=np.float32)[:, None].repeat(4, 1)
            f["metadata/algorithm"] = "SAC"
            f["metadata/iteration"] = 7


@pytest.fixture
def root(tmp_path):
    write_d4rl(D4RLExperienceReplay.raw_file(DATASET, tmp_path))
    return tmp_path


def make(root, **kwargs):
    kwargs.setdefault("download", False)
    return D4RLExperienceReplay(
        DATASET, batch_size=kwargs.pop("batch_size", 4), root=root, **kwargs
    )


def test_ted_layout_with_reconstructed_next_observation(root):
    data = make(root)
    # the last step of each truncated trajectory has no recorded next observation: dropped
    assert len(data) == ROWS - 2
    td = data[:]
    assert td["observation"].dtype == torch.float32 and td["observation"].shape == (10, 2)
    assert td["action"].shape == (10, 3)
    assert td["next", "reward"].shape == (10, 1) and td["next", "reward"].dtype == torch.float32
    for name in ("done", "terminated", "truncated"):
        assert td[name].shape == (10, 1) and not td[name].any()
        assert td["next", name].dtype == torch.bool
    kept = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10]
    assert td["observation"][:, 0].tolist() == [2.0 * k for k in kept]
    # next observation is the following frame, zero at the terminal step, and the real
    # following frame for the step before a dropped one
    assert td["next", "observation"][:, 0].tolist() == [2, 4, 6, 0, 10, 12, 14, 16, 20, 22]
    assert td["next", "terminated"].squeeze(-1).tolist() == [False] * 3 + [True] + [False] * 6
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [7, 9]
    assert torch.equal(td["next", "done"], td["next", "terminated"] | td["next", "truncated"])
    assert td["episode"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    # per-step infos are shifted like observations; metadata is kept aside
    assert torch.equal(td["info", "qpos"][:, 0], torch.tensor(kept, dtype=torch.float32))
    assert td["next", "info", "qpos"][0, 0] == 1 and td["next", "info", "qpos"][3, 0] == 0
    assert data.metadata["algorithm"] == "SAC" and data.metadata["iteration"] == 7


def test_recorded_next_observations_keep_every_step(tmp_path):
    write_d4rl(D4RLExperienceReplay.raw_file(DATASET, tmp_path), next_observations=True)
    data = make(tmp_path)
    td = data[:]
    assert len(data) == ROWS
    assert torch.equal(td["next", "observation"], td["observation"] + 1000)
    assert td["episode"].tolist() == [0] * 4 + [1] * 5 + [2] * 3


def test_terminate_on_end_keeps_truncated_ends_with_a_warning(root):
    with pytest.warns(UserWarning, match="use_truncated_as_done=True with terminate_on_end"):
        data = make(root, terminate_on_end=True)
    td = data[:]
    assert len(data) == ROWS
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == TIMEOUTS
    assert td["next", "observation"][TIMEOUTS].abs().sum() == 0


def test_use_truncated_as_done_false_marks_terminations_only(root):
    td = make(root, use_truncated_as_done=False)[:]
    assert torch.equal(td["next", "done"], td["next", "terminated"])
    assert td["next", "truncated"].any()


def test_slice_sampler_stays_within_trajectories(root):
    data = make(root, sampler=SliceSampler(slice_len=2), batch_size=8)
    for _ in range(10):
        sample = data.sample().reshape(4, 2)
        assert (sample["episode"][:, 0] == sample["episode"][:, 1]).all()


def test_split_trajs_gives_one_row_per_trajectory(root):
    data = make(root, split_trajs=True, batch_size=2)
    td = data[:]
    assert td.shape == (3, 4)
    assert td["mask"].sum(-1).tolist() == [4, 4, 2]
    assert data.sample().shape == (2, 4)


def test_iteration_without_replacement_visits_every_step(root):
    data = make(root, sampler=SamplerWithoutReplacement(drop_last=True), batch_size=3)
    seen = torch.cat([batch["index"] for batch in data])
    assert len(seen) == 9 and len(set(seen.tolist())) == 9


def test_second_opening_reads_the_built_folder(root):
    first = make(root)
    D4RLExperienceReplay.raw_file(DATASET, root).unlink()
    again = make(root)
    assert again.data_path == first.data_path == root / DATASET
    assert torch.equal(again[:]["observation"], first[:]["observation"])


def test_options_of_a_built_folder_must_match(root):
    make(root)
    with pytest.raises(ValueError, match="built with .*split_trajs': False.*download='force'"):
        make(root, split_trajs=True)


def test_force_downloads_again_and_rebuilds(root, monkeypatch):
    make(root)
    fresh = root / "fresh.hdf5"
    write_d4rl(fresh, next_observations=True)
    calls = []

    def fake_download(url, dest):
        calls.append(url)
        shutil.copy(fresh, dest)
        return dest

    monkeypatch.setattr(_files, "download_url", fake_download)
    data = make(root, download="force")
    assert calls == [d4rl_url(DATASET)]
    assert len(data) == ROWS  # the new file records next observations


def test_missing_and_damaged_files_are_named(tmp_path, root):
    with pytest.raises(FileNotFoundError, match="no raw file at .*hopper-medium-v2.hdf5"):
        make(tmp_path / "empty")
    make(root)
    (root / DATASET / _files.MARKER).unlink()
    with pytest.raises(RuntimeError, match=f"{DATASET} is incomplete or damaged.*marker"):
        make(root)
    bad = tmp_path / "bad"
    raw = D4RLExperienceReplay.raw_file(DATASET, bad)
    raw.parent.mkdir(parents=True)
    raw.write_bytes(b"not hdf5")
    with pytest.raises(RuntimeError, match="bad/raw/hopper-medium-v2.hdf5 is not a readable HDF5"):
        make(bad)
    odd = tmp_path / "odd"
    raw = D4RLExperienceReplay.raw_file(DATASET, odd)
    raw.parent.mkdir(parents=True)
    with h5py.File(raw, "w") as f:
        f["observations"] = np.zeros((3, 2))
    with pytest.raises(RuntimeError, match=r"missing \['actions', 'rewards', 'terminals'\]"):
        make(odd)


def test_a_failed_build_leaves_no_folder(tmp_path):
    raw = D4RLExperienceReplay.raw_file(DATASET, tmp_path)
    raw.parent.mkdir(parents=True)
    with h5py.File(raw, "w") as f:
        f["observations"] = np.zeros((3, 2))
    with pytest.raises(RuntimeError):
        make(tmp_path)
    assert not (tmp_path / DATASET).exists()
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]


def test_writes_are_refused_and_specs_describe_a_step(root):
    data = make(root)
    with pytest.raises(RuntimeError, match="immutable"):
        data.extend(data[:2])
    specs = data.specs
    assert specs["observation"].shape == (2,) and specs["next", "reward"].shape == (1,)


def test_checkpoint_round_trip(root, tmp_path):
    data = make(root)
    data.dumps(tmp_path / "ckpt")
    restored = TensorDictReplayBuffer(
        storage=LazyTensorStorage(len(data)), writer=ImmutableDatasetWriter()
    )
    restored.loads(tmp_path / "ckpt")
    assert torch.equal(restored[:]["next", "observation"], data[:]["next", "observation"])


def test_preprocess_to_a_new_folder_leaves_the_dataset(root, tmp_path):
    data = make(root)

    def add_norm(td):
        return td.set("obs_norm", td.get("observation").norm(dim=-1))

    storage = data.preprocess(add_norm, num_workers=1, num_frames=6, dest=tmp_path / "pp")
    assert len(storage) == 6
    assert torch.allclose(storage[:]["obs_norm"], data[:6]["observation"].norm(dim=-1))
    assert "obs_norm" not in data.sample().keys()


def test_preprocess_in_place_persists(root):
    data = make(root)
    data.preprocess(lambda td: td.set("twice", td.get("action") * 2), num_chunks=2)
    assert "twice" in data.sample().keys()
    assert "twice" in make(root).sample().keys()


def test_preprocess_checks_its_arguments(root, tmp_path):
    data = make(root)
    with pytest.raises(ValueError, match="keep the chunk size"):
        data.preprocess(lambda td: td[:0], num_chunks=2, dest=tmp_path / "a")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "precious.txt").write_text("keep me")
    with pytest.raises(ValueError, match="neither empty nor a built dataset"):
        data.preprocess(lambda td: td, dest=occupied)
    assert (occupied / "precious.txt").exists()
    with pytest.raises(ValueError, match="num_frames must be a positive integer"):
        data.preprocess(lambda td: td, num_frames=0, dest=tmp_path / "b")


def test_download_addresses():
    assert d4rl_url("walker2d-medium-replay-v2").endswith(
        "gym_mujoco_v2/walker2d_medium_replay-v2.hdf5"
    )
    assert d4rl_url("pen-human-v1").endswith("hand_dapg_v1/pen-human-v1.hdf5")
    assert d4rl_url("maze2d-umaze-dense-v1").endswith("maze2d/maze2d-umaze-dense-v1.hdf5")
    assert d4rl_url("antmaze-medium-play-v2").endswith(
        "ant_maze_v2/Ant_maze_big-maze_noisy_multistart_True_multigoal_False_sparse_fixed.hdf5"
    )
    assert d4rl_url("antmaze-umaze-v0").endswith(
        "Ant_maze_u-maze_noisy_multistart_False_multigoal_False_sparse.hdf5"
    )
    assert d4rl_url("kitchen-complete-v0").endswith(
        "mini_kitchen_microwave_kettle_light_slider-v0.hdf5"
    )
    with pytest.raises(ValueError, match="no direct download address .*'carla-town-v0'"):
        d4rl_url("carla-town-v0")


def test_source_arguments(tmp_path):
    with pytest.raises(ValueError, match="from_env=True.*direct_download=True"):
        D4RLExperienceReplay(DATASET, 2, from_env=True, direct_download=True, root=tmp_path)
    with pytest.raises(ImportError, match="pip install d4rl|pip install gym"):
        D4RLExperienceReplay(DATASET, 2, from_env=True, root=tmp_path, download=False)
    with pytest.raises(ValueError, match="download must be True, False or 'force'"):
        D4RLExperienceReplay(DATASET, 2, root=tmp_path, download="yes")


def test_contiguous_arrays_are_mapped_in_place_not_copied(tmp_path, monkeypatch):
    raw = D4RLExperienceReplay.raw_file(DATASET, tmp_path)
    write_d4rl(raw, next_observations=True)
    data = make(tmp_path)
    linked = tmp_path / DATASET / "source.hdf5"
    assert linked.stat().st_ino == raw.stat().st_ino  # a hard link: no byte was copied
    record = json.loads((tmp_path / DATASET / _files.MARKER).read_text())
    mapped = {tuple(entry["key"]) for entry in record["external"]}
    assert mapped == {("observation",), ("next", "observation"), ("action",), ("info", "qpos")}
    expected = torch.arange(ROWS * 2, dtype=torch.float32).reshape(ROWS, 2)
    assert torch.equal(data[:]["observation"], expected)
    raw.unlink()
    assert torch.equal(make(tmp_path)[:]["next", "observation"], expected + 1000)
    # where the file cannot be linked (another file system), the bytes are copied
    other = tmp_path / "other"
    write_d4rl(D4RLExperienceReplay.raw_file(DATASET, other), next_observations=True)
    monkeypatch.setattr(_files, "link_into", lambda folder, source, name: None)
    copied = make(other)
    assert not (other / DATASET / "source.hdf5").exists()
    assert torch.equal(copied[:]["observation"], expected)
