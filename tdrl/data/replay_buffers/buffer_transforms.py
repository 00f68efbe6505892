"""The transforms of a replay buffer: applied in order to sampled data, inverted on writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["Inverted", "TransformSequence"]


class Inverted:
    """Swaps a transform's forward and inverse (``append_transform(t, invert=True)``).

    Examples:
        >>> inverted = Inverted(lambda x: x + 1)
        >>> inverted(1), inverted.inv(1)
        (1, 2)
    """

    def __init__(self, transform: Any) -> None:
        self.transform = transform

    def __call__(self, data: Any) -> Any:
        """Apply the wrapped transform's inverse (data passes unchanged when it has none)."""
        inverse = getattr(self.transform, "inv", None)
        return inverse(data) if inverse is not None else data

    def inv(self, data: Any) -> Any:
        """Apply the wrapped transform's forward."""
        return self.transform(data)

    def __repr__(self) -> str:
        return f"Inverted({self.transform!r})"


class TransformSequence:
    """Transforms applied to sampled data in order; their ``inv`` runs, reversed, on writes.

    Examples:
        >>> transforms = TransformSequence()
        >>> transforms.append(lambda x: x * 2)
        >>> transforms.append(Inverted(lambda x: x + 1))
        >>> transforms(3), transforms.inv(3), transforms.has_inv
        (6, 4, True)
    """

    def __init__(self) -> None:
        self._transforms: list[Any] = []
        self.has_inv = False

    def _changed(self) -> None:
        self.has_inv = any(hasattr(t, "inv") for t in self._transforms)

    def append(self, transform: Any) -> None:
        """Add a transform at the end."""
        self._transforms.append(transform)
        self._changed()

    def insert(self, index: int, transform: Any) -> None:
        """Insert a transform at ``index``.

        Raises:
            ValueError: ``index`` is not a position of the sequence.
        """
        if not -len(self._transforms) <= index <= len(self._transforms):
            raise ValueError(
                f"insert_transform index: expected a position in [{-len(self._transforms)}, "
                f"{len(self._transforms)}] (the buffer has {len(self._transforms)} transforms), "
                f"got {index}"
            )
        self._transforms.insert(index, transform)
        self._changed()

    def forward(self, data: Any) -> Any:
        """Apply the transforms, in order, to sampled data."""
        for transform in self._transforms:
            data = transform(data)
        return data

    def __call__(self, data: Any) -> Any:
        """Apply :meth:`forward` (looked up on the instance, so a replaced one is used)."""
        return self.forward(data)

    def inv(self, data: Any) -> Any:
        """Apply the inverses in reverse order (to written data); transforms without one are skipped."""
        for transform in reversed(self._transforms):
            inverse = getattr(transform, "inv", None)
            if inverse is not None:
                data = inverse(data)
        return data

    def __len__(self) -> int:
        return len(self._transforms)

    def __getitem__(self, index: int) -> Any:
        return self._transforms[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._transforms)

    def __repr__(self) -> str:
        return f"Transforms({self._transforms!r})"
