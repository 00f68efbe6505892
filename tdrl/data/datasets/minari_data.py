""":class:`MinariExperienceReplay`: Minari datasets (read with ``minari`` itself), in the TED layout.

Follows minari 0.5: a dataset is read episode by episode with ``minari.load_dataset``
(whatever its storage backend, HDF5 or Arrow); each episode has ``T + 1`` observations and
``T`` actions, rewards, terminations and truncations, and infos.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.data.datasets import _files
from tdrl.data.datasets._ted import DONE_NAMES, episode_ids, torch_dtype
from tdrl.data.datasets._text import TextLookup
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.replay_buffers import Sampler, Writer

__all__ = ["MinariExperienceReplay"]

_PATH_VAR = "MINARI_DATASETS_PATH"


@contextmanager
def _minari_path(path: Path | None) -> Iterator[None]:
    """Point minari at ``path`` (its datasets folder) for the duration of the block."""
    if path is None:
        yield
        return
    previous = os.environ.get(_PATH_VAR)
    os.environ[_PATH_VAR] = str(path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_PATH_VAR, None)
        else:
            os.environ[_PATH_VAR] = previous


def _leaves(value: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """The arrays of a (nested) dict / tuple structure of episode data, by key path."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _leaves(item, (*prefix, str(name)))
    elif isinstance(value, tuple):
        for position, item in enumerate(value):
            yield from _leaves(item, (*prefix, str(position)))
    else:
        yield prefix, value


def _is_text(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and isinstance(value[0], (str, bytes))
    return isinstance(value, np.ndarray) and value.dtype.kind in ("U", "S", "O")


class MinariExperienceReplay(BaseDatasetExperienceReplay):
    """A Minari dataset as a read-only, memory-mapped replay buffer.

    The dataset is read with ``minari`` (``pip install "minari[hdf5]"``): by default it is
    downloaded into ``root/raw`` (Minari's remote datasets); with
    ``load_from_local_minari=True`` it is read from Minari's own datasets folder
    (``$MINARI_DATASETS_PATH``, e.g. one made with ``minari.DataCollector``). It is then
    converted once to the TED layout under ``root/<dataset_id>``.

    Each step holds ``"observation"`` (nested entries for dict / tuple spaces),
    ``"action"``, ``"episode"``, the root done flags (False) and ``"next"``: the following
    ``"observation"``, ``"reward"``, ``"terminated"``, ``"truncated"`` and ``"done"``. Infos
    recorded at every step go under ``"info"`` (``T + 1`` values: ``"info"`` and ``("next",
    "info")``; ``T`` values: ``("next", "info")``). Text entries (e.g. MiniGrid missions) are
    stored as integer ids into ``metadata["text_values"][key]`` and turned back into strings
    in samples. :attr:`metadata` holds the
    dataset's ``"action_space"`` and ``"observation_space"`` as tdrl specs.

    Args:
        dataset_id: the Minari dataset id, e.g. ``"D4RL/pointmaze/large-v2"``.
        batch_size: the default batch size of :meth:`sample`.
        root: where datasets are kept (default ``~/.cache/tdrl/minari``).
        download: True (download when missing), False (never download) or ``"force"``.
        sampler, writer, transform, prefetch, collate_fn, pin_memory: as in
            :class:`~tdrl.data.ReplayBuffer`.
        split_trajs: store one row per episode (``[n_episodes, max_length]``, zero-padded,
            with a boolean ``"mask"``).
        load_from_local_minari: read the dataset from Minari's datasets folder instead of
            downloading it.

    Examples:
        >>> import os, tempfile, numpy as np, minari
        >>> from minari.data_collector import EpisodeBuffer
        >>> os.environ["MINARI_DATASETS_PATH"] = tempfile.mkdtemp()
        >>> episodes = [EpisodeBuffer(observations=np.random.randn(11, 4).astype("float32"),
        ...     actions=np.random.randint(2, size=10), rewards=np.ones(10),
        ...     terminations=np.arange(10) == 9, truncations=np.zeros(10, bool), infos={})
        ...     for _ in range(3)]
        >>> _ = minari.create_dataset_from_buffers("cartpole/doc-v0", episodes, env="CartPole-v1")
        >>> data = MinariExperienceReplay("cartpole/doc-v0", batch_size=8,
        ...     load_from_local_minari=True, root=tempfile.mkdtemp())
        >>> sample = data.sample()
        >>> bool(data.metadata["action_space"].is_in(sample["action"]))
        True
    """

    def __init__(
        self,
        dataset_id: str,
        batch_size: int,
        *,
        root: str | os.PathLike | None = None,
        download: bool | str = True,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        transform: Any = None,
        split_trajs: bool = False,
        prefetch: int | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        load_from_local_minari: bool = False,
    ) -> None:
        self.dataset_id = dataset_id
        self.split_trajs = bool(split_trajs)
        self.load_from_local_minari = bool(load_from_local_minari)
        root = Path(root) if root is not None else _files.default_root("minari")
        self.__dict__["_root"] = root
        options = {"split_trajs": self.split_trajs}

        def build(folder: Path, allow_download: bool) -> tuple[TensorDictBase, dict]:
            return self._build(folder, root, download, allow_download)

        path = root / dataset_id
        data, metadata = self._load_or_build(path, download, options, build)
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
        self.__dict__["_metadata"] = self._with_specs(self.__dict__["_metadata"])
        text_values = self.metadata.get("text_values") or {}
        if text_values:
            both = {**text_values, **{f"next/{key}": words for key, words in text_values.items()}}
            self.insert_transform(0, TextLookup(both))

    # -- building -------------------------------------------------------------------------------
    def _build(
        self, folder: Path, root: Path, download: bool | str, allow_download: bool
    ) -> tuple[TensorDictBase, dict]:
        minari = _files.require("minari", "minari[hdf5]", "MinariExperienceReplay")
        raw_root = None if self.load_from_local_minari else root / "raw"
        with _minari_path(raw_root):
            local = minari.storage.get_dataset_path(self.dataset_id)
            if raw_root is not None and (download == "force" or not local.exists()):
                if not allow_download:
                    raise FileNotFoundError(
                        f"Minari dataset {self.dataset_id!r}: no built dataset and no raw files at "
                        f"{local} (download=False); pass download=True"
                    )
                minari.download_dataset(self.dataset_id, force_download=download == "force")
            if not local.exists():
                raise FileNotFoundError(
                    f"Minari dataset {self.dataset_id!r} not found at {local}: create it with "
                    "minari.DataCollector or download it with minari.download_dataset"
                )
            try:
                dataset = minari.load_dataset(self.dataset_id)
            except Exception as err:
                raise RuntimeError(
                    f"Minari dataset {self.dataset_id!r} at {local} cannot be read "
                    f"({type(err).__name__}: {err})"
                ) from err
            return self._convert(dataset, folder)

    def _convert(self, dataset: Any, folder: Path) -> tuple[TensorDictBase, dict]:
        from minari.serialization import serialize_space

        total = int(dataset.total_steps)
        episodes = list(dataset.iterate_episodes())
        if not episodes or total == 0:
            raise RuntimeError(f"Minari dataset {self.dataset_id!r} holds no step")
        first = episodes[0]
        entries: dict[Any, tuple] = {}
        text_values: dict[str, dict] = {}

        def declare(key: tuple, value: Any) -> None:
            if _is_text(value):
                entries[key] = ((total,), torch.int64)
                text_values.setdefault("/".join(key[1:] if key[0] == "next" else key), {})
                return
            array = np.asarray(value)
            entries[key] = ((total, *array.shape[1:]), torch_dtype(array.dtype))

        steps = len(first)
        for path, value in _leaves(first.observations):
            declare(("observation", *path), value)
            declare(("next", "observation", *path), value)
        for path, value in _leaves(first.actions):
            declare(("action", *path), value)
        infos = {
            path: value for path, value in _leaves(first.infos) if len(value) in (steps, steps + 1)
        }
        for path, value in infos.items():
            if len(value) == steps + 1:
                declare(("info", *path), value)
            declare(("next", "info", *path), value)
        entries[("next", "reward")] = ((total, 1), torch.float32)
        for name in DONE_NAMES:
            entries[(name,)] = ((total, 1), torch.bool)
            entries[("next", name)] = ((total, 1), torch.bool)
        entries[("episode",)] = ((total,), torch.int64)
        data = _files.allocate(_files.stage(folder, self.split_trajs), entries, (total,))
        ends = np.zeros(total, bool)
        start = 0
        for episode in episodes:
            length = len(episode)
            rows = slice(start, start + length)
            if start + length > total:
                raise RuntimeError(
                    f"Minari dataset {self.dataset_id!r}: its episodes hold more steps than the "
                    f"{total} it declares"
                )
            self._write(data, ("observation",), episode.observations, rows, 0, text_values)
            self._write(data, ("next", "observation"), episode.observations, rows, 1, text_values)
            self._write(data, ("action",), episode.actions, rows, 0, text_values)
            for path, value in _leaves(episode.infos):
                if ("next", "info", *path) not in entries:
                    continue
                offset = 1 if len(value) == length + 1 else 0
                if offset:
                    self._write(data, ("info", *path), value, rows, 0, text_values)
                self._write(data, ("next", "info", *path), value, rows, offset, text_values)
            data.get(("next", "reward"))[rows] = torch.as_tensor(
                np.asarray(episode.rewards, dtype=np.float32)
            ).reshape(length, 1)
            terminated = torch.as_tensor(np.asarray(episode.terminations, bool)).reshape(length, 1)
            truncated = torch.as_tensor(np.asarray(episode.truncations, bool)).reshape(length, 1)
            truncated[-1] |= ~terminated[-1]
            data.get(("next", "terminated"))[rows] = terminated
            data.get(("next", "truncated"))[rows] = truncated
            data.get(("next", "done"))[rows] = terminated | truncated
            ends[start + length - 1] = True
            start += length
        data.get("episode").copy_(torch.from_numpy(episode_ids(ends)))
        metadata = {
            "dataset_id": self.dataset_id,
            "action_space": serialize_space(dataset.action_space),
            "observation_space": serialize_space(dataset.observation_space),
            "total_episodes": len(episodes),
            "text_values": {key: list(values) for key, values in text_values.items()},
        }
        return _files.publish(data, folder, self.split_trajs), metadata

    @staticmethod
    def _write(
        data: TensorDictBase,
        prefix: tuple,
        value: Any,
        rows: slice,
        offset: int,
        text_values: dict,
    ) -> None:
        length = rows.stop - rows.start
        for path, leaf in _leaves(value):
            key = (*prefix, *path)
            values = leaf[offset : offset + length]
            if _is_text(leaf):
                known = text_values.setdefault("/".join(key[1:] if key[0] == "next" else key), {})
                ids = [known.setdefault(text, len(known)) for text in values]
                data.get(key)[rows] = torch.tensor(ids, dtype=torch.int64)
                continue
            target = data.get(key)
            target[rows] = torch.as_tensor(np.asarray(values)).reshape(target[rows].shape)

    def _with_specs(self, metadata: dict) -> dict:
        """The stored metadata with the spaces (serialized by minari) turned into tdrl specs."""
        from minari.serialization import deserialize_space

        from tdrl.envs.libs.gym import gym_space_to_spec

        metadata = dict(metadata)
        for name in ("action_space", "observation_space"):
            if isinstance(metadata.get(name), str):
                space = deserialize_space(metadata[name])
                metadata[name] = gym_space_to_spec(space, categorical_action_encoding=True)
        return metadata
