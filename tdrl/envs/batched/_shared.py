"""Preallocated data buffers of batched envs, built once from the sub-env specs.

All buffers of a batched env live in one flat byte *arena* (a single shared
memory segment for :class:`ParallelEnv`); each spec leaf is a typed view into
it. There are three regions: ``"input"`` (actions and state entries written by
the parent), ``"root"`` (reset outputs) and ``"next"`` (step outputs), written
by the sub-envs. When every sub-env has the same specs, each leaf is one tensor
of shape ``[num_workers, *leaf_shape]`` and worker ``i`` writes ``leaf[i]``; with
heterogeneous specs, each worker gets its own tensors and the parent stacks them
lazily.

Leaves that cannot live in a fixed buffer are routed elsewhere: non-tensor
entries travel with the worker's reply, and an env with a dynamic dim (``-1``)
in any spec does not use buffers at all (see ``uses_buffers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, is_tensorclass

from tdrl.data import Composite, NonTensor
from tdrl.envs._keys import leaf_keys

REGIONS = ("input", "root", "next")
_ALIGN = 64

WRITE_MISMATCH = (
    "{region} data of worker {worker} does not fit its spec at key {key!r}: expected {what} "
    "{expected}, got {got}"
)
MISSING_KEY = (
    "{region} data of worker {worker} does not fit its spec at key {key!r}: the env did not "
    "write this entry"
)


@dataclass(frozen=True)
class Slot:
    """One buffer leaf: where it lives in the arena and what it holds."""

    key: Any
    offset: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    optional: bool
    worker: int | None  # None: stacked over all workers (homogeneous layout)


@dataclass
class BufferLayout:
    """Where every buffer leaf of every region lives in the arena (picklable plain data)."""

    num_workers: int
    homogeneous: bool
    sub_batch_size: torch.Size
    nbytes: int = 0
    slots: dict[str, list[Slot]] = field(default_factory=lambda: {r: [] for r in REGIONS})
    pipe_keys: list[dict[str, list]] = field(default_factory=list)
    #: per worker (one entry when homogeneous): nested level -> its sub-env batch shape
    groups: list[dict[tuple, torch.Size]] = field(default_factory=list)


def group_shapes(output_spec: Composite, input_spec: Composite) -> dict[tuple, torch.Size]:
    """The shape of every nested level of a sub-env's data (e.g. an agent dim), by prefix."""
    shapes: dict[tuple, torch.Size] = {}

    def walk(spec: Composite, prefix: tuple) -> None:
        for name, value in spec.items():
            if isinstance(value, Composite):
                shapes.setdefault((*prefix, name), torch.Size(value.shape))
                walk(value, (*prefix, name))

    for parent in (output_spec, input_spec):
        for entry in parent.values():
            walk(entry, ())
    return shapes


def region_specs(output_spec: Composite, input_spec: Composite) -> dict[str, list]:
    """The ``(key, spec, optional)`` leaves of each region for one sub-env."""
    obs = output_spec["full_observation_spec"]
    reward = output_spec["full_reward_spec"]
    done = output_spec["full_done_spec"]
    action = input_spec["full_action_spec"]
    state = input_spec["full_state_spec"]

    def leaves(spec: Composite, optional: bool) -> list:
        return [(key, spec[key], optional) for key in leaf_keys(spec)]

    state_leaves = leaves(state, True)
    return {
        "input": leaves(action, False) + state_leaves,
        "root": leaves(obs, False) + leaves(done, False) + state_leaves,
        "next": leaves(obs, False) + leaves(reward, False) + leaves(done, False) + state_leaves,
    }


def is_dynamic(specs: dict[str, list]) -> bool:
    """Whether a leaf has a dynamic (``-1``) dim: such envs exchange data through pipes.

    Non-tensor leaves count too: a ``-1`` there means a variable-length content (a
    growing history...), whose steps are stacked lazily as well.
    """
    return any(-1 in tuple(spec.shape) for leaves in specs.values() for _, spec, _ in leaves)


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def plan_layout(
    per_worker: list[dict[str, list]],
    homogeneous: bool,
    sub_batch_size: torch.Size,
    groups: list[dict[tuple, torch.Size]] | None = None,
) -> BufferLayout:
    """Lay out the buffers of all workers (``per_worker[i]`` from :func:`region_specs`).

    ``groups[i]`` (from :func:`group_shapes`) gives the batch shape of the nested levels
    of worker ``i``, so that the tensordicts read from the buffers keep them.
    """
    layout = BufferLayout(len(per_worker), homogeneous, torch.Size(sub_batch_size))
    groups = groups or [{} for _ in per_worker]
    layout.groups = [groups[0]] if homogeneous else list(groups)
    offset = 0
    workers: list[int | None] = [None] if homogeneous else list(range(len(per_worker)))
    for worker in workers:
        specs = per_worker[0 if worker is None else worker]
        for region in REGIONS:
            seen = set()
            for key, spec, optional in specs[region]:
                if isinstance(spec, NonTensor) or key in seen:
                    continue
                seen.add(key)
                shape = tuple(spec.shape)
                if worker is None:
                    shape = (len(per_worker), *shape)
                nbytes = (
                    torch.Size(shape).numel() * torch.empty((), dtype=spec.dtype).element_size()
                )
                layout.slots[region].append(Slot(key, offset, spec.dtype, shape, optional, worker))
                offset += _aligned(max(nbytes, 1))
    layout.nbytes = max(offset, _ALIGN)
    for specs in per_worker:
        layout.pipe_keys.append(
            {
                region: list(
                    dict.fromkeys(
                        key for key, spec, _ in specs[region] if isinstance(spec, NonTensor)
                    )
                )
                for region in REGIONS
            }
        )
    return layout


def allocate(layout: BufferLayout, shared: bool) -> torch.Tensor:
    """The arena: one zero-filled byte tensor, in shared memory when ``shared``."""
    arena = torch.zeros(layout.nbytes, dtype=torch.uint8)
    if shared:
        arena.share_memory_()
    return arena


def _view(arena: torch.Tensor, slot: Slot) -> torch.Tensor:
    numel = torch.Size(slot.shape).numel()
    size = torch.empty((), dtype=slot.dtype).element_size()
    return arena[slot.offset : slot.offset + numel * size].view(slot.dtype).view(slot.shape)


def _tensordict(
    pairs: list,
    batch_size: torch.Size,
    device: Any = None,
    groups: dict[tuple, torch.Size] | None = None,
    lead: tuple = (),
) -> TensorDictBase:
    """The tensordict of ``(key, tensor)`` leaves; nested levels get their ``groups`` shape."""
    td = TensorDict({}, batch_size=batch_size, device=device)
    if groups:
        used = {
            key[:depth]
            for key, _ in pairs
            if isinstance(key, tuple)
            for depth in range(1, len(key))
        }
        for prefix in sorted(used, key=len):
            shape = groups.get(prefix)
            if shape is not None:
                td.set(prefix, TensorDict({}, batch_size=(*lead, *shape), device=device))
    for key, tensor in pairs:
        td.set(key, tensor)
    return td


def parent_views(
    arena: torch.Tensor, layout: BufferLayout, device: Any = None
) -> dict[str, list[TensorDictBase]]:
    """Per region, the buffers as tensordicts: one (batch ``[N, *sub]``) or one per worker.

    ``device`` (a CPU device or None) is the device the tensordicts declare.
    """
    out: dict[str, list[TensorDictBase]] = {}
    for region in REGIONS:
        slots = layout.slots[region]
        groups = layout.groups or [{}] * layout.num_workers
        if layout.homogeneous:
            batch = torch.Size([layout.num_workers, *layout.sub_batch_size])
            pairs = [(s.key, _view(arena, s)) for s in slots]
            out[region] = [_tensordict(pairs, batch, device, groups[0], (layout.num_workers,))]
        else:
            out[region] = [
                _tensordict(
                    [(s.key, _view(arena, s)) for s in slots if s.worker == worker],
                    layout.sub_batch_size,
                    device,
                    groups[worker],
                )
                for worker in range(layout.num_workers)
            ]
    return out


def worker_views(arena: torch.Tensor, layout: BufferLayout, worker: int) -> dict[str, list]:
    """Per region, the ``(key, tensor, optional)`` views worker ``worker`` reads or writes."""
    out: dict[str, list] = {}
    for region in REGIONS:
        pairs = []
        for slot in layout.slots[region]:
            if slot.worker is None:
                pairs.append((slot.key, _view(arena, slot)[worker], slot.optional))
            elif slot.worker == worker:
                pairs.append((slot.key, _view(arena, slot), slot.optional))
        out[region] = pairs
    return out


def _copy(td: TensorDictBase, exclude: list) -> TensorDictBase:
    if exclude:
        td = td.exclude(*exclude)
    if type(td) is not TensorDict:
        return td.clone()
    # flat fast path: one clone per leaf, no per-key validation
    leaves = {}
    tensor = torch.Tensor
    for key, value in td._tensordict.items():
        if type(value) is not tensor:
            return td.clone()
        leaves[key] = value.clone()
    return TensorDict._new_unsafe(leaves, batch_size=td.batch_size, device=td.device, nested=False)


def read_region(views: list[TensorDictBase], exclude: list) -> TensorDictBase:
    """A fresh copy of a region, as the parent returns it (lazy stack when heterogeneous)."""
    if len(views) == 1:
        return _copy(views[0], exclude)
    return LazyStackedTensorDict.lazy_stack([_copy(td, exclude) for td in views], 0)


class BufferWriter:
    """Copies an env's output into its buffer views; checks keys, shapes and dtypes once.

    The first write of each region validates the data against the buffers and
    raises ``ValueError`` / ``TypeError`` naming the key; later writes compare each value's
    shape and dtype with its buffer's (no broadcast, no cast) and validate again on a
    difference, so the error names the key there too.
    """

    def __init__(self, views: dict[str, list], pipe_keys: dict[str, list], worker: int) -> None:
        self.views = views
        self.pipe_keys = pipe_keys
        self.worker = worker
        self.checked: dict[str, list] = {}

    def write(self, region: str, data: TensorDictBase) -> tuple[list, dict | None]:
        """Write ``data``; return the optional keys it lacked and its non-tensor entries."""
        plan = self.checked.get(region)
        missing: list = []
        if plan is None:
            pairs, missing = self._check(region, data)
            buffers = [buffer for _, buffer in pairs]
            layout = [(buffer.shape, buffer.dtype) for buffer in buffers]
            plan = (buffers, [key for key, _ in pairs], layout)
            self.checked[region] = plan
        buffers, keys, layout = plan
        try:
            if type(data) is TensorDict:
                values = _leaf_values(data, keys)
            else:
                values = [data.get(key) for key in keys]
        except KeyError:
            absent = next(key for key in keys if data.get(key, None) is None)
            raise ValueError(
                MISSING_KEY.format(region=region, worker=self.worker, key=absent)
            ) from None
        try:
            same = [(value.shape, value.dtype) for value in values] == layout
        except AttributeError:  # not a tensor
            same = False
        if not same:
            self._check(region, data)
        torch._foreach_copy_(buffers, values)
        extra = None
        pipe = self.pipe_keys[region]
        if pipe:
            extra = {key: _plain(data.get(key, None)) for key in pipe}
        return missing, extra

    def _check(self, region: str, data: TensorDictBase) -> tuple[list, list]:
        pairs, missing = [], []
        for key, buffer, optional in self.views[region]:
            value = data.get(key, None)
            if value is None:
                if optional:
                    missing.append(key)
                    continue
                raise ValueError(MISSING_KEY.format(region=region, worker=self.worker, key=key))
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    WRITE_MISMATCH.format(
                        region=region,
                        worker=self.worker,
                        key=key,
                        what="a tensor",
                        expected="",
                        got=type(value).__name__,
                    )
                )
            if value.shape != buffer.shape:
                raise ValueError(
                    WRITE_MISMATCH.format(
                        region=region,
                        worker=self.worker,
                        key=key,
                        what="shape",
                        expected=tuple(buffer.shape),
                        got=tuple(value.shape),
                    )
                )
            if value.dtype != buffer.dtype:
                raise TypeError(
                    WRITE_MISMATCH.format(
                        region=region,
                        worker=self.worker,
                        key=key,
                        what="dtype",
                        expected=buffer.dtype,
                        got=value.dtype,
                    )
                )
            pairs.append((key, buffer))
        return pairs, missing


def _leaf_values(data: TensorDict, keys: list) -> list:
    """``[data.get(key) for key in keys]`` with a dict lookup for top-level keys."""
    entries = data._tensordict
    return [entries[key] if key.__class__ is str else data.get(key) for key in keys]


def _plain(value: Any) -> Any:
    """Non-tensor values as plain python objects (what crosses the pipe)."""
    if value is None:
        return None
    tolist = getattr(value, "tolist", None)
    if hasattr(value, "data") and not isinstance(value, torch.Tensor):
        if tolist is not None and type(value).__name__ == "NonTensorStack":
            return tolist()
        return value.data
    return value


def data_classes(output_spec: Composite) -> list[tuple[tuple, type]]:
    """The entries of the step / reset outputs that the sub-envs return as tensorclasses.

    Their specs are Composites with a tensorclass ``data_cls``; the workers' data reach the
    parent as plain tensordicts (buffers or pipes), :func:`restore_classes` re-wraps them.
    """
    found: list[tuple[tuple, type]] = []

    def visit(spec: Composite, prefix: tuple) -> None:
        for name, sub in spec.items():
            if isinstance(sub, Composite):
                cls = getattr(sub, "data_cls", None)
                if cls is not None and is_tensorclass(cls):
                    found.append(((*prefix, name), cls))
                else:
                    visit(sub, (*prefix, name))

    for group in output_spec.values():
        visit(group, ())
    return found


def restore_classes(data: TensorDictBase, classes: list[tuple[tuple, type]]) -> TensorDictBase:
    """Wrap the entries listed by :func:`data_classes` back into their tensorclasses."""
    for key, cls in classes:
        value = data.get(key, None)
        if value is not None and not isinstance(value, cls):
            data.set(key, cls.from_tensordict(value))
    return data
