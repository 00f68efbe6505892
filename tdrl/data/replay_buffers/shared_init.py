"""Lazy storages shared before their first write: one process allocates, the others map its files.

A shared lazy storage gets a folder when it is shared. The first process to write allocates
every leaf there as a file and then writes a small layout record; the other processes read
the record on their next access and map the same files, so every process sees one content.
"""

from __future__ import annotations

import math
import os
import pickle
import shutil
import tempfile
from typing import Any

import torch
from torch.utils._pytree import treespec_dumps, treespec_loads

from tdrl.data.replay_buffers.process_lock import _LOCK_DIR

__all__ = [
    "SHARED_ROOT",
    "leaf_file",
    "map_file",
    "new_shared_dir",
    "read_layout",
    "remove_dir",
    "write_layout",
]

_LAYOUT = "layout.pkl"

#: Where the folders of shared tensor storages are made (shared memory when the system has it).
SHARED_ROOT = _LOCK_DIR


def new_shared_dir(scratch_dir: str | None = None) -> str:
    """A folder for the files of a shared storage: ``scratch_dir`` or a new temporary one.

    A layout record left in ``scratch_dir`` by an earlier storage is removed, so that the
    processes sharing this storage do not map stale files.
    """
    if scratch_dir is None:
        return tempfile.mkdtemp(prefix="tdrl-shared-", dir=SHARED_ROOT)
    os.makedirs(scratch_dir, exist_ok=True)
    try:
        os.unlink(os.path.join(scratch_dir, _LAYOUT))
    except FileNotFoundError:
        pass
    return scratch_dir


def remove_dir(path: str, owner: int) -> None:
    """Remove ``path`` when called in process ``owner`` (a forked copy leaves it alone)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def leaf_file(folder: str, position: int) -> str:
    """The file holding leaf number ``position`` of a storage kept in ``folder``."""
    return os.path.join(folder, f"leaf_{position}.memmap")


def map_file(filename: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """A plain tensor of ``shape`` mapped onto ``filename`` (created when missing), shared by every process mapping it."""
    numel = math.prod(shape)
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_file(filename, shared=True, size=numel, dtype=dtype).view(shape)


def write_layout(folder: str, layout: dict[str, Any]) -> None:
    """Publish the layout record (atomically: readers see all of it or nothing)."""
    path = os.path.join(folder, _LAYOUT)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as file:
        pickle.dump(layout, file)
    os.replace(tmp, path)


def read_layout(folder: str) -> dict[str, Any] | None:
    """The layout record of ``folder``, or ``None`` while no process has allocated."""
    try:
        with open(os.path.join(folder, _LAYOUT), "rb") as file:
            return pickle.load(file)
    except FileNotFoundError:
        return None


class SharedInit:
    """What a lazy tensor storage needs to be shared before its first write.

    Mixed into :class:`~tdrl.data.replay_buffers.TensorStorage`: :meth:`_enable_shared_init`
    picks the folder (in the process that shares the storage, before the others start),
    :meth:`_first_write` allocates or maps under a :class:`ProcessLock`, and
    :meth:`_attached` maps what another process allocated.
    """

    _shared_dir: str | None = None
    _shared_lock: Any = None
    _shared_finalizer: Any = None

    def _new_shared_dir(self) -> str:
        return new_shared_dir()

    def _removes_shared_dir(self) -> bool:
        return True

    def _map_leaf(
        self, filename: str, shape: tuple, dtype: torch.dtype, create: bool = False
    ) -> torch.Tensor:
        return map_file(filename, shape, dtype)

    def _allocate_shared(self, template: list, first: int = 0) -> list[torch.Tensor]:
        """Leaves ``first``, ``first + 1``... as files of the shared folder."""
        if first == 0:
            self._shared_leaves = []
        tensors = []
        for position, (key, shape, dtype) in enumerate(template, start=first):
            filename = leaf_file(self._shared_dir, position)
            tensors.append(self._map_leaf(filename, shape, dtype, create=True))
            self._shared_leaves.append((key, tuple(shape), dtype))
        return tensors

    def _enable_shared_init(self) -> None:
        """Make the first write of any process allocate where every process sees it."""
        if self._shared_dir is not None or self._td is not None:
            return
        import weakref

        from tdrl.data.replay_buffers.process_lock import ProcessLock

        folder = self._new_shared_dir()
        self._shared_lock = ProcessLock("shared storage allocation lock", timeout=None)
        if self._removes_shared_dir():
            self._shared_finalizer = weakref.finalize(self, remove_dir, folder, os.getpid())
        self._shared_dir = folder

    def _first_write(self, data: Any, batched: bool) -> None:
        """Allocate from ``data``, or map the storage another process allocated first."""
        if self._shared_dir is None:
            self._init(data, batched=batched)
            return
        with self._shared_lock:
            if self._attach_shared():
                return
            self._init(data, batched=batched)
            td = self._td
            subs = [
                (key, tuple(value.batch_size))
                for key, value in td.items(include_nested=True)
                if not isinstance(value, torch.Tensor)
            ]
            write_layout(
                self._shared_dir,
                {
                    "kind": self._kind,
                    "treespec": None if self._treespec is None else treespec_dumps(self._treespec),
                    "tc_types": self._tc_types,
                    "max_size": self.max_size,
                    "batch_size": tuple(td.batch_size),
                    "leaves": self._shared_leaves,
                    "sub_batches": subs,
                },
            )

    def _attached(self) -> bool:
        """Whether the storage is allocated here, mapping another process's allocation if any."""
        return self._td is not None or (self._shared_dir is not None and self._attach_shared())

    def _attach_shared(self) -> bool:
        from tensordict import TensorDict

        folder = self._shared_dir
        layout = read_layout(folder)
        if layout is None:
            return False
        source: dict = {}
        for position, (key, shape, dtype) in enumerate(layout["leaves"]):
            node = source
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = self._map_leaf(leaf_file(folder, position), shape, dtype)
        td = TensorDict(source, batch_size=layout["batch_size"], device="cpu")
        for key, batch in layout["sub_batches"]:
            td.get(key).batch_size = batch
        self._kind = layout["kind"]
        spec = layout["treespec"]
        self._treespec = None if spec is None else treespec_loads(spec)
        self._tc_types = layout["tc_types"]
        self.max_size = layout["max_size"]
        self._td = td
        self._build_plans()
        return True

    def _shared_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Pickled copies map the files again instead of carrying the tensors."""
        if self._shared_dir is not None:
            state["_td"] = None
            state["_shared_finalizer"] = None
        return state
