"""Whole-buffer reads and in-place writes of a replay buffer's stored TensorDicts.

These are the methods of :class:`~tdrl.data.replay_buffers.ReplayBuffer` that read every
stored item at once (e.g. to compute value targets over the whole buffer) and write results
back key by key, without moving the write cursor or the length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.storages import TensorStorage

__all__ = ["InPlaceAccess"]


class InPlaceAccess:
    """Mixin of :class:`ReplayBuffer`: whole-buffer reads and in-place TensorDict writes.

    Reads and writes address the stored items as :meth:`ReplayBuffer.__getitem__` shows
    them (``rb[:]``), in the layout :meth:`ReplayBuffer.extend` received them. The key-wise
    writes (:meth:`set_`, :meth:`set_at_`, :meth:`update_`) keep the items' priorities.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(3)}, [3]))
        >>> data = rb.read_all_in_order()
        >>> data["target"] = data["obs"] * 2
        >>> rb.write_all(data)
        >>> rb["target"].tolist()
        [0, 2, 4]
        >>> rb.set_at_("target", torch.tensor([-1]), torch.tensor([0]))
        >>> rb["target"].tolist()
        [-1, 2, 4]
    """

    def read_all_in_order(self, end: int | None = None) -> Any:
        """A copy of the stored items ``[0, end)`` in storage order (all of them by default).

        Unlike :meth:`ReplayBuffer.sample`, nothing is drawn or transformed: this is
        ``rb[:end]``, for a pass over the whole buffer followed by :meth:`write_all`.
        """
        return self[slice(None, end)]

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write ``data`` over the stored items ``[0, end)``, as read by :meth:`read_all_in_order`.

        Keys of ``data`` the storage lacks are added to it (zero-filled elsewhere).
        """
        self[slice(None, end)] = data

    def set_(self, key: Any, value: torch.Tensor) -> None:
        """Overwrite the entry ``key`` of every stored item with ``value``, in place."""
        self._update_in_place("set_", lambda view: view.set_(key, value))

    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> None:
        """Overwrite the entry ``key`` of the stored items at ``index`` with ``value``, in place."""
        self._update_in_place("set_at_", lambda view: view.set_at_(key, value, index))

    def update_(self, data: TensorDictBase) -> None:
        """Overwrite, in place, the entries of every stored item that ``data`` holds."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"update_ expects a TensorDict of the stored items' shape, got {type(data).__name__}"
            )
        self._update_in_place("update_", lambda view: view.update_(data))

    def _update_in_place(self, name: str, write: Callable[[TensorDictBase], Any]) -> None:
        self._ensure_init()
        storage = self._storage
        if not isinstance(storage, TensorStorage):
            raise TypeError(
                f"{name} writes into the stored TensorDicts of a tensor storage, got "
                f"{type(storage).__name__}; write items with rb[index] = data instead"
            )
        with self._replay_lock:
            if not len(storage):
                raise RuntimeError(f"{name}: the storage is empty, extend the buffer first")
            view = self._data_layout_view()
            if not isinstance(view, TensorDictBase):
                raise TypeError(
                    f"{name} writes into stored TensorDicts, the storage holds "
                    f"{type(view).__name__} items"
                )
            write(view)
            # samplers caching what they read from the storage (trajectory bounds) see the
            # change; priorities are kept, as these writes update entries, not items
            storage.mark_written()
