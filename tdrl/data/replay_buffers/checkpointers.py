"""Saving replay buffers to folders: memory-mapped tensors plus JSON metadata, written atomically.

Every checkpoint folder holds a ``checkpoint.json`` file naming its format, and one
``.memmap`` file per tensor. Nothing is pickled, so loading a folder from an untrusted
source cannot run code. A folder is written under a temporary sibling name and renamed
into place once complete: a crash in the middle of a write leaves the previous checkpoint
loadable (if the crash hits between moving the old folder aside and moving the new one in,
:func:`checkpoint_folder` finds the old one under its backup name). The folder machinery
lives in :mod:`tdrl.data.replay_buffers.checkpoint_files`.

Storage checkpointers:

* :class:`TensorStorageCheckpointer`: the stored TensorDict (or tensor / pytree) as is.
* :class:`FlatStorageCheckpointer`: TED data without the duplicated ``"next"`` entries
  (see :mod:`tdrl.data.ted`), restored on load.
* :class:`NestedStorageCheckpointer`: one jagged nested tensor per entry, one row per
  trajectory.
* :class:`H5StorageCheckpointer`: the flat layout in a compressed HDF5 file.
* :class:`ListStorageCheckpointer`: items that are tensors, TensorDicts or JSON values.
* :class:`StorageEnsembleCheckpointer`: one sub-folder per storage of an ensemble.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils import _pytree

from tdrl.data.replay_buffers.checkpoint_files import (
    FORMAT_VERSION,
    META_FILE,
    atomic_folder,
    checkpoint_folder,
    dtype_name,
    dtype_of,
    dump_state,
    load_state,
    load_tensor,
    read_metadata,
    save_tensor,
    write_json,
    write_marker,
)
from tdrl.data.replay_buffers.slice_samplers import Timeline, storage_timeline
from tdrl.data.ted import H5Combine, H5Split, duplicated_keys, find_stops, restore_next

__all__ = [
    "FlatStorageCheckpointer",
    "H5StorageCheckpointer",
    "ListStorageCheckpointer",
    "NestedStorageCheckpointer",
    "StorageCheckpointerBase",
    "StorageEnsembleCheckpointer",
    "TensorStorageCheckpointer",
    "atomic_folder",
    "checkpoint_bytes",
    "checkpoint_folder",
    "default_checkpointer",
    "dump_buffer",
    "dump_state",
    "load_buffer",
    "load_state",
    "read_metadata",
    "write_marker",
]


# -- storage checkpointers -----------------------------------------------------------------------
class StorageCheckpointerBase:
    """Base class of storage checkpointers: ``dumps(storage, path)`` and ``loads(storage, path)``.

    Examples:
        >>> isinstance(TensorStorageCheckpointer(), StorageCheckpointerBase)
        True
    """

    format_name = "tdrl.storage"

    def dumps(self, storage: Any, path: str | os.PathLike) -> None:
        """Write ``storage`` into the folder ``path`` (replaced atomically)."""
        with atomic_folder(path) as folder:
            meta = self._dump(storage, folder)
            meta.update({"format": self.format_name, "version": FORMAT_VERSION})
            write_json(folder, meta)

    def loads(self, storage: Any, path: str | os.PathLike) -> None:
        """Fill ``storage`` from the folder ``path``."""
        folder = checkpoint_folder(path)
        self._load(storage, folder, read_metadata(folder, self.format_name))

    def _dump(self, storage: Any, folder: str) -> dict:
        raise NotImplementedError

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        raise NotImplementedError


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def _tensordict_layout(td: TensorDictBase) -> dict:
    nodes = {}
    for key in td.keys(include_nested=True):
        value = td.get(key)
        if isinstance(value, TensorDictBase):
            nodes["/".join(key if isinstance(key, tuple) else (key,))] = list(value.batch_size)
    return {"batch_size": list(td.batch_size), "nodes": nodes}


def _empty_tensordict(layout: dict) -> TensorDict:
    td = TensorDict({}, batch_size=layout["batch_size"])
    for name, batch in sorted(layout["nodes"].items(), key=lambda item: item[0].count("/")):
        td.set(tuple(name.split("/")), TensorDict({}, batch_size=batch))
    return td


class ListStorageCheckpointer(StorageCheckpointerBase):
    """Saves a :class:`ListStorage` whose items are tensors, TensorDicts or JSON values.

    Examples:
        >>> import tempfile, torch
        >>> from tdrl.data.replay_buffers import ListStorage
        >>> storage = ListStorage(10)
        >>> storage.set(slice(0, 3), [torch.ones(2), {"a": 1}, "text"])
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> ListStorageCheckpointer().dumps(storage, path)
        >>> restored = ListStorage(10)
        >>> ListStorageCheckpointer().loads(restored, path)
        >>> restored.get([0, 1, 2])
        [tensor([1., 1.]), {'a': 1}, 'text']
    """

    format_name = "tdrl.ListStorage"

    def _dump(self, storage: Any, folder: str) -> dict:
        items = []
        for position, item in enumerate(storage._storage):
            if isinstance(item, torch.Tensor):
                items.append({"tensor": save_tensor(folder, f"item_{position}", item)})
            elif isinstance(item, TensorDictBase):
                td = item.to_tensordict() if not isinstance(item, TensorDict) else item
                entries = []
                for number, key in enumerate(td.keys(include_nested=True, leaves_only=True)):
                    key = key if isinstance(key, tuple) else (key,)
                    entry = save_tensor(folder, f"item_{position}_{number}", td.get(key))
                    entry["key"] = list(key)
                    entries.append(entry)
                items.append({"tensordict": {"layout": _tensordict_layout(td), "entries": entries}})
            elif _is_json_value(item):
                items.append({"json": item})
            else:
                raise TypeError(
                    f"ListStorageCheckpointer saves tensors, TensorDicts and JSON values; item "
                    f"{position} is a {type(item).__name__}"
                )
        return {"max_size": storage.max_size, "items": items}

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        items = []
        for position, item in enumerate(meta["items"]):
            what = f"item {position}"
            if "tensor" in item:
                items.append(load_tensor(folder, item["tensor"], what).clone())
            elif "tensordict" in item:
                td = _empty_tensordict(item["tensordict"]["layout"])
                for entry in item["tensordict"]["entries"]:
                    td.set(tuple(entry["key"]), load_tensor(folder, entry, what).clone())
                items.append(td)
            elif "json" in item:
                items.append(item["json"])
            else:
                raise ValueError(f"damaged checkpoint: unknown item kind for {what} in {folder}")
        if len(items) > storage.max_size:
            raise ValueError(
                f"storage size mismatch: the checkpoint holds {len(items)} items, the storage "
                f"takes at most {storage.max_size}"
            )
        storage._storage = items


def _storage_layout(storage: Any) -> dict:
    td = storage._td
    layout = _tensordict_layout(td)
    return {
        "kind": storage._kind,
        "ndim": storage.ndim,
        "max_size": storage.max_size,
        "len": storage._len_along_dim0,
        "treespec": None
        if storage._treespec is None
        else _pytree.treespec_dumps(storage._treespec),
        "layout": layout,
    }


def _leaf_entries(storage: Any) -> list[tuple[tuple, torch.Tensor]]:
    td = storage._td
    return [
        (key if isinstance(key, tuple) else (key,), td.get(key))
        for key in td.keys(include_nested=True, leaves_only=True)
    ]


def _prepare_storage(
    storage: Any, meta: dict, template: list[tuple[tuple, tuple, torch.dtype]]
) -> None:
    """Allocate a lazy storage from the checkpoint's structure, or check an allocated one."""
    if int(meta["ndim"]) != storage.ndim:
        raise ValueError(
            f"storage ndim mismatch: expected ndim={storage.ndim}, got a checkpoint with ndim={meta['ndim']}"
        )
    layout = meta["layout"]
    if storage._td is None:
        tensors = storage._allocate(template)
        td = _empty_tensordict(layout)
        for (key, _, _), tensor in zip(template, tensors):
            td.set(key, tensor)
        device = storage._storage_device()
        if device is not None:
            td = td.to(device)
        storage._kind = meta["kind"]
        if meta["treespec"] is not None:
            storage._treespec = _pytree.treespec_loads(meta["treespec"])
        storage.max_size = int(meta["max_size"])
        storage._td = td
        storage._build_plans()
        return
    expected = {key: (shape, dtype) for key, shape, dtype in template}
    current = {key: (tuple(value.shape), value.dtype) for key, value in _leaf_entries(storage)}
    for key in expected.keys() | current.keys():
        if expected.get(key) != current.get(key):
            raise ValueError(
                f"storage structure mismatch at key {key}: the storage holds "
                f"{current.get(key, 'nothing')}, the checkpoint holds {expected.get(key, 'nothing')}"
            )


def _timeline_of(meta: dict) -> Timeline:
    return Timeline(*(int(v) for v in meta["timeline"]))


def _flat_view(tensor: torch.Tensor, ndim: int) -> torch.Tensor:
    return tensor.reshape(-1, *tensor.shape[ndim:]) if ndim > 1 else tensor


class TensorStorageCheckpointer(StorageCheckpointerBase):
    """Saves a :class:`TensorStorage` (and lazy / memory-mapped ones) as memory-mapped tensors.

    Only the filled rows are written. Loading into a lazy storage allocates it (in memory-
    mapped files for :class:`LazyMemmapStorage`); an allocated storage must have the same
    structure.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(slice(0, 4), TensorDict({"obs": torch.arange(4.0)}, [4]))
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> TensorStorageCheckpointer().dumps(storage, path)
        >>> restored = LazyTensorStorage(10)
        >>> TensorStorageCheckpointer().loads(restored, path)
        >>> len(restored), restored.get(slice(None))["obs"]
        (4, tensor([0., 1., 2., 3.]))
    """

    format_name = "tdrl.TensorStorage"

    def _dump(self, storage: Any, folder: str) -> dict:
        if storage._td is None:
            return {"initialized": False}
        length = storage._len_along_dim0
        entries = []
        for number, (key, value) in enumerate(_leaf_entries(storage)):
            entry = save_tensor(folder, f"leaf_{number}", value[:length])
            entry.update({"key": list(key), "rows": value.shape[0]})
            entries.append(entry)
        return {"initialized": True, **_storage_layout(storage), "entries": entries}

    @staticmethod
    def _template(meta: dict) -> list:
        return [
            (
                tuple(e["key"]),
                (int(e["rows"]), *e["shape"][1:]),
                dtype_of(e["dtype"], str(e["key"])),
            )
            for e in meta["entries"]
        ]

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        if not meta.get("initialized"):
            storage._empty()
            return
        _prepare_storage(storage, meta, self._template(meta))
        length = int(meta["len"])
        td = storage._td
        for entry in meta["entries"]:
            key = tuple(entry["key"])
            td.get(key)[:length].copy_(load_tensor(folder, entry, f"entry {key}"))
        storage._len_tensor.fill_(length)


def _stored_tensordict(storage: Any, name: str) -> TensorDictBase:
    if getattr(storage, "_kind", None) != "tensordict" or storage._td is None:
        raise TypeError(
            f"{name} saves TensorStorages holding TED TensorDicts, got {type(storage).__name__}"
            + ("" if getattr(storage, "_td", 1) is not None else " (not initialized)")
        )
    return storage._td


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

    def __init__(
        self,
        done_keys: tuple | None = None,
        reward_keys: tuple | None = None,
        done_key: Any = ("next", "done"),
        **kwargs: Any,
    ) -> None:
        self.done_keys = (
            tuple(done_keys) if done_keys is not None else ("done", "truncated", "terminated")
        )
        self.reward_keys = tuple(reward_keys) if reward_keys is not None else ("reward",)
        self.done_key = done_key

    def _chronological(
        self, storage: Any, timeline: Timeline
    ) -> tuple[TensorDictBase, torch.Tensor]:
        """A ``[streams, length]`` view-like TensorDict in time order, and its flat storage indices."""
        order = timeline.all_flat()
        td = storage._td
        flat = td if storage.ndim == 1 else td.flatten(0, storage.ndim - 1)
        return flat, order

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
        if hasattr(storage, "_td") and storage._td is None:
            return {"initialized": False}
        td = _stored_tensordict(storage, type(self).__name__)
        timeline = storage_timeline(storage)
        flat, order = self._chronological(storage, timeline)
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
        return [
            (
                tuple(e["key"]),
                (int(e["rows"]), *e["item_shape"]),
                dtype_of(e["dtype"], str(e["key"])),
            )
            for e in meta["entries"]
        ]

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        if not meta.get("initialized"):
            storage._empty()
            return
        _prepare_storage(storage, meta, self._template(meta))
        timeline = _timeline_of(meta)
        order = timeline.all_flat()
        stops = load_tensor(folder, meta["stops"], "stops")
        loaded = {tuple(e["key"]): e for e in meta["entries"]}
        td = storage._td
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
        storage._len_tensor.fill_(timeline.length)


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
        if hasattr(storage, "_td") and storage._td is None:
            return {"initialized": False}
        td = _stored_tensordict(storage, type(self).__name__)
        timeline = storage_timeline(storage)
        flat, order = self._chronological(storage, timeline)
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
        if hasattr(storage, "_td") and storage._td is None:
            return {"initialized": False}
        td = _stored_tensordict(storage, type(self).__name__)
        timeline = storage_timeline(storage)
        flat, order = self._chronological(storage, timeline)
        chrono = flat[order].reshape(timeline.streams, timeline.length)
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
            storage._empty()
            return
        file = os.path.join(folder, os.path.basename(str(meta.get("file", ""))))
        if not os.path.isfile(file):
            raise ValueError(f"damaged checkpoint: the HDF5 file {file} is missing")
        _prepare_storage(storage, meta, self._template(meta))
        timeline = _timeline_of(meta)
        order = timeline.all_flat()
        chrono = H5Combine()(file).reshape(-1)
        td = storage._td
        for entry in meta["entries"]:
            key = tuple(entry["key"])
            value = chrono.get(key, None)
            if value is None:
                raise ValueError(f"damaged checkpoint: entry {key} is missing from {file}")
            dst = _flat_view(td.get(key), storage.ndim)
            dst.index_copy_(0, order, value.to(device=dst.device, dtype=dst.dtype))
        storage._len_tensor.fill_(timeline.length)


class StorageEnsembleCheckpointer(StorageCheckpointerBase):
    """Saves each storage of a :class:`StorageEnsemble` in its own sub-folder.

    Examples:
        >>> import tempfile, torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> from tdrl.data.replay_buffers.ensemble import StorageEnsemble
        >>> ensemble = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> ensemble[0].set(slice(0, 2), torch.ones(2))
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> StorageEnsembleCheckpointer().dumps(ensemble, path)
        >>> other = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> StorageEnsembleCheckpointer().loads(other, path)
        >>> len(other[0]), len(other[1])
        (2, 0)
    """

    format_name = "tdrl.StorageEnsemble"

    def _dump(self, storage: Any, folder: str) -> dict:
        for number, sub in enumerate(storage._storages):
            default_checkpointer(sub).dumps(sub, os.path.join(folder, f"storage_{number}"))
        return {"count": len(storage._storages)}

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        if int(meta["count"]) != len(storage._storages):
            raise ValueError(
                f"storage count mismatch: the ensemble has {len(storage._storages)} storages, the "
                f"checkpoint holds {meta['count']}"
            )
        for number, sub in enumerate(storage._storages):
            default_checkpointer(sub).loads(sub, os.path.join(folder, f"storage_{number}"))


def default_checkpointer(storage: Any) -> StorageCheckpointerBase:
    """The storage's own checkpointer, or the default one for its type."""
    checkpointer = getattr(storage, "checkpointer", None)
    if checkpointer is not None:
        return checkpointer
    if hasattr(storage, "_storages"):
        return StorageEnsembleCheckpointer()
    if hasattr(storage, "_td"):
        return TensorStorageCheckpointer()
    if isinstance(getattr(storage, "_storage", None), list):
        return ListStorageCheckpointer()
    raise TypeError(f"no checkpointer for storages of type {type(storage).__name__}")


# -- whole buffers -------------------------------------------------------------------------------
def _buffer_checkpointer(buffer: Any) -> StorageCheckpointerBase:
    """The storage's checkpointer, else the buffer's ``checkpointer`` argument, else the default."""
    storage = buffer._storage
    if (
        getattr(storage, "checkpointer", None) is None
        and getattr(buffer, "checkpointer", None) is not None
    ):
        return buffer.checkpointer
    return default_checkpointer(storage)


def dump_buffer(buffer: Any, path: str | os.PathLike) -> None:
    """Save a replay buffer's storage, sampler and writer (not its transforms) under ``path``."""
    with atomic_folder(path) as folder:
        storage = buffer._storage
        _buffer_checkpointer(buffer).dumps(storage, os.path.join(folder, "storage"))
        dump_state(buffer._sampler, os.path.join(folder, "sampler"))
        dump_state(buffer._writer, os.path.join(folder, "writer"))
        extra: dict[str, Any] = {"batch_size": buffer._batch_size}
        if buffer._rng is not None:
            extra["rng"] = save_tensor(folder, "rng_state", buffer._rng.get_state())
        write_json(
            folder,
            {
                "format": "tdrl.ReplayBuffer",
                "version": FORMAT_VERSION,
                "class": type(buffer).__name__,
                "components": {
                    "storage": type(storage).__name__,
                    "sampler": type(buffer._sampler).__name__,
                    "writer": type(buffer._writer).__name__,
                },
                **extra,
            },
        )


def load_buffer(buffer: Any, path: str | os.PathLike) -> None:
    """Restore a replay buffer saved by :func:`dump_buffer`."""
    folder = checkpoint_folder(path)
    meta = read_metadata(folder, "tdrl.ReplayBuffer")
    storage = buffer._storage
    _buffer_checkpointer(buffer).loads(storage, os.path.join(folder, "storage"))
    buffer._known_max_size = storage.max_size
    sampler_folder = os.path.join(folder, "sampler")
    if storage.max_size != getattr(buffer._sampler, "_max_capacity", storage.max_size):
        buffer._sampler._storage_resized(storage.max_size)
    load_state(buffer._sampler, sampler_folder)
    load_state(buffer._writer, os.path.join(folder, "writer"))
    if hasattr(buffer._sampler, "_cache"):
        buffer._sampler._cache.clear()
    buffer._batch_size = meta.get("batch_size", buffer._batch_size)
    if "rng" in meta and buffer._rng is not None:
        buffer._rng.set_state(load_tensor(folder, meta["rng"], "rng state").clone())


def _size_of(folder: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def checkpoint_bytes(path: str | os.PathLike) -> int:
    """Total size in bytes of the files of a checkpoint folder."""
    return _size_of(checkpoint_folder(path))
