"""OpenMLEnv and its loader on small local datasets (no network)."""

from __future__ import annotations

import sys

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tdrl.envs.libs.openml import OpenMLEnv, load_openml_dataset
from tests.envs.conformance import EnvConformance


def write_dataset(root, name="shuttle", rows=40, features=5, classes=3):
    generator = torch.Generator().manual_seed(0)
    data = TensorDict(
        {
            "X": torch.randn(rows, features, generator=generator),
            "y": torch.arange(rows) % classes,
        },
        batch_size=[rows],
    )
    data.memmap(root / name)
    return data


class TestOpenMLConformance(EnvConformance):
    @pytest.fixture(autouse=True)
    def _dataset(self, tmp_path):
        write_dataset(tmp_path)
        self.root = tmp_path

    def make_env(self):
        return OpenMLEnv("shuttle", batch_size=[4], root=self.root)


@pytest.mark.parametrize("batch_size", [(), (2,), (2, 3)])
def test_contexts_rewards_and_episode_ends(tmp_path, batch_size):
    data = write_dataset(tmp_path)
    env = OpenMLEnv("shuttle", batch_size=batch_size, root=tmp_path)
    assert env.num_classes == 3 and env.action_spec.n == 3
    check_env_specs(env)
    start = env.reset()
    assert start.shape == batch_size and "index" not in start.keys()
    # find each context's label in the dataset and play it: reward 1, episode over
    flat = start["observation"].reshape(-1, 5)
    labels = torch.stack([data["y"][(data["X"] == row).all(-1)][0] for row in flat])
    out = env.step(start.set("action", labels.reshape(batch_size)))["next"]
    assert (out["reward"] == 1).all() and out["done"].all() and out["terminated"].all()
    wrong = env.step(start.set("action", ((labels + 1) % 3).reshape(batch_size)))["next"]
    assert (wrong["reward"] == 0).all()


def test_seeding_repeats_the_draws(tmp_path):
    write_dataset(tmp_path)
    env = OpenMLEnv("shuttle", batch_size=[6], root=tmp_path)
    env.set_seed(4)
    first = env.reset()["observation"]
    env.set_seed(4)
    assert torch.equal(first, env.reset()["observation"])
    env.set_seed(5)
    assert not torch.equal(first, env.reset()["observation"])


def test_partial_reset_keeps_the_other_contexts_and_labels(tmp_path):
    data = write_dataset(tmp_path)
    env = OpenMLEnv("shuttle", batch_size=[3], root=tmp_path)
    start = env.reset()
    before = start["observation"].clone()
    start.set("_reset", torch.tensor([[True], [False], [False]]))
    after = env.reset(start)
    assert torch.equal(after["observation"][1:], before[1:])
    labels = torch.stack([data["y"][(data["X"] == row).all(-1)][0] for row in after["observation"]])
    out = env.step(after.set("action", labels))["next"]
    assert (out["reward"] == 1).all()


def test_loader_downloads_encodes_and_caches(tmp_path, monkeypatch):
    pd = pytest.importorskip("pandas")
    datasets = pytest.importorskip("sklearn.datasets")
    from sklearn.utils import Bunch

    calls = []

    def fake_fetch_openml(name, *, version, as_frame, parser):
        calls.append((name, version))
        frame = pd.DataFrame(
            {
                "age": [30.0, 41.0, 25.0, 60.0],
                "work": pd.Categorical(["a", "b", "a", "c"]),
                "hours": [40, 20, 35, 10],
            }
        )
        target = pd.Series(pd.Categorical(["<=50K", ">50K", "<=50K", ">50K"]))
        return Bunch(data=frame, target=target)

    monkeypatch.setattr(datasets, "fetch_openml", fake_fetch_openml)
    onehot = load_openml_dataset("adult_onehot", root=tmp_path)
    assert calls == [("adult", 2)]
    assert onehot["X"].shape == (4, 5)  # age, hours and three one-hot columns
    assert onehot["X"].dtype == torch.float32 and onehot["y"].tolist() == [0, 1, 0, 1]
    numeric = load_openml_dataset("adult_num", root=tmp_path)
    assert numeric["X"].shape == (4, 3)
    assert numeric["X"][:, 1].tolist() == [0.0, 1.0, 0.0, 2.0]  # category codes
    load_openml_dataset("adult_num", root=tmp_path)  # read back from the cache
    assert len(calls) == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["adult_num", "adult_onehot"]
    env = OpenMLEnv("adult_onehot", root=tmp_path)
    assert env.observation_spec["observation"].shape == (5,) and env.num_classes == 2


def test_errors_name_the_dataset_and_the_packages(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="expected one of"):
        OpenMLEnv("iris", root=tmp_path)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="pip install scikit-learn pandas"):
        OpenMLEnv("magic", root=tmp_path)


def test_batched_envs_and_a_collector(tmp_path):
    write_dataset(tmp_path)

    def make():
        return OpenMLEnv("shuttle", batch_size=[2], root=tmp_path)

    check_env_specs(SerialEnv(2, make))
    with ParallelEnv(2, make) as parallel:
        check_env_specs(parallel)
    collector = SyncDataCollector(make(), frames_per_batch=4, total_frames=8)
    batches = list(collector)
    collector.shutdown()
    assert [batch.shape for batch in batches] == [torch.Size([2, 2])] * 2
    assert all(batch["next", "done"].all() for batch in batches)
