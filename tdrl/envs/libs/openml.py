"""OpenMLEnv: a contextual bandit over an OpenML classification dataset.

Each episode is one decision: the observation is a row of the dataset's features, the action
a class, and the reward 1 when the class is the row's label (0 otherwise). The dataset is
downloaded once with scikit-learn's ``fetch_openml`` (scikit-learn 1.x and pandas; both are
imported only then), encoded as numbers (categorical features as codes, or one-hot for the
``*_onehot`` variants) and cached as memory-mapped tensors under ``root``; later runs read the
cache and need neither library nor network.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Categorical, Composite, Unbounded
from tdrl.envs.common import EnvBase

__all__ = ["OPENML_DATASETS", "OpenMLEnv", "load_openml_dataset"]

#: The datasets by name: OpenML name, version, and whether categorical features are one-hot.
OPENML_DATASETS: dict[str, tuple[str, int, bool]] = {
    "adult_num": ("adult", 2, False),
    "adult_onehot": ("adult", 2, True),
    "mushroom_num": ("mushroom", 1, False),
    "mushroom_onehot": ("mushroom", 1, True),
    "covertype": ("covertype", 3, False),
    "shuttle": ("shuttle", 1, False),
    "magic": ("MagicTelescope", 1, False),
}
MISSING_SKLEARN = (
    "OpenMLEnv downloads its datasets with scikit-learn and pandas (pip install scikit-learn "
    "pandas); the cache at {path} does not exist yet"
)


def _default_root() -> Path:
    return Path(os.environ.get("TDRL_DATA_ROOT", Path.home() / ".cache" / "tdrl")) / "openml"


def _encode(frame: Any, target: Any, one_hot: bool) -> TensorDict:
    """Numeric features ``X`` (float32) and class codes ``y`` (int64) of a pandas table."""
    import pandas as pd

    categorical = [
        name
        for name in frame.columns
        if isinstance(frame[name].dtype, pd.CategoricalDtype) or frame[name].dtype == object
    ]
    if one_hot and categorical:
        frame = pd.get_dummies(frame, columns=categorical, dtype=np.float32)
    else:
        frame = frame.copy()
        for name in categorical:
            frame[name] = frame[name].astype("category").cat.codes
    features = frame.astype(np.float32).fillna(0.0).to_numpy()
    labels = pd.Series(target).astype("category").cat.codes.to_numpy().astype(np.int64)
    return TensorDict(
        {"X": torch.from_numpy(np.ascontiguousarray(features)), "y": torch.from_numpy(labels)},
        batch_size=[len(labels)],
    )


def load_openml_dataset(name: str, root: str | os.PathLike | None = None) -> TensorDictBase:
    """The dataset ``name`` (see :data:`OPENML_DATASETS`) as memory-mapped ``X`` and ``y``.

    Reads the cache ``root / name`` when it exists; otherwise downloads the dataset from
    OpenML, encodes it and writes the cache first (to a temporary folder renamed into place,
    so an interrupted download leaves no partial cache).

    Args:
        name: the dataset name.
        root: the cache folder (default ``$TDRL_DATA_ROOT/openml`` or ``~/.cache/tdrl/openml``).
    """
    if name not in OPENML_DATASETS:
        raise ValueError(f"OpenML dataset: expected one of {sorted(OPENML_DATASETS)}, got {name!r}")
    path = Path(root) if root is not None else _default_root()
    path = path / name
    if path.exists():
        return TensorDict.load_memmap(path)
    try:
        from sklearn.datasets import fetch_openml
    except ImportError as err:
        raise ImportError(MISSING_SKLEARN.format(path=path)) from err
    openml_name, version, one_hot = OPENML_DATASETS[name]
    bunch = fetch_openml(openml_name, version=version, as_frame=True, parser="auto")
    data = _encode(bunch.data, bunch.target, one_hot)
    partial = path.with_name(f".{name}.partial")
    data.memmap(partial)
    partial.rename(path)
    return TensorDict.load_memmap(path)


class OpenMLEnv(EnvBase):
    """A one-step contextual bandit over an OpenML dataset.

    A reset draws rows uniformly (with the env's generator, seeded by :meth:`set_seed`) and
    shows their features as ``"observation"``; a step takes a class as ``"action"`` and
    returns a ``"reward"`` of 1 when it is the row's label, and ends the episode. The labels
    stay in the env.

    Args:
        dataset_name: one of :data:`OPENML_DATASETS` (e.g. ``"adult_num"``).

    Keyword Args:
        batch_size: rows drawn per reset (the env's batch size).
        root: the dataset cache folder (see :func:`load_openml_dataset`).
        device: the device of the data.

    Examples:
        >>> env = OpenMLEnv("adult_num", batch_size=[4])  # doctest: +SKIP
        >>> env.rand_step(env.reset())["next", "reward"].shape  # doctest: +SKIP
        torch.Size([4, 1])
    """

    available_envs = sorted(OPENML_DATASETS)

    def __init__(
        self,
        dataset_name: str,
        *,
        batch_size: Any = None,
        root: str | os.PathLike | None = None,
        device: Any = None,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size)
        self.dataset_name = dataset_name
        data = load_openml_dataset(dataset_name, root)
        self._features = data["X"].to(torch.float32)
        self._labels = data["y"].to(torch.int64)
        if self._labels.numel() == 0:
            raise ValueError(f"OpenMLEnv {dataset_name!r}: the dataset has no rows")
        self.num_classes = int(self._labels.max()) + 1
        batch = self.batch_size
        self.observation_spec = Composite(
            observation=Unbounded((*batch, self._features.shape[-1]), dtype=torch.float32),
            shape=batch,
        )
        self.action_spec = Categorical(self.num_classes, batch, dtype=torch.int64)
        self.reward_spec = Unbounded((*batch, 1), dtype=torch.float32)
        self._generator = torch.Generator()
        self._targets = torch.zeros(batch, dtype=torch.int64)
        self._context = torch.zeros((*batch, self._features.shape[-1]), dtype=torch.float32)
        if device is not None:
            self.to(device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        batch = self.batch_size
        rows = torch.randint(len(self._labels), (math.prod(batch),), generator=self._generator)
        targets = self._labels[rows].reshape(batch)
        context = self._features[rows].reshape(*batch, -1)
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        if mask is not None:
            # only the masked elements draw a new row; the others keep theirs
            keep = ~mask.to("cpu").reshape(batch)
            targets = torch.where(keep, self._targets, targets)
            context = torch.where(keep.unsqueeze(-1), self._context, context)
        self._targets, self._context = targets, context
        done = torch.zeros((*batch, 1), dtype=torch.bool)
        return TensorDict(
            {"observation": context.clone(), "done": done, "terminated": done.clone()},
            batch_size=batch,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = self.batch_size
        action = tensordict.get("action").reshape(batch).to("cpu")
        reward = (action == self._targets).to(torch.float32).unsqueeze(-1)
        done = torch.ones((*batch, 1), dtype=torch.bool)
        return TensorDict(
            {
                "observation": self._context.clone(),
                "reward": reward,
                "done": done,
                "terminated": done.clone(),
            },
            batch_size=batch,
            device=self.device,
        )

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._generator.manual_seed(int(seed))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset_name={self.dataset_name!r}, "
            f"rows={len(self._labels)}, classes={self.num_classes}, batch_size={self.batch_size})"
        )
