"""Stacking the specs of the sub-envs of a batched env or an env pool.

Identical specs give a plain spec with a leading batch dim. Different specs
give a lazily stacked Composite whose common view keeps only the entries that
can be stacked: an entry whose sub-env specs cannot form one stacked leaf (for
instance a float action in one env and an integer action in another) stays
reachable through each element (``spec.composites[i]``) and is left out of the
common view, like a key that only some sub-envs have.
"""

from __future__ import annotations

from typing import Any

import torch

from tdrl.data import Composite, StackedComposite, TensorSpec


class LenientStackedComposite(StackedComposite):
    """A StackedComposite whose common view skips the entries that cannot be stacked."""

    def _build_specs(self) -> dict[str, TensorSpec | None]:
        first = self._elements[0]
        out: dict[str, TensorSpec | None] = {}
        for key in first._specs:
            values = [c._specs.get(key, ...) for c in self._elements]
            if any(v is ... for v in values):
                continue
            if all(v is None for v in values):
                out[key] = None
                continue
            if any(v is None for v in values):
                continue
            if all(type(v) is Composite for v in values) and not all(
                v == values[0] for v in values[1:]
            ):
                out[key] = LenientStackedComposite(*values, dim=self.dim)
                continue
            try:
                out[key] = torch.stack(values, self.dim)
            except (TypeError, ValueError):
                continue
        return out

    def clone(self) -> LenientStackedComposite:
        """A deep copy."""
        return LenientStackedComposite(*[c.clone() for c in self._elements], dim=self.dim)

    def empty(self) -> LenientStackedComposite:
        """A stack of empty Composites with the same shapes."""
        return LenientStackedComposite(*[c.empty() for c in self._elements], dim=self.dim)

    def to(self, dest: Any) -> LenientStackedComposite:
        """A copy on another device / with leaves of another dtype."""
        return LenientStackedComposite(*[c.to(dest) for c in self._elements], dim=self.dim)


def stack_env_specs(specs: list[Composite]) -> tuple[Composite, bool]:
    """Stack the ``specs`` Composites (``input_spec`` + ``output_spec``) of each sub-env.

    Returns the stacked spec and whether all sub-env specs were identical.
    """
    first = specs[0]
    if all(s == first for s in specs[1:]):
        return first.expand(len(specs), *first.shape), True
    return LenientStackedComposite(*specs, dim=0), False
