"""TensorSpec family: leaf specs, composites, stacked specs and legacy aliases."""

from __future__ import annotations

__all__: list[str] = []
