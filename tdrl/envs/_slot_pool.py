"""SlotPool: fresh one-element tensors handed out without a torch operator per call."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["SlotPool"]


class SlotPool:
    """Hands out fresh one-element tensors without running a torch operator per call.

    Tensors are carved from a preallocated block: ``unbind`` makes one view per row up front,
    and a value is written through a numpy view of the block, so a step's reward and done flags
    cost a few numpy stores instead of four tensor constructions. Every call returns a distinct
    row, so no two steps share memory; a block is freed once none of its rows is referenced.
    Blocks start small and double up to ``max_block_size``, so an env that is built but
    stepped little (or stepped in place by a batched env) does not pay for a large block.
    """

    def __init__(self, dtype: torch.dtype, max_block_size: int = 4096) -> None:
        self._dtype = dtype
        self._max_block_size = max_block_size
        self._block_size = 0
        self._next = 0

    def __getstate__(self) -> dict:
        # a copy starts empty: rows and the numpy view would no longer share memory
        return {"_dtype": self._dtype, "_max_block_size": self._max_block_size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_dtype"], state["_max_block_size"])

    def _refill(self) -> None:
        self._block_size = min(max(2 * self._block_size, 32), self._max_block_size)
        block = torch.empty(self._block_size, 1, dtype=self._dtype)
        self._array = block.numpy()
        self._rows = block.unbind(0)
        self._next = 0

    def take(self, value: Any) -> torch.Tensor:
        index = self._next
        if index == self._block_size:
            self._refill()
            index = 0
        self._array[index, 0] = value
        self._next = index + 1
        return self._rows[index]
