""":class:`OpenXExperienceReplay`: Open X-Embodiment episodes (RLDS steps), in the TED layout.

Follows the RLDS episode format of the Open X-Embodiment release (as mirrored by the
``jxu124/OpenX-Embodiment`` Hugging Face dataset, one configuration per sub-dataset): each
row is an episode whose ``"data.pickle"`` entry (or the row itself) holds ``"steps"``, a
list of RLDS steps: ``observation`` (a dict), ``action``, ``reward``, ``discount``,
``is_first``, ``is_last``, ``is_terminal`` and, for language-conditioned data,
``language_instruction``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.datasets import _files
from tdrl.data.datasets._text import TextLookup
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.replay_buffers import (
    ListStorage,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    Writer,
)
from tdrl.envs.transforms.transform import Transform

__all__ = ["OpenXExperienceReplay"]

_REPO = "jxu124/OpenX-Embodiment"
_TEXT = "language_instruction"
_STEP_FLAGS = ("is_first", "is_last", "is_terminal")


def _decode(value: Any) -> Any:
    """Arrays as numpy; encoded images (bytes) decoded with Pillow."""
    if isinstance(value, (bytes, bytearray)):
        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(value)))
    return value


def _flatten(value: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _flatten(item, (*prefix, str(name)))
    else:
        yield prefix, _decode(value)


def episode_steps(row: Any) -> list[dict]:
    """The RLDS steps of a dataset row (``row["data.pickle"]["steps"]`` or ``row["steps"]``)."""
    episode = row.get("data.pickle", row) if isinstance(row, dict) else row
    steps = episode.get("steps") if isinstance(episode, dict) else None
    if not isinstance(steps, (list, tuple)):
        keys = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise RuntimeError(
            f"an Open X-Embodiment row must hold an RLDS episode with a 'steps' list (directly "
            f"or under 'data.pickle'), got {keys}"
        )
    return list(steps)


def episode_to_ted(steps: list[dict], vocabulary: dict[str, int]) -> TensorDict | None:
    """The ``T - 1`` TED transitions of an episode of ``T`` RLDS steps (None when ``T < 2``).

    Step ``t`` gives the observation and action of transition ``t`` and the reward received;
    step ``t + 1`` gives the next observation and the done flags. Language instructions become
    ids into ``vocabulary`` (extended as new strings are met).
    """
    if len(steps) < 2:
        return None
    count = len(steps) - 1
    columns: dict[tuple, list] = {}
    for step in steps:
        for key, value in _flatten({"observation": step.get("observation", {})}):
            columns.setdefault(key, []).append(value)
    out: dict[Any, torch.Tensor] = {}
    for key, values in columns.items():
        stacked = torch.as_tensor(np.stack([np.asarray(v) for v in values]))
        out[key] = stacked[:-1]
        out[("next", *key)] = stacked[1:]
    actions = [step["action"] for step in steps[:-1]]
    if isinstance(actions[0], dict):
        for key, _ in _flatten(actions[0]):
            out[("action", *key)] = torch.as_tensor(
                np.stack([np.asarray(dict(_flatten(a))[key]) for a in actions])
            )
    else:
        out[("action",)] = torch.as_tensor(np.stack([np.asarray(a) for a in actions]))
    rewards = np.asarray([float(step.get("reward", 0.0)) for step in steps[:-1]], np.float32)
    out[("next", "reward")] = torch.from_numpy(rewards).unsqueeze(-1)
    terminal = torch.tensor([bool(step.get("is_terminal", False)) for step in steps[1:]])
    truncated = torch.zeros(count, dtype=torch.bool)
    truncated[-1] = not terminal[-1]
    for name, flags in (
        ("terminated", terminal),
        ("truncated", truncated),
        ("done", terminal | truncated),
    ):
        out[("next", name)] = flags.unsqueeze(-1)
        out[(name,)] = torch.zeros(count, 1, dtype=torch.bool)
    if any(_TEXT in step for step in steps):
        ids = [vocabulary.setdefault(str(step.get(_TEXT, "")), len(vocabulary)) for step in steps]
        out[(_TEXT,)] = torch.tensor(ids[:-1])
    return TensorDict({key: value for key, value in out.items()}, batch_size=[count])


class _FillPadding(Transform):
    """Writes ``value`` at the padded steps (``"mask"`` False) of sampled slices."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        mask = next_tensordict.get("mask", None)
        if mask is None:
            # the slice sampler marks real steps in ("collector", "mask"), and only when it
            # padded; the dataset's samples always carry them in "mask"
            mask = next_tensordict.get(("collector", "mask"), None)
            if mask is None:
                mask = torch.ones(next_tensordict.shape, dtype=torch.bool)
            next_tensordict.set("mask", mask)
        if bool(mask.all()):
            return next_tensordict
        for key in next_tensordict.keys(True, True):
            if key in ("mask", "index", ("collector", "mask")):
                continue
            value = next_tensordict.get(key)
            if isinstance(value, torch.Tensor):
                pad = ~mask.view(*mask.shape, *([1] * (value.ndim - mask.ndim)))
                next_tensordict.set(key, value.masked_fill(pad, self.value))
        return next_tensordict


class OpenXExperienceReplay(BaseDatasetExperienceReplay):
    """An Open X-Embodiment sub-dataset as a replay buffer, downloaded or streamed.

    With ``download=True`` (or ``streaming=False``) the episodes of ``dataset_id`` are read
    with ``datasets`` (``pip install datasets``) and converted once to a memory-mapped TED
    folder under ``root/<dataset_id>``. With ``streaming=True`` (the default) nothing is
    stored: each :meth:`sample` reads the next episodes of the stream (in a shuffle buffer
    when ``shuffle``) and takes one random slice of each.

    Each step holds ``"observation"`` (the RLDS observation dict, nested), ``"action"``,
    ``"episode"`` (downloaded data), the done flags and ``"next"`` entries; language
    instructions come back as strings (``"language_instruction"``, stored as ids). A streamed
    dataset stores nothing (``len()`` is 0).

    Sampling returns slices of consecutive steps: ``num_slices`` slices, or slices of
    ``slice_len`` steps, per batch of ``batch_size`` steps. Without either, downloaded data
    is sampled step by step and a streamed batch is one whole episode.

    Args:
        dataset_id: the sub-dataset (a configuration of the hub dataset, e.g. ``"cmu_stretch"``).
        batch_size: steps per batch.

    Keyword Args:
        shuffle: visit episodes in random order.
        num_slices, slice_len: the slicing of batches (give at most one).
        pad: allow episodes shorter than ``slice_len``: their slices are padded with this
            value (``True`` pads with 0) and a boolean ``"mask"`` marks the real steps;
            ``None`` (default) samples only long enough episodes.
        replacement: sample with replacement (downloaded data only; default: when
            ``shuffle``).
        streaming: read the data as a stream instead of downloading it (default: when
            ``download`` is not set).
        root: where downloaded datasets are kept (default ``~/.cache/tdrl/openx``).
        download: True, False or ``"force"``.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in
            :class:`~tdrl.data.ReplayBuffer` (downloaded data).
        split_trajs: store one row per episode (downloaded data).
        strict_length: see :class:`~tdrl.data.SliceSampler`.
    """

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        shuffle: bool = True,
        num_slices: int | None = None,
        slice_len: int | None = None,
        pad: float | bool | None = None,
        replacement: bool | None = None,
        streaming: bool | None = None,
        root: str | os.PathLike | None = None,
        download: bool | str | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        split_trajs: bool = False,
        strict_length: bool = True,
    ) -> None:
        if num_slices is not None and slice_len is not None:
            raise ValueError("give at most one of num_slices and slice_len")
        if streaming is None:
            streaming = not download
        if download is None:
            download = not streaming
        if replacement is None:
            replacement = shuffle and not streaming
        if streaming and replacement:
            raise RuntimeError(
                "replacement=True is not available with streamed datasets: episodes are read "
                "once from the stream; download the dataset to sample with replacement"
            )
        if not streaming and replacement and not shuffle:
            raise RuntimeError(
                "replacement=True needs shuffle=True: with shuffle=False episodes are visited "
                "in order, once each"
            )
        self.dataset_id = dataset_id
        self.streaming = bool(streaming)
        self.shuffle = bool(shuffle)
        self.num_slices, self.slice_len = num_slices, slice_len
        self.pad = pad
        self.strict_length = strict_length
        self.split_trajs = bool(split_trajs)
        root = Path(root) if root is not None else _files.default_root("openx")
        self.__dict__["_root"] = root
        buffer = {
            "writer": writer,
            "collate_fn": collate_fn,
            "pin_memory": pin_memory,
            "prefetch": prefetch,
            "transform": transform,
            "batch_size": batch_size,
        }
        if self.streaming:
            self.__dict__["_stream"] = None
            self.__dict__["_vocabulary"] = {}
            # streamed episodes are not stored: samples are read from the stream
            BaseDatasetExperienceReplay.__init__(self, storage=ListStorage(max_size=1), **buffer)
            return

        def build(folder: Path, allow_download: bool) -> tuple[TensorDictBase, dict]:
            if not allow_download:
                raise FileNotFoundError(
                    f"Open X-Embodiment dataset {dataset_id!r}: no built dataset at "
                    f"{root / dataset_id} (download=False); pass download=True"
                )
            return self._convert(self._rows(root, streaming=False), folder)

        path = root / dataset_id
        data, metadata = self._load_or_build(path, download, {"split_trajs": split_trajs}, build)
        if sampler is None:
            sampler = self._default_sampler(replacement)
        self._open_data(data, path, metadata, {**buffer, "sampler": sampler})
        vocabulary = self.metadata.get("vocabulary") or []
        if vocabulary:
            self.insert_transform(0, TextLookup({_TEXT: vocabulary}))
        if self.pad is not None and self.pad is not False:
            self.insert_transform(0, _FillPadding(0.0 if self.pad is True else float(self.pad)))

    # -- reading the hub dataset ------------------------------------------------------------------
    def _rows(self, root: Path | None, streaming: bool) -> Any:
        """The episodes of ``dataset_id`` as a ``datasets`` dataset (or stream)."""
        datasets = _files.require("datasets", "datasets", "OpenXExperienceReplay")
        try:
            rows = datasets.load_dataset(
                _REPO,
                self.dataset_id,
                split="train",
                streaming=streaming,
                cache_dir=None if root is None else str(root / "raw"),
            )
        except Exception as err:  # network, missing configuration, parsing
            raise RuntimeError(
                f"Open X-Embodiment dataset {self.dataset_id!r}: cannot load it from the hub "
                f"dataset {_REPO!r} ({type(err).__name__}: {err})"
            ) from err
        if self.shuffle and streaming:
            rows = rows.shuffle(buffer_size=64)
        return rows

    def _default_sampler(self, replacement: bool) -> Sampler:
        pad = self.pad is not None and self.pad is not False
        if self.num_slices is None and self.slice_len is None:
            return (
                RandomSampler() if replacement else SamplerWithoutReplacement(shuffle=self.shuffle)
            )
        kwargs = {
            "num_slices": self.num_slices,
            "slice_len": self.slice_len,
            "strict_length": self.strict_length and not pad,
            "pad_output": pad,
            "traj_key": "episode",
        }
        if replacement:
            return SliceSampler(cache_values=True, **kwargs)
        return SliceSamplerWithoutReplacement(shuffle=self.shuffle, cache_values=True, **kwargs)

    def _convert(self, rows: Any, folder: Path) -> tuple[TensorDictBase, dict]:
        vocabulary: dict[str, int] = {}
        episodes = []
        for row in rows:
            data = episode_to_ted(episode_steps(row), vocabulary)
            if data is not None:
                data.set("episode", torch.full((data.shape[0],), len(episodes), dtype=torch.int64))
                episodes.append(data)
        if not episodes:
            raise RuntimeError(f"Open X-Embodiment dataset {self.dataset_id!r} holds no episode")
        try:
            data = torch.cat(episodes)
        except (RuntimeError, KeyError) as err:
            raise RuntimeError(
                f"Open X-Embodiment dataset {self.dataset_id!r}: episodes have different entries "
                f"or shapes ({err})"
            ) from err
        data = data.memmap_(str(_files.stage(folder, self.split_trajs)))
        metadata = {
            "dataset_id": self.dataset_id,
            "episodes": len(episodes),
            "vocabulary": list(vocabulary),
        }
        return _files.publish(data, folder, self.split_trajs), metadata

    # -- streaming ------------------------------------------------------------------------------
    def _next_episode(self) -> TensorDict:
        if self.__dict__["_stream"] is None:
            self.__dict__["_stream"] = iter(self._rows(None, streaming=True))
        while True:
            row = next(self.__dict__["_stream"])  # StopIteration ends an iteration
            data = episode_to_ted(episode_steps(row), self.__dict__["_vocabulary"])
            if data is not None:
                return data

    def _stream_batch(self, batch_size: int | None) -> TensorDictBase:
        if self.num_slices is None and self.slice_len is None:
            return self._with_text(self._next_episode())
        if batch_size is None:
            batch_size = self.slice_len if self.slice_len is not None else self.num_slices
        count = self.num_slices if self.num_slices is not None else batch_size // self.slice_len
        length = batch_size // count if count else 0
        if count < 1 or length * count != batch_size:
            raise ValueError(
                f"batch_size={batch_size} must be a positive multiple of "
                f"{'num_slices' if self.num_slices else 'slice_len'}"
            )
        slices = [self._slice(self._next_episode(), length) for _ in range(count)]
        return self._with_text(torch.cat(slices))

    def _slice(self, episode: TensorDict, length: int) -> TensorDict:
        steps = episode.shape[0]
        if steps < length:
            if self.pad is None or self.pad is False:
                raise RuntimeError(
                    f"The trajectory length ({steps}) is shorter than the slice length ({length}): "
                    "pass pad=<value> to pad short trajectories"
                )
            value = 0 if self.pad is True else self.pad
            mask = torch.arange(length) < steps
            padded = episode[torch.arange(length).clamp(max=steps - 1)].clone()
            padded.apply_(lambda t: t.masked_fill(~mask.view(-1, *([1] * (t.ndim - 1))), value))
            padded.set("mask", mask)
            padded.set(
                ("next", "done"),
                padded.get(("next", "done")) | (torch.arange(length) == length - 1).unsqueeze(-1),
            )
            return padded
        start = int(torch.randint(steps - length + 1, ()))
        out = episode[start : start + length].clone()
        if self.pad is not None and self.pad is not False:
            out.set("mask", torch.ones(length, dtype=torch.bool))
        truncated = out.get(("next", "truncated"))
        truncated[-1] = ~out.get(("next", "terminated"))[-1]
        out.set(("next", "done"), out.get(("next", "terminated")) | truncated)
        return out

    def _with_text(self, data: TensorDictBase) -> TensorDictBase:
        vocabulary = list(self.__dict__["_vocabulary"])
        if vocabulary and _TEXT in data.keys():
            data = TextLookup({_TEXT: vocabulary})(data)
        if len(self.transform):
            data = self.transform(data)
        return data

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Draw a batch (streamed data: read from the stream, see the class)."""
        if not self.streaming:
            return super().sample(batch_size, return_info)
        data = self._stream_batch(batch_size if batch_size is not None else self.batch_size)
        return (data, {}) if return_info else data

    def __iter__(self) -> Iterator[Any]:
        """Batches until the data is exhausted (streamed data: until the stream ends)."""
        if not self.streaming:
            yield from super().__iter__()
            return
        self.__dict__["_stream"] = None
        while True:
            try:
                yield self._stream_batch(self.batch_size)
            except StopIteration:
                return
