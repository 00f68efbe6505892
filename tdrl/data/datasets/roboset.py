""":class:`RobosetExperienceReplay`: the RoboSet datasets (RoboHive HDF5 traces), in the TED layout.

Follows the RoboHive logger's trace schema (robohive 0.7): an HDF5 file holds one group per
rollout (``Trial0``, ``Trial1``, ...), each with time-aligned datasets ``observations``,
``actions``, ``rewards``, ``done`` and a group ``env_infos`` (nested). A rollout of horizon
``h`` has ``h + 1`` rows: row ``t`` holds the state at time ``t``, the action taken from it
(NaN on the last row), and the reward and done flag of that state.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.data.datasets import _files
from tdrl.data.datasets._ted import DONE_NAMES, episode_ids, torch_dtype
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.replay_buffers import Sampler, Writer

__all__ = ["RobosetExperienceReplay"]

_REPO = "jdvakil/RoboSet_Sim"
_NAMES = {"observations": "observation", "actions": "action", "env_infos": "info"}
_NEXT_ONLY = ("rewards", "done")


def _datasets(group: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    out: dict[tuple, Any] = {}
    for name, item in group.items():
        path = (*prefix, name)
        if hasattr(item, "items"):
            out.update(_datasets(item, path))
        else:
            out[path] = item
    return out


def _trials(handle: Any) -> list[Any]:
    """The rollout groups of a trace file, in rollout order (``Trial2`` before ``Trial10``)."""

    def order(name: str) -> tuple:
        digits = "".join(ch for ch in name if ch.isdigit())
        return (int(digits) if digits else -1, name)

    return [
        handle[name]
        for name in sorted(handle.keys(), key=order)
        if hasattr(handle[name], "items") and "observations" in handle[name]
    ]


class RobosetExperienceReplay(BaseDatasetExperienceReplay):
    """A RoboSet dataset as a read-only, memory-mapped replay buffer.

    The HDF5 traces of ``dataset_id`` (a folder of the ``jdvakil/RoboSet_Sim`` Hugging Face
    dataset, e.g. ``"FK1-v4(expert)/FK1_MicroOpenRandom_v2d-v4"``) are downloaded once to
    ``root/raw/<dataset_id>`` (``.h5`` files placed there by hand are used as they are) and
    converted to the TED layout under ``root/<dataset_id>``: ``"observation"``,
    ``"action"``, ``"info"`` (the ``env_infos``, nested) and other per-row entries at the
    root, their values at ``t + 1`` under ``"next"`` with ``"reward"`` and the done flags
    (``"done"`` and ``"terminated"`` from the trace, ``"truncated"`` on the last step of a
    rollout that did not terminate), and ``"episode"``. A rollout of ``h + 1`` rows gives
    ``h`` steps.

    Args:
        dataset_id: the dataset folder, one of :attr:`available_datasets`.
        batch_size: the default batch size of :meth:`sample`.
        root: where datasets are kept (default ``~/.cache/tdrl/roboset``).
        download: True (download when missing), False (never download) or ``"force"``.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in
            :class:`~tdrl.data.ReplayBuffer`.
        split_trajs: store one row per rollout (zero-padded, with a boolean ``"mask"``).

    Examples:
        >>> import tempfile, h5py, numpy as np
        >>> from tdrl.data.datasets import RobosetExperienceReplay
        >>> root = tempfile.mkdtemp()
        >>> raw = RobosetExperienceReplay.raw_dir("FK1-v4(expert)/task", root)
        >>> raw.mkdir(parents=True)
        >>> with h5py.File(raw / "trace.h5", "w") as f:
        ...     for trial in range(2):
        ...         f[f"Trial{trial}/observations"] = np.random.randn(6, 5)
        ...         f[f"Trial{trial}/actions"] = np.random.randn(6, 2)
        ...         f[f"Trial{trial}/rewards"] = np.random.randn(6)
        ...         f[f"Trial{trial}/done"] = np.zeros(6, bool)
        >>> data = RobosetExperienceReplay("FK1-v4(expert)/task", batch_size=4, root=root,
        ...     download=False)
        >>> len(data), data.sample()["next", "observation"].shape
        (10, torch.Size([4, 5]))
    """

    available_datasets = _files.HubDatasets(_REPO, ".h5")

    def __init__(
        self,
        dataset_id: str,
        batch_size: int,
        *,
        root: str | os.PathLike | None = None,
        download: bool | str = True,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        split_trajs: bool = False,
        **env_kwargs: Any,
    ) -> None:
        self.dataset_id = dataset_id
        self.split_trajs = bool(split_trajs)
        root = Path(root) if root is not None else _files.default_root("roboset")
        self.__dict__["_root"] = root

        def build(folder: Path, allow_download: bool) -> tuple[TensorDictBase, dict]:
            return self._build(folder, root, download, allow_download)

        path = root / dataset_id
        data, metadata = self._load_or_build(
            path, download, {"split_trajs": self.split_trajs}, build
        )
        self._open_data(
            data,
            path,
            metadata,
            {
                "sampler": sampler,
                "writer": writer,
                "collate_fn": collate_fn,
                "pin_memory": pin_memory,
                "prefetch": prefetch,
                "transform": transform,
                "batch_size": batch_size,
            },
        )

    @classmethod
    def raw_dir(cls, dataset_id: str, root: str | os.PathLike | None = None) -> Path:
        """Where the ``.h5`` files of ``dataset_id`` are downloaded (place them there to build offline)."""
        root = Path(root) if root is not None else _files.default_root("roboset")
        return cls._raw_folder(root, dataset_id)

    def _build(
        self, folder: Path, root: Path, download: bool | str, allow_download: bool
    ) -> tuple[TensorDictBase, dict]:
        h5py = _files.require("h5py", "h5py", "RobosetExperienceReplay")
        raw = self.raw_dir(self.dataset_id, root)
        files = sorted(raw.glob("*.h5")) if raw.is_dir() else []
        if download == "force" or not files:
            if not allow_download:
                raise FileNotFoundError(
                    f"Roboset dataset {self.dataset_id!r}: no built dataset and no .h5 file in {raw} "
                    "(download=False); pass download=True or place the files there"
                )
            hub_root = raw.parents[len(Path(self.dataset_id).parts) - 1]
            _files.hub_snapshot(
                _REPO,
                [f"{self.dataset_id}/*.h5"],
                hub_root,
                force=download == "force",
                purpose="RobosetExperienceReplay",
            )
            files = sorted(raw.glob("*.h5"))
            if not files:
                raise RuntimeError(f"Roboset dataset {self.dataset_id!r}: no .h5 file in {raw}")
        handles = []
        try:
            for file in files:
                try:
                    handles.append(h5py.File(file, "r"))
                except OSError as err:
                    raise RuntimeError(
                        f"Roboset dataset {self.dataset_id!r}: {file} is not a readable HDF5 file "
                        f"({err}); delete it or pass download='force'"
                    ) from err
            trials = [trial for handle in handles for trial in _trials(handle)]
            return self._convert(trials, folder, raw)
        finally:
            for handle in handles:
                handle.close()

    def _convert(self, trials: list[Any], folder: Path, raw: Path) -> tuple[TensorDictBase, dict]:
        if not trials:
            raise RuntimeError(
                f"Roboset dataset {self.dataset_id!r}: the files in {raw} hold no rollout group "
                "with an 'observations' dataset"
            )
        first = _datasets(trials[0])
        total = 0
        for trial in trials:
            rows = trial["observations"].shape[0]
            if rows >= 2:
                total += rows - 1
        entries: dict[Any, tuple] = {}
        for path, value in first.items():
            key = (_NAMES.get(path[0], path[0]), *path[1:])
            shape = (total, *value.shape[1:])
            dtype = torch_dtype(value.dtype)
            if path[0] == "rewards":
                entries[("next", "reward")] = ((total, 1), torch.float32)
            elif path[0] == "done":
                continue
            elif path[0] == "actions":
                entries[key] = (shape, dtype)
            else:
                entries[key] = (shape, dtype)
                entries[("next", *key)] = (shape, dtype)
        for name in DONE_NAMES:
            entries[(name,)] = ((total, 1), torch.bool)
            entries[("next", name)] = ((total, 1), torch.bool)
        entries[("episode",)] = ((total,), torch.int64)
        data = _files.allocate(_files.stage(folder, self.split_trajs), entries, (total,))
        ends = np.zeros(total, bool)
        start = 0
        for trial in trials:
            arrays = _datasets(trial)
            rows = arrays[("observations",)].shape[0]
            if rows < 2:
                continue
            steps = rows - 1
            out = slice(start, start + steps)
            for path, value in arrays.items():
                key = (_NAMES.get(path[0], path[0]), *path[1:])
                if key not in entries and path[0] not in _NEXT_ONLY:
                    continue
                values = torch.as_tensor(np.asarray(value[()]))
                if values.shape[0] != rows:
                    raise RuntimeError(
                        f"Roboset dataset {self.dataset_id!r}: {trial.name}/{'/'.join(path)} has "
                        f"{values.shape[0]} rows, expected {rows} (as observations)"
                    )
                if path[0] == "rewards":
                    data.get(("next", "reward"))[out] = values[1:].reshape(steps, 1).float()
                elif path[0] == "done":
                    done = values[1:].reshape(steps, 1).bool()
                    data.get(("next", "done"))[out] = done
                    data.get(("next", "terminated"))[out] = done
                elif path[0] == "actions":
                    data.get(key)[out] = values[:-1]
                else:
                    data.get(key)[out] = values[:-1]
                    data.get(("next", *key))[out] = values[1:]
            terminated = data.get(("next", "terminated"))[out]
            truncated = torch.zeros(steps, 1, dtype=torch.bool)
            truncated[-1] = ~terminated[-1]
            data.get(("next", "truncated"))[out] = truncated
            data.get(("next", "done"))[out] |= truncated
            ends[start + steps - 1] = True
            start += steps
        data.get("episode").copy_(torch.from_numpy(episode_ids(ends)))
        metadata = {"dataset_id": self.dataset_id, "rollouts": len(trials)}
        return _files.publish(data, folder, self.split_trajs), metadata
