"""Spec helpers: building a Composite from data, and inspecting / consolidating stacked specs."""

from __future__ import annotations

import torch
from tensordict import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDictBase,
    is_tensorclass,
)

from tdrl.data.specs.base import TensorSpec
from tdrl.data.specs.composite import Composite
from tdrl.data.specs.continuous import Unbounded
from tdrl.data.specs.non_tensor import NonTensor
from tdrl.data.specs.stacked import Stacked, StackedComposite

__all__ = [
    "check_no_exclusive_keys",
    "consolidate_spec",
    "contains_lazy_spec",
    "make_composite_from_td",
]


def contains_lazy_spec(spec: TensorSpec) -> bool:
    """Whether ``spec`` is, or contains, a heterogeneous stack (Stacked / StackedComposite).

    Examples:
        >>> import torch
        >>> from tdrl.data import Composite, Unbounded
        >>> contains_lazy_spec(Composite(a=Unbounded((2,))))
        False
        >>> contains_lazy_spec(Composite(a=torch.stack([Unbounded((2,)), Unbounded((3,))])))
        True
    """
    if isinstance(spec, (Stacked, StackedComposite)):
        return True
    if isinstance(spec, Composite):
        return any(contains_lazy_spec(v) for v in spec.values() if v is not None)
    return False


def check_no_exclusive_keys(spec: TensorSpec, recurse: bool = True) -> bool:
    """Whether every element of each StackedComposite in ``spec`` has the same keys.

    Examples:
        >>> import torch
        >>> from tdrl.data import Composite, Unbounded
        >>> stacked = torch.stack([Composite(a=Unbounded((1,))), Composite(b=Unbounded((1,)))])
        >>> check_no_exclusive_keys(stacked)
        False
    """
    if isinstance(spec, StackedComposite):
        elements = spec.composites
        first = set(elements[0].keys(True, True))
        if any(set(c.keys(True, True)) != first for c in elements[1:]):
            return False
        if recurse:
            return all(check_no_exclusive_keys(c, recurse) for c in elements)
        return True
    if isinstance(spec, Composite) and recurse:
        return all(check_no_exclusive_keys(v, recurse) for v in spec.values() if v is not None)
    return True


def _empty_like(spec: TensorSpec, batch_ndim: int) -> TensorSpec:
    """A spec of the same kind as ``spec`` with no values: a stand-in for a missing key.

    Its dims after the ``batch_ndim`` leading ones have size 0 (dims that hold one
    value, like the categories of a one-hot vector, keep their size).
    """
    if isinstance(spec, Composite):
        return spec.empty()
    if isinstance(spec, Stacked):
        return torch.stack(_stack_fillers(spec.specs, min(batch_ndim, spec.dim)), spec.dim)
    empty = max(spec._batch_ndim - batch_ndim, 0)
    if not empty:
        return spec.clone()
    return spec[(slice(None),) * batch_ndim + (slice(0, 0),) * empty]


def _stack_fillers(elements: list[TensorSpec], batch_ndim: int) -> list[TensorSpec]:
    """Empty stand-ins for the elements of a stack of leaves of different shapes.

    Only the dims where the element shapes differ get size 0: the stand-in keeps the
    stack's fixed dims, so that stacking it beside the original keeps them too.
    """
    shapes = [tuple(element.shape) for element in elements]
    leaves = not any(isinstance(element, (Composite, Stacked)) for element in elements)
    if not leaves or len(set(shapes)) == 1 or len({len(shape) for shape in shapes}) != 1:
        return [_empty_like(element, batch_ndim) for element in elements]
    index = tuple(
        slice(0, 0) if len({shape[i] for shape in shapes}) > 1 else slice(None)
        for i in range(len(shapes[0]))
    )
    return [element[index] for element in elements]


def consolidate_spec(
    spec: Composite,
    recurse_through_entries: bool = True,
    recurse_through_stack: bool = True,
) -> Composite:
    """Give every element of each StackedComposite the same keys, filling gaps with empty specs.

    A key present in some elements only is added to the others with a spec whose value
    dims have size 0 (same dtype, batch dims kept), so that the stack exposes it.

    Examples:
        >>> import torch
        >>> from tdrl.data import Composite, Unbounded
        >>> stacked = torch.stack([Composite(a=Unbounded((1,))), Composite(b=Unbounded((2,)))])
        >>> sorted(consolidate_spec(stacked).keys())
        ['a', 'b']
    """
    spec = spec.clone()
    _consolidate_(spec, recurse_through_entries, recurse_through_stack)
    return spec


def _consolidate_(spec: TensorSpec, through_entries: bool, through_stack: bool) -> None:
    if isinstance(spec, StackedComposite):
        elements = spec.composites
        reference: dict = {}
        for element in elements:
            for key, value in element.items(True, False):
                reference.setdefault(key if isinstance(key, tuple) else (key,), value)
        # parents before children, so that a missing nested Composite keeps its own shape
        for element in elements:
            for key in sorted(reference, key=len):
                value = reference[key]
                if value is not None and key not in element.keys(True):
                    parent = element[key[:-1]] if len(key) > 1 else element
                    element[key] = _empty_like(value, parent.ndim)
        if through_stack:
            for element in elements:
                _consolidate_(element, through_entries, through_stack)
        return
    if isinstance(spec, Composite) and through_entries:
        for value in spec.values():
            if value is not None:
                _consolidate_(value, through_entries, through_stack)


def _leaf_from_value(
    value: object, batch_ndim: int, unsqueeze_null_shapes: bool, dynamic_shape: bool
) -> TensorSpec:
    if isinstance(value, (NonTensorData, NonTensorStack)):
        example = value.data if isinstance(value, NonTensorData) else value.tolist()
        return NonTensor(shape=value.batch_size, device=value.device, example_data=example)
    if is_tensorclass(value):
        spec = make_composite_from_td(value.to_tensordict(), unsqueeze_null_shapes, dynamic_shape)
        spec.data_cls = type(value)
        return spec
    if isinstance(value, TensorDictBase):
        return make_composite_from_td(value, unsqueeze_null_shapes, dynamic_shape)
    if not isinstance(value, torch.Tensor):
        return NonTensor(shape=(), example_data=value)
    shape = value.shape
    if not shape and unsqueeze_null_shapes:
        shape = torch.Size((1,))
    if dynamic_shape:
        shape = (*shape[:batch_ndim], *([-1] * (len(shape) - batch_ndim)))
    return Unbounded(shape=shape, device=value.device, dtype=value.dtype)


def make_composite_from_td(
    data: TensorDictBase,
    unsqueeze_null_shapes: bool = True,
    dynamic_shape: bool = False,
) -> Composite:
    """Build a Composite of Unbounded specs (NonTensor for non-tensor data) describing ``data``.

    Args:
        data: the TensorDict to describe; its batch size becomes the Composite's shape.
        unsqueeze_null_shapes: give entries of shape ``()`` the shape ``(1,)``.
        dynamic_shape: mark every dim of a tensor entry after the batch dims as dynamic
            (``-1``); a lazy stack then gives one Composite instead of a stacked spec.

    Tensorclass entries give a Composite whose ``data_cls`` is the tensorclass, so that
    ``rand()`` / ``zero()`` / ``one()`` rebuild it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"obs": torch.zeros(3, 4), "next": {"r": torch.zeros(3, 1)}}, [3])
        >>> spec = make_composite_from_td(td)
        >>> spec["next", "r"].shape, spec.shape
        (torch.Size([3, 1]), torch.Size([3]))
    """
    if isinstance(data, LazyStackedTensorDict) and not dynamic_shape:
        parts = [make_composite_from_td(td, unsqueeze_null_shapes) for td in data.tensordicts]
        return torch.stack(parts, data.stack_dim)
    entries = {}
    lazy = isinstance(data, LazyStackedTensorDict)
    for key in data.keys():
        if lazy and dynamic_shape:
            values = [td.get(key) for td in data.tensordicts]
            if all(isinstance(v, torch.Tensor) for v in values):
                shapes = [v.shape for v in values]
                inner_batch = data.batch_dims - 1
                dims = [*shapes[0][:inner_batch], *([-1] * (len(shapes[0]) - inner_batch))]
                dims.insert(data.stack_dim, len(shapes))
                entries[key] = Unbounded(shape=dims, device=values[0].device, dtype=values[0].dtype)
                continue
        entries[key] = _leaf_from_value(
            data.get(key), data.batch_dims, unsqueeze_null_shapes, dynamic_shape
        )
    return Composite(entries, shape=data.batch_size, device=data.device)
