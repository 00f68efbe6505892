"""Wide sum / min / max trees for prioritized sampling, vectorised over whole batches.

One design, :class:`WideTree`: a tree stores one value per leaf and, level after level, the
reduction (sum, min or max) of each block of ``fanout`` consecutive nodes of the level below.
The top level is small and is scanned whole. Batch updates and batch prefix-sum searches are
a handful of tensor operations per level (gather a block per query, reduce or cumulate it,
scatter), never a Python loop per item. With the default fanout of 64 a tree of one million
leaves has two levels.

:class:`PriorityTree` is the sum tree prioritized samplers use (search, draws and an exact
minimum); :class:`SumSegmentTree` is a view of it with the segment-tree API, and
:class:`MinSegmentTree` / :class:`MaxSegmentTree` are the same levels reduced with min / max.
"""

from __future__ import annotations

from multiprocessing import context as _mp_context

import torch

__all__ = ["MaxSegmentTree", "MinSegmentTree", "PriorityTree", "SumSegmentTree", "WideTree"]

_DEFAULT_FANOUT = 64
_TOP_SIZE = 16384
# batches up to this size reuse preallocated buffers; larger updates (extends of
# contiguous items) deduplicate the parents they refresh instead
_SCRATCH_MAX = 1024
# index copies shorter than this run serially in PyTorch, so repeated indices keep their
# last value; longer writes are split into such chunks
_SERIAL_COPY = 32768
_INF = float("inf")


def _level_sizes(capacity: int, fanout: int, top_size: int) -> list[int]:
    """Sizes of the levels, leaves first; every level but the top is a multiple of fanout."""
    sizes = []
    size = max(int(capacity), 1)
    while size > top_size or not sizes:
        padded = -(-size // fanout) * fanout
        sizes.append(padded)
        size = padded // fanout
    sizes.append(size)
    return sizes


class WideTree:
    """Leaves and levels of block reductions: the one tree design of this module.

    The top level follows one slot holding the neutral element (``0`` for sums), so the
    cumulative sum of that store is the exclusive prefix sum of the top level. Subclasses
    choose the reduction (``_fill`` is its neutral element) and what they read from the tree.

    Args:
        capacity: number of leaves.
        fanout: children per node; larger means fewer, wider levels.
        dtype: dtype of the stored values.
        top_size: the largest top level (scanned whole by a search).

    Examples:
        >>> import torch
        >>> tree = MaxSegmentTree(100)
        >>> tree.update(torch.tensor([3, 50]), torch.tensor([2.0, 0.5]))
        >>> tree.leaves()[[3, 50]].tolist(), len(tree)
        ([2.0, 0.5], 100)
    """

    _fill: float = 0.0

    def __init__(
        self,
        capacity: int,
        *,
        fanout: int = _DEFAULT_FANOUT,
        dtype: torch.dtype = torch.float64,
        top_size: int = _TOP_SIZE,
    ) -> None:
        if int(capacity) < 1:
            raise ValueError(f"tree capacity must be a positive integer, got {capacity}")
        if int(fanout) < 2:
            raise ValueError(f"tree fanout must be at least 2, got {fanout}")
        if not dtype.is_floating_point:
            raise TypeError(f"tree dtype must be a floating point dtype, got {dtype}")
        self.capacity = int(capacity)
        self.fanout = fanout = int(fanout)
        self.dtype = dtype
        sizes = _level_sizes(self.capacity, fanout, max(int(top_size), fanout))
        self._top_store = torch.full((sizes[-1] + 1,), self._fill, dtype=dtype)
        self._levels = [torch.full((size,), self._fill, dtype=dtype) for size in sizes[:-1]]
        self._levels.append(self._top_store[1:])
        self._blocks = [level.view(-1, fanout) for level in self._levels[:-1]]
        self._leaves = self._levels[0][: self.capacity]
        self._shift = fanout.bit_length() - 1 if fanout & (fanout - 1) == 0 else None
        self._padded_size = sizes[0]

    def _reduce(self, blocks: torch.Tensor) -> torch.Tensor:
        """The reduction of each row of ``blocks``."""
        return blocks.sum(1)

    def __len__(self) -> int:
        return self.capacity

    def __getitem__(self, index: torch.Tensor | int) -> torch.Tensor:
        """Leaf values at ``index``."""
        return self._leaves[index]

    def __setitem__(self, index: torch.Tensor | int, value: torch.Tensor | float) -> None:
        self.update(index, value)

    def _parents(self, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if self._shift is None:
            return torch.div(index, self.fanout, rounding_mode="floor", out=out)
        return torch.bitwise_right_shift(index, self._shift, out=out)

    @staticmethod
    def _distinct(index: torch.Tensor, size: int) -> torch.Tensor:
        """The distinct values of ``index`` (in ``[0, size)``), sorted, without a sort."""
        return torch.zeros(size, dtype=torch.bool).index_fill_(0, index, True).nonzero().squeeze(1)

    def update(self, index: torch.Tensor | int, value: torch.Tensor | float) -> None:
        """Set the leaves at ``index`` to ``value`` and refresh their ancestors.

        Args:
            index: leaf indices (any shape, flattened); duplicates are allowed, the last
                value given for a leaf is the one kept.
            value: values broadcastable to ``index``.
        """
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if not index.shape[0]:
            return
        value = torch.as_tensor(value, dtype=self.dtype).expand(index.shape)
        self._write_leaves(index, value)
        self._refresh(self._parents(index))

    def _write_leaves(self, index: torch.Tensor, value: torch.Tensor) -> None:
        count = index.shape[0]
        try:
            if count < _SERIAL_COPY:
                self._leaves.index_copy_(0, index, value)
            else:
                for start in range(0, count, _SERIAL_COPY - 1):
                    stop = start + _SERIAL_COPY - 1
                    self._leaves.index_copy_(0, index[start:stop], value[start:stop])
        except (IndexError, RuntimeError) as err:
            raise IndexError(
                f"tree index out of range: expected indices in [0, {self.capacity}), got "
                f"[{int(index.min())}, {int(index.max())}]"
            ) from err

    def _refresh(self, parent: torch.Tensor, depth: int = 0) -> None:
        """Recompute the nodes above blocks ``parent`` of level ``depth``, up to the top."""
        for level in range(depth, len(self._blocks)):
            blocks = self._blocks[level]
            if parent.shape[0] > _SCRATCH_MAX:
                # large writes (extends) touch few blocks many times: refresh each block once
                parent = self._distinct(parent, blocks.shape[0])
            self._levels[level + 1].index_copy_(0, parent, self._reduce(blocks[parent]))
            parent = self._parents(parent)

    def _rebuild(self) -> None:
        for depth, blocks in enumerate(self._blocks):
            self._levels[depth + 1][: blocks.shape[0]].copy_(self._reduce(blocks))

    def _top(self) -> torch.Tensor:
        """The reduction of every leaf, as a 0-d tensor."""
        return self._reduce(self._levels[-1].unsqueeze(0))[0]

    def _query(self, start: int, end: int | None) -> torch.Tensor:
        if start == 0 and (end is None or end >= self.capacity):
            return self._top()
        return self._reduce(self._leaves[start:end].unsqueeze(0))[0]

    def leaves(self) -> torch.Tensor:
        """A view of the leaf values."""
        return self._leaves

    def load_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf at once and rebuild the tree."""
        values = torch.as_tensor(values, dtype=self.dtype)
        if values.shape != (self.capacity,):
            raise ValueError(
                f"tree leaves shape mismatch: expected ({self.capacity},), got {tuple(values.shape)}"
            )
        self._leaves.copy_(values)
        self._rebuild()

    def fill_(self, value: float | None = None) -> None:
        """Reset every leaf to ``value`` (the neutral element when omitted)."""
        for level in self._levels[:-1]:
            level.fill_(self._fill)
        self._top_store.fill_(self._fill)
        if value is not None and value != self._fill:
            self._leaves.fill_(value)
            self._rebuild()

    def share_memory_(self) -> None:
        """Move every level to shared memory, for processes forked or spawned later."""
        self._top_store.share_memory_()
        for level in self._levels[:-1]:
            level.share_memory_()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, fanout={self.fanout}, "
            f"levels={len(self._levels)})"
        )


class MinSegmentTree(WideTree):
    """A min tree: batch updates and the minimum over all leaves.

    Leaves that were never written hold ``+inf``, so they never win the minimum.

    Examples:
        >>> import torch
        >>> tree = MinSegmentTree(100)
        >>> tree.update(torch.tensor([3, 50]), torch.tensor([2.0, 0.5]))
        >>> float(tree.min())
        0.5
    """

    _fill = _INF

    def _reduce(self, blocks: torch.Tensor) -> torch.Tensor:
        return blocks.amin(1)

    def min(self) -> torch.Tensor:
        """The smallest leaf, as a 0-d tensor (``+inf`` when the tree is empty)."""
        return self._top()

    def query(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        """The minimum of the leaves in ``[start, end)``."""
        return self._query(start, end)


class MaxSegmentTree(WideTree):
    """A max tree: batch updates and the maximum over all leaves.

    Leaves that were never written hold ``-inf``.

    Examples:
        >>> import torch
        >>> tree = MaxSegmentTree(100)
        >>> tree.update(torch.tensor([3, 50]), torch.tensor([2.0, 0.5]))
        >>> float(tree.max())
        2.0
    """

    _fill = -_INF

    def _reduce(self, blocks: torch.Tensor) -> torch.Tensor:
        return blocks.amax(1)

    def max(self) -> torch.Tensor:
        """The largest leaf, as a 0-d tensor (``-inf`` when the tree is empty)."""
        return self._top()

    def query(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        """The maximum of the leaves in ``[start, end)``."""
        return self._query(start, end)


class _Scratch:
    """Preallocated intermediates for one batch size, reused by every draw and update."""

    __slots__ = (
        "child",
        "count",
        "mass",
        "mass_column",
        "node",
        "offset",
        "parent",
        "prefix",
        "prefix_inner",
        "prefix_total",
        "rows",
        "rows_head",
        "sums",
    )

    def __init__(self, size: int, fanout: int, top_size: int, dtype: torch.dtype) -> None:
        f64 = dtype
        self.mass = torch.empty(size, dtype=f64)
        self.mass_column = self.mass.unsqueeze(1)
        self.node = torch.empty(size, dtype=torch.long)
        self.offset = torch.empty(size, dtype=f64)
        # one block per item; a draw turns it in place into prefix sums, then into 0/1 flags
        self.rows = torch.empty(size, fanout, dtype=f64)
        self.rows_head = self.rows[:, :-1]
        # The zero-led prefix sum of the top level is read only before the blocks are
        # gathered, so it shares their memory when it fits (less memory touched per draw).
        flat = self.rows.view(-1)
        self.prefix = (
            flat[: top_size + 1] if flat.shape[0] > top_size else flat.new_empty(top_size + 1)
        )
        # searching all boundaries but the last gives indices in [0, n) with no clamp
        self.prefix_inner = self.prefix[1:-1]
        self.prefix_total = self.prefix[-1]
        self.count = torch.empty(size, dtype=f64)
        self.child = torch.empty(size, dtype=torch.long)
        self.parent = torch.empty(size, dtype=torch.long)
        self.sums = torch.empty(size, dtype=f64)


class PriorityTree(WideTree):
    """Sum tree and exact minimum over one array of leaves: what prioritized sampling needs.

    Leaves hold priorities (``0`` marks an empty slot, ignored by the minimum). Above the
    leaves, each level holds the sums of blocks of ``fanout`` nodes (see :class:`WideTree`).
    A draw scans the small top level whole (one cumsum and one searchsorted over a zero-led
    copy, so the exclusive prefix comes for free), then searches one block per draw at each
    level below; in the leaf blocks it counts the prefix sums that do not exceed the draw,
    which is branch-free. With the default sizes a million leaves take two levels: the leaves
    and 15,625 block sums. Sums are float64 unless ``dtype`` says otherwise.

    The minimum is kept exact without a min tree: the tree keeps a lower bound of all
    non-empty leaves and the leaf that attains it. An update only compares its values with
    the bound and checks that leaf; when that leaf is raised, the next :meth:`min` rescans
    the blocks written since the last rescan. So draws and updates touch no min level.

    Intermediates of batches up to 1024 items live in buffers reused from call to call, so
    a tree must not be used by two threads at once (replay buffers hold a lock around it).

    Args:
        capacity: number of leaves.
        fanout: children per node.
        top_size: the largest top level (scanned whole by every draw).
        dtype: dtype of the leaves and sums.

    Examples:
        >>> import torch
        >>> tree = PriorityTree(4)
        >>> tree.update(torch.arange(4), torch.tensor([1.0, 0.5, 2.0, 0.5]))
        >>> float(tree.total()), float(tree.min())
        (4.0, 0.5)
        >>> index, value = tree.scan_lower_bound(torch.tensor([0.2, 1.2, 3.9]))
        >>> index.tolist(), value.tolist()
        ([0, 1, 3], [1.0, 0.5, 0.5])
    """

    _fill = 0.0

    def __init__(
        self,
        capacity: int,
        *,
        fanout: int = _DEFAULT_FANOUT,
        top_size: int = _TOP_SIZE,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__(capacity, fanout=fanout, dtype=dtype, top_size=top_size)
        fanout = self.fanout
        padded = self._padded_size
        # counting flags with a matrix-vector product (exact: a sum of zeros and ones)
        self._ones = torch.ones(fanout - 1, dtype=dtype)
        # the last draw (leaf tensor, its version, the leaf blocks it searched): an update of
        # exactly those leaves reuses the blocks instead of recomputing them
        self._last_draw: tuple[torch.Tensor, int, torch.Tensor] | None = None
        self._scratch: dict[int, _Scratch] = {}
        # The minimum: ``_low`` is at most every non-empty leaf; when ``_exact`` it is the
        # minimum itself, held by the leaf viewed by ``_holder`` (None: no non-empty leaf).
        # ``_block_low`` holds the non-empty minimum of each leaf block, up to date except
        # for the blocks flagged in ``_dirty``; only a rescan reads them.
        self._block_low = torch.full((padded // fanout,), _INF, dtype=dtype)
        self._dirty = torch.zeros(padded // fanout, dtype=torch.bool)
        self._low = _INF
        self._exact = True
        self._holder: torch.Tensor | None = None
        # Shared trees count writes in shared memory: a process whose cached minimum predates
        # another process's write rescans (``None``: a tree of this process only).
        self._writes: torch.Tensor | None = None
        self._seen = 0

    def share_memory_(self) -> None:
        """Keep the tree in shared memory, for processes forked or spawned later.

        Every process then reads and writes the same leaves and sums; the caller serializes
        the writes and draws of all processes (a :class:`ProcessLock`).
        """
        if self._writes is not None:
            return
        super().share_memory_()
        self._block_low.share_memory_()
        self._dirty.share_memory_()
        self._writes = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._seen = 0

    @property
    def is_shared(self) -> bool:
        """Whether the tree lives in shared memory (see :meth:`share_memory_`)."""
        return self._writes is not None

    def _sync(self) -> None:
        """Forget the cached minimum when another process wrote since this one last looked."""
        if int(self._writes[0]) != self._seen:
            self._exact = False

    def _count_write(self) -> None:
        self._seen = int(self._writes[0]) + 1
        self._writes[0] = self._seen

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_scratch"] = {}
        state["_last_draw"] = None
        # the holder is a view of the leaves: rescan after unpickling instead
        state["_holder"] = None
        state["_exact"] = False
        if self._writes is None or _mp_context.get_spawning_popen() is None:
            # a copy (deepcopy, torch.save) is a tree of its own
            state["_dirty"] = torch.ones_like(self._dirty)
            state["_writes"] = None
        else:
            # a shared tree travels by its shared tensors: flag every block for the rescan
            self._dirty.fill_(True)
        return state

    def _scratch_for(self, size: int) -> _Scratch:
        scratch = self._scratch.get(size)
        if scratch is None:
            top_size = self._top_store.shape[0] - 1
            if size > _SCRATCH_MAX:
                return _Scratch(size, self.fanout, top_size, self.dtype)
            if len(self._scratch) >= 4:
                self._scratch.clear()
            scratch = self._scratch[size] = _Scratch(size, self.fanout, top_size, self.dtype)
        return scratch

    def update(self, index: torch.Tensor | int, value: torch.Tensor | float) -> None:
        """Set the leaves at ``index`` to ``value`` and refresh the tree.

        Duplicated indices are allowed: the last value given for a leaf is the one kept, and
        the sums above it are recomputed from the leaves, so the tree stays exact.
        """
        if type(index) is not torch.Tensor:
            index = torch.as_tensor(index)
        if index.ndim != 1 or index.dtype != torch.long:
            index = index.reshape(-1).long()
        if not index.shape[0]:
            return
        if not isinstance(value, torch.Tensor) or value.dtype != self.dtype:
            value = torch.as_tensor(value, dtype=self.dtype)
        if value.shape != index.shape:
            value = value.expand(index.shape)
        self._write(index, value)

    def write(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """:meth:`update` without conversions, for callers that prepared their batch.

        Args:
            index: a non-empty 1-d long tensor of leaf indices.
            value: values of the tree's dtype, shaped like ``index``.
        """
        self._write(index, value)

    def _write(self, index: torch.Tensor, value: torch.Tensor) -> None:
        count = index.shape[0]
        if self._writes is not None:
            self._sync()
            self._count_write()
        self._write_leaves(index, value)
        if self._exact:
            # the minimum stands if no value undercuts it and its leaf still holds it
            lowest = value.amin().item()
            holder = self._holder
            if lowest < self._low or (holder is not None and holder.item() != self._low):
                self._settle_minimum(index, lowest)
        blocks = self._blocks
        if count <= _SCRATCH_MAX:
            scratch = self._scratch.get(count) or self._scratch_for(count)
            draw = self._last_draw
            if draw is not None and draw[0] is index and draw[1] == index._version:
                parent = draw[2]
            else:
                parent = self._parents(index, scratch.parent)
            rows = torch.index_select(blocks[0], 0, parent, out=scratch.rows)
            self._levels[1].index_copy_(0, parent, torch.sum(rows, 1, out=scratch.sums))
        else:
            # large writes (extends) touch few blocks many times: refresh each block once
            parent = self._distinct(self._parents(index), blocks[0].shape[0])
            self._levels[1].index_copy_(0, parent, blocks[0][parent].sum(1))
        self._dirty.index_fill_(0, parent, True)
        if len(blocks) > 1:
            self._refresh(self._parents(parent), 1)

    def _settle_minimum(self, index: torch.Tensor, lowest: float) -> None:
        """After a write that may move the minimum: update it, or mark it for a rescan.

        ``lowest`` is the smallest value written (some may be lost to duplicated indices).
        """
        if lowest > self._low:
            # the leaf that held the minimum was raised: only a rescan can tell the new one
            self._exact = False
            return
        # read back what the leaves kept (duplicated indices keep one value each)
        written = self._leaves.index_select(0, index)
        written = torch.where(written > 0, written, _INF)
        position = int(written.argmin())
        lowest = written[position].item()
        if lowest <= self._low and lowest < _INF:
            self._low = lowest
            self._holder = self._leaves[int(index[position])]
        elif self._holder is not None and self._holder.item() != self._low:
            self._exact = False

    def _rescan_minimum(self) -> None:
        """Refresh the block minima written since the last rescan and take their minimum."""
        leaf_blocks = self._blocks[0]
        dirty = self._dirty.nonzero().squeeze(1)
        if dirty.shape[0] * 4 > self._dirty.shape[0]:
            lows = leaf_blocks.amin(1)
            dirty = (lows <= 0).nonzero().squeeze(1)
            self._block_low.copy_(lows)
        rows = leaf_blocks.index_select(0, dirty)
        self._block_low.index_copy_(0, dirty, torch.where(rows > 0, rows, _INF).amin(1))
        self._dirty.zero_()
        block = int(self._block_low.argmin())
        self._low = self._block_low[block].item()
        self._exact = True
        if self._low == _INF:
            self._holder = None
            return
        leaf = block * self.fanout + int(leaf_blocks[block].eq(self._low).nonzero()[0])
        self._holder = self._levels[0][leaf]

    def total(self) -> torch.Tensor:
        """Sum of all leaves (0-d tensor)."""
        return self._top_store.sum()

    def min(self) -> torch.Tensor:
        """Smallest non-empty leaf (0-d tensor, ``+inf`` when empty)."""
        return torch.tensor(self.min_value(), dtype=self.dtype)

    def min_value(self) -> float:
        """Smallest non-empty leaf as a Python float (``inf`` when empty)."""
        if self._writes is not None:
            self._sync()
        if not self._exact:
            self._rescan_minimum()
        return self._low

    def load_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf at once and rebuild the tree."""
        super().load_leaves(values)
        self._dirty.fill_(True)
        self._exact = False
        if self._writes is not None:
            self._count_write()

    def fill_(self, value: float | None = None) -> None:
        """Set every leaf to ``value``; empty every leaf when omitted (or ``0``)."""
        super().fill_(value)
        self._block_low.fill_(_INF)
        if value is None or value == 0:
            self._dirty.zero_()
            self._low, self._exact, self._holder = _INF, True, None
        else:
            self._dirty.fill_(True)
            self._exact = False
        if self._writes is not None:
            self._count_write()

    def scan_lower_bound(self, mass: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse-CDF search for a batch of masses in ``[0, total())``.

        Returns:
            the leaf index for each mass (the first leaf whose inclusive prefix sum exceeds
            it; valid even for masses out of range) and the leaf's value.
        """
        mass = mass.reshape(-1)
        scratch = self._scratch_for(mass.shape[0])
        scratch.mass.copy_(mass)
        torch.cumsum(self._top_store, 0, out=scratch.prefix)
        self._last_draw = None
        leaf = self._descend(scratch)[0]
        if self.capacity < self._padded_size:
            # leaves past the capacity are only reached by masses at or past the total
            leaf.clamp_(max=self.capacity - 1)
        return leaf, self._leaves.index_select(0, leaf)

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None, limit: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``batch_size`` leaves in proportion to their value; returns indices and values.

        Args:
            batch_size: the number of draws.
            generator: the random generator of the draws.
            limit: the draws stay below this leaf index (the number of filled leaves);
                only draws whose mass is rounded past the filled leaves need it.
        """
        scratch = self._scratch.get(batch_size) or self._scratch_for(batch_size)
        torch.cumsum(self._top_store, 0, out=scratch.prefix)
        scratch.mass.uniform_(0.0, scratch.prefix_total.item(), generator=generator)
        leaf, node = self._descend(scratch)
        last = self.capacity if limit is None or limit > self.capacity else int(limit)
        if last < self._padded_size:
            # leaves past ``last`` are only reached by masses at or past the total
            leaf.clamp_(max=last - 1)
            self._last_draw = None
        else:
            self._last_draw = (leaf, leaf._version, node)
        return leaf, self._leaves.index_select(0, leaf)

    def _descend(self, scratch: _Scratch) -> tuple[torch.Tensor, torch.Tensor]:
        """Leaf index (a new tensor) and leaf block of each mass in ``scratch.mass``.

        The masses are consumed.
        """
        mass = scratch.mass
        node = torch.searchsorted(scratch.prefix_inner, mass, right=True, out=scratch.node)
        mass.sub_(torch.index_select(scratch.prefix, 0, node, out=scratch.offset))
        fanout, blocks = self.fanout, self._blocks
        for depth in range(len(blocks) - 1, 0, -1):
            rows = blocks[depth].index_select(0, node)
            cumulated = rows.cumsum(1)
            child = torch.searchsorted(cumulated, mass.unsqueeze(1), right=True)
            child.clamp_(max=fanout - 1)
            mass.sub_(cumulated.gather(1, child).sub_(rows.gather(1, child)).squeeze_(1))
            # nodes past the padding of a middle level only come from out-of-range masses
            node = child.squeeze_(1).add_(node, alpha=fanout)
            node.clamp_(max=blocks[depth - 1].shape[0] - 1)
        torch.index_select(blocks[0], 0, node, out=scratch.rows)
        # the child is the number of inclusive prefix sums (all but the last) <= the mass
        head = scratch.rows_head.cumsum_(1)
        flags = torch.le(head, scratch.mass_column, out=head)
        torch.mv(flags, self._ones, out=scratch.count)
        return torch.add(scratch.child.copy_(scratch.count), node, alpha=fanout), node


class SumSegmentTree(PriorityTree):
    """A sum tree with the segment-tree API: a :class:`PriorityTree` read through sums only.

    Args:
        capacity: number of leaves.
        fanout: children per node; larger means fewer, wider levels.
        dtype: dtype of the stored values (float64 keeps sums exact enough for 1M leaves).
        top_size: the largest top level.

    Examples:
        >>> import torch
        >>> tree = SumSegmentTree(5)
        >>> tree.update(torch.arange(5), torch.tensor([1.0, 0.0, 2.0, 0.0, 1.0]))
        >>> float(tree.total())
        4.0
        >>> tree.scan_lower_bound(torch.tensor([0.5, 1.5, 2.5, 3.5]))
        tensor([0, 2, 2, 4])
    """

    def query(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        """The sum of the leaves in ``[start, end)``."""
        return self._query(start, end)

    def scan_lower_bound(self, mass: torch.Tensor) -> torch.Tensor:
        """For each value of ``mass``, the first leaf whose inclusive prefix sum exceeds it.

        Args:
            mass: a 1-d tensor of values in ``[0, total())``.

        Returns:
            a long tensor of leaf indices, same shape as ``mass``; masses outside
            ``[0, total())`` still give valid leaf indices.
        """
        return super().scan_lower_bound(mass.to(self.dtype))[0]
