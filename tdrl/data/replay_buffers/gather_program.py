"""Gather programs: a TensorDict storage's layout compiled once for the batches sampled from it.

A sampled batch is one ``index_select`` per stored leaf, assembled into nested TensorDicts
in the stored key order, with some entries taken from the caller instead of the storage
(a sampler's flags, ``given``). Which leaf goes where depends only on the storage layout
and on the names of the given entries, so the storage compiles it once per layout and per
set of names (:class:`GatherProgram`); a sample then runs straight lists of gathers and
assignments, with no per-key lookups or type checks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from tensordict import TensorDict

__all__ = ["GatherProgram"]


class GatherNode(NamedTuple):
    """One level of a batch: its keys in order, and where the value of each comes from.

    ``gathered`` pairs a key with the stored leaf read at the sampled rows, ``given`` a key
    with the name of a given entry, ``children`` a key with the node below it and that
    node's batch dims past the batch's own.
    """

    keys: tuple
    gathered: tuple
    given: tuple
    children: tuple


def _path(name: Any) -> tuple:
    return name if isinstance(name, tuple) else (name,)


class GatherProgram:
    """The gathers of a storage's batches, for one set of given entry names.

    Given entries take the place of the stored leaves of the same key (which are not
    gathered), or are added after the stored keys of their node when it holds no such leaf.
    Those whose node is the root, is not stored, or has batch dims of its own are in
    :attr:`leftover`, for the caller to set on the built TensorDict.

    Args:
        plan: the storage's gather plan (see :func:`~tdrl.data.replay_buffers.utils.tensordict_plan`).
        names: the keys of the given entries, in the order the caller gives them.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers.utils import tensordict_plan
        >>> stored = TensorDict({"obs": torch.arange(6.0), "next": {"done": torch.zeros(6, 1)}}, [6])
        >>> program = GatherProgram(tensordict_plan(stored, 1), (("next", "done"),))
        >>> batch = program.build(torch.tensor([4, 5]), {("next", "done"): torch.ones(2, 1)},
        ...     torch.Size([2]), None)
        >>> batch["obs"], batch["next", "done"].squeeze(-1)
        (tensor([4., 5.]), tensor([1., 1.]))
    """

    def __init__(self, plan: list, names: tuple) -> None:
        self.plan = plan
        self.names = names
        paths = {name: _path(name) for name in names}
        placed: set = set()
        self.root = self._compile(plan, (), paths, placed, accepts_new=False)
        #: names of the given entries the program does not place, in the order given
        self.leftover = tuple(name for name in names if name not in placed)

    def _compile(
        self, plan: list, prefix: tuple, paths: dict, placed: set, accepts_new: bool
    ) -> GatherNode:
        depth = len(prefix) + 1
        here = {
            path[-1]: name
            for name, path in paths.items()
            if len(path) == depth and path[:-1] == prefix
        }
        keys, gathered, given, children = [], [], [], []
        for key, entry, sub_dims in plan:
            keys.append(key)
            if sub_dims is None:
                name = here.get(key)
                if name is None:
                    gathered.append((key, entry))
                else:
                    given.append((key, name))
                    placed.add(name)
            else:
                # a given tensor in place of a stored node is set by the caller
                node = self._compile(entry, (*prefix, key), paths, placed, accepts_new=not sub_dims)
                children.append((key, node, tuple(sub_dims)))
        if accepts_new:
            stored = set(keys)
            for key, name in here.items():
                if key not in stored:
                    keys.append(key)
                    given.append((key, name))
                    placed.add(name)
        return GatherNode(tuple(keys), tuple(gathered), tuple(given), tuple(children))

    def build(
        self, index: torch.Tensor, given: dict | None, batch: torch.Size, device: Any
    ) -> TensorDict:
        """The batch at ``index`` (rows of the stored leaves) as a TensorDict of ``batch``."""
        source = self.source(index, given, batch, device)
        return TensorDict._new_unsafe(source=source, batch_size=batch, device=device, nested=False)

    def source(
        self, index: torch.Tensor, given: dict | None, batch: torch.Size, device: Any
    ) -> dict:
        """The root entries of the batch at ``index``: tensors and nested TensorDicts."""
        return _run(self.root, index, given, batch, device)


def _run(node: GatherNode, index: torch.Tensor, given: Any, batch: torch.Size, device: Any) -> dict:
    if node.given or node.children:
        source = dict.fromkeys(node.keys)
        for key, leaf in node.gathered:
            source[key] = leaf.index_select(0, index)
    else:
        return {key: leaf.index_select(0, index) for key, leaf in node.gathered}
    for key, name in node.given:
        source[key] = given[name]
    for key, child, sub_dims in node.children:
        sub_batch = torch.Size(batch + sub_dims) if sub_dims else batch
        source[key] = TensorDict._new_unsafe(
            source=_run(child, index, given, batch, device),
            batch_size=sub_batch,
            device=device,
            nested=False,
        )
    return source
