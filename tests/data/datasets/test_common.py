"""The shared dataset machinery: building folders atomically, reopening, imports, listings."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import SliceSampler
from tdrl.data.datasets import BaseDatasetExperienceReplay, _files


def table(n=12):
    return TensorDict(
        {
            "observation": torch.arange(n, dtype=torch.float32),
            "episode": torch.arange(n) // 4,
            "next": {"done": (torch.arange(n) % 4 == 3).unsqueeze(-1)},
        },
        [n],
    )


def test_from_tensordict_and_reopening(tmp_path):
    data = BaseDatasetExperienceReplay.from_tensordict(
        table(),
        tmp_path / "set",
        {"source": "test"},
        batch_size=4,
        sampler=SliceSampler(slice_len=2),
    )
    assert len(data) == 12 and data.metadata == {"source": "test"}
    assert data.data_path == tmp_path / "set" and data.sample().shape == (4,)
    reopened, metadata = _files.load(tmp_path / "set")
    assert torch.equal(reopened["observation"], table()["observation"]) and metadata == {
        "source": "test"
    }
    data.delete()
    assert not (tmp_path / "set").exists()


def test_damaged_folders_are_named(tmp_path):
    BaseDatasetExperienceReplay.from_tensordict(table(), tmp_path / "set")
    (tmp_path / "set" / "observation.memmap").unlink()
    with pytest.raises(RuntimeError, match="set is incomplete or damaged"):
        _files.load(tmp_path / "set")
    with pytest.raises(FileNotFoundError, match="no dataset found at"):
        _files.load(tmp_path / "nothing")


def test_an_interrupted_build_keeps_the_previous_folder(tmp_path):
    BaseDatasetExperienceReplay.from_tensordict(table(), tmp_path / "set")
    with pytest.raises(ZeroDivisionError):
        with _files.building(tmp_path / "set") as tmp:
            (tmp / "half").write_text("written")
            raise ZeroDivisionError
    assert _files.load(tmp_path / "set")[0].shape == (12,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_refuses_to_replace_a_foreign_folder(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="neither empty nor a built dataset"):
        BaseDatasetExperienceReplay.from_tensordict(table(), tmp_path / "mine")


def test_hub_listing_errors_name_the_repository(monkeypatch):
    def refuse(repo_id, repo_type):
        raise OSError("offline")

    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub, "list_repo_files", refuse)
    listing = _files.HubDatasets("someone/data", ".h5")
    with pytest.raises(
        RuntimeError, match="cannot list the files of the Hugging Face dataset 'someone/data'"
    ):
        listing.__get__(None, BaseDatasetExperienceReplay)


def test_importing_tdrl_imports_no_data_backend():
    code = (
        "import sys, tdrl, tdrl.data, tdrl.data.datasets, tdrl.data.llm, tdrl.envs; "
        "names = ('h5py', 'minari', 'datasets', 'transformers', 'tokenizers', 'huggingface_hub', "
        "'sklearn', 'pandas', 'torchvision', 'gdown'); "
        "print(','.join(m for m in names if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
