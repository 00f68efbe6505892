"""Post-processing of collected batches: n-step returns and reward densification.

:class:`MultiStep` lives in :mod:`tdrl.data.postprocs.multistep` and :class:`DensifyReward`
in :mod:`tdrl.data.postprocs.densify`; both are importable from here and from
:mod:`tdrl.data.postprocs.postprocs`, the module path of the reference API.
"""

from __future__ import annotations

from tdrl.data.postprocs.densify import DensifyReward
from tdrl.data.postprocs.multistep import MultiStep

__all__ = ["DensifyReward", "MultiStep"]
