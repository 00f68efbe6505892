"""How a tensor storage lays out its items: one TensorDict of leaves, whatever the item type.

:class:`TensorLayout` is mixed into :class:`~tdrl.data.replay_buffers.TensorStorage`. It
turns tensors, TensorDicts, tensorclasses and pytrees into one TensorDict (``kind`` says
which form to give back), allocates it from the first data written, adds entries that later
data brings, and exposes the layout publicly for checkpointers (:attr:`TensorLayout.content`,
:meth:`TensorLayout.adopt_content`, ...).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, is_tensorclass
from torch.utils import _pytree

from tdrl.data.replay_buffers.utils import (
    collect_leaves,
    keys_of,
    non_tensor_error,
    non_tensor_key,
    retyped,
    tensordict_plan,
    untyped,
)

__all__ = ["TENSOR_KEY", "TensorLayout", "as_key_tuple"]

# the key of the single leaf of a storage holding plain tensors
TENSOR_KEY = "_tensor"


def as_key_tuple(key: Any) -> tuple:
    """A TensorDict key as a tuple (``"a"`` -> ``("a",)``)."""
    return key if isinstance(key, tuple) else (key,)


class TensorLayout:
    """The layout half of a tensor storage: kind, the TensorDict of leaves and its read plans.

    Subclasses set ``ndim``, ``max_size`` and ``device`` and implement ``_attached`` (whether
    the content exists in any process), ``_allocate`` (tensors for a template) and the
    write-generation hooks used by ``_build_plans``.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> storage = LazyTensorStorage(4)
        >>> storage.set(0, torch.zeros(3))
        >>> storage.kind, storage.content.shape, storage.stored_keys
        ('tensor', torch.Size([4]), [('_tensor',)])
    """

    _kind: str | None = None
    _td: TensorDictBase | None = None
    _treespec: Any = None
    _tc_types: dict[tuple, type] | None = None

    @property
    def content(self) -> TensorDictBase | None:
        """The stored TensorDict: every row of every leaf (``None`` before allocation).

        Tensors and pytrees are held as TensorDicts too (see :attr:`kind`). Rows past
        :attr:`len_along_dim0` hold stale or uninitialized values. Checkpointers read and
        fill it in place; after writing it directly, call :meth:`set_len_along_dim0`.
        """
        if self._td is None:
            self._attached()
        return self._td

    @property
    def kind(self) -> str | None:
        """What the items are: ``"tensordict"``, ``"tensor"`` or ``"pytree"`` (``None`` before allocation)."""
        if self._td is None:
            self._attached()
        return self._kind

    @property
    def treespec(self) -> Any:
        """The pytree structure of the items when :attr:`kind` is ``"pytree"``, else ``None``."""
        return self._treespec

    @property
    def stored_keys(self) -> list[tuple]:
        """The keys of the stored leaves in :attr:`content`, in storage order."""
        return list(self._keys) if self._td is not None else []

    def wrap_content(self, td: TensorDictBase) -> Any:
        """Turn rows of :attr:`content` into the stored form (TensorDict, tensor or pytree)."""
        return self._wrap(td)

    def allocate_leaves(self, template: list) -> list[torch.Tensor]:
        """New tensors, where this storage keeps its data, for ``(key, shape, dtype)`` entries.

        A memory-mapped storage makes files, a shared one shared memory. Fill a
        TensorDict with them and hand it to :meth:`adopt_content`.
        """
        return self._allocate(template)

    def adopt_content(self, td: TensorDictBase, *, kind: str, treespec: Any = None) -> None:
        """Make ``td`` (built from :meth:`allocate_leaves`) the storage's content.

        Args:
            td: the TensorDict of all rows; moved to the storage's device.
            kind: ``"tensordict"``, ``"tensor"`` or ``"pytree"`` (see :attr:`kind`).
            treespec: the pytree structure when ``kind`` is ``"pytree"``.
        """
        if kind not in ("tensordict", "tensor", "pytree"):
            raise ValueError(f"kind must be 'tensordict', 'tensor' or 'pytree', got {kind!r}")
        device = self._storage_device()
        if device is not None:
            td = td.to(device)
        self._kind = kind
        if treespec is not None:
            self._treespec = treespec
        self._td = td
        self._build_plans()

    def _adopt(self, storage: Any) -> None:
        """Wrap a container (tensor, TensorDict, tensorclass or pytree) as the internal TensorDict."""
        if isinstance(storage, TensorDictBase) or is_tensorclass(storage):
            self._kind = "tensordict"
            td, self._tc_types = untyped(storage)
        elif isinstance(storage, torch.Tensor):
            self._kind = "tensor"
            td = TensorDict({TENSOR_KEY: storage}, batch_size=storage.shape[: self.ndim])
        else:
            leaves, self._treespec = _pytree.tree_flatten(storage)
            if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
                raise TypeError(
                    f"{type(self).__name__} stores tensors, TensorDicts or pytrees of tensors; "
                    f"got {type(storage).__name__}"
                )
            self._kind = "pytree"
            td = TensorDict(
                {str(i): leaf for i, leaf in enumerate(leaves)},
                batch_size=leaves[0].shape[: self.ndim],
            )
        if td.batch_dims < self.ndim:
            raise ValueError(
                f"storage shape mismatch: expected at least {self.ndim} batch dimensions, got {tuple(td.shape)}"
            )
        self._td = td
        self._build_plans()

    def _build_plans(self) -> None:
        td = self._td
        if self._tracks_generations and (
            self._slot_generations is None or self._slot_generations.numel() != td.shape[0]
        ):
            self._allocate_generations()
        self._plan = tensordict_plan(td, td.batch_dims)
        self._keys = keys_of(self._plan)
        self._leaves = [td.get(key) for key in self._keys]
        self._item_shape = tuple(td.shape[1:])
        # batch dims of each item beyond the ``ndim`` indexing dims ([N, T] items with ndim=1)
        self._trailing = tuple(td.shape[self.ndim :])
        flat = td if self.ndim == 1 else td.flatten(0, self.ndim - 1)
        self._flat_plan = tensordict_plan(flat, flat.batch_dims)
        self._flat_leaves = [flat.get(key) for key in self._keys]
        self._strides = torch.tensor(
            [math.prod(td.shape[d + 1 : self.ndim]) for d in range(self.ndim)], dtype=torch.long
        )
        self._out_device = self._td.device
        self._gather_programs: dict = {}  # compiled gathers of the plans above (see gather)
        # the rows along dim 0 and, per write length, the shapes a slice write expects
        self._slice_rows = td.shape[0]
        self._write_shapes: dict[int, list[torch.Size]] = {}

    def _wrap(self, td: TensorDictBase) -> Any:
        if self._kind == "tensordict":
            return td if self._tc_types is None else retyped(td, self._tc_types)
        if self._kind == "tensor":
            return td.get(TENSOR_KEY)
        return _pytree.tree_unflatten(
            [td.get(str(i)) for i in range(len(self._keys))], self._treespec
        )

    def _data_leaves(self, data: Any) -> list[torch.Tensor]:
        """The leaves of ``data`` in storage order; a clear error when the structure differs."""
        if self._kind == "tensordict":
            if not isinstance(data, TensorDictBase):
                if is_tensorclass(data):
                    data = data._tensordict
                else:
                    raise TypeError(
                        f"data type mismatch: this storage holds TensorDicts, got {type(data).__name__}"
                    )
            leaves: list[torch.Tensor] = []
            try:
                collect_leaves(data, self._plan, (), leaves)
            except ValueError:
                if not self.add_entries(data):
                    raise
                leaves = []
                collect_leaves(data, self._plan, (), leaves)
            return leaves
        if self._kind == "tensor":
            if not isinstance(data, torch.Tensor):
                if isinstance(data, TensorDictBase):
                    raise TypeError(
                        "data type mismatch: this storage holds tensors, got a TensorDict"
                    )
                data = torch.as_tensor(data)
            return [data]
        leaves, spec = _pytree.tree_flatten(data)
        if spec != self._treespec:
            raise ValueError(
                f"data structure mismatch: expected a pytree structured as {self._treespec}, got {spec}"
            )
        return leaves

    # -- lazy allocation -----------------------------------------------------------------------
    def _init(self, data: Any, batched: bool = False) -> None:
        """Allocate the storage from the structure of the first data written.

        ``data`` is one item, or items stacked along dim 0 when ``batched``.
        """
        tc_types = None
        if is_tensorclass(data):
            data, tc_types = untyped(data)
        if isinstance(data, TensorDictBase):
            kind = "tensordict"
            found = non_tensor_key(data)
            if found is not None:
                raise non_tensor_error(type(self).__name__, found, data.get(found))
            keys = [as_key_tuple(key) for key in data.keys(include_nested=True, leaves_only=True)]
            leaves = [data.get(key) for key in keys]
        elif isinstance(data, torch.Tensor):
            kind, keys, leaves = "tensor", [(TENSOR_KEY,)], [data]
        else:
            leaves, self._treespec = _pytree.tree_flatten(data)
            for position, leaf in enumerate(leaves):
                if not isinstance(leaf, (torch.Tensor, int, float, bool)):
                    raise TypeError(
                        f"{type(self).__name__} stores tensors only; got {type(leaf).__name__} "
                        f"at pytree leaf {position}"
                    )
            leaves = [torch.as_tensor(leaf) for leaf in leaves]
            kind, keys = "pytree", [(str(i),) for i in range(len(leaves))]
            if not leaves:
                raise ValueError("cannot allocate a storage from data with no tensor")
        for key, leaf in zip(keys, leaves):
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(
                    f"{type(self).__name__} stores tensors only; got {type(leaf).__name__} at key {key}"
                )
        if kind == "tensordict":
            batch = tuple(data.batch_size)
        else:
            batch = tuple(leaves[0].shape)
        # an item's batch dims: all of them for TensorDicts, the indexing ones otherwise
        item = batch[1:] if batched else batch
        other = item[: self.ndim - 1]
        if len(other) != self.ndim - 1:
            raise ValueError(
                f"data shape mismatch: a storage with ndim={self.ndim} needs data with at least "
                f"{self.ndim if batched else self.ndim - 1} batch dimensions, got batch shape {batch}"
            )
        per_row = math.prod(other)
        rows = -(-self.max_size // per_row)
        self.max_size = rows * per_row
        start = 1 if batched else 0
        template = []
        for key, leaf in zip(keys, leaves):
            template.append((key, (rows, *leaf.shape[start:]), leaf.dtype))
        tensors = self._allocate(template)
        source: dict = {}
        for (key, _, _), tensor in zip(template, tensors):
            node = source
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = tensor
        self._kind = kind
        self._tc_types = tc_types
        td_batch = (rows, *item) if kind == "tensordict" else (rows, *other)
        td = TensorDict(source, batch_size=td_batch, device=self._storage_device())
        if kind == "tensordict":
            self._restore_sub_batch(td, data, batched)
        self._td = td
        self._build_plans()

    @staticmethod
    def _restore_sub_batch(td: TensorDictBase, data: TensorDictBase, batched: bool) -> None:
        """Give the nested levels their batch dims; create the levels that hold no tensor."""
        for key, value in data.items(include_nested=True):
            if isinstance(value, TensorDictBase):
                dims = value.batch_size[1:] if batched else value.batch_size
                batch = (td.shape[0], *dims)
                level = td.get(key, None)
                if level is None:  # an empty level: nothing to allocate, kept as such
                    td.set(key, TensorDict(batch_size=batch, device=td.device))
                else:
                    level.batch_size = batch

    def _storage_device(self) -> torch.device | None:
        return self.device

    def _allocate(self, template: list, first: int = 0) -> list[torch.Tensor]:
        """Tensors for ``template`` entries ``(key, shape, dtype)``, the first being leaf ``first``."""
        if self._td is None:
            raise RuntimeError(
                f"{type(self).__name__} was not given a storage; use LazyTensorStorage to "
                "allocate lazily"
            )
        return [
            torch.empty(shape, dtype=dtype, device=self._td.device) for _, shape, dtype in template
        ]

    def add_entries(self, data: TensorDictBase) -> bool:
        """Allocate, zero-filled, the entries of ``data`` that the stored TensorDicts lack.

        A write may then bring keys the first data written did not have; the rows not
        written to hold zeros in them. The dims of ``data``'s entries past its batch dims
        are those of one stored value. In a storage shared with other processes, the new
        entries exist in this process only.

        Args:
            data: a TensorDict whose batch dims cover the stored items' batch dims.

        Returns:
            whether entries were added.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from tdrl.data.replay_buffers import LazyTensorStorage
            >>> storage = LazyTensorStorage(4)
            >>> storage.set(range(2), TensorDict({"a": torch.ones(2)}, [2]))
            >>> storage.set(range(2), TensorDict({"a": torch.ones(2), "b": torch.ones(2, 3)}, [2]))
            >>> storage.get(slice(None))["b"].shape
            torch.Size([2, 3])
        """
        if self._td is None or self._kind != "tensordict" or not isinstance(data, TensorDictBase):
            return False
        stored = set(self._keys)
        template = []
        for key in data.keys(include_nested=True, leaves_only=True):
            key = as_key_tuple(key)
            if key in stored or any(key[:i] in stored for i in range(1, len(key))):
                continue
            value = data.get(key)
            if not isinstance(value, torch.Tensor) or value.ndim < data.batch_dims:
                continue
            shape = (*self._td.shape, *value.shape[data.batch_dims :])
            template.append((key, shape, value.dtype))
        if not template:
            return False
        for (key, _, _), tensor in zip(template, self._allocate(template, first=len(self._keys))):
            tensor.zero_()
            self._td.set(key, tensor)
        self._build_plans()
        return True
