"""LazyMemmapStorage: a tensor storage kept in memory-mapped files."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import torch
from tensordict import MemoryMappedTensor
from torch.utils import _pytree

from tdrl.data.replay_buffers.storages import LazyTensorStorage

__all__ = ["LazyMemmapStorage"]


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


class LazyMemmapStorage(LazyTensorStorage):
    """A tensor storage in memory-mapped files, allocated on the first write.

    The files live in ``scratch_dir`` (a temporary folder removed with the storage when
    omitted). The storage pickles by file name, so a buffer passed to another process writes
    to the same files; the length is kept in shared memory so every process sees it.

    Args:
        max_size: the number of items to hold.
        scratch_dir: the folder for the memory-mapped files.
        device: where sampled batches are moved (the files are always on CPU).
        ndim: how many leading dimensions index items.
        existsok: whether existing files in ``scratch_dir`` may be overwritten.
        compilable: accepted for API compatibility; it has no effect.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> storage = LazyMemmapStorage(10)
        >>> storage.set(slice(0, 2), TensorDict({"obs": torch.zeros(2, 3)}, [2]))
        >>> storage.get(torch.tensor([1, 0]))["obs"].shape
        torch.Size([2, 3])
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
    ) -> None:
        super().__init__(max_size, device=device, ndim=ndim, compilable=compilable)
        self.scratch_dir = None if scratch_dir is None else os.fspath(scratch_dir)
        self.existsok = existsok
        self._share_len()

    def _storage_device(self) -> torch.device:
        return torch.device("cpu")

    def _allocate(self, template: list) -> list[torch.Tensor]:
        folder = self.scratch_dir
        if folder is None:
            folder = tempfile.mkdtemp(prefix="tdrl_memmap_")
            weakref.finalize(self, _remove_dir, folder, os.getpid())
        os.makedirs(folder, exist_ok=True)
        tensors = []
        for position, (_, shape, dtype) in enumerate(template):
            filename = os.path.join(folder, f"leaf_{position}.memmap")
            tensors.append(
                MemoryMappedTensor.empty(
                    shape, dtype=dtype, filename=filename, existsok=self.existsok
                )
            )
        return tensors

    def _build_plans(self) -> None:
        super()._build_plans()
        if self.device is not None and self.device.type != "cpu":
            self._out_device = None

    def _gather_with(self, plan, leaves, indices, batch, extra):
        out = super()._gather_with(plan, leaves, indices, batch, extra)
        if self.device is not None and self.device.type != "cpu":
            return (
                out.to(self.device)
                if hasattr(out, "to")
                else _pytree.tree_map(lambda x: x.to(self.device), out)
            )
        return out
