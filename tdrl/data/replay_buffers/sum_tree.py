"""Wide sum / min / max trees for prioritized sampling, vectorised over whole batches.

A tree stores one value per leaf and, level after level, the reduction (sum, min or max) of
each block of ``fanout`` consecutive nodes of the level below. The top level is small and is
scanned whole. Batch updates and batch prefix-sum searches are a handful of tensor operations
per level (gather a block per query, reduce or cumulate it, scatter), never a Python loop per
item. With the default fanout of 64 a tree of one million leaves has three levels.
"""

from __future__ import annotations

import torch

__all__ = ["MaxSegmentTree", "MinSegmentTree", "PriorityTree", "SumSegmentTree"]

_DEFAULT_FANOUT = 64
_TOP_SIZE = 16384


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


class _WideTree:
    """Shared machinery of the wide trees: levels of block reductions over the leaves."""

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
        self.capacity = int(capacity)
        self.fanout = int(fanout)
        self.dtype = dtype
        self._top_size = max(int(top_size), self.fanout)
        sizes = _level_sizes(self.capacity, self.fanout, self._top_size)
        self._levels = [torch.full((size,), self._fill, dtype=dtype) for size in sizes]
        self._blocks = [level.view(-1, self.fanout) for level in self._levels[:-1]]

    def _reduce(self, blocks: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.capacity

    def __getitem__(self, index: torch.Tensor | int) -> torch.Tensor:
        """Leaf values at ``index``."""
        return self._levels[0][: self.capacity][index]

    def __setitem__(self, index: torch.Tensor | int, value: torch.Tensor | float) -> None:
        self.update(index, value)

    def update(self, index: torch.Tensor | int, value: torch.Tensor | float) -> None:
        """Set the leaves at ``index`` to ``value`` and refresh their ancestors.

        Args:
            index: leaf indices (any shape, flattened); duplicates are allowed.
            value: values broadcastable to ``index``.
        """
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        value = torch.as_tensor(value, dtype=self.dtype).expand(index.shape)
        try:
            self._levels[0][: self.capacity].index_copy_(0, index, value)
        except (IndexError, RuntimeError) as err:
            raise IndexError(
                f"tree index out of range: expected indices in [0, {self.capacity}), got "
                f"[{int(index.min())}, {int(index.max())}]"
            ) from err
        self._refresh(index)

    def _refresh(self, index: torch.Tensor) -> None:
        fanout = self.fanout
        for depth, blocks in enumerate(self._blocks):
            index = index.div(fanout, rounding_mode="floor")
            self._levels[depth + 1].index_copy_(
                0, index, self._reduce(blocks.index_select(0, index))
            )

    def fill_(self, value: float | None = None) -> None:
        """Reset every leaf to ``value`` (the neutral element when omitted)."""
        fill = self._fill if value is None else value
        self._levels[0].fill_(fill)
        self._levels[0][self.capacity :].fill_(self._fill)
        self._rebuild()

    def _rebuild(self) -> None:
        for depth, blocks in enumerate(self._blocks):
            self._levels[depth + 1][: blocks.shape[0]].copy_(self._reduce(blocks))

    def leaves(self) -> torch.Tensor:
        """A view of the leaf values."""
        return self._levels[0][: self.capacity]

    def load_leaves(self, values: torch.Tensor) -> None:
        """Replace all leaf values at once and rebuild the tree."""
        values = torch.as_tensor(values, dtype=self.dtype)
        if values.shape != (self.capacity,):
            raise ValueError(
                f"tree leaves shape mismatch: expected ({self.capacity},), got {tuple(values.shape)}"
            )
        self._levels[0][: self.capacity].copy_(values)
        self._rebuild()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, fanout={self.fanout}, levels={len(self._levels)})"


class SumSegmentTree(_WideTree):
    """A sum tree: batch updates, totals and batch prefix-sum (inverse CDF) searches.

    Args:
        capacity: number of leaves.
        fanout: children per node; larger means fewer, wider levels.
        dtype: dtype of the stored values (float64 keeps sums exact enough for 1M leaves).

    Examples:
        >>> import torch
        >>> tree = SumSegmentTree(5)
        >>> tree.update(torch.arange(5), torch.tensor([1.0, 0.0, 2.0, 0.0, 1.0]))
        >>> float(tree.total())
        4.0
        >>> tree.scan_lower_bound(torch.tensor([0.5, 1.5, 2.5, 3.5]))
        tensor([0, 2, 2, 4])
    """

    _fill = 0.0

    def _reduce(self, blocks: torch.Tensor) -> torch.Tensor:
        return blocks.sum(1)

    def total(self) -> torch.Tensor:
        """The sum of all leaves, as a 0-d tensor."""
        return self._levels[-1].sum()

    def query(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        """The sum of the leaves in ``[start, end)``."""
        if start == 0 and (end is None or end >= self.capacity):
            return self.total()
        return self.leaves()[start:end].sum()

    def scan_lower_bound(self, mass: torch.Tensor) -> torch.Tensor:
        """For each value of ``mass``, the first leaf whose inclusive prefix sum exceeds it.

        Args:
            mass: a 1-d tensor of values in ``[0, total())``.

        Returns:
            a long tensor of leaf indices, same shape as ``mass``; masses outside
            ``[0, total())`` still give valid leaf indices.
        """
        mass = mass.to(self.dtype).reshape(-1)
        top = self._levels[-1]
        cumulated = top.cumsum(0)
        node = torch.searchsorted(cumulated, mass, right=True).clamp_(max=top.numel() - 1)
        if len(self._blocks):
            mass = mass - (cumulated - top).index_select(0, node)
        fanout = self.fanout
        last = len(self._blocks) - 1
        for depth in range(last, -1, -1):
            rows = self._blocks[depth].index_select(0, node)
            cumulated = rows.cumsum(1)
            child = torch.searchsorted(cumulated, mass.unsqueeze(1), right=True)
            child.clamp_(max=fanout - 1)
            if depth:
                mass = mass - (cumulated.gather(1, child) - rows.gather(1, child)).squeeze(1)
            node = node.mul_(fanout).add_(child.squeeze(1))
            if depth:
                node.clamp_(max=self._blocks[depth - 1].shape[0] - 1)
        return node.clamp_(max=self.capacity - 1)


class MinSegmentTree(_WideTree):
    """A min tree: batch updates and the minimum over all leaves.

    Leaves that were never written hold ``+inf``, so they never win the minimum.

    Examples:
        >>> import torch
        >>> tree = MinSegmentTree(100)
        >>> tree.update(torch.tensor([3, 50]), torch.tensor([2.0, 0.5]))
        >>> float(tree.min())
        0.5
    """

    _fill = float("inf")

    def _reduce(self, blocks: torch.Tensor) -> torch.Tensor:
        return blocks.amin(1)

    def min(self) -> torch.Tensor:
        """The smallest leaf, as a 0-d tensor (``+inf`` when the tree is empty)."""
        return self._levels[-1].amin()

    def query(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        """The minimum of the leaves in ``[start, end)``."""
        if start == 0 and (end is None or end >= self.capacity):
            return self.min()
        return self.leaves()[start:end].amin()


class MaxSegmentTree(_WideTree):
    """A max tree: batch updates and the maximum over all leaves.

    Leaves that were never written hold ``-inf``.

    Examples:
        >>> import torch
        >>> tree = MaxSegmentTree(100)
        >>> tree.update(torch.tensor([3, 50]), torch.tensor([2.0, 0.5]))
        >>> float(tree.max())
        2.0
    """

    _fill = float("-inf")

    def _reduce(self, blocks: torch.Tensor) -> torch.Tensor:
        return blocks.amax(1)

    def max(self) -> torch.Tensor:
        """The largest leaf, as a 0-d tensor (``-inf`` when the tree is empty)."""
        return self._levels[-1].amax()

    def query(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        """The maximum of the leaves in ``[start, end)``."""
        if start == 0 and (end is None or end >= self.capacity):
            return self.max()
        return self.leaves()[start:end].amax()


class PriorityTree:
    """Sum and min trees over one shared array of leaves: what prioritized sampling needs.

    Leaves hold priorities (``0`` marks an empty slot, ignored by the minimum). An update
    refreshes both trees from the same gathered blocks; a draw is one inverse-CDF search
    over the sum levels. With the default sizes a million leaves take two levels: the
    leaves and 15,625 block sums, scanned whole at the top.

    Args:
        capacity: number of leaves.
        fanout: children per node.

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

    def __init__(
        self, capacity: int, *, fanout: int = _DEFAULT_FANOUT, top_size: int = _TOP_SIZE
    ) -> None:
        self._sum = SumSegmentTree(capacity, fanout=fanout, top_size=top_size)
        self._min = MinSegmentTree(capacity, fanout=fanout, top_size=top_size)
        self.capacity = self._sum.capacity
        self.fanout = self._sum.fanout
        self._leaves = self._sum._levels[0]
        self._sum_blocks = self._sum._blocks
        self._min_blocks = self._min._blocks
        self._sum_levels = self._sum._levels
        self._min_levels = self._min._levels

    def update(self, index: torch.Tensor, value: torch.Tensor | float) -> None:
        """Set the leaves at ``index`` (1-d long tensor) to ``value`` and refresh both trees."""
        value = torch.as_tensor(value, dtype=torch.float64).expand(index.shape)
        try:
            self._leaves[: self.capacity].index_copy_(0, index, value)
        except (IndexError, RuntimeError) as err:
            raise IndexError(
                f"priority index out of range: expected indices in [0, {self.capacity}), got "
                f"[{int(index.min())}, {int(index.max())}]"
            ) from err
        fanout = self.fanout
        inf = float("inf")
        for depth, blocks in enumerate(self._sum_blocks):
            index = index.div(fanout, rounding_mode="floor")
            rows = blocks.index_select(0, index)
            self._sum_levels[depth + 1].index_copy_(0, index, rows.sum(1))
            if depth == 0:
                rows = torch.where(rows > 0, rows, inf)
            else:
                rows = self._min_blocks[depth].index_select(0, index)
            self._min_levels[depth + 1].index_copy_(0, index, rows.amin(1))

    def total(self) -> torch.Tensor:
        """Sum of all leaves (0-d tensor)."""
        return self._sum.total()

    def min(self) -> torch.Tensor:
        """Smallest non-empty leaf (0-d tensor, ``+inf`` when empty)."""
        return self._min.min()

    def leaves(self) -> torch.Tensor:
        """A view of the leaf values."""
        return self._leaves[: self.capacity]

    def load_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf at once and rebuild both trees."""
        self._sum.load_leaves(values)
        self._min.load_leaves(torch.where(self._sum.leaves() > 0, self._sum.leaves(), float("inf")))

    def fill_(self) -> None:
        """Empty every leaf."""
        self._sum.fill_()
        self._min.fill_()

    def scan_lower_bound(self, mass: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse-CDF search for a batch of masses in ``[0, total())``.

        Returns:
            the leaf index for each mass and the leaf's value.
        """
        top = self._sum_levels[-1]
        cumulated = top.cumsum(0)
        return self._descend(cumulated, top, mass.to(torch.float64))

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``batch_size`` leaves in proportion to their value; returns indices and values."""
        top = self._sum_levels[-1]
        cumulated = top.cumsum(0)
        mass = torch.rand(batch_size, dtype=torch.float64, generator=generator)
        mass.mul_(cumulated[-1])
        return self._descend(cumulated, top, mass)

    def _descend(
        self, cumulated: torch.Tensor, top: torch.Tensor, mass: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        node = torch.searchsorted(cumulated, mass, right=True).clamp_(max=top.numel() - 1)
        mass = mass - cumulated.index_select(0, node)
        mass.add_(top.index_select(0, node))
        fanout = self.fanout
        value = mass
        for depth in range(len(self._sum_blocks) - 1, -1, -1):
            rows = self._sum_blocks[depth].index_select(0, node)
            cumulated = rows.cumsum(1)
            child = torch.searchsorted(cumulated, mass.unsqueeze(1), right=True)
            child.clamp_(max=fanout - 1)
            if depth:
                mass = mass - cumulated.gather(1, child).squeeze(1)
                mass.add_(rows.gather(1, child).squeeze(1))
            else:
                value = rows.gather(1, child).squeeze(1)
            node = child.squeeze(1).add_(node, alpha=fanout)
            if depth:
                node.clamp_(max=self._sum_blocks[depth - 1].shape[0] - 1)
        return node.clamp_(max=self.capacity - 1), value
