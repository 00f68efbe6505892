"""LazyMemmapStorage: a tensor storage kept in memory-mapped files."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

import torch
from tensordict import MemoryMappedTensor
from torch.utils import _pytree

from tdrl.data.replay_buffers.shared_init import new_shared_dir
from tdrl.data.replay_buffers.storages import LazyTensorStorage

__all__ = ["LazyMemmapStorage"]


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


class LazyMemmapStorage(LazyTensorStorage):
    """A tensor storage in memory-mapped files, allocated on the first write.

    The files live in ``scratch_dir`` (a temporary folder when omitted). The storage pickles
    by file name, so a buffer passed to another process writes to the same files; the length
    is kept in shared memory so every process sees it.

    With ``auto_cleanup``, the folder of the files is removed when the storage is garbage
    collected or the interpreter exits (also after Ctrl+C), by the process that created the
    files only; :meth:`cleanup` removes it at once.

    Args:
        max_size: the number of items to hold.
        scratch_dir: the folder for the memory-mapped files.
        device: where sampled batches are moved (the files are always on CPU).
        ndim: how many leading dimensions index items.
        existsok: whether existing files in ``scratch_dir`` may be overwritten.
        compilable: accepted for API compatibility; it has no effect.
        shared_init: choose the folder now, so that processes the storage is passed to before
            its first write share one allocation, whichever writes first (as
            ``ReplayBuffer(..., shared=True)`` does).
        auto_cleanup: remove the folder of the files automatically (see above). Defaults to
            ``True`` for a temporary folder and ``False`` for a ``scratch_dir`` you chose.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> storage = LazyMemmapStorage(10)
        >>> storage.set(slice(0, 2), TensorDict({"obs": torch.zeros(2, 3)}, [2]))
        >>> storage.get(torch.tensor([1, 0]))["obs"].shape
        torch.Size([2, 3])
        >>> storage.cleanup()
        True
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike | None = None,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        existsok: bool = False,
        compilable: bool = False,
        shared_init: bool = False,
        auto_cleanup: bool | None = None,
    ) -> None:
        super().__init__(max_size, device=device, ndim=ndim, compilable=compilable)
        self.scratch_dir = None if scratch_dir is None else os.fspath(scratch_dir)
        self.existsok = existsok
        self._scratch_dir_is_temp = self.scratch_dir is None
        self._auto_cleanup = self._scratch_dir_is_temp if auto_cleanup is None else auto_cleanup
        self._folder: str | None = None
        self._finalizer: weakref.finalize | None = None
        self._cleaned_up = False
        self._share_len()
        if shared_init:
            self._enable_shared_init()

    def _new_shared_dir(self) -> str:
        if self.scratch_dir is None:
            folder = tempfile.mkdtemp(prefix="tdrl_memmap_")
        else:
            folder = new_shared_dir(self.scratch_dir)
        self._folder = folder
        return folder

    def _removes_shared_dir(self) -> bool:
        return self._auto_cleanup

    def _map_leaf(
        self, filename: str, shape: tuple, dtype: torch.dtype, create: bool = False
    ) -> torch.Tensor:
        if create:
            return MemoryMappedTensor.empty(
                shape, dtype=dtype, filename=filename, existsok=self.existsok
            )
        return MemoryMappedTensor.from_filename(filename, dtype, shape)

    def _storage_device(self) -> torch.device:
        return torch.device("cpu")

    def _allocate(self, template: list, first: int = 0) -> list[torch.Tensor]:
        if self._shared_dir is not None:
            return self._allocate_shared(template, first)
        folder = self._folder if first else None
        if folder is None:
            folder = self.scratch_dir
            if folder is None:
                folder = tempfile.mkdtemp(prefix="tdrl_memmap_")
            os.makedirs(folder, exist_ok=True)
            self._folder = folder
            if self._auto_cleanup:
                self._finalizer = weakref.finalize(self, _remove_dir, folder, os.getpid())
        tensors = []
        for position, (_, shape, dtype) in enumerate(template, start=first):
            filename = os.path.join(folder, f"leaf_{position}.memmap")
            tensors.append(
                MemoryMappedTensor.empty(
                    shape, dtype=dtype, filename=filename, existsok=self.existsok
                )
            )
        return tensors

    def cleanup(self) -> bool:
        """Remove the folder of the memory-mapped files now.

        The stored data is lost for every process sharing the storage. Calling it again, or
        on a storage never written to, does nothing.

        Returns:
            whether a folder was removed.
        """
        for finalizer in (self._finalizer, self._shared_finalizer):
            if finalizer is not None:
                finalizer.detach()
        self._finalizer = self._shared_finalizer = None
        self._cleaned_up = True
        folder = self._folder
        if folder is None or not os.path.isdir(folder):
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return True

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        # the process that created the files removes them; a copy elsewhere does not
        state["_finalizer"] = None
        return state

    def _build_plans(self) -> None:
        super()._build_plans()
        if self.device is not None and self.device.type != "cpu":
            self._out_device = None

    def _gather_with(self, plan, leaves, indices, batch, extra, given=None):
        out = super()._gather_with(plan, leaves, indices, batch, extra, given)
        if self.device is not None and self.device.type != "cpu":
            return (
                out.to(self.device)
                if hasattr(out, "to")
                else _pytree.tree_map(lambda x: x.to(self.device), out)
            )
        return out
