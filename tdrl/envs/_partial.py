"""Partial resets (``"_reset"``) and partial steps (``"_step"``).

Both follow one rule: the output of the env is used where the mask is ``True``
and the previous content of the input tensordict (or zeros when the input does
not hold the entry) is kept where it is ``False``.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictBase,
    is_non_tensor,
    is_tensor_collection,
    is_tensorclass,
)

from tdrl.envs._keys import as_tuple
from tdrl.envs._td_fast import all_true, any_true, fast_get

MASK_SHAPE_ERROR = (
    "{kind} mask at key {key!r} has shape {mask_shape}, which cannot be aligned with the "
    "entry {entry!r} of shape {value_shape}"
)


def align_mask(
    mask: torch.Tensor, shape: torch.Size, kind: str, key: Any, entry: Any
) -> torch.Tensor:
    """Broadcast a boolean mask to ``shape``.

    The mask is aligned from the left: trailing dims that the value lacks are
    reduced with ``any`` and dims that the mask lacks are appended.
    """
    if mask.shape == shape:
        return mask
    ndim = len(shape)
    while mask.ndim > ndim:
        mask = mask.any(-1)
    while mask.ndim < ndim:
        mask = mask.unsqueeze(-1)
    try:
        return mask.expand(shape)
    except RuntimeError as err:
        raise ValueError(
            MASK_SHAPE_ERROR.format(
                kind=kind,
                key=key,
                mask_shape=tuple(mask.shape),
                entry=entry,
                value_shape=tuple(shape),
            )
        ) from err


def _sub(td: TensorDictBase, prefix: tuple[str, ...]) -> TensorDictBase | None:
    return td.get(prefix, None) if prefix else td


def collect_reset_masks(tensordict: TensorDictBase, reset_keys: list) -> dict:
    """Map each done-level prefix to the ``"_reset"`` mask found for it (absent levels omitted)."""
    masks = {}
    for reset_key in reset_keys:
        mask = fast_get(tensordict, reset_key)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype is not torch.bool:
                got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise TypeError(
                    f"reset mask at key {reset_key!r}: expected a torch.bool tensor, got {got} "
                    "(a float or int mask is ambiguous; convert it with mask.bool())"
                )
            masks[as_tuple(reset_key)[:-1]] = mask
    return masks


def effective_masks(masks: dict) -> dict:
    """Drop masks that a mask at a shallower level overrides."""
    if len(masks) == 1:
        return masks
    out = {}
    for prefix, mask in masks.items():
        if any(prefix[:i] in masks for i in range(len(prefix))):
            continue
        out[prefix] = mask
    return out


def remove_reset_keys(tensordict: TensorDictBase, reset_keys: list) -> None:
    """Delete every ``"_reset"`` entry of ``reset_keys`` present in ``tensordict``."""
    for reset_key in reset_keys:
        if type(tensordict) is TensorDict and type(reset_key) is str and not tensordict.is_locked:
            tensordict._tensordict.pop(reset_key, None)
        elif tensordict.get(reset_key, None) is not None:
            tensordict.del_(reset_key)


def update_during_reset(
    tensordict_reset: TensorDictBase,
    tensordict: TensorDictBase,
    reset_keys: list,
    masks: dict | None = None,
) -> TensorDictBase:
    """Merge the output of ``_reset`` into the input ``tensordict`` and return it.

    Levels with a ``"_reset"`` mask keep the input's data where the mask is
    ``False``; a mask at a shallower level overrides nested ones; levels without
    a mask take the reset output. The ``"_reset"`` entries are removed.
    ``masks`` is :func:`collect_reset_masks` of ``tensordict``, when already known.
    """
    if masks is None:
        masks = collect_reset_masks(tensordict, reset_keys)
    masks = effective_masks(masks)
    remove_reset_keys(tensordict, reset_keys)
    remove_reset_keys(tensordict_reset, reset_keys)
    if tensordict_reset is tensordict:
        return tensordict
    if _stacked_over_first_dim(tensordict_reset, tensordict) and not all(
        all_true(mask) for mask in masks.values()
    ):
        return _update_elementwise(tensordict_reset, tensordict, reset_keys, masks)
    if len(masks) == 1 and () in masks:
        merged = _update_flat(tensordict_reset, tensordict, masks[()])
        if merged is not None:
            return merged
    masked: dict = {}
    for prefix, mask in masks.items():
        if all_true(mask):
            continue
        node_reset = _sub(tensordict_reset, prefix)
        node = _sub(tensordict, prefix)
        if node_reset is None or node is None:
            continue
        reset_key = (*prefix, "_reset")
        for key, value in node_reset.items(
            include_nested=True, leaves_only=True, is_leaf=is_data_leaf
        ):
            full_key = (*prefix, *as_tuple(key))
            previous = node.get(key, None)
            if previous is None:
                continue
            if is_non_tensor(value) and is_non_tensor(previous) and value.batch_dims:
                masked[full_key] = merge_non_tensor(value, previous, mask)
                continue
            if not isinstance(value, torch.Tensor):
                continue
            if previous.shape != value.shape:
                if any_true(mask):
                    continue
                masked[full_key] = previous
                continue
            mask_v = align_mask(mask, value.shape, "_reset", reset_key, full_key)
            masked[full_key] = torch.where(mask_v, value, previous)
    resized = _resized_levels(tensordict_reset, tensordict, ())
    if resized:
        # a nested level whose length the reset changed (a history, a variable-length
        # list) is replaced whole: its entries cannot be merged into the longer input
        for key in resized:
            tensordict.set(key, tensordict_reset.get(key))
        tensordict_reset = tensordict_reset.exclude(*resized)
    tensordict.update(tensordict_reset)
    for key, value in masked.items():
        tensordict.set(key, value)
    return tensordict


def _resized_levels(
    tensordict_reset: TensorDictBase, tensordict: TensorDictBase, prefix: tuple
) -> list:
    """Keys of the nested levels of the reset output whose batch size the input's lacks.

    Only plain TensorDicts are walked (a lazy stack's elements are merged one by one).
    """
    resized: list = []
    if type(tensordict_reset) is not TensorDict or type(tensordict) is not TensorDict:
        return resized
    for key, value in tensordict_reset.items():
        if is_data_leaf(type(value)):
            continue
        previous = tensordict.get(key, None)
        if previous is None or is_data_leaf(type(previous)):
            continue
        if previous.batch_size != value.batch_size:
            resized.append((*prefix, key))
        else:
            resized.extend(_resized_levels(value, previous, (*prefix, key)))
    return resized


def _update_flat(
    tensordict_reset: TensorDictBase, tensordict: TensorDictBase, mask: torch.Tensor
) -> TensorDictBase | None:
    """:func:`update_during_reset` of flat plain tensordicts under one root mask, or None.

    The same merge in one pass over the entry dicts (one aligned mask per shape); None,
    before anything is written, when an entry is not a plain tensor, shapes differ, the
    mask resets every element, or the input is locked.
    """
    if (
        type(tensordict_reset) is not TensorDict
        or type(tensordict) is not TensorDict
        or tensordict.is_locked
        or all_true(mask)
    ):
        return None
    entries = tensordict._tensordict
    aligned: dict = {}
    merged: dict = {}
    for key, value in tensordict_reset._tensordict.items():
        if type(value) is not torch.Tensor:
            return None
        previous = entries.get(key)
        if previous is None:
            merged[key] = value
            continue
        if type(previous) is not torch.Tensor or previous.shape != value.shape:
            return None
        shape = value.shape
        mask_v = aligned.get(shape)
        if mask_v is None:
            mask_v = aligned[shape] = align_mask(mask, shape, "_reset", ("_reset",), (key,))
        merged[key] = torch.where(mask_v, value, previous)
    for key, value in merged.items():
        tensordict._set_str(key, value, inplace=False, validated=False)
    return tensordict


def is_data_leaf(cls: type) -> bool:
    """Leaves of env data: tensors and non-tensor entries (strings, python objects...)."""
    return not is_tensor_collection(cls) or issubclass(cls, (NonTensorData, NonTensorStack))


def _stacked_over_first_dim(tensordict_reset: TensorDictBase, tensordict: TensorDictBase) -> bool:
    """Whether both are lazy stacks along dim 0 (e.g. a batched env's heterogeneous data)."""
    return (
        type(tensordict_reset) is LazyStackedTensorDict
        and tensordict_reset.stack_dim == 0
        and tensordict.batch_size[:1] == tensordict_reset.batch_size[:1]
    )


def _update_elementwise(
    tensordict_reset: TensorDictBase, tensordict: TensorDictBase, reset_keys: list, masks: dict
) -> TensorDictBase:
    """:func:`update_during_reset` element by element of a lazy stack along dim 0.

    The elements may differ in shapes or hold non-tensor data, which cannot be merged
    as one tensor: each element takes the reset output, keeps the input or is merged.
    """
    parts = []
    inputs = tensordict.unbind(0)
    for index, (reset_part, input_part) in enumerate(zip(tensordict_reset.unbind(0), inputs)):
        part_masks = {prefix: mask[index] for prefix, mask in masks.items()}
        if all(all_true(mask) for mask in part_masks.values()):
            parts.append(reset_part)
        elif not any(any_true(mask) for mask in part_masks.values()):
            parts.append(input_part)
        else:
            parts.append(update_during_reset(reset_part, input_part, reset_keys, part_masks))
    return LazyStackedTensorDict.lazy_stack(parts, 0)


def merge_non_tensor(value: Any, previous: Any, mask: torch.Tensor) -> Any:
    """Non-tensor data taking ``value`` where ``mask`` is True and ``previous`` elsewhere."""
    flags = mask.reshape(*value.batch_size, -1).any(-1).tolist()

    def pick(new: Any, old: Any, flag: Any) -> Any:
        if isinstance(flag, list):
            return [pick(n, o, f) for n, o, f in zip(new, old, flag)]
        return new if flag else old

    return NonTensorStack.from_list(pick(value.tolist(), previous.tolist(), flags))


def fill_from_input(
    tensordict: TensorDictBase, keys_and_specs: list, batch_size: torch.Size, spec_batch_ndim: int
) -> TensorDictBase:
    """Build a 'next' tensordict from the input's values, or zeros from the specs.

    An input entry held as a tensorclass (a Composite spec with a ``data_cls``) is
    carried over whole, so the output holds the same class as a stepped element does.
    """
    out = TensorDict({}, batch_size=batch_size, device=tensordict.device)
    carried: set[tuple] = set()
    for key, spec in keys_and_specs:
        if isinstance(key, tuple) and len(key) > 1:
            holder = _tensorclass_holder(tensordict, key)
            if holder is not None:
                if holder[0] not in carried:
                    carried.add(holder[0])
                    out.set(holder[0], holder[1])
                continue
        value = tensordict.get(key, None)
        if value is None:
            value = spec.zero(batch_size) if spec_batch_ndim == 0 else spec.zero()
        out.set(key, value)
    return out


def _tensorclass_holder(tensordict: TensorDictBase, key: tuple) -> tuple | None:
    """The ``(prefix, value)`` of the first tensorclass on the path to ``key``, if any."""
    for end in range(1, len(key)):
        value = tensordict.get(key[:end], None)
        if value is None:
            return None
        if is_tensorclass(value):
            return key[:end], value
    return None


def merge_partial_step(
    tensordict: TensorDictBase, next_sub: TensorDictBase, mask: torch.Tensor
) -> TensorDictBase:
    """Scatter the output of a step run on ``tensordict[mask]`` back to the full batch.

    Entries the step did not produce for the masked-out elements are taken from
    the input tensordict when it holds them, zeros otherwise.
    """
    batch_size = tensordict.batch_size
    out = TensorDict({}, batch_size=batch_size, device=next_sub.device)
    for key, value in next_sub.items(include_nested=True, leaves_only=True):
        previous = tensordict.get(key, None)
        full_shape = batch_size + value.shape[1:]
        if isinstance(previous, torch.Tensor) and previous.shape == full_shape:
            base = previous.to(value.dtype).clone()
        else:
            base = torch.zeros(full_shape, dtype=value.dtype, device=value.device)
        base[mask] = value
        out.set(key, base)
    return out


def _output_keys(env: Any) -> list:
    return [
        (key, spec[key])
        for spec, keys in (
            (env.full_observation_spec, env.observation_keys),
            (env.full_reward_spec, env.reward_keys),
            (env.full_done_spec, env.done_keys),
        )
        for key in keys
    ]


def partial_step(env: Any, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
    """Run ``env._step`` on the elements where the ``"_step"`` mask is True only.

    Batch-locked batched envs get the mask in ``_step`` (they dispatch it
    themselves) unless it is all False: then ``_step`` is not called at all. Unbatched
    and batch-unlocked envs are stepped on the masked elements. Elements not stepped
    keep the input's values (zeros when absent). Returns the raw next tensordict;
    ``"_step"`` is removed from the input.
    """
    tensordict.del_("_step")
    if env.batch_locked and env.batch_size and any_true(mask):
        tensordict.set("_step", mask)
        try:
            return env._step(tensordict)
        finally:
            tensordict.del_("_step")
    if all_true(mask):
        return env._step(tensordict)
    if not tensordict.batch_dims:
        return fill_from_input(tensordict, _output_keys(env), torch.Size([]), 0)
    mask = mask.reshape(tensordict.batch_size)
    if any_true(mask):
        sub = env._post_process(env._step(tensordict[mask]))
        return merge_partial_step(tensordict, sub, mask)
    return fill_from_input(
        tensordict, _output_keys(env), tensordict.batch_size, len(env.batch_size)
    )
