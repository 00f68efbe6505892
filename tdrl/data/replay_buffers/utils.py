"""Small helpers shared by the replay-buffer components: leading sizes, slicing and stacking."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import (
    LazyStackedTensorDict,
    TensorDict,
    TensorDictBase,
    is_non_tensor,
    is_tensorclass,
)
from torch.utils import _pytree

from tdrl.data.replay_buffers.errors import DataValueError

__all__ = [
    "built_component",
    "copied_views",
    "pinned",
    "checked_batch_size",
    "collect_leaves",
    "expand_to_items",
    "item_list",
    "keys_of",
    "leading_dim",
    "non_tensor_error",
    "non_tensor_key",
    "move_extend_dim",
    "retyped",
    "slice_data",
    "stack_items",
    "tensordict_plan",
    "tree_iter",
    "untyped",
]

_EXTEND_TYPES = "a tensor, a TensorDict, a list of items or a pytree of tensors stacked along dim 0"


def leading_dim(data: Any) -> int:
    """Number of items in ``data``: its leading dimension (or length, for a list).

    Raises:
        ValueError: when the leaves of a pytree do not share their leading dimension.
        TypeError: when ``data`` holds no tensor (e.g. a ``range`` given to a tensor storage).

    Examples:
        >>> import torch
        >>> leading_dim({"a": torch.zeros(3, 2), "b": (torch.ones(3),)})
        3
        >>> leading_dim(range(3))
        Traceback (most recent call last):
        ...
        TypeError: extend expects a tensor, a TensorDict, a list of items or a pytree of tensors stacked along dim 0, got range
    """
    if isinstance(data, TensorDictBase):
        if not data.batch_dims:
            raise ValueError(
                "cannot extend with a TensorDict that has no batch dimension; use add()"
            )
        return data.batch_size[0]
    if isinstance(data, torch.Tensor):
        if not data.ndim:
            raise ValueError("cannot extend with a 0-d tensor; use add()")
        return data.shape[0]
    if isinstance(data, list):
        return len(data)
    leaves = _pytree.tree_leaves(data)
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    if not tensors:
        held = f" holding {type(leaves[0]).__name__}" if leaves and leaves[0] is not data else ""
        raise TypeError(f"extend expects {_EXTEND_TYPES}, got {type(data).__name__}{held}")
    sizes = {tuple(leaf.shape[:1]) for leaf in tensors}
    if len(sizes) != 1 or () in sizes:
        shapes = [tuple(leaf.shape) for leaf in tensors]
        raise ValueError(
            f"extend expects all tensors of a pytree to share their leading dimension, got shapes {shapes}"
        )
    return sizes.pop()[0]


def item_list(data: Any) -> list | None:
    """``data`` as a list of items when it is a plain sequence of objects, else ``None``.

    A ``range``, or a tuple holding anything but tensors, is a sequence of items; tensors,
    TensorDicts and pytrees of tensors are batches stacked along dim 0.

    Examples:
        >>> import torch
        >>> item_list(range(3)), item_list(("a", 1))
        ([0, 1, 2], ['a', 1])
        >>> item_list((torch.zeros(2), torch.ones(2))) is None
        True
    """
    if isinstance(data, list):
        return data
    if isinstance(data, range):
        return list(data)
    if type(data) is tuple and not all(
        isinstance(leaf, torch.Tensor) for leaf in _pytree.tree_leaves(data)
    ):
        return list(data)
    return None


def expand_to_items(value: torch.Tensor, batch: tuple[int, ...]) -> torch.Tensor:
    """Broadcast a per-item value ``[n, *rest]`` over the item dims of a ``[n, *item]`` batch.

    Items stored with batch dims of their own (``[N, T]`` trajectories in a storage indexed
    along ``N``) come out as ``[n, T]`` batches; per-item sampler values such as ``"index"``
    or importance weights are expanded (a view, no copy) to ``[n, T, *rest]``.

    Examples:
        >>> import torch
        >>> expand_to_items(torch.tensor([4, 7]), (2, 3))
        tensor([[4, 4, 4],
                [7, 7, 7]])
    """
    item = tuple(batch[1:])
    if not item or tuple(value.shape[1 : 1 + len(item)]) == item:
        return value
    rest = value.shape[1:]
    view = value.reshape(value.shape[0], *([1] * len(item)), *rest)
    return view.expand(value.shape[0], *item, *rest)


def slice_data(data: Any, index: Any) -> Any:
    """Index ``data`` along its leading dimension (tensors, TensorDicts, lists or pytrees)."""
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        return data[index]
    if isinstance(data, list):
        if isinstance(index, slice):
            return data[index]
        return [data[i] for i in torch.as_tensor(index).tolist()]
    return _pytree.tree_map(lambda leaf: leaf[index], data)


def checked_batch_size(batch_size: Any) -> int:
    """``batch_size`` as a non-negative int; raises naming it otherwise.

    Examples:
        >>> checked_batch_size(3)
        3
    """
    if isinstance(batch_size, bool) or not hasattr(batch_size, "__index__"):
        raise TypeError(
            f"batch_size must be an integer, got {batch_size!r} ({type(batch_size).__name__})"
        )
    batch_size = operator.index(batch_size)
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    return batch_size


def _check_same_keys(items: list) -> None:
    """Raise when the TensorDicts of a list do not hold the same keys (they would stack empty)."""
    keys = set(items[0].keys(True, True))
    for position, item in enumerate(items[1:], 1):
        if not isinstance(item, TensorDictBase):
            raise TypeError(
                f"a list of TensorDicts must hold only TensorDicts: item 0 is a TensorDict, item "
                f"{position} is a {type(item).__name__}"
            )
        other = set(item.keys(True, True))
        if other != keys:
            raise DataValueError(
                f"the TensorDicts of a list must hold the same keys to be stored together: item "
                f"{position} has {sorted(map(str, other - keys))} that item 0 lacks and lacks "
                f"{sorted(map(str, keys - other))}"
            )


def stack_items(items: list, strict: bool = False) -> Any:
    """Stack a list of items: TensorDicts, tensors or pytrees of tensors; other lists stay lists.

    Args:
        items: the items.
        strict: raise when items of tensors cannot be stacked (shapes differ) instead of
            returning the list.

    Raises:
        DataValueError: with ``strict``, when stacking failed (the message gives the cause).

    Examples:
        >>> import torch
        >>> stack_items([torch.zeros(2), torch.ones(2)]).shape
        torch.Size([2, 2])
        >>> stack_items(["a", "b"])
        ['a', 'b']
    """
    if not items:
        return items
    first = items[0]
    if isinstance(first, TensorDictBase):
        _check_same_keys(items)
        return LazyStackedTensorDict.maybe_dense_stack(items)
    leaves = [first] if isinstance(first, torch.Tensor) else _pytree.tree_leaves(first)
    if leaves and all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        try:
            if isinstance(first, torch.Tensor):
                return torch.stack(items)
            return _pytree.tree_map(lambda *xs: torch.stack(xs), *items)
        except (RuntimeError, ValueError) as err:
            if strict:
                raise DataValueError(
                    f"Stacking the elements of the list resulted in an error: {err}. Items "
                    "written to a tensor storage must share their structure and shapes; a "
                    "ListStorage keeps items of any shape"
                ) from err
            return items
    if isinstance(first, (int, float, bool)) and all(type(x) is type(first) for x in items):
        return torch.tensor(items)
    return items


def tensordict_plan(td: TensorDictBase, batch_dims: int) -> list[tuple[str, Any, Any]]:
    """A gather plan: (key, tensor, None) for leaves, (key, sub_plan, trailing batch dims) for nodes.

    The trailing batch dims of a node are those after the first ``batch_dims`` (the batch
    dims of the root, which a gather gives as a whole).
    """
    plan = []
    for key, value in td.items():
        if isinstance(value, TensorDictBase):
            plan.append(
                (key, tensordict_plan(value, batch_dims), tuple(value.batch_size[batch_dims:]))
            )
        else:
            plan.append((key, value, None))
    return plan


def keys_of(plan: list, prefix: tuple = ()) -> list[tuple[str, ...]]:
    """The nested keys of a plan's leaves, in plan order."""
    keys = []
    for key, entry, sub_dims in plan:
        if sub_dims is None:
            keys.append((*prefix, key))
        else:
            keys.extend(keys_of(entry, (*prefix, key)))
    return keys


def collect_leaves(td: TensorDictBase, plan: list, prefix: tuple, out: list) -> None:
    """Append the leaves of ``td`` in plan order to ``out``; name the first key that differs."""
    items = td._tensordict if type(td) is TensorDict else None
    for key, entry, sub_dims in plan:
        value = items.get(key) if items is not None else td.get(key, None)
        if value is None:
            raise ValueError(
                f"data structure mismatch at key {(*prefix, key)}: the storage holds this key "
                f"but the data written lacks it"
            )
        if sub_dims is None:
            if not isinstance(value, torch.Tensor):
                raise ValueError(
                    f"data structure mismatch at key {(*prefix, key)}: expected a tensor, got "
                    f"{type(value).__name__}"
                )
            out.append(value)
        else:
            if not isinstance(value, TensorDictBase):
                if is_tensorclass(value) and not is_non_tensor(value):
                    collect_leaves(value._tensordict, entry, (*prefix, key), out)
                    continue
                raise ValueError(
                    f"data structure mismatch at key {(*prefix, key)}: expected a TensorDict, "
                    f"got {type(value).__name__}"
                )
            collect_leaves(value, entry, (*prefix, key), out)
    if (len(items) if items is not None else len(td.keys())) != len(plan):
        known = {key for key, _, _ in plan}
        extra = [key for key in td.keys() if key not in known]
        value = td.get(extra[0])
        if is_non_tensor(value):
            raise non_tensor_error("a tensor storage", (*prefix, extra[0]), value)
        raise ValueError(
            f"data structure mismatch at key {(*prefix, extra[0])}: the storage has no such key "
            f"(stored keys at this level: {sorted(known)})"
        )


def move_extend_dim(data: Any, dim: int) -> Any:
    """Swap the ``dim_extend`` dim of ``data`` (a tensor, TensorDict or pytree) with the first.

    The swap is its own inverse: it also puts the first dim of stored data back in place.
    """
    if isinstance(data, TensorDictBase) or is_tensorclass(data):
        shape = data.batch_size
    elif isinstance(data, torch.Tensor):
        shape = data.shape
    else:
        shape = _pytree.tree_leaves(data)[0].shape
    if len(shape) <= dim:
        raise ValueError(
            f"extend writes along dim {dim} (dim_extend): expected data with at least "
            f"{dim + 1} batch dims, got batch size {tuple(shape)}"
        )
    if isinstance(data, (torch.Tensor, TensorDictBase)) or is_tensorclass(data):
        return data.transpose(dim, 0)
    return _pytree.tree_map(lambda leaf: leaf.transpose(dim, 0), data)


def tree_iter(data: Any) -> Iterator[Any]:
    """Iterate over the leaves of a pytree (tensors of a TensorDict, items of nested containers).

    Examples:
        >>> import torch
        >>> [leaf.shape for leaf in tree_iter({"a": torch.zeros(2), "b": (torch.ones(3),)})]
        [torch.Size([2]), torch.Size([3])]
    """
    if isinstance(data, TensorDictBase):
        yield from data.values(include_nested=True, leaves_only=True)
        return
    yield from _pytree.tree_leaves(data)


def untyped(data: Any) -> tuple[TensorDictBase, dict[tuple, type] | None]:
    """A tensorclass (or a TensorDict holding tensorclasses) as a plain TensorDict, and its types.

    The types map the key of each tensorclass (``()`` for the root) to its class, for
    :func:`retyped`; when ``data`` holds no tensorclass it is returned as is, with ``None``.
    Tensors are shared, not copied.
    """
    types: dict[tuple, type] = {}
    plain = _untyped(data, (), types)
    return (plain, types) if types else (data, None)


def non_tensor_key(data: TensorDictBase, prefix: tuple = ()) -> tuple | None:
    """The key of the first non-tensor entry of ``data`` (a string, any object), or None."""
    for key, value in data.items():
        if is_non_tensor(value):
            return (*prefix, key)
        if _is_node(value):
            node = value if isinstance(value, TensorDictBase) else value._tensordict
            found = non_tensor_key(node, (*prefix, key))
            if found is not None:
                return found
    return None


def non_tensor_error(owner: str, key: tuple, value: Any) -> TypeError:
    """The error of a tensor storage given a non-tensor entry: where such data can go."""
    return TypeError(
        f"{owner} stores tensors only: entry {key} holds non-tensor data "
        f"({type(value).__name__}); store such items in a ListStorage or LazyStackStorage, or "
        "drop the entry before writing (e.g. data.exclude(key))"
    )


def _is_node(value: Any) -> bool:
    return isinstance(value, TensorDictBase) or (is_tensorclass(value) and not is_non_tensor(value))


def _untyped(data: Any, prefix: tuple, types: dict) -> TensorDictBase:
    if is_tensorclass(data):
        types[prefix] = type(data)
        data = data._tensordict
    if not any(_is_node(value) for value in data.values()):
        return data
    source = {
        key: _untyped(value, (*prefix, key), types) if _is_node(value) else value
        for key, value in data.items()
    }
    return TensorDict._new_unsafe(source=source, batch_size=data.batch_size, device=data.device)


def retyped(td: TensorDictBase, types: dict[tuple, type]) -> Any:
    """Inverse of :func:`untyped`: rebuild the tensorclasses of ``td`` (``td`` is not modified)."""
    root = types.get(())
    nested = sorted((key for key in types if key), key=len, reverse=True)
    if nested:
        td = td.copy()
        for key in nested:
            td.set(key, types[key]._from_tensordict(td.get(key)))
    return root._from_tensordict(td) if root is not None else td


def built_component(value: Any, kind: type, name: str) -> Any:
    """``value`` if it is a ``kind`` instance (or ``None``), else what the factory ``value`` builds."""
    if value is None or isinstance(value, kind):
        return value
    if not callable(value):
        raise TypeError(
            f"{name} must be a {kind.__name__} or a callable building one, got {type(value).__name__}"
        )
    built = value()
    if not isinstance(built, kind):
        raise TypeError(
            f"the {name} factory must return a {kind.__name__}, got {type(built).__name__}"
        )
    return built


def copied_views(data: Any) -> Any:
    """A copy of views read from a tensor storage (other objects are returned as they are)."""
    if isinstance(data, (torch.Tensor, TensorDictBase)) or is_tensorclass(data):
        return data.clone()
    if isinstance(data, (list, str)) or data is None:
        return data
    return _pytree.tree_map(
        lambda leaf: leaf.clone() if isinstance(leaf, torch.Tensor) else leaf, data
    )


def pinned(data: Any) -> Any:
    """``data`` with its tensors in pinned memory (tensors, TensorDicts or pytrees)."""
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        return data.pin_memory()
    return _pytree.tree_map(
        lambda leaf: leaf.pin_memory() if isinstance(leaf, torch.Tensor) else leaf, data
    )
