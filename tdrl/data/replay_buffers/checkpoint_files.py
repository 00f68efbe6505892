"""Checkpoint folders: atomic writes, JSON metadata, memory-mapped tensor files, component states.

The building blocks of :mod:`tdrl.data.replay_buffers.checkpointers`. A checkpoint folder
holds a ``checkpoint.json`` naming its format and version, plus one ``.memmap`` file per
tensor; nothing is pickled. :func:`atomic_folder` writes a folder under a temporary sibling
name and renames it into place, so a crash mid-write keeps the previous folder loadable.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase
from torch.utils import _pytree

__all__ = [
    "FORMAT_VERSION",
    "META_FILE",
    "atomic_folder",
    "checkpoint_folder",
    "checkpoint_guard",
    "dtype_name",
    "dtype_of",
    "dump_state",
    "empty_tensordict",
    "load_object",
    "load_state",
    "load_tensor",
    "read_metadata",
    "save_object",
    "save_tensor",
    "tensordict_layout",
    "write_json",
    "write_marker",
]

META_FILE = "checkpoint.json"
FORMAT_VERSION = 1
_BACKUP_SUFFIX = ".tdrl-old"


# -- atomic folders ------------------------------------------------------------------------------
def _backup_path(path: str) -> str:
    parent, name = os.path.split(path)
    return os.path.join(parent, f".{name}{_BACKUP_SUFFIX}")


@contextlib.contextmanager
def checkpoint_guard(path: str | os.PathLike, *, exclusive: bool) -> Iterator[None]:
    """Hold the lock that keeps readers of the checkpoint ``path`` apart from its replacement.

    Readers share it for a whole load; :func:`atomic_folder` called with ``guarded=True``
    holds it alone while it swaps the new folder in. It is a ``flock`` on the parent folder
    (no file is left behind), which the OS releases if its holder dies, so a load never
    reads half of one version and half of another written by a concurrent dump.
    """
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    os.makedirs(parent, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, *, guarded: bool = False) -> Iterator[str]:
    """Yield a temporary sibling folder of ``path`` and move it to ``path`` once the block ends.

    If the block raises, the temporary folder is removed and ``path`` is untouched. An
    existing ``path`` is first renamed to a backup name, then deleted after the swap. With
    ``guarded``, the swap holds :func:`checkpoint_guard` alone, so guarded readers see the
    old folder or the new one, never a mix.
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(
            f"cannot write a checkpoint folder at {path}: a file that is not a folder is there "
            "(remove it or choose another path)"
        )
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    _remove_stale_temporaries(parent, name)
    tmp = os.path.join(parent, f".{name}.tdrl-tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with checkpoint_guard(path, exclusive=True) if guarded else contextlib.nullcontext():
        _swap_in(tmp, path)


def _swap_in(tmp: str, path: str) -> None:
    backup = _backup_path(path)
    if os.path.lexists(backup):
        if os.path.isdir(path):
            shutil.rmtree(backup, ignore_errors=True)
        else:
            # a previous swap was interrupted: the backup is the last complete checkpoint
            os.replace(backup, path)
    if os.path.lexists(path):
        os.replace(path, backup)
    os.replace(tmp, path)
    if os.path.lexists(backup):
        shutil.rmtree(backup, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(parent: str, name: str) -> None:
    """Delete temporary folders left by writers of ``name`` that died mid-write."""
    prefix = f".{name}.tdrl-tmp-"
    for entry in os.listdir(parent):
        if not entry.startswith(prefix):
            continue
        pid = entry[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def checkpoint_folder(path: str | os.PathLike) -> str:
    """The folder to read for the checkpoint ``path``: itself, or its backup after a crash.

    Raises:
        FileNotFoundError: when neither exists.
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        return path
    backup = _backup_path(path)
    if os.path.isdir(backup):
        return backup
    raise FileNotFoundError(f"no checkpoint folder at {path}")


# -- metadata and tensor files -------------------------------------------------------------------
def write_json(folder: str, payload: dict) -> None:
    """Write ``payload`` as the ``checkpoint.json`` of ``folder`` (flushed to disk)."""
    with open(os.path.join(folder, META_FILE), "w") as handle:
        json.dump(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())


def write_marker(folder: str, format_name: str, **extra: Any) -> None:
    """Write the ``checkpoint.json`` of a folder of format ``format_name`` (written last)."""
    write_json(folder, {"format": format_name, "version": FORMAT_VERSION, **extra})


def read_metadata(folder: str, expected: str | tuple) -> dict:
    """Read and check ``checkpoint.json`` of ``folder``; ``expected`` names the accepted formats.

    Raises:
        ValueError: when the file is missing, unreadable or of another format.
    """
    file = os.path.join(folder, META_FILE)
    if not os.path.isfile(file):
        raise ValueError(
            f"{folder} is not a tdrl checkpoint: missing {META_FILE} (a foreign folder, or a "
            "write that did not finish)"
        )
    try:
        with open(file) as handle:
            meta = json.load(handle)
    except (OSError, ValueError) as err:
        raise ValueError(f"damaged checkpoint metadata {file}: {err}") from err
    expected = (expected,) if isinstance(expected, str) else tuple(expected)
    found = meta.get("format") if isinstance(meta, dict) else None
    if found not in expected:
        raise ValueError(
            f"checkpoint format mismatch in {folder}: expected {' or '.join(expected)}, got {found!r}"
        )
    if meta.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint version mismatch in {folder}: expected {FORMAT_VERSION}, got {meta.get('version')!r}"
        )
    return meta


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def dtype_of(name: str, where: str) -> torch.dtype:
    """``"float32"`` -> ``torch.float32``; a clear error names ``where`` for unknown names."""
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"damaged checkpoint: unknown dtype {name!r} for {where}")
    return dtype


def save_tensor(folder: str, name: str, tensor: torch.Tensor) -> dict:
    """Write ``tensor`` as a memory-mapped file; returns its JSON description."""
    file = f"{name}.memmap"
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    MemoryMappedTensor.from_tensor(tensor, filename=os.path.join(folder, file), existsok=True)
    return {"file": file, "dtype": dtype_name(tensor.dtype), "shape": list(tensor.shape)}


def load_tensor(folder: str, entry: dict, what: str) -> torch.Tensor:
    """Open a tensor described by :func:`save_tensor` (memory-mapped, read from disk lazily).

    Raises:
        ValueError: when the file is missing or its size does not match the description.
    """
    try:
        file = os.path.join(folder, entry["file"])
        dtype = dtype_of(entry["dtype"], what)
        shape = torch.Size(int(size) for size in entry["shape"])
    except (KeyError, TypeError) as err:
        raise ValueError(f"damaged checkpoint metadata for {what} in {folder}: {err!r}") from err
    if os.path.dirname(os.path.normpath(file)) != os.path.normpath(folder):
        raise ValueError(
            f"damaged checkpoint metadata for {what}: file {entry['file']!r} is outside {folder}"
        )
    if os.path.islink(file):
        raise ValueError(
            f"damaged checkpoint: the file of {what} ({file}) is a symbolic link; a checkpoint "
            "only reads files inside its folder"
        )
    if not os.path.isfile(file):
        raise ValueError(f"damaged checkpoint: the file of {what} is missing ({file})")
    expected = shape.numel() * dtype.itemsize
    size = os.path.getsize(file)
    if size != expected:
        raise ValueError(
            f"damaged checkpoint: the file of {what} ({file}) has {size} bytes, expected {expected} "
            f"for shape {tuple(shape)} and dtype {dtype}"
        )
    if expected == 0:
        return torch.empty(shape, dtype=dtype)
    return MemoryMappedTensor.from_filename(file, dtype=dtype, shape=shape)


# -- TensorDicts, tensors and pytrees -----------------------------------------------------------
def tensordict_layout(td: TensorDictBase) -> dict:
    """The batch sizes of ``td`` and of its nested TensorDicts (by ``/``-joined key)."""
    nodes = {}
    for key in td.keys(include_nested=True):
        value = td.get(key)
        if isinstance(value, TensorDictBase):
            nodes["/".join(key if isinstance(key, tuple) else (key,))] = list(value.batch_size)
    return {"batch_size": list(td.batch_size), "nodes": nodes}


def empty_tensordict(layout: dict) -> TensorDict:
    """A TensorDict with the nested structure and batch sizes of :func:`tensordict_layout`."""
    td = TensorDict({}, batch_size=layout["batch_size"])
    for name, batch in sorted(layout["nodes"].items(), key=lambda item: item[0].count("/")):
        td.set(tuple(name.split("/")), TensorDict({}, batch_size=batch))
    return td


def save_object(folder: str, name: str, value: Any) -> dict:
    """Write a tensor, a TensorDict or a pytree of tensors as memory-mapped files.

    Returns its JSON description for :func:`load_object`; files are named after ``name``.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(value, torch.Tensor):
        return {"tensor": save_tensor(folder, name, value)}
    if isinstance(value, TensorDictBase):
        entries = []
        for number, key in enumerate(value.keys(include_nested=True, leaves_only=True)):
            key = key if isinstance(key, tuple) else (key,)
            leaf = value.get(key)
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(
                    f"cannot save the entry {key} of a TensorDict: expected a tensor, got "
                    f"{type(leaf).__name__}"
                )
            entry = save_tensor(folder, f"{name}_{number}", leaf)
            entry["key"] = list(key)
            entries.append(entry)
        return {"tensordict": {"layout": tensordict_layout(value), "entries": entries}}
    leaves, spec = _pytree.tree_flatten(value)
    if leaves and all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        try:
            treespec = _pytree.treespec_dumps(spec)
        except Exception as err:  # noqa: BLE001 - any container pytree cannot describe
            raise TypeError(f"cannot save a pytree structured as {spec}: {err}") from err
        saved = [save_tensor(folder, f"{name}_{i}", leaf) for i, leaf in enumerate(leaves)]
        return {"pytree": {"treespec": treespec, "leaves": saved}}
    raise TypeError(
        f"cannot save {type(value).__name__}: expected a tensor, a TensorDict or a pytree of tensors"
    )


def load_object(folder: str, entry: dict, what: str) -> Any:
    """Read what :func:`save_object` wrote (tensors stay memory-mapped: copy what you keep).

    Raises:
        ValueError: when the description or the files are damaged.
    """
    if not isinstance(entry, dict):
        raise ValueError(f"damaged checkpoint metadata for {what} in {folder}: {entry!r}")
    if "tensor" in entry:
        return load_tensor(folder, entry["tensor"], what)
    if "tensordict" in entry:
        td = empty_tensordict(entry["tensordict"]["layout"])
        for leaf in entry["tensordict"]["entries"]:
            td.set(tuple(leaf["key"]), load_tensor(folder, leaf, f"{what} at key {leaf['key']}"))
        return td
    if "pytree" in entry:
        leaves = [
            load_tensor(folder, leaf, f"{what}, leaf {i}")
            for i, leaf in enumerate(entry["pytree"]["leaves"])
        ]
        return _pytree.tree_unflatten(leaves, _pytree.treespec_loads(entry["pytree"]["treespec"]))
    raise ValueError(f"damaged checkpoint: unknown kind of {what} in {folder}")


# -- generic state dicts (samplers, writers) -----------------------------------------------------
def _encode(value: Any, folder: str, name: str, counter: list) -> Any:
    if isinstance(value, torch.Tensor):
        counter[0] += 1
        return {"__tensor__": save_tensor(folder, f"state_{counter[0]}", value)}
    if isinstance(value, torch.dtype):
        return {"__dtype__": dtype_name(value)}
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"cannot save the state entry {name}: key {key!r} is not a str")
        return {
            "__dict__": {k: _encode(v, folder, f"{name}.{k}", counter) for k, v in value.items()}
        }
    if isinstance(value, (list, tuple)):
        return [_encode(v, folder, f"{name}[{i}]", counter) for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"cannot save the state entry {name}: expected tensors, numbers, strings or containers of "
        f"those, got {type(value).__name__}"
    )


def _decode(value: Any, folder: str, name: str) -> Any:
    if isinstance(value, dict):
        if "__tensor__" in value:
            return load_tensor(folder, value["__tensor__"], name).clone()
        if "__dtype__" in value:
            return dtype_of(value["__dtype__"], name)
        if "__dict__" in value:
            return {k: _decode(v, folder, f"{name}.{k}") for k, v in value["__dict__"].items()}
        raise ValueError(f"damaged checkpoint: unexpected entry {name} in {folder}")
    if isinstance(value, list):
        return [_decode(v, folder, f"{name}[{i}]") for i, v in enumerate(value)]
    return value


def dump_state(component: Any, path: str | os.PathLike) -> None:
    """Save ``component.state_dict()`` (a sampler or writer) under ``path``, atomically."""
    with atomic_folder(path) as folder:
        state = _encode(component.state_dict(), folder, type(component).__name__, [0])
        write_json(
            folder,
            {
                "format": "tdrl.state",
                "version": FORMAT_VERSION,
                "class": type(component).__name__,
                "state": state,
            },
        )


def load_state(component: Any, path: str | os.PathLike) -> None:
    """Restore a state saved by :func:`dump_state` into ``component``.

    Raises:
        ValueError: when the folder is damaged, foreign, or saved from another class.
    """
    folder = checkpoint_folder(path)
    meta = read_metadata(folder, "tdrl.state")
    if meta.get("class") != type(component).__name__:
        raise ValueError(
            f"checkpoint class mismatch in {folder}: expected a {type(component).__name__} state, "
            f"got {meta.get('class')!r}"
        )
    component.load_state_dict(_decode(meta["state"], folder, type(component).__name__))
