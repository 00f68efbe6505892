"""Checkpointers for TED data in compact layouts: flat, nested (jagged) and HDF5.

TED stores the observations of step ``t + 1`` twice: under ``"next"`` at step ``t`` and at
the root of step ``t + 1``. These checkpointers write stored TED trajectories without the
copies, or one row per trajectory, and restore the storage exactly on load. They are
importable from :mod:`tdrl.data.replay_buffers.checkpointers` too.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.replay_buffers.checkpoint_files import (
    META_FILE,
    checkpoint_folder,
    dtype_name,
    load_tensor,
    read_metadata,
    save_tensor,
)
from tdrl.data.replay_buffers.checkpointers import (
    TensorStorageCheckpointer,
    _flat_view,
    _item_template,
    _prepare_storage,
    _storage_layout,
    _timeline_of,
)
from tdrl.data.replay_buffers.trajectories import Timeline, storage_timeline
from tdrl.data.ted import (
    DEFAULT_DONE_KEYS,
    H5Combine,
    H5Split,
    duplicated_keys,
    find_stops,
    restore_next,
)

__all__ = ["FlatStorageCheckpointer", "H5StorageCheckpointer", "NestedStorageCheckpointer"]


def _stored_tensordict(storage: Any, name: str) -> TensorDictBase:
    content = getattr(storage, "content", 1)
    if getattr(storage, "kind", None) != "tensordict" or content is None:
        raise TypeError(
            f"{name} saves TensorStorages holding TED TensorDicts, got {type(storage).__name__}"
            + ("" if content is not None else " (not initialized)")
        )
    return content


class FlatStorageCheckpointer(TensorStorageCheckpointer):
    """Saves TED data without the duplicated ``"next"`` observations, restoring them on load.

    Trajectories are read in chronological order (see :mod:`tdrl.data.ted`). A ``"next"``
    entry that also exists at the root is kept only at the steps where it differs from the
    root entry of the following step (trajectory ends, the newest step, any discontinuity),
    so the round trip is exact whatever the data. Tensors are processed one at a time.

    Args:
        done_keys: accepted for API compatibility (done flags are deduplicated exactly, like
            observations).
        reward_keys: leaf names of rewards (kept in full).
        done_key: the flag ending trajectories.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> obs = torch.arange(9.0).unsqueeze(-1)
        >>> data = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:],
        ...     "done": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> storage = LazyTensorStorage(8)
        >>> storage.set(slice(0, 8), data)
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> FlatStorageCheckpointer().dumps(storage, path)
        >>> restored = LazyTensorStorage(8)
        >>> FlatStorageCheckpointer().loads(restored, path)
        >>> bool((restored.get(slice(None)) == data).all())
        True
    """

    format_name = "tdrl.FlatStorage"
    _runs_hooks = False

    def __init__(
        self,
        done_keys: tuple | None = None,
        reward_keys: tuple | None = None,
        done_key: Any = ("next", "done"),
        **kwargs: Any,
    ) -> None:
        self.done_keys = tuple(done_keys) if done_keys is not None else DEFAULT_DONE_KEYS
        self.reward_keys = tuple(reward_keys) if reward_keys is not None else ("reward",)
        self.done_key = done_key

    def _chronological(
        self, storage: Any
    ) -> tuple[TensorDictBase, Timeline, TensorDictBase, torch.Tensor] | None:
        """The content a dump reads, or None for a storage not initialized yet.

        Returns the stored TED TensorDict, its timeline, a flat view of it and the flat
        indices in time order.
        """
        if getattr(storage, "content", 1) is None:
            return None
        td = _stored_tensordict(storage, type(self).__name__)
        timeline = storage_timeline(storage)
        flat = td if storage.ndim == 1 else td.flatten(0, storage.ndim - 1)
        return td, timeline, flat, timeline.all_flat()

    def _stops(
        self, flat: TensorDictBase, order: torch.Tensor, timeline: Timeline, dup: list
    ) -> torch.Tensor:
        """Timeline positions whose duplicated ``"next"`` entries must be kept (one key at a time)."""
        shape = (timeline.streams, timeline.length, -1)
        stop = torch.zeros(timeline.streams, timeline.length, dtype=torch.bool)
        stop[:, -1] = True
        done = flat.get(self.done_key, None)
        if done is not None:
            stop |= done[order].reshape(shape).ne(0).any(-1)
        for key in dup:
            current = flat.get(("next", *key))[order].reshape(shape)
            following = flat.get(key)[order].reshape(shape)
            stop[:, :-1] |= (current[:, :-1] != following[:, 1:]).any(-1)
        return stop.reshape(-1).nonzero().squeeze(1)

    def _dump(self, storage: Any, folder: str) -> dict:
        content = self._chronological(storage)
        if content is None:
            return {"initialized": False}
        td, timeline, flat, order = content
        dup = duplicated_keys(td, self.done_keys, self.reward_keys)
        stops = self._stops(flat, order, timeline, dup)
        entries = []
        for number, key in enumerate(td.keys(include_nested=True, leaves_only=True)):
            key = key if isinstance(key, tuple) else (key,)
            value = flat.get(key)
            if key[0] == "next" and key[1:] in dup:
                entry = save_tensor(folder, f"leaf_{number}", value[order[stops]])
                entry["role"] = "stops"
            else:
                entry = save_tensor(folder, f"leaf_{number}", value[order])
                entry["role"] = "full"
            entry.update(
                {
                    "key": list(key),
                    "rows": td.get(key).shape[0],
                    "item_shape": list(td.get(key).shape[1:]),
                }
            )
            entries.append(entry)
        return {
            "initialized": True,
            **_storage_layout(storage),
            "timeline": list(timeline),
            "stops": save_tensor(folder, "stops", stops),
            "entries": entries,
        }

    @staticmethod
    def _template(meta: dict) -> list:
        return _item_template(meta["entries"])

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        if not meta.get("initialized"):
            storage.empty()
            return
        _prepare_storage(storage, meta, self._template(meta))
        timeline = _timeline_of(meta)
        order = timeline.all_flat()
        stops = load_tensor(folder, meta["stops"], "stops")
        loaded = {tuple(e["key"]): e for e in meta["entries"]}
        td = storage.content
        for key, entry in loaded.items():
            dst = _flat_view(td.get(key), storage.ndim)
            value = load_tensor(folder, entry, f"entry {key}")
            if entry["role"] == "stops":
                root_entry = loaded.get(key[1:])
                if root_entry is None or root_entry["role"] != "full":
                    raise ValueError(
                        f"damaged checkpoint: {key} has no matching root entry {key[1:]}"
                    )
                root = load_tensor(folder, root_entry, f"entry {key[1:]}")
                value = restore_next(root, stops, value, 1)
            dst.index_copy_(0, order, value.to(dst.device))
        storage.set_len_along_dim0(timeline.length)


class NestedStorageCheckpointer(FlatStorageCheckpointer):
    """Saves TED data as one jagged nested tensor per entry: a row per trajectory.

    Each entry is written as the values of a jagged nested tensor (trajectories one after
    the other, in time order) and the trajectories share one offsets file, so a checkpoint
    reads back as ``torch.nested.nested_tensor_from_jagged(values, offsets)``.

    Args:
        done_keys, reward_keys, done_key: as in :class:`FlatStorageCheckpointer`.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> done = torch.tensor([0, 0, 1, 0, 1], dtype=torch.bool).unsqueeze(-1)
        >>> data = TensorDict({"obs": torch.arange(5.0), "next": {"done": done}}, [5])
        >>> storage = LazyTensorStorage(5)
        >>> storage.set(slice(0, 5), data)
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> NestedStorageCheckpointer().dumps(storage, path)
        >>> [t.tolist() for t in NestedStorageCheckpointer.read_nested(path)["obs"].unbind(0)]
        [[0.0, 1.0, 2.0], [3.0, 4.0]]
    """

    format_name = "tdrl.NestedStorage"

    def _dump(self, storage: Any, folder: str) -> dict:
        content = self._chronological(storage)
        if content is None:
            return {"initialized": False}
        td, timeline, flat, order = content
        done = flat.get(self.done_key, None)
        chrono = TensorDict({}, batch_size=[timeline.streams, timeline.length])
        if done is not None:
            chrono.set(self.done_key, done[order].reshape(timeline.streams, timeline.length, -1))
        stops = find_stops(chrono, [], self.done_key)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), stops + 1])
        entries = []
        for number, key in enumerate(td.keys(include_nested=True, leaves_only=True)):
            key = key if isinstance(key, tuple) else (key,)
            entry = save_tensor(folder, f"values_{number}", flat.get(key)[order])
            entry.update(
                {
                    "key": list(key),
                    "rows": td.get(key).shape[0],
                    "item_shape": list(td.get(key).shape[1:]),
                    "role": "full",
                }
            )
            entries.append(entry)
        return {
            "initialized": True,
            **_storage_layout(storage),
            "timeline": list(timeline),
            "offsets": save_tensor(folder, "offsets", offsets),
            "stops": save_tensor(folder, "stops", stops),
            "entries": entries,
        }

    @classmethod
    def read_nested(cls, path: str | os.PathLike) -> TensorDict:
        """The trajectories of a checkpoint as a TensorDict of jagged nested tensors."""
        folder = checkpoint_folder(path)
        meta = read_metadata(folder, cls.format_name)
        offsets = load_tensor(folder, meta["offsets"], "offsets").clone()
        out = TensorDict({}, batch_size=[offsets.numel() - 1])
        for entry in meta["entries"]:
            values = load_tensor(folder, entry, f"entry {entry['key']}").clone()
            out.set(tuple(entry["key"]), torch.nested.nested_tensor_from_jagged(values, offsets))
        return out


class H5StorageCheckpointer(FlatStorageCheckpointer):
    """Saves TED data in the flat layout to a compressed HDF5 file (needs ``h5py``).

    Args:
        checkpoint_file: the file name inside the checkpoint folder.
        done_keys, reward_keys: as in :class:`FlatStorageCheckpointer`.
        h5_kwargs: dataset options for ``h5py`` (default ``{"compression": "gzip"}``).
        **kwargs: ``done_key``, as in :class:`FlatStorageCheckpointer`.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> storage = LazyTensorStorage(6)
        >>> storage.set(slice(0, 6), TensorDict({"obs": torch.arange(6.0)}, [6]))
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> H5StorageCheckpointer().dumps(storage, path)
        >>> restored = LazyTensorStorage(6)
        >>> H5StorageCheckpointer().loads(restored, path)
        >>> restored.get(slice(None))["obs"]
        tensor([0., 1., 2., 3., 4., 5.])
    """

    format_name = "tdrl.H5Storage"

    def __init__(
        self,
        *,
        checkpoint_file: str = "checkpoint.h5",
        done_keys: tuple | None = None,
        reward_keys: tuple | None = None,
        h5_kwargs: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(done_keys=done_keys, reward_keys=reward_keys, **kwargs)
        if os.path.basename(checkpoint_file) != checkpoint_file or checkpoint_file == META_FILE:
            raise ValueError(f"checkpoint_file must be a plain file name, got {checkpoint_file!r}")
        self.checkpoint_file = checkpoint_file
        self.h5_kwargs = {"compression": "gzip"} if h5_kwargs is None else dict(h5_kwargs)

    def _dump(self, storage: Any, folder: str) -> dict:
        content = self._chronological(storage)
        if content is None:
            return {"initialized": False}
        td, timeline, flat, order = content
        chrono = flat[order].unflatten(0, (timeline.streams, timeline.length))
        splitter = H5Split(self.h5_kwargs, self.done_key, self.done_keys, self.reward_keys)
        splitter(chrono, os.path.join(folder, self.checkpoint_file))
        template = [
            {
                "key": list(k if isinstance(k, tuple) else (k,)),
                "rows": td.get(k).shape[0],
                "item_shape": list(td.get(k).shape[1:]),
                "dtype": dtype_name(td.get(k).dtype),
            }
            for k in td.keys(include_nested=True, leaves_only=True)
        ]
        return {
            "initialized": True,
            **_storage_layout(storage),
            "timeline": list(timeline),
            "file": self.checkpoint_file,
            "entries": template,
        }

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        if not meta.get("initialized"):
            storage.empty()
            return
        file = os.path.join(folder, os.path.basename(str(meta.get("file", ""))))
        if not os.path.isfile(file):
            raise ValueError(f"damaged checkpoint: the HDF5 file {file} is missing")
        _prepare_storage(storage, meta, self._template(meta))
        timeline = _timeline_of(meta)
        order = timeline.all_flat()
        chrono = H5Combine()(file).flatten(0, 1)
        td = storage.content
        for entry in meta["entries"]:
            key = tuple(entry["key"])
            value = chrono.get(key, None)
            if value is None:
                raise ValueError(f"damaged checkpoint: entry {key} is missing from {file}")
            dst = _flat_view(td.get(key), storage.ndim)
            dst.index_copy_(0, order, value.to(device=dst.device, dtype=dst.dtype))
        storage.set_len_along_dim0(timeline.length)
