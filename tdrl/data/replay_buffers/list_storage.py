"""List storages: Python objects in a list, or TensorDicts read back as lazy stacks.

:class:`ListStorage` holds any object; :class:`LazyStackStorage` holds TensorDicts of
varying shapes and reads batches of them as ``LazyStackedTensorDict``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase
from torch.utils import _pytree

from tdrl.data.replay_buffers.storage_base import Storage, _out_of_range

__all__ = ["LazyStackStorage", "ListStorage"]


def _clone_tensor(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


class ListStorage(Storage):
    """A storage that keeps items in a Python list; it holds any object.

    Args:
        max_size: the largest number of items; ``None`` means unbounded.

    Examples:
        >>> storage = ListStorage(10)
        >>> storage.set(slice(0, 3), ["a", 1, None])
        >>> storage.get([2, 0])
        [None, 'a']
    """

    def __init__(self, max_size: int | None = None, *, compilable: bool = False) -> None:
        super().__init__(max_size, compilable=compilable)
        if self.max_size is None:
            self.max_size = 2**62
        self._storage: list[Any] = []
        self._mutation_revision = 0
        self._last_cursor_index = -1

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Write one item (int cursor) or a sequence of items (slice / indices)."""
        self._mutation_revision += 1
        if isinstance(cursor, (int, np.integer)):
            self._set_one(int(cursor), data, set_cursor)
            if set_cursor:
                self._last_cursor_index = int(cursor)
            return
        if isinstance(cursor, slice):
            cursor = range(*cursor.indices(cursor.stop if cursor.stop is not None else len(self)))
        elif isinstance(cursor, torch.Tensor):
            cursor = cursor.reshape(-1).tolist()
        if isinstance(data, list):
            items = data
        elif isinstance(data, (torch.Tensor, TensorDictBase)):
            items = list(data.unbind(0))
        else:
            count = len(cursor)
            items = [_pytree.tree_map(lambda leaf, i=i: leaf[i], data) for i in range(count)]
        if len(cursor) != len(items):
            raise ValueError(
                f"ListStorage.set: expected {len(cursor)} items for {len(cursor)} indices, got {len(items)}"
            )
        pairs = zip(cursor, items)
        if set_cursor and cursor and max(cursor) >= len(self._storage):
            # new items are appended: write them in position order (a stable sort keeps the
            # last of repeated positions last), e.g. a wrapped write [2, ..., 9, 0, 1]
            pairs = sorted(pairs, key=lambda pair: int(pair[0]))
        for position, item in pairs:
            self._set_one(int(position), item, set_cursor)
        if set_cursor and len(cursor):
            self._last_cursor_index = int(cursor[-1])

    def _set_one(self, position: int, item: Any, set_cursor: bool) -> None:
        if position < 0 or position >= self.max_size:
            raise IndexError(f"index out of range: expected [0, {self.max_size}), got {position}")
        if position < len(self._storage):
            self._storage[position] = item
        elif position == len(self._storage) and set_cursor:
            self._storage.append(item)
        else:
            raise _out_of_range(position, len(self._storage))

    def get(self, index: Any) -> Any:
        """Read one item (int), a list of items (slice, index tensor, list of ints)."""
        length = len(self._storage)
        if isinstance(index, (int, np.integer)):
            if not -length <= index < length:
                raise _out_of_range(int(index), length)
            return self._storage[index]
        if isinstance(index, slice):
            return self._storage[index]
        indices = torch.as_tensor(index).reshape(-1)
        if indices.dtype == torch.bool:
            indices = indices.nonzero().squeeze(-1)
        indices = indices.tolist()
        if indices and not (-length <= min(indices) and max(indices) < length):
            raise _out_of_range(index, length)
        return [self._storage[i] for i in indices]

    def gather(self, index: Any) -> Any:
        """The items at a sampler's index tensor, as a list (no bounds check)."""
        storage = self._storage
        return [storage[i] for i in index.tolist()]

    def __len__(self) -> int:
        return len(self._storage)

    def empty(self) -> None:
        """Forget every item."""
        self._storage.clear()
        self._mutation_revision += 1
        self._last_cursor_index = -1

    def state_dict(self) -> dict[str, Any]:
        """The stored items (a list) for ``torch.save``."""
        return {"_storage": list(self._storage)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Replace the stored items with copies of those of ``state_dict``.

        Tensors are cloned, so later changes to ``state_dict`` do not reach the storage.
        """
        items = state_dict["_storage"]
        if not isinstance(items, list):
            raise TypeError(
                f"ListStorage state '_storage' must be a list, got {type(items).__name__}"
            )
        self._storage = [_pytree.tree_map(_clone_tensor, item) for item in items]
        self._mutation_revision += 1
        self._last_cursor_index = len(self._storage) - 1

    def __repr__(self) -> str:
        return f"ListStorage(items={len(self)}, max_size={self.max_size})"


class LazyStackStorage(ListStorage):
    """A list of TensorDicts read back as a lazy stack: items may differ in shape and keys.

    Reading several items (a slice, indices, a sampled batch) returns a
    ``LazyStackedTensorDict`` that stacks them along ``stack_dim`` without copying; entries
    whose shapes agree read as one tensor, ragged ones can be read as nested tensors
    (``sample.densify(layout=torch.jagged)``). Useful for variable-length data such as text.

    Args:
        max_size: the largest number of items; ``None`` means unbounded.
        stack_dim: the dim of the stack in the batches read.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> storage = LazyStackStorage(10)
        >>> storage.set(0, TensorDict(a=torch.zeros(3)))
        >>> storage.set(1, TensorDict(a=torch.ones(5)))
        >>> batch = storage.get([0, 1])
        >>> type(batch).__name__, batch[1]["a"].shape
        ('LazyStackedTensorDict', torch.Size([5]))
    """

    def __init__(
        self, max_size: int | None = None, *, compilable: bool = False, stack_dim: int = 0
    ) -> None:
        super().__init__(max_size, compilable=compilable)
        self.stack_dim = int(stack_dim)

    def _stack(self, items: list) -> Any:
        if not items or not all(isinstance(item, TensorDictBase) for item in items):
            return items
        return LazyStackedTensorDict.lazy_stack(items, dim=self.stack_dim)

    def get(self, index: Any) -> Any:
        """Read one item (int) or a lazy stack of items (slice, indices)."""
        out = super().get(index)
        return out if isinstance(index, (int, np.integer)) else self._stack(out)

    def gather(self, index: Any) -> Any:
        """The items at a sampler's index tensor, stacked lazily."""
        return self._stack(super().gather(index))

    def __repr__(self) -> str:
        return f"LazyStackStorage(items={len(self)}, max_size={self.max_size}, stack_dim={self.stack_dim})"
