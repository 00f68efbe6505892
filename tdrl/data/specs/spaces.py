"""Value spaces attached to specs: ``spec.space`` describes the set of allowed values."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["BinaryBox", "BoxList", "CategoricalBox", "ContinuousBox"]


@dataclass
class ContinuousBox:
    """An interval ``[low, high]`` per element, stored as tensors of the spec's shape.

    Examples:
        >>> box = ContinuousBox(torch.zeros(2), torch.ones(2))
        >>> box.high
        tensor([1., 1.])
    """

    low: torch.Tensor
    high: torch.Tensor

    @property
    def device(self) -> torch.device:
        """Device of the bounds."""
        return self.low.device

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ContinuousBox)
            and self.low.shape == other.low.shape
            and torch.equal(self.low, other.low.to(self.low.device))
            and torch.equal(self.high, other.high.to(self.high.device))
        )


@dataclass(frozen=True)
class CategoricalBox:
    """The integers ``0 .. n - 1``.

    Examples:
        >>> CategoricalBox(4).n
        4
    """

    n: int


@dataclass(frozen=True)
class BinaryBox:
    """Vectors of ``n`` independent 0/1 values.

    Examples:
        >>> BinaryBox(3).n
        3
    """

    n: int


@dataclass(frozen=True)
class BoxList:
    """One :class:`CategoricalBox` per sub-action of a multi-discrete spec.

    When the number of categories differs between batch elements, the boxes are nested:
    one ``BoxList`` per element of the leading dim.

    Examples:
        >>> BoxList.from_nvec([2, 3]).nvec
        (2, 3)
        >>> BoxList.from_nvec([[2, 3], [4, 5]]).nvec
        ((2, 3), (4, 5))
    """

    boxes: tuple[CategoricalBox | BoxList, ...]

    @classmethod
    def from_nvec(cls, nvec: list | tuple | torch.Tensor) -> BoxList:
        """Build a box list from the number of categories of each sub-action (nested lists nest)."""
        values = nvec.tolist() if isinstance(nvec, torch.Tensor) else list(nvec)
        return cls(
            tuple(
                cls.from_nvec(n) if isinstance(n, (list, tuple)) else CategoricalBox(int(n))
                for n in values
            )
        )

    @property
    def nvec(self) -> tuple:
        """Number of categories of each sub-action (nested tuples for nested boxes)."""
        return tuple(box.nvec if isinstance(box, BoxList) else box.n for box in self.boxes)

    def __len__(self) -> int:
        return len(self.boxes)
