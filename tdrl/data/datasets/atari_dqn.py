""":class:`AtariDQNExperienceReplay`: the DQN Replay Dataset (dopamine replay logs), in TED.

Follows the layout of the DQN Replay Dataset (Agarwal et al., 2020) as written by dopamine's
``OutOfGraphReplayBuffer.save``: for run ``<game>/<run>``, the folder ``replay_logs`` holds,
per checkpoint ``i``, gzip-compressed ``.npy`` arrays ``$store$_observation_ckpt.<i>.gz``
(``[capacity, 84, 84]`` uint8), ``$store$_action_ckpt.<i>.gz``, ``$store$_reward_ckpt.<i>.gz``,
``$store$_terminal_ckpt.<i>.gz`` and ``add_count_ckpt.<i>.gz`` (a scalar). Each buffer is
circular: its oldest element is at ``add_count % capacity`` once it is full. Element ``k``
holds a frame, the action taken from it, the reward received and whether the episode ended.
"""

from __future__ import annotations

import gzip
import os
import re
import threading
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.data.datasets import _files
from tdrl.data.datasets._ted import episode_ids
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.replay_buffers import (
    RandomSampler,
    Sampler,
    SliceSampler,
    TensorStorage,
    Writer,
)

__all__ = ["AtariDQNExperienceReplay"]

_BASE_URL = "https://storage.googleapis.com/atari-replay-datasets/dqn"
_FIELDS = ("observation", "action", "reward", "terminal")
_CHECKPOINTS = 51
_CHUNK_ROWS = 1 << 14


def _store_name(field: str, checkpoint: int) -> str:
    return f"$store${field}_ckpt.{checkpoint}.gz"


# numpy parses an .npy header with ``ast.literal_eval``; CPython 3.11 can fail building ASTs
# in two threads at once ("AST constructor recursion depth mismatch"), and the converter reads
# headers from several threads: they take turns
_HEADER_LOCK = threading.Lock()


def _npy_header(stream: Any) -> tuple[tuple[int, ...], np.dtype]:
    with _HEADER_LOCK:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    if fortran:
        raise ValueError("Fortran-ordered arrays are not part of the DQN replay layout")
    return tuple(shape), dtype


def _read_scalar(path: Path) -> int:
    with gzip.open(path, "rb") as stream:
        return int(np.load(stream, allow_pickle=False))


def _stream_rows(path: Path, dest: np.ndarray, start: int, oldest: int) -> None:
    """Decompress the array in ``path`` into ``dest[start:start + n]`` in chronological order.

    Stored row ``k`` goes to chronological position ``(k - oldest) % n``; rows are streamed
    in chunks, so the whole array is never held in memory.
    """
    with gzip.open(path, "rb") as stream:
        shape, dtype = _npy_header(stream)
        rows = shape[0]
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        done = 0
        while done < rows:
            count = min(_CHUNK_ROWS, rows - done)
            buffer = stream.read(count * row_bytes)
            if len(buffer) != count * row_bytes:
                raise ValueError(f"{path} ends after {done} of its {rows} rows")
            chunk = np.frombuffer(buffer, dtype=dtype).reshape(count, *shape[1:])
            positions = (np.arange(done, done + count) - oldest) % rows
            split = np.flatnonzero(np.diff(positions) < 0)
            pieces = np.split(np.arange(count), split + 1)
            for piece in pieces:
                if piece.size:
                    first = start + int(positions[piece[0]])
                    dest[first : first + piece.size] = chunk[piece].reshape(
                        piece.size, *dest.shape[1:]
                    )
            done += count


class _NextFrameStorage(TensorStorage):
    """A storage of frames kept once: ``("next", "observation")`` is gathered at read time.

    The next observation of item ``k`` is the observation of item ``k + 1`` (of item ``k``
    for the last one). Samples also carry the dataset's ``"metadata"`` (a non-tensor entry).
    """

    def __init__(self, data: TensorDictBase, metadata: dict) -> None:
        super().__init__(data)
        _files.mark_full(self, data)
        self._frames = data.get("observation")
        self._last = data.shape[0] - 1
        self._metadata = metadata

    def _complete(self, out: TensorDictBase, rows: torch.Tensor) -> TensorDictBase:
        following = (rows.reshape(-1) + 1).clamp_(max=self._last)
        frames = self._frames.index_select(0, following)
        out.set(("next", "observation"), frames.reshape(*out.batch_size, *frames.shape[1:]))
        out.set_non_tensor("metadata", dict(self._metadata))
        return out

    def _rows(self, index: Any) -> torch.Tensor:
        length = len(self)
        if isinstance(index, (int, np.integer)):
            return torch.tensor([int(index) % length])
        if isinstance(index, slice):
            return torch.arange(length)[index]
        index = torch.as_tensor(index)
        if index.dtype == torch.bool:
            return index.nonzero().squeeze(-1)
        return index.long().remainder(length)

    def get(self, index: Any) -> Any:
        """Read items (see :meth:`TensorStorage.get`), with their next observation."""
        out = super().get(index)
        rows = self._rows(index)
        if isinstance(index, (int, np.integer)):
            single = out.unsqueeze(0)
            return self._complete(single, rows)[0]
        return self._complete(out, rows)

    def gather(self, index: Any, extra: dict | None = None, given: dict | None = None) -> Any:
        out = super().gather(index, extra, given)
        return self._complete(out, torch.as_tensor(index).long())


class AtariDQNExperienceReplay(BaseDatasetExperienceReplay):
    """A run of the DQN Replay Dataset as a read-only, memory-mapped replay buffer.

    ``dataset_id`` is ``"<Game>/<run>"`` (e.g. ``"Pong/4"``). The replay logs are
    downloaded once to ``root/raw/<dataset_id>/replay_logs`` (files placed there by hand are
    used as they are) and converted, checkpoint after checkpoint in chronological order, to
    memory-mapped files under ``root/<dataset_id>``. Frames are stored once:
    ``("next", "observation")`` is read from the following frame when sampling, which halves
    the disk use of the TED layout. At a terminal step the next frame is the first of the
    following episode: mask it with ``("next", "done")``.

    Each step holds ``"observation"`` (``[84, 84]`` uint8), ``"action"`` (int64),
    ``"episode"``, the root done flags and, under ``"next"``, ``"observation"``,
    ``"reward"``, ``"terminated"`` (the logs' terminal flag), ``"truncated"`` (the last step)
    and ``"done"``. Samples carry a non-tensor ``"metadata"`` entry with the
    ``"dataset_id"``.

    Args:
        dataset_id: ``"<Game>/<run>"``.
        batch_size: the default batch size of :meth:`sample`.
        root: where datasets are kept (default ``~/.cache/tdrl/atari``).
        download: True (download when missing), False (never download) or ``"force"``.
        sampler: the sampler; by default a :class:`~tdrl.data.SliceSampler` when
            ``slice_len`` or ``num_slices`` is given, else uniform.
        writer, transform, collate_fn, pin_memory, prefetch: as in
            :class:`~tdrl.data.ReplayBuffer`.
        num_slices, slice_len: for the default slice sampler.
        strict_length: see :class:`~tdrl.data.SliceSampler`.
        num_procs: threads decompressing the checkpoint files (0: in the calling thread).

    Examples:
        >>> import gzip, tempfile, numpy as np
        >>> from tdrl.data.datasets import AtariDQNExperienceReplay
        >>> root = tempfile.mkdtemp()
        >>> logs = AtariDQNExperienceReplay.raw_dir("Pong/1", root)
        >>> logs.mkdir(parents=True)
        >>> arrays = {"observation": np.zeros((20, 84, 84), np.uint8),
        ...     "action": np.zeros(20, np.int32), "reward": np.zeros(20, np.float32),
        ...     "terminal": np.arange(20) % 10 == 9}
        >>> for field, array in arrays.items():
        ...     with gzip.open(logs / f"$store${field}_ckpt.0.gz", "wb") as f:
        ...         np.save(f, array)
        >>> data = AtariDQNExperienceReplay("Pong/1", batch_size=4, root=root, download=False)
        >>> sample = data.sample()
        >>> sample["next", "observation"].shape, sample.get_non_tensor("metadata")["dataset_id"]
        (torch.Size([4, 84, 84]), 'Pong/1')
    """

    #: how many checkpoints of a run are loaded (None: all of them)
    _max_runs: int | None = None

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | os.PathLike | None = None,
        download: bool | str = True,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        transform: Any = None,
        num_procs: int = 0,
        num_slices: int | None = None,
        slice_len: int | None = None,
        strict_length: bool = True,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z]+/\d+", dataset_id):
            raise ValueError(
                f"AtariDQNExperienceReplay dataset_id: expected '<Game>/<run>' (e.g. 'Pong/4'), "
                f"got {dataset_id!r}"
            )
        self.dataset_id = dataset_id
        self.num_procs = int(num_procs)
        root = Path(root) if root is not None else _files.default_root("atari")
        self.__dict__["_root"] = root
        options = {"max_runs": self._max_runs}

        def build(folder: Path, allow_download: bool) -> tuple[TensorDictBase, dict]:
            return self._build(folder, root, download, allow_download)

        path = root / dataset_id
        data, metadata = self._load_or_build(path, download, options, build)
        if sampler is None:
            if num_slices is not None or slice_len is not None:
                sampler = SliceSampler(
                    num_slices=num_slices,
                    slice_len=slice_len,
                    strict_length=strict_length,
                    cache_values=True,
                )
            else:
                sampler = RandomSampler()
        self.__dict__["_data"] = data
        self.__dict__["_data_path"] = path
        self.__dict__["_metadata"] = metadata
        BaseDatasetExperienceReplay.__init__(
            self,
            storage=_NextFrameStorage(_files.plain_view(data), {"dataset_id": dataset_id}),
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
        )

    @classmethod
    def raw_dir(cls, dataset_id: str, root: str | os.PathLike | None = None) -> Path:
        """Where the replay logs of ``dataset_id`` are downloaded (place them there to build offline)."""
        root = Path(root) if root is not None else _files.default_root("atari")
        return cls._raw_folder(root, dataset_id) / "replay_logs"

    @staticmethod
    def url(dataset_id: str, filename: str) -> str:
        """The download address of one replay-log file."""
        return f"{_BASE_URL}/{dataset_id}/replay_logs/{urllib.parse.quote(filename)}"

    # -- building -------------------------------------------------------------------------------
    def _checkpoints(self, logs: Path) -> list[int]:
        found = sorted(
            int(match.group(1))
            for path in (logs.iterdir() if logs.is_dir() else ())
            if (match := re.fullmatch(r"\$store\$observation_ckpt\.(\d+)\.gz", path.name))
        )
        return found if self._max_runs is None else found[: self._max_runs]

    def _build(
        self, folder: Path, root: Path, download: bool | str, allow_download: bool
    ) -> tuple[TensorDictBase, dict]:
        logs = self.raw_dir(self.dataset_id, root)
        checkpoints = self._checkpoints(logs)
        if download == "force" or not checkpoints:
            if not allow_download:
                raise FileNotFoundError(
                    f"DQN replay dataset {self.dataset_id!r}: no built dataset and no replay log in "
                    f"{logs} (download=False); pass download=True or place the files there"
                )
            count = _CHECKPOINTS if self._max_runs is None else self._max_runs
            for checkpoint in range(count):
                for field in _FIELDS:
                    name = _store_name(field, checkpoint)
                    _files.download_url(self.url(self.dataset_id, name), logs / name)
                name = f"add_count_ckpt.{checkpoint}.gz"
                _files.download_url(self.url(self.dataset_id, name), logs / name)
            checkpoints = self._checkpoints(logs)
        return self._convert(logs, checkpoints, folder)

    def _convert(
        self, logs: Path, checkpoints: list[int], folder: Path
    ) -> tuple[TensorDictBase, dict]:
        layout: list[tuple[int, int, int]] = []  # (checkpoint, rows, oldest)
        frame_shape: tuple = ()
        dtypes: dict[str, np.dtype] = {}
        for checkpoint in checkpoints:
            shapes = {}
            for field in _FIELDS:
                path = logs / _store_name(field, checkpoint)
                if not path.exists():
                    raise FileNotFoundError(
                        f"DQN replay dataset {self.dataset_id!r}: checkpoint {checkpoint} has no "
                        f"{path.name} in {logs}"
                    )
                try:
                    with gzip.open(path, "rb") as stream:
                        shapes[field], dtypes[field] = _npy_header(stream)
                except (OSError, ValueError) as err:
                    raise RuntimeError(
                        f"DQN replay dataset {self.dataset_id!r}: {path} is not a gzip-compressed "
                        f".npy array ({err}); delete it or pass download='force'"
                    ) from err
            rows = shapes["observation"][0]
            if any(shape[0] != rows for shape in shapes.values()):
                raise RuntimeError(
                    f"DQN replay dataset {self.dataset_id!r}: checkpoint {checkpoint} arrays have "
                    f"different lengths: { {f: s[0] for f, s in shapes.items()} }"
                )
            frame_shape = shapes["observation"][1:]
            count_path = logs / f"add_count_ckpt.{checkpoint}.gz"
            adds = _read_scalar(count_path) if count_path.exists() else rows
            oldest = adds % rows if adds >= rows else 0
            layout.append((checkpoint, min(rows, adds), oldest))
        total = sum(rows for _, rows, _ in layout)
        if total == 0:
            raise RuntimeError(f"DQN replay dataset {self.dataset_id!r} holds no step")
        entries = {
            ("observation",): ((total, *frame_shape), torch.uint8),
            ("action",): ((total,), torch.int64),
            ("next", "reward"): ((total, 1), torch.float32),
            ("episode",): ((total,), torch.int64),
        }
        for name in ("done", "terminated", "truncated"):
            entries[(name,)] = ((total, 1), torch.bool)
            entries[("next", name)] = ((total, 1), torch.bool)
        data = _files.allocate(folder, entries, (total,))
        staging = {
            "observation": data.get("observation").numpy(),
            "action": np.empty(total, dtypes["action"]),
            "reward": np.empty(total, dtypes["reward"]),
            "terminal": np.empty(total, dtypes["terminal"]),
        }
        jobs = []
        start = 0
        for checkpoint, rows, oldest in layout:
            for field in _FIELDS:
                jobs.append((logs / _store_name(field, checkpoint), staging[field], start, oldest))
            start += rows

        def run(job: tuple) -> None:
            path, dest, offset, oldest = job
            try:
                _stream_rows(path, dest, offset, oldest)
            except (OSError, ValueError, EOFError) as err:
                raise RuntimeError(
                    f"DQN replay dataset {self.dataset_id!r}: cannot read {path} ({err}); delete "
                    "it or pass download='force'"
                ) from err

        if self.num_procs > 0:
            with ThreadPoolExecutor(self.num_procs) as pool:
                list(pool.map(run, jobs))
        else:
            for job in jobs:
                run(job)
        terminal = staging["terminal"].astype(bool)
        truncated = np.zeros(total, bool)
        truncated[-1] = not terminal[-1]
        data.get("action").copy_(torch.from_numpy(staging["action"].astype(np.int64)))
        data.get(("next", "reward")).copy_(
            torch.from_numpy(staging["reward"].astype(np.float32)).unsqueeze(-1)
        )
        data.get(("next", "terminated")).copy_(torch.from_numpy(terminal).unsqueeze(-1))
        data.get(("next", "truncated")).copy_(torch.from_numpy(truncated).unsqueeze(-1))
        data.get(("next", "done")).copy_(torch.from_numpy(terminal | truncated).unsqueeze(-1))
        data.get("episode").copy_(torch.from_numpy(episode_ids(terminal | truncated)))
        metadata = {"dataset_id": self.dataset_id, "checkpoints": [c for c, _, _ in layout]}
        return data, metadata
