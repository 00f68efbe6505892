"""The reference API's module path for the post-processing classes (``...postprocs.postprocs``)."""

from __future__ import annotations

from tdrl.data.postprocs.densify import DensifyReward
from tdrl.data.postprocs.multistep import MultiStep

__all__ = ["DensifyReward", "MultiStep"]
