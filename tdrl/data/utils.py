"""Spec helpers under the module path that the reference API gives them (``data.utils``).

The functions live in :mod:`tdrl.data.specs.utils`; this module re-exports them so that
code importing them from ``tdrl.data.utils`` gets the same objects.

Examples:
    >>> import torch
    >>> from tdrl.data import Composite, Unbounded
    >>> from tdrl.data.utils import check_no_exclusive_keys, consolidate_spec
    >>> stacked = torch.stack([Composite(a=Unbounded((1,))), Composite(b=Unbounded((1,)))])
    >>> check_no_exclusive_keys(stacked), check_no_exclusive_keys(consolidate_spec(stacked))
    (False, True)
"""

from __future__ import annotations

from tdrl.data.specs.shapes import DEVICE_TYPING
from tdrl.data.specs.utils import (
    check_no_exclusive_keys,
    consolidate_spec,
    contains_lazy_spec,
)

__all__ = ["DEVICE_TYPING", "check_no_exclusive_keys", "consolidate_spec", "contains_lazy_spec"]
