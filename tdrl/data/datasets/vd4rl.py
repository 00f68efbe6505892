""":class:`VD4RLExperienceReplay`: the V-D4RL pixel datasets (npz episodes or HDF5 shards), in TED.

Follows the two layouts of the V-D4RL release (v-d4rl 1.0): DreamerV2 episodes, one
``.npz`` file each with ``image`` (``[T, H, W, 3]`` uint8), ``action``, ``reward``,
``discount``, ``is_first``, ``is_last`` and ``is_terminal``; and DrQ+BC HDF5 shards with
episodes one after the other: ``observation`` (``[N, 3, H, W]`` uint8), ``action``,
``reward``, ``discount`` and ``step_type`` (0 first, 1 mid, 2 last). In both, the action and
reward stored with a frame are the ones that led to it (dm_env's convention).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.data.datasets import _files
from tdrl.data.datasets._ted import DONE_NAMES, episode_ids, torch_dtype
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.replay_buffers import Sampler, Writer

__all__ = ["VD4RLExperienceReplay"]

_REPO = "conglu/vd4rl"
_EPISODE_KEYS = ("is_first", "is_last", "is_terminal")


def _episode_from_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as handle:
        episode = {name: handle[name] for name in handle.files}
    if "image" not in episode or "action" not in episode:
        raise RuntimeError(
            f"{path} is not a V-D4RL episode: expected 'image' and 'action' arrays, got "
            f"{sorted(episode)}"
        )
    frames = episode["image"].shape[0]
    if "is_terminal" not in episode:
        episode["is_terminal"] = episode.get("discount", np.ones(frames)) == 0
    if "is_last" not in episode:
        episode["is_last"] = np.arange(frames) == frames - 1
    episode["pixels"] = episode.pop("image")
    return episode


def _episodes_from_h5(path: Path, h5py: Any) -> list[dict[str, np.ndarray]]:
    with h5py.File(path, "r") as handle:
        arrays = {name: handle[name][()] for name in handle.keys()}
    if "observation" not in arrays or "step_type" not in arrays:
        raise RuntimeError(
            f"{path} is not a V-D4RL shard: expected 'observation' and 'step_type' datasets, "
            f"got {sorted(arrays)}"
        )
    starts = np.flatnonzero(arrays["step_type"] == 0).tolist() or [0]
    bounds = [*starts, arrays["step_type"].shape[0]]
    episodes = []
    for begin, end in zip(bounds[:-1], bounds[1:]):
        episode = {name: value[begin:end] for name, value in arrays.items()}
        frames = end - begin
        episode["pixels"] = np.ascontiguousarray(episode.pop("observation").transpose(0, 2, 3, 1))
        discount = episode.get("discount", np.ones(frames))
        episode["is_terminal"] = discount == 0
        episode["is_last"] = episode.pop("step_type") == 2
        episodes.append(episode)
    return episodes


def _read_file(dataset_id: str, path: Path) -> list[dict[str, np.ndarray]]:
    """The episodes of one V-D4RL file (an npz episode or an HDF5 shard)."""
    try:
        if path.suffix == ".npz":
            return [_episode_from_npz(path)]
        import h5py

        return _episodes_from_h5(path, h5py)
    except (OSError, ValueError, KeyError) as err:
        raise RuntimeError(
            f"V-D4RL dataset {dataset_id!r}: cannot read {path} ({err}); delete it or pass "
            "download='force'"
        ) from err


class VD4RLExperienceReplay(BaseDatasetExperienceReplay):
    """A V-D4RL dataset as a read-only, memory-mapped replay buffer.

    The files of ``dataset_id`` (a folder of the ``conglu/vd4rl`` Hugging Face dataset,
    e.g. ``"main/walker_walk/random/64px"``) are downloaded once to
    ``root/raw/<dataset_id>`` (``.npz`` / ``.hdf5`` files placed there by hand are used as
    they are) and converted to the TED layout under ``root/<dataset_id>``: ``"pixels"``
    (``[H, W, 3]`` uint8, as stored), ``"action"``, ``"episode"``, the done flags, and under
    ``"next"`` the following ``"pixels"``, ``"reward"``, ``"terminated"``, ``"truncated"``
    and ``"done"``. Every other per-frame array (e.g. ``discount``) goes under ``"state"``
    (and ``("next", "state")``).

    Sampled pixels are turned into float ``[3, H, W]`` images in ``[0, 1]`` (``totensor``)
    and resized (``image_size``) by transforms applied at sampling time, before
    ``transform``; :meth:`preprocess` sees the stored uint8 frames.

    Args:
        dataset_id: the dataset folder, one of :attr:`available_datasets`.
        batch_size: the default batch size of :meth:`sample`.
        root: where datasets are kept (default ``~/.cache/tdrl/vd4rl``).
        download: True (download when missing), False (never download) or ``"force"``.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in
            :class:`~tdrl.data.ReplayBuffer`.
        split_trajs: store one row per episode (zero-padded, with a boolean ``"mask"``).
        totensor: convert sampled pixels with :class:`~tdrl.envs.ToTensorImage`.
        image_size: resize sampled pixels to ``(height, width)`` (an int for squares).
        num_workers: processes reading the episode files (0: in the calling process).

    Examples:
        >>> import tempfile, numpy as np
        >>> from tdrl.data.datasets import VD4RLExperienceReplay
        >>> root = tempfile.mkdtemp()
        >>> raw = VD4RLExperienceReplay.raw_dir("main/walker_walk/random/64px", root)
        >>> raw.mkdir(parents=True)
        >>> np.savez(raw / "episode-0-11.npz", image=np.zeros((11, 8, 8, 3), np.uint8),
        ...     action=np.zeros((11, 6), np.float32), reward=np.ones(11, np.float32),
        ...     discount=np.ones(11, np.float32), is_first=np.arange(11) == 0,
        ...     is_last=np.arange(11) == 10, is_terminal=np.zeros(11, bool))
        >>> data = VD4RLExperienceReplay("main/walker_walk/random/64px", batch_size=4,
        ...     root=root, download=False, image_size=6)
        >>> len(data), data.sample()["pixels"].shape
        (10, torch.Size([4, 3, 6, 6]))
    """

    available_datasets = _files.HubDatasets(_REPO, (".npz", ".hdf5"))

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
        totensor: bool = True,
        image_size: int | list[int] | tuple[int, int] | None = None,
        num_workers: int = 0,
        **env_kwargs: Any,
    ) -> None:
        self.dataset_id = dataset_id
        self.split_trajs = bool(split_trajs)
        self.num_workers = int(num_workers)
        root = Path(root) if root is not None else _files.default_root("vd4rl")
        self.__dict__["_root"] = root

        def build(folder: Path, allow_download: bool) -> tuple[TensorDictBase, dict]:
            return self._build(folder, root, download, allow_download)

        path = root / dataset_id
        data, metadata = self._load_or_build(
            path, download, {"split_trajs": self.split_trajs}, build
        )
        transforms = self._image_transforms(totensor, image_size)
        if transform is not None:
            transforms.extend(transform if isinstance(transform, (list, tuple)) else [transform])
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
                "transform": transforms or None,
                "batch_size": batch_size,
            },
        )

    @classmethod
    def raw_dir(cls, dataset_id: str, root: str | os.PathLike | None = None) -> Path:
        """Where the files of ``dataset_id`` are downloaded (place them there to build offline)."""
        root = Path(root) if root is not None else _files.default_root("vd4rl")
        return cls._raw_folder(root, dataset_id)

    @staticmethod
    def _image_transforms(totensor: bool, image_size: Any) -> list:
        from tdrl.envs.transforms import Resize, ToTensorImage

        keys = ["pixels", ("next", "pixels")]
        transforms: list = []
        if totensor:
            transforms.append(ToTensorImage(in_keys=keys))
        if image_size is not None:
            if isinstance(image_size, int):
                image_size = (image_size, image_size)
            height, width = (int(size) for size in image_size)
            transforms.append(Resize(height, width, in_keys=keys))
        return transforms

    # -- building -------------------------------------------------------------------------------
    def _build(
        self, folder: Path, root: Path, download: bool | str, allow_download: bool
    ) -> tuple[TensorDictBase, dict]:
        raw = self.raw_dir(self.dataset_id, root)

        def found() -> list[Path]:
            if not raw.is_dir():
                return []
            return sorted(p for p in raw.iterdir() if p.suffix in (".npz", ".hdf5", ".h5"))

        files = found()
        if download == "force" or not files:
            if not allow_download:
                raise FileNotFoundError(
                    f"V-D4RL dataset {self.dataset_id!r}: no built dataset and no .npz / .hdf5 file "
                    f"in {raw} (download=False); pass download=True or place the files there"
                )
            hub_root = raw.parents[len(Path(self.dataset_id).parts) - 1]
            _files.hub_snapshot(
                _REPO,
                [f"{self.dataset_id}/*"],
                hub_root,
                force=download == "force",
                purpose="VD4RLExperienceReplay",
            )
            files = found()
            if not files:
                raise RuntimeError(f"V-D4RL dataset {self.dataset_id!r}: no data file in {raw}")
        return self._convert(self._read(files), folder)

    def _read(self, files: list[Path]) -> list[dict[str, np.ndarray]]:
        if any(path.suffix != ".npz" for path in files):
            _files.require("h5py", "h5py", "VD4RLExperienceReplay")
        read = functools.partial(_read_file, self.dataset_id)
        if self.num_workers > 0:
            # processes, not threads: numpy parses .npy headers with ``compile``, which some
            # Python versions (3.11 before 3.11.8) do not allow from several threads at once
            context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
            with ProcessPoolExecutor(self.num_workers, mp_context=context) as pool:
                chunks: Iterable = list(pool.map(read, files))
        else:
            chunks = [read(path) for path in files]
        return [episode for chunk in chunks for episode in chunk]

    def _convert(
        self, episodes: list[dict[str, np.ndarray]], folder: Path
    ) -> tuple[TensorDictBase, dict]:
        episodes = [episode for episode in episodes if episode["pixels"].shape[0] >= 2]
        if not episodes:
            raise RuntimeError(f"V-D4RL dataset {self.dataset_id!r} holds no episode of 2 frames")
        total = sum(episode["pixels"].shape[0] - 1 for episode in episodes)
        first = episodes[0]
        entries: dict[Any, tuple] = {}
        state = [
            name
            for name, value in first.items()
            if name not in ("pixels", "action", "reward", *_EPISODE_KEYS) and value.ndim >= 1
        ]
        for key in [("pixels",), *(("state", other) for other in state)]:
            value = first[key[-1]]
            spec = ((total, *value.shape[1:]), torch_dtype(value.dtype))
            entries[key] = spec
            entries[("next", *key)] = spec
        entries[("action",)] = ((total, *first["action"].shape[1:]), torch.float32)
        entries[("next", "reward")] = ((total, 1), torch.float32)
        for name in DONE_NAMES:
            entries[(name,)] = ((total, 1), torch.bool)
            entries[("next", name)] = ((total, 1), torch.bool)
        entries[("episode",)] = ((total,), torch.int64)
        data = _files.allocate(_files.stage(folder, self.split_trajs), entries, (total,))
        ends = np.zeros(total, bool)
        start = 0
        for episode in episodes:
            steps = episode["pixels"].shape[0] - 1
            rows = slice(start, start + steps)
            for key in entries:
                if key[0] in ("pixels", "state"):
                    value = torch.as_tensor(episode[key[-1]])
                    data.get(key)[rows] = value[:-1]
                    data.get(("next", *key))[rows] = value[1:]
            data.get("action")[rows] = torch.as_tensor(episode["action"][1:], dtype=torch.float32)
            reward = episode.get("reward", np.zeros(steps + 1))
            data.get(("next", "reward"))[rows] = torch.as_tensor(
                reward[1:], dtype=torch.float32
            ).reshape(steps, 1)
            terminated = torch.as_tensor(episode["is_terminal"][1:], dtype=torch.bool)
            truncated = torch.as_tensor(episode["is_last"][1:], dtype=torch.bool) & ~terminated
            truncated[-1] = ~terminated[-1]
            data.get(("next", "terminated"))[rows] = terminated.reshape(steps, 1)
            data.get(("next", "truncated"))[rows] = truncated.reshape(steps, 1)
            data.get(("next", "done"))[rows] = (terminated | truncated).reshape(steps, 1)
            ends[start + steps - 1] = True
            start += steps
        data.get("episode").copy_(torch.from_numpy(episode_ids(ends)))
        metadata = {"dataset_id": self.dataset_id, "episodes": len(episodes)}
        return _files.publish(data, folder, self.split_trajs), metadata
