""":class:`GenDGRLExperienceReplay`: the Procgen datasets of "The Generalization Gap in Offline RL".

Follows the gen_dgrl release (facebookresearch/gen_dgrl, 2024): one archive per game and
category (``<category>/<game>.tar.xz``), unpacking to one ``.npz`` file per episode with
``observations`` (``[T + 1, 3, 64, 64]`` uint8), ``actions`` (``[T, 1]``), ``rewards``
(``[T, 1]``) and ``dones`` (``[T]``).
"""

from __future__ import annotations

import os
import shutil
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

__all__ = ["GenDGRLExperienceReplay"]

_BASE_URL = "https://dl.fbaipublicfiles.com/DGRL"
_GAMES = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)
# category -> (path of its archive under the base address, whether one archive holds all games)
_CATEGORIES = {
    "1M_E": ("1M/expert", False),
    "1M_S": ("1M/suboptimal", False),
    "10M": ("10M", False),
    "25M": ("25M", False),
    "level_1_E": ("100k_procgen_dataset_1.tar", True),
    "level_1_S": ("100k_procgen_dataset_1_suboptimal.tar", True),
    "level_40_E": ("100k_procgen_dataset_40.tar", True),
    "level_40_S": ("100k_procgen_dataset_40_suboptimal.tar", True),
}


def _load_episode(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path) as handle:
            episode = {name: handle[name] for name in handle.files}
    else:
        episode = np.load(path, allow_pickle=True).item()
    missing = [name for name in ("observations", "actions") if name not in episode]
    if missing:
        raise RuntimeError(f"{path} is not a gen_dgrl episode: missing {missing}")
    return episode


class GenDGRLExperienceReplay(BaseDatasetExperienceReplay):
    """A gen_dgrl Procgen dataset as a read-only, memory-mapped replay buffer.

    ``dataset_id`` is ``"<game>-<category>"`` (one of :attr:`available_datasets`, e.g.
    ``"bigfish-1M_E"``; categories: ``1M_E``, ``1M_S``, ``10M``, ``25M``, ``level_1_E``,
    ``level_1_S``, ``level_40_E``, ``level_40_S``). The archive is downloaded and unpacked
    once into ``root/raw/<dataset_id>`` (episode files placed there by hand are used as they
    are) and converted to the TED layout under ``root/<dataset_id>``: ``"observation"``
    (``[3, 64, 64]`` uint8), ``"action"`` (int64), ``"episode"``, the done flags, and under
    ``"next"`` the following ``"observation"``, ``"reward"`` (``[1]``), ``"terminated"``
    (the episode's ``dones``), ``"truncated"`` and ``"done"``.

    Args:
        dataset_id: ``"<game>-<category>"``.
        batch_size: the default batch size of :meth:`sample`.
        root: where datasets are kept (default ``~/.cache/tdrl/gen_dgrl``).
        download: True (download when missing), False (never download) or ``"force"``.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in
            :class:`~tdrl.data.ReplayBuffer`.
        split_trajs: store one row per episode (zero-padded, with a boolean ``"mask"``).

    Examples:
        >>> import tempfile, numpy as np
        >>> from tdrl.data.datasets import GenDGRLExperienceReplay
        >>> root = tempfile.mkdtemp()
        >>> raw = GenDGRLExperienceReplay.raw_dir("bigfish-1M_E", root)
        >>> raw.mkdir(parents=True)
        >>> np.savez(raw / "ep_0_5_0_1.00.npz",
        ...     observations=np.zeros((6, 3, 64, 64), np.uint8),
        ...     actions=np.zeros((5, 1), np.int64), rewards=np.ones((5, 1)),
        ...     dones=np.arange(5) == 4)
        >>> data = GenDGRLExperienceReplay("bigfish-1M_E", batch_size=2, root=root,
        ...     download=False)
        >>> len(data), data.sample()["next", "observation"].shape
        (5, torch.Size([2, 3, 64, 64]))
    """

    available_datasets = [f"{game}-{category}" for category in _CATEGORIES for game in _GAMES]

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
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
    ) -> None:
        game, _, category = dataset_id.partition("-")
        if game not in _GAMES or category not in _CATEGORIES:
            raise ValueError(
                f"unknown gen_dgrl dataset {dataset_id!r}: expected '<game>-<category>' with a "
                f"game in {list(_GAMES)} and a category in {list(_CATEGORIES)}"
            )
        self.dataset_id = dataset_id
        self.split_trajs = bool(split_trajs)
        root = Path(root) if root is not None else _files.default_root("gen_dgrl")
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
        """Where the episodes of ``dataset_id`` are unpacked (place them there to build offline)."""
        root = Path(root) if root is not None else _files.default_root("gen_dgrl")
        return cls._raw_folder(root, dataset_id)

    @staticmethod
    def url(dataset_id: str) -> str:
        """The download address of the archive holding ``dataset_id``."""
        game, _, category = dataset_id.partition("-")
        path, shared = _CATEGORIES[category]
        return f"{_BASE_URL}/{path}" if shared else f"{_BASE_URL}/{path}/{game}.tar.xz"

    # -- building -------------------------------------------------------------------------------
    def _episode_files(self, raw: Path) -> list[Path]:
        if not raw.is_dir():
            return []
        game = self.dataset_id.partition("-")[0]
        files = sorted(p for p in raw.rglob("*") if p.suffix in (".npz", ".npy"))
        # a shared archive unpacks every game: keep the files under this game's folder
        if any(game in p.relative_to(raw).parts[:-1] for p in files):
            files = [p for p in files if game in p.relative_to(raw).parts[:-1]]
        return files

    def _build(
        self, folder: Path, root: Path, download: bool | str, allow_download: bool
    ) -> tuple[TensorDictBase, dict]:
        raw = self.raw_dir(self.dataset_id, root)
        files = self._episode_files(raw)
        if download == "force" or not files:
            if not allow_download:
                raise FileNotFoundError(
                    f"gen_dgrl dataset {self.dataset_id!r}: no built dataset and no episode file "
                    f"in {raw} (download=False); pass download=True or place the files there"
                )
            url = self.url(self.dataset_id)
            archive = root / "raw" / "archives" / url.rsplit("/", 1)[-1]
            if download == "force" or not archive.exists():
                _files.download_url(url, archive)
            _files.remove_tree(raw)
            shutil.unpack_archive(str(archive), str(raw))
            files = self._episode_files(raw)
            if not files:
                raise RuntimeError(
                    f"gen_dgrl dataset {self.dataset_id!r}: the archive {archive} holds no episode"
                )
        episodes = []
        for path in files:
            try:
                episodes.append(_load_episode(path))
            except (OSError, ValueError) as err:
                raise RuntimeError(
                    f"gen_dgrl dataset {self.dataset_id!r}: cannot read {path} ({err}); delete it "
                    "or pass download='force'"
                ) from err
        return self._convert(episodes, folder)

    def _convert(self, episodes: list[dict], folder: Path) -> tuple[TensorDictBase, dict]:
        episodes = [episode for episode in episodes if len(episode["actions"])]
        if not episodes:
            raise RuntimeError(f"gen_dgrl dataset {self.dataset_id!r} holds no step")
        total = sum(len(episode["actions"]) for episode in episodes)
        first = episodes[0]
        frame = first["observations"]
        entries: dict[Any, tuple] = {
            ("observation",): ((total, *frame.shape[1:]), torch_dtype(frame.dtype)),
            ("next", "observation"): ((total, *frame.shape[1:]), torch_dtype(frame.dtype)),
            ("action",): ((total,), torch.int64),
            ("next", "reward"): ((total, 1), torch.float32),
            ("episode",): ((total,), torch.int64),
        }
        for name in DONE_NAMES:
            entries[(name,)] = ((total, 1), torch.bool)
            entries[("next", name)] = ((total, 1), torch.bool)
        data = _files.allocate(_files.stage(folder, self.split_trajs), entries, (total,))
        ends = np.zeros(total, bool)
        start = 0
        for episode in episodes:
            steps = len(episode["actions"])
            rows = slice(start, start + steps)
            frames = torch.as_tensor(episode["observations"])
            if frames.shape[0] != steps + 1:
                raise RuntimeError(
                    f"gen_dgrl dataset {self.dataset_id!r}: an episode has {frames.shape[0]} "
                    f"observations for {steps} actions, expected {steps + 1}"
                )
            data.get("observation")[rows] = frames[:-1]
            data.get(("next", "observation"))[rows] = frames[1:]
            data.get("action")[rows] = torch.as_tensor(episode["actions"]).reshape(steps).long()
            reward = episode.get("rewards", np.zeros(steps))
            data.get(("next", "reward"))[rows] = torch.as_tensor(
                np.asarray(reward, np.float32)
            ).reshape(steps, 1)
            dones = episode.get("dones", np.zeros(steps, bool))
            terminated = torch.as_tensor(np.asarray(dones) != 0).reshape(steps, 1)
            truncated = torch.zeros(steps, 1, dtype=torch.bool)
            truncated[-1] = ~terminated[-1]
            data.get(("next", "terminated"))[rows] = terminated
            data.get(("next", "truncated"))[rows] = truncated
            data.get(("next", "done"))[rows] = terminated | truncated
            ends[start + steps - 1] = True
            start += steps
        data.get("episode").copy_(torch.from_numpy(episode_ids(ends)))
        metadata = {"dataset_id": self.dataset_id, "episodes": len(episodes)}
        return _files.publish(data, folder, self.split_trajs), metadata
