"""OpenMLExperienceReplay with a small stand-in for scikit-learn's fetch_openml."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from tdrl.data.datasets import OpenMLExperienceReplay
from tdrl.envs import Compose, DoubleToFloat, RenameTransform

pandas = pytest.importorskip("pandas")


@pytest.fixture
def fake_sklearn(monkeypatch):
    """``sklearn.datasets.fetch_openml`` returning a frame (documented as_frame=True result)."""
    calls = []

    def fetch_openml(name, *, version, as_frame, data_home):
        calls.append((name, version, as_frame, data_home))
        rows = 50
        frame = pandas.DataFrame(
            {
                "size": np.linspace(0, 1, rows),
                "colour": pandas.Categorical(["red", "green", "blue", "red", "green"] * 10),
                "weight": np.where(np.arange(rows) == 3, np.nan, np.arange(rows, dtype=float)),
            }
        )
        target = pandas.Series(pandas.Categorical(["e", "p"] * 25))
        return types.SimpleNamespace(data=frame, target=target)

    module = types.ModuleType("sklearn.datasets")
    module.fetch_openml = fetch_openml
    monkeypatch.setitem(sys.modules, "sklearn", types.ModuleType("sklearn"))
    monkeypatch.setitem(sys.modules, "sklearn.datasets", module)
    return calls


@pytest.mark.parametrize("name,columns", [("mushroom_num", 3), ("mushroom_onehot", 5)])
def test_table_encoding(fake_sklearn, tmp_path, name, columns):
    data = OpenMLExperienceReplay(name, batch_size=16, root=tmp_path)
    assert fake_sklearn == [("mushroom", 1, True, str(tmp_path / "raw"))]
    assert len(data) == 49  # the row with a missing value is dropped
    td = data[:]
    assert td["X"].dtype == torch.float64 and td["X"].shape == (49, columns)
    assert td["y"].dtype == torch.int64 and set(td["y"].tolist()) == {0, 1}
    assert data.metadata["classes"] == 2


def test_iteration_runs_out(fake_sklearn, tmp_path):
    data = OpenMLExperienceReplay(
        "shuttle",
        batch_size=16,
        root=tmp_path,
        transform=Compose(RenameTransform(["X"], ["observation"]), DoubleToFloat(["observation"])),
    )
    batches = list(data)
    assert [len(batch) for batch in batches] == [16, 16, 16, 1]
    assert batches[0]["observation"].dtype == torch.float32
    OpenMLExperienceReplay("shuttle", batch_size=16, root=tmp_path)
    assert len(fake_sklearn) == 1  # the second opening reads the stored table


def test_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown OpenML dataset 'iris'"):
        OpenMLExperienceReplay("iris", batch_size=2, root=tmp_path)
    with pytest.raises(FileNotFoundError, match="download=False"):
        OpenMLExperienceReplay("magic", batch_size=2, root=tmp_path, download=False)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="pip install scikit-learn"):
        OpenMLExperienceReplay("magic", batch_size=2, root=tmp_path)
