""":class:`OpenMLExperienceReplay`: OpenML classification tables as contextual-bandit data.

Tables are fetched with scikit-learn's ``fetch_openml`` (scikit-learn >= 1.2, pandas
frames): features become ``"X"`` and the class label ``"y"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.datasets import _files
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.replay_buffers import Sampler, SamplerWithoutReplacement, Writer

__all__ = ["OpenMLExperienceReplay"]

# dataset name -> (OpenML name, version, categorical features encoding)
_TABLES = {
    "adult_num": ("adult", 2, "codes"),
    "adult_onehot": ("adult", 2, "onehot"),
    "mushroom_num": ("mushroom", 1, "codes"),
    "mushroom_onehot": ("mushroom", 1, "onehot"),
    "covertype": ("covertype", 3, "codes"),
    "shuttle": ("shuttle", 1, "codes"),
    "magic": ("MagicTelescope", 1, "codes"),
}


def _encode(features: Any, encoding: str) -> np.ndarray:
    """A float64 matrix from a feature frame: categories as codes or one-hot columns."""
    import pandas

    categorical = [
        name
        for name in features.columns
        if isinstance(features[name].dtype, pandas.CategoricalDtype)
        or features[name].dtype == object
    ]
    if encoding == "onehot" and categorical:
        features = pandas.get_dummies(features, columns=categorical, dtype=np.float64)
    else:
        features = features.copy()
        for name in categorical:
            features[name] = features[name].astype("category").cat.codes
    return features.to_numpy(dtype=np.float64)


class OpenMLExperienceReplay(BaseDatasetExperienceReplay):
    """An OpenML classification table as a read-only, memory-mapped replay buffer.

    Each item is a row of the table: ``"X"`` (float64 features) and ``"y"`` (the class, an
    int64 index) -- the data of a contextual bandit whose context is ``"X"`` and whose best
    arm is ``"y"``. The table is fetched once with scikit-learn (``pip install scikit-learn
    pandas``) into ``root/raw`` and stored under ``root/<name>``. Rows with missing values
    are dropped; categorical features become integer codes (``*_num``, ``covertype``,
    ``shuttle``, ``magic``) or one-hot columns (``*_onehot``).

    By default the buffer is iterated without replacement, so ``for batch in dataset``
    visits every row once.

    Args:
        name: one of ``"adult_num"``, ``"adult_onehot"``, ``"mushroom_num"``,
            ``"mushroom_onehot"``, ``"covertype"``, ``"shuttle"``, ``"magic"``.
        batch_size: the default batch size of :meth:`sample`.
        root: where datasets are kept (default ``~/.cache/tdrl/openml``).
        download: True (fetch when missing), False (never fetch) or ``"force"``.
        sampler: defaults to ``SamplerWithoutReplacement()``.
        writer, collate_fn, pin_memory, prefetch, transform: as in
            :class:`~tdrl.data.ReplayBuffer`.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.datasets import OpenMLExperienceReplay
        >>> table = TensorDict({"X": torch.randn(10, 3, dtype=torch.float64),
        ...     "y": torch.arange(10) % 2}, [10])
        >>> data = OpenMLExperienceReplay.from_tensordict(table, tempfile.mkdtemp(),
        ...     batch_size=4)
        >>> [batch.shape[0] for batch in data]
        [4, 4, 2]
    """

    available_datasets = list(_TABLES)

    def __init__(
        self,
        name: str,
        batch_size: int,
        root: str | os.PathLike | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        download: bool | str = True,
    ) -> None:
        if name not in _TABLES:
            raise ValueError(f"unknown OpenML dataset {name!r}: expected one of {list(_TABLES)}")
        self.dataset_name = name
        root = Path(root) if root is not None else _files.default_root("openml")
        self.__dict__["_root"] = root

        def build(folder: Path, allow_download: bool) -> tuple[TensorDictBase, dict]:
            if not allow_download:
                raise FileNotFoundError(
                    f"OpenML dataset {name!r}: no built dataset at {folder.parent / name} "
                    "(download=False); pass download=True"
                )
            table = self._get_data(name, data_home=root / "raw")
            data = table.memmap_(str(folder))
            return data, {"dataset_id": name, "classes": int(table["y"].max()) + 1}

        path = root / name
        data, metadata = self._load_or_build(path, download, {}, build)
        self._open_data(
            data,
            path,
            metadata,
            {
                "sampler": sampler if sampler is not None else SamplerWithoutReplacement(),
                "writer": writer,
                "collate_fn": collate_fn,
                "pin_memory": pin_memory,
                "prefetch": prefetch,
                "transform": transform,
                "batch_size": batch_size,
            },
        )

    @classmethod
    def from_tensordict(
        cls, data: TensorDictBase, path: str | os.PathLike, metadata: dict | None = None, **kwargs
    ) -> OpenMLExperienceReplay:
        """Open a table held in ``data`` (``"X"`` and ``"y"``) as a dataset stored at ``path``."""
        kwargs.setdefault("sampler", SamplerWithoutReplacement())
        return super().from_tensordict(data, path, metadata, **kwargs)

    @classmethod
    def _get_data(cls, dataset_name: str, data_home: Path | None = None) -> TensorDict:
        """Fetch and encode a table: ``{"X": float64 [rows, features], "y": int64 [rows]}``."""
        datasets = _files.require("sklearn.datasets", "scikit-learn", "OpenMLExperienceReplay")
        openml_name, version, encoding = _TABLES[dataset_name]
        try:
            bunch = datasets.fetch_openml(
                openml_name,
                version=version,
                as_frame=True,
                data_home=None if data_home is None else str(data_home),
            )
        except Exception as err:  # network and parsing errors of scikit-learn
            raise RuntimeError(
                f"OpenML dataset {dataset_name!r}: fetch_openml({openml_name!r}, version={version}) "
                f"failed ({type(err).__name__}: {err})"
            ) from err
        frame = bunch.data.copy()
        target = bunch.target
        keep = ~(frame.isna().any(axis=1).to_numpy() | target.isna().to_numpy())
        frame, target = frame[keep], target[keep]
        features = _encode(frame, encoding)
        labels = target.astype("category").cat.codes.to_numpy(dtype=np.int64)
        rows = features.shape[0]
        return TensorDict(
            {"X": torch.from_numpy(features), "y": torch.from_numpy(labels)}, batch_size=[rows]
        )
