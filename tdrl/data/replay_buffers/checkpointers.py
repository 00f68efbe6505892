"""Saving replay buffers to folders: memory-mapped tensors plus JSON metadata, written atomically.

Every checkpoint folder holds a ``checkpoint.json`` file naming its format, and one
``.memmap`` file per tensor. Nothing is pickled, so loading a folder from an untrusted
source cannot run code. A folder is written under a temporary sibling name and renamed
into place once complete: a crash in the middle of a write leaves the previous checkpoint
loadable (if the crash hits between moving the old folder aside and moving the new one in,
:func:`checkpoint_folder` finds the old one under its backup name). The folder machinery
lives in :mod:`tdrl.data.replay_buffers.checkpoint_files`.

Storage checkpointers:

* :class:`TensorStorageCheckpointer`: the stored TensorDict (or tensor / pytree) as is,
  or what the storage's save hooks make of it (e.g. :class:`~tdrl.data.TED2Flat`).
* :class:`FlatStorageCheckpointer`: TED data without the duplicated ``"next"`` entries
  (see :mod:`tdrl.data.ted`), restored on load.
* :class:`NestedStorageCheckpointer`: one jagged nested tensor per entry, one row per
  trajectory.
* :class:`H5StorageCheckpointer`: the flat layout in a compressed HDF5 file.
* :class:`ListStorageCheckpointer`: items that are tensors, TensorDicts or JSON values.
* :class:`StorageEnsembleCheckpointer`: one sub-folder per storage of an ensemble.

The three TED layouts live in :mod:`tdrl.data.replay_buffers.ted_checkpointers`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch.utils import _pytree

from tdrl.data.replay_buffers.checkpoint_files import (
    FORMAT_VERSION,
    atomic_folder,
    checkpoint_folder,
    checkpoint_guard,
    dtype_name,
    dtype_of,
    dump_state,
    empty_tensordict,
    load_object,
    load_state,
    load_tensor,
    read_metadata,
    save_object,
    save_tensor,
    tensordict_layout,
    write_json,
    write_marker,
)
from tdrl.data.replay_buffers.storage_state import full_batch_size
from tdrl.data.replay_buffers.trajectories import Timeline, storage_timeline

__all__ = [
    "FlatStorageCheckpointer",
    "H5StorageCheckpointer",
    "ListStorageCheckpointer",
    "NestedStorageCheckpointer",
    "StorageCheckpointerBase",
    "StorageEnsembleCheckpointer",
    "StorageStateCheckpointer",
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
    # whether the storage's save / load hooks run (subclasses with a layout of their own
    # refuse storages that have hooks rather than ignore them)
    _runs_hooks = False

    def dumps(self, storage: Any, path: str | os.PathLike) -> None:
        """Write ``storage`` into the folder ``path`` (replaced atomically)."""
        self._check_hooks(storage)
        with atomic_folder(path) as folder:
            meta = self._dump(storage, folder)
            meta.update({"format": self.format_name, "version": FORMAT_VERSION})
            write_json(folder, meta)

    def loads(self, storage: Any, path: str | os.PathLike) -> None:
        """Fill ``storage`` from the folder ``path``."""
        self._check_hooks(storage)
        folder = checkpoint_folder(path)
        self._load(storage, folder, read_metadata(folder, self.format_name))

    def _check_hooks(self, storage: Any) -> None:
        if self._runs_hooks:
            return
        if getattr(storage, "save_hooks", None) or getattr(storage, "load_hooks", None):
            raise ValueError(
                f"{type(self).__name__} writes a layout of its own and runs no save / load "
                "hooks, but the storage has some registered: use the default "
                "TensorStorageCheckpointer with hooks (FlatStorageCheckpointer already "
                "writes TED data flat, without TED2Flat / Flat2TED hooks)"
            )

    def _dump(self, storage: Any, folder: str) -> dict:
        raise NotImplementedError

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        raise NotImplementedError


def _run_hooks(hooks: list[Callable], content: Any, **optional: Any) -> Any:
    """Apply ``hooks`` in order; ``optional`` keywords go to the hooks that declare them.

    Hooks written for the reference API take ``path=`` (save) or ``out=`` (load) keywords;
    plain one-argument callables work too.
    """
    for hook in hooks:
        try:
            params = inspect.signature(hook).parameters
        except (TypeError, ValueError):
            params = {}
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs = {key: value for key, value in optional.items() if var_kw or key in params}
        content = hook(content, **kwargs)
    return content


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


class ListStorageCheckpointer(StorageCheckpointerBase):
    """Saves a :class:`ListStorage` whose items are tensors, TensorDicts or JSON values.

    Pytrees of tensors are saved too. The storage's save hooks get the list of items and
    return the list to write; its load hooks get the list read back.

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
    _runs_hooks = True

    def _dump(self, storage: Any, folder: str) -> dict:
        items = list(storage)
        hooks = storage.save_hooks
        if hooks:
            items = _hooked_list(_run_hooks(hooks, items, path=folder), "save")
        entries = []
        for position, item in enumerate(items):
            if isinstance(item, (torch.Tensor, TensorDictBase)):
                entries.append(save_object(folder, f"item_{position}", item))
            elif _is_json_value(item):
                entries.append({"json": item})
            else:
                try:
                    entries.append(save_object(folder, f"item_{position}", item))
                except TypeError as err:
                    raise TypeError(
                        f"ListStorageCheckpointer saves tensors, TensorDicts, pytrees of tensors "
                        f"and JSON values; item {position} is a {type(item).__name__}"
                    ) from err
        return {"max_size": storage.max_size, "items": entries}

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        items = []
        for position, item in enumerate(meta["items"]):
            if isinstance(item, dict) and "json" in item:
                items.append(item["json"])
                continue
            value = load_object(folder, item, f"item {position}")
            if isinstance(value, (torch.Tensor, TensorDictBase)):
                items.append(value.clone())
            else:
                items.append(_pytree.tree_map(torch.clone, value))
        hooks = storage.load_hooks
        if hooks:
            items = _hooked_list(_run_hooks(hooks, items, out=None), "load")
        if len(items) > storage.max_size:
            raise ValueError(
                f"storage size mismatch: the checkpoint holds {len(items)} items, the storage "
                f"takes at most {storage.max_size}"
            )
        storage.load_state_dict({"_storage": items})


def _hooked_list(items: Any, kind: str) -> list:
    if not isinstance(items, list):
        raise TypeError(
            f"ListStorage {kind} hooks must return a list of items, got {type(items).__name__}"
        )
    return items


def _storage_layout(storage: Any) -> dict:
    layout = tensordict_layout(storage.content)
    return {
        "kind": storage.kind,
        "ndim": storage.ndim,
        "max_size": storage.max_size,
        "len": storage.len_along_dim0,
        "treespec": None if storage.treespec is None else _pytree.treespec_dumps(storage.treespec),
        "layout": layout,
        # older checkpoints cut the root batch size to ``ndim`` dims (see full_batch_size)
        "full_batch_size": True,
    }


def _leaf_entries(storage: Any) -> list[tuple[tuple, torch.Tensor]]:
    td = storage.content
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
    if storage.content is None:
        tensors = storage.allocate_leaves(template)
        td = empty_tensordict(layout)
        for (key, _, _), tensor in zip(template, tensors):
            td.set(key, tensor)
        if meta["kind"] == "tensordict" and not meta.get("full_batch_size"):
            td = full_batch_size(td, storage.ndim)
        treespec = meta["treespec"]
        storage.max_size = int(meta["max_size"])
        storage.adopt_content(
            td,
            kind=meta["kind"],
            treespec=None if treespec is None else _pytree.treespec_loads(treespec),
        )
        return
    expected = {key: (shape, dtype) for key, shape, dtype in template}
    current = {key: (tuple(value.shape), value.dtype) for key, value in _leaf_entries(storage)}
    for key in expected.keys() | current.keys():
        if expected.get(key) != current.get(key):
            raise ValueError(
                f"storage structure mismatch at key {key}: the storage holds "
                f"{current.get(key, 'nothing')}, the checkpoint holds {expected.get(key, 'nothing')}"
            )


def _item_template(entries: list[dict]) -> list[tuple[tuple, tuple, torch.dtype]]:
    """(key, storage shape, dtype) of each leaf from entries holding rows and item shapes."""
    return [
        (
            tuple(e["key"]),
            (int(e["rows"]), *e["item_shape"]),
            dtype_of(e["dtype"], str(e["key"])),
        )
        for e in entries
    ]


def _timeline_of(meta: dict) -> Timeline:
    return Timeline(*(int(v) for v in meta["timeline"]))


def _flat_view(tensor: torch.Tensor, ndim: int) -> torch.Tensor:
    return tensor.reshape(-1, *tensor.shape[ndim:]) if ndim > 1 else tensor


class TensorStorageCheckpointer(StorageCheckpointerBase):
    """Saves a :class:`TensorStorage` (and lazy / memory-mapped ones) as memory-mapped tensors.

    Only the filled rows are written. Loading into a lazy storage allocates it (in memory-
    mapped files for :class:`LazyMemmapStorage`); an allocated storage must have the same
    structure.

    When the storage has save hooks (:meth:`Storage.register_save_hook`), they get the
    items in chronological order (see :func:`chronological_content`) and what the last one
    returns (a TensorDict, a tensor or a pytree of tensors) is written instead. Loading
    such a checkpoint runs the storage's load hooks on what was written; the last one must
    give back the chronological content, which is put back in place.

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
    _runs_hooks = True

    def _dump(self, storage: Any, folder: str) -> dict:
        if storage.content is None:
            return {"initialized": False}
        if storage.save_hooks:
            return self._dump_hooked(storage, folder)
        length = storage.len_along_dim0
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

    def _dump_hooked(self, storage: Any, folder: str) -> dict:
        """Write what the save hooks make of the content, in chronological order."""
        timeline = storage_timeline(storage)
        content = chronological_content(storage, timeline)
        content = _run_hooks(storage.save_hooks, content, path=folder)
        try:
            saved = save_object(folder, "hooked", content)
        except TypeError as err:
            raise TypeError(f"cannot save what the save hooks returned: {err}") from err
        template = [
            {
                "key": list(key),
                "rows": value.shape[0],
                "item_shape": list(value.shape[1:]),
                "dtype": dtype_name(value.dtype),
            }
            for key, value in _leaf_entries(storage)
        ]
        return {
            "initialized": True,
            **_storage_layout(storage),
            "timeline": list(timeline),
            "hooked": saved,
            "template": template,
        }

    def _load_hooked(self, storage: Any, folder: str, meta: dict) -> None:
        """Run the load hooks on what :meth:`_dump_hooked` wrote and fill the storage."""
        content = load_object(folder, meta["hooked"], "the content written by the save hooks")
        content = _run_hooks(storage.load_hooks, content, out=None)
        template = _item_template(meta["template"])
        _prepare_storage(storage, meta, template)
        timeline = _timeline_of(meta)
        leaves = _content_leaves(storage, content)
        order = timeline.all_flat()
        ndim = storage.ndim
        for key, dst in _leaf_entries(storage):
            value = leaves[key]
            chrono = (timeline.length, *dst.shape[1:])
            if ndim > 1:
                chrono = (timeline.streams, timeline.length, *dst.shape[ndim:])
            if tuple(value.shape) != chrono:
                raise ValueError(
                    f"content shape mismatch at key {key} after the load hooks: expected "
                    f"{chrono} (the layout the save hooks received), got {tuple(value.shape)}"
                )
            value = value.reshape(timeline.size, *dst.shape[ndim:])
            _flat_view(dst, ndim).index_copy_(0, order, value.to(dst.device, dst.dtype))
        storage.set_len_along_dim0(timeline.length)

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        if not meta.get("initialized"):
            storage.empty()
            return
        if "hooked" in meta:
            self._load_hooked(storage, folder, meta)
            return
        if storage.load_hooks:
            raise ValueError(
                f"the checkpoint in {folder} was written without save hooks, but the storage "
                "has load hooks registered: load it into a storage without them"
            )
        length = meta["len"]
        for entry in meta["entries"]:
            saved_rows = entry["shape"][0] if entry["shape"] else 0
            if not isinstance(length, int) or not 0 <= length <= saved_rows:
                raise ValueError(
                    f"damaged checkpoint in {folder}: len must be an integer in [0, {saved_rows}] "
                    f"(the rows saved for entry {tuple(entry['key'])}), got {length!r}"
                )
        _prepare_storage(storage, meta, self._template(meta))
        td = storage.content
        for entry in meta["entries"]:
            key = tuple(entry["key"])
            td.get(key)[:length].copy_(load_tensor(folder, entry, f"entry {key}"))
        storage.set_len_along_dim0(length)


def chronological_content(storage: Any, timeline: Timeline | None = None) -> Any:
    """A copy of a tensor storage's items, oldest first, time being the last batch dim.

    The result is ``[length, *item dims]`` (``[streams, length, *item dims]`` when
    ``ndim > 1``), in the storage's form: a TensorDict, a tensor or a pytree. It is what
    save hooks receive.
    """
    timeline = storage_timeline(storage) if timeline is None else timeline
    td = storage.content
    flat = td if storage.ndim == 1 else td.flatten(0, storage.ndim - 1)
    chrono = flat[timeline.all_flat()]
    if storage.ndim > 1:
        chrono = chrono.unflatten(0, (timeline.streams, timeline.length))
    return storage.wrap_content(chrono)


def _content_leaves(storage: Any, content: Any) -> dict[tuple, torch.Tensor]:
    """The leaves of loaded content by storage key; a clear error when the structure differs."""
    hint = "(do the load hooks undo the save hooks?)"
    kind = storage.kind
    if kind == "tensordict":
        if not isinstance(content, TensorDictBase):
            raise TypeError(
                f"content type mismatch after the load hooks: expected a TensorDict, got "
                f"{type(content).__name__} {hint}"
            )
        leaves = {
            key if isinstance(key, tuple) else (key,): content.get(key)
            for key in content.keys(include_nested=True, leaves_only=True)
        }
    elif kind == "tensor":
        if not isinstance(content, torch.Tensor):
            raise TypeError(
                f"content type mismatch after the load hooks: expected a tensor, got "
                f"{type(content).__name__} {hint}"
            )
        leaves = {(storage.stored_keys[0][0],): content}
    else:
        flat, spec = _pytree.tree_flatten(content)
        if spec != storage.treespec:
            raise ValueError(
                f"content structure mismatch after the load hooks: expected a pytree "
                f"structured as {storage.treespec}, got {spec} {hint}"
            )
        leaves = {(str(i),): leaf for i, leaf in enumerate(flat)}
    expected = {key for key, _ in _leaf_entries(storage)}
    if set(leaves) != expected:
        missing = sorted(map(str, expected - set(leaves)))
        extra = sorted(map(str, set(leaves) - expected))
        raise ValueError(
            f"content keys mismatch after the load hooks: missing {missing}, unexpected "
            f"{extra} {hint}"
        )
    return leaves


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
        for number, sub in enumerate(storage.storages):
            default_checkpointer(sub).dumps(sub, os.path.join(folder, f"storage_{number}"))
        return {"count": len(storage.storages)}

    def _load(self, storage: Any, folder: str, meta: dict) -> None:
        if int(meta["count"]) != len(storage.storages):
            raise ValueError(
                f"storage count mismatch: the ensemble has {len(storage.storages)} storages, the "
                f"checkpoint holds {meta['count']}"
            )
        for number, sub in enumerate(storage.storages):
            default_checkpointer(sub).loads(sub, os.path.join(folder, f"storage_{number}"))


class StorageStateCheckpointer(StorageCheckpointerBase):
    """Saves any storage through its :meth:`~Storage.state_dict` / :meth:`~Storage.load_state_dict`.

    The default for storages other than tensor, list and ensemble storages (e.g. one written
    by a user against the :class:`Storage` contract). The state may hold tensors,
    TensorDicts and JSON values, nested in dicts and lists. Save / load hooks are not run.

    Examples:
        >>> import tempfile, torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> storage = LazyTensorStorage(4)
        >>> storage.set(slice(0, 2), torch.ones(2))
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> StorageStateCheckpointer().dumps(storage, path)
        >>> other = LazyTensorStorage(4)
        >>> StorageStateCheckpointer().loads(other, path)
        >>> other.get(slice(None))
        tensor([1., 1.])
    """

    format_name = "tdrl.state"

    def dumps(self, storage: Any, path: str | os.PathLike) -> None:
        """Write ``storage.state_dict()`` into the folder ``path`` (replaced atomically)."""
        self._check_hooks(storage)
        dump_state(storage, path)

    def loads(self, storage: Any, path: str | os.PathLike) -> None:
        """Restore a state written by :meth:`dumps` with ``storage.load_state_dict``.

        Raises:
            ValueError: when the folder is damaged or holds the state of another class.
        """
        self._check_hooks(storage)
        load_state(storage, path)


def default_checkpointer(storage: Any) -> StorageCheckpointerBase:
    """The storage's own checkpointer, or the default one for its type.

    Storages of other types are saved through their state dict
    (:class:`StorageStateCheckpointer`).
    """
    from tdrl.data.replay_buffers.ensemble import StorageEnsemble
    from tdrl.data.replay_buffers.list_storage import ListStorage
    from tdrl.data.replay_buffers.storages import TensorStorage

    checkpointer = getattr(storage, "checkpointer", None)
    if checkpointer is not None:
        return checkpointer
    if isinstance(storage, StorageEnsemble):
        return StorageEnsembleCheckpointer()
    if isinstance(storage, TensorStorage):
        return TensorStorageCheckpointer()
    if isinstance(storage, ListStorage):
        return ListStorageCheckpointer()
    if callable(getattr(storage, "state_dict", None)):
        return StorageStateCheckpointer()
    raise TypeError(f"no checkpointer for storages of type {type(storage).__name__}")


# -- whole buffers -------------------------------------------------------------------------------
def _buffer_checkpointer(buffer: Any) -> StorageCheckpointerBase:
    """The storage's checkpointer, else the buffer's ``checkpointer`` argument, else the default."""
    storage = buffer.storage
    if (
        getattr(storage, "checkpointer", None) is None
        and getattr(buffer, "checkpointer", None) is not None
    ):
        return buffer.checkpointer
    return default_checkpointer(storage)


def dump_buffer(buffer: Any, path: str | os.PathLike) -> None:
    """Save a replay buffer's storage, sampler and writer (not its transforms) under ``path``."""
    with atomic_folder(path, guarded=True) as folder:
        storage = buffer.storage
        _buffer_checkpointer(buffer).dumps(storage, os.path.join(folder, "storage"))
        dump_state(buffer.sampler, os.path.join(folder, "sampler"))
        dump_state(buffer.writer, os.path.join(folder, "writer"))
        extra: dict[str, Any] = {"batch_size": buffer.batch_size}
        if buffer.generator is not None:
            extra["rng"] = save_tensor(folder, "rng_state", buffer.generator.get_state())
        write_json(
            folder,
            {
                "format": "tdrl.ReplayBuffer",
                "version": FORMAT_VERSION,
                "class": type(buffer).__name__,
                "components": {
                    "storage": type(storage).__name__,
                    "sampler": type(buffer.sampler).__name__,
                    "writer": type(buffer.writer).__name__,
                },
                **extra,
            },
        )


def _checked_buffer_meta(folder: str, meta: dict, buffer: Any) -> tuple[Any, Any]:
    """The batch size and rng state of a buffer checkpoint, checked before anything is loaded."""
    batch_size = meta.get("batch_size", buffer.batch_size)
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(
            f"damaged checkpoint metadata in {folder}: batch_size must be a positive integer "
            f"or null, got {batch_size!r}"
        )
    rng_state = None
    if "rng" in meta and buffer.generator is not None:
        rng_state = load_tensor(folder, meta["rng"], "rng state").clone()
        try:
            torch.Generator().set_state(rng_state)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"damaged checkpoint: the rng state in {folder} is invalid") from err
    return batch_size, rng_state


def load_buffer(buffer: Any, path: str | os.PathLike) -> None:
    """Restore a replay buffer saved by :func:`dump_buffer`.

    The metadata and rng state are checked, then the sampler and writer states are loaded
    (each checks what it reads), then the storage: a damaged part raises before the storage
    is overwritten, and the sampler and writer get their previous state back.
    """
    with checkpoint_guard(path, exclusive=False):
        _load_buffer(buffer, checkpoint_folder(path))


def _load_buffer(buffer: Any, folder: str) -> None:
    meta = read_metadata(folder, "tdrl.ReplayBuffer")
    batch_size, rng_state = _checked_buffer_meta(folder, meta, buffer)
    sampler, writer, storage = buffer.sampler, buffer.writer, buffer.storage
    previous = (sampler.state_dict(), writer.state_dict())
    try:
        load_state(sampler, os.path.join(folder, "sampler"))
        load_state(writer, os.path.join(folder, "writer"))
        _buffer_checkpointer(buffer).loads(storage, os.path.join(folder, "storage"))
    except BaseException:
        sampler.load_state_dict(previous[0])
        writer.load_state_dict(previous[1])
        raise
    buffer.storage_replaced()
    buffer.batch_size = batch_size
    if rng_state is not None:
        buffer.generator.set_state(rng_state)


def _size_of(folder: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def checkpoint_bytes(path: str | os.PathLike) -> int:
    """Total size in bytes of the files of a checkpoint folder."""
    return _size_of(checkpoint_folder(path))


# The TED layouts live in their own module; they are importable from here too.
from tdrl.data.replay_buffers.ted_checkpointers import (  # noqa: E402
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    NestedStorageCheckpointer,
)
