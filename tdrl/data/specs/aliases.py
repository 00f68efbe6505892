"""Legacy spec names, kept so that code written against the older names keeps running.

Each name is the current class itself, or (for the two unbounded names) a thin subclass
that only changes the default dtype. They compare equal to the current classes.

Examples:
    >>> import torch
    >>> from tdrl.data import Bounded, BoundedTensorSpec, UnboundedDiscreteTensorSpec
    >>> BoundedTensorSpec is Bounded
    True
    >>> UnboundedDiscreteTensorSpec((2,)).dtype
    torch.int64
"""

from __future__ import annotations

from tdrl.data.specs.base import TensorSpec
from tdrl.data.specs.categorical import Binary, Categorical, OneHot
from tdrl.data.specs.composite import Composite
from tdrl.data.specs.continuous import Bounded, UnboundedContinuous, UnboundedDiscrete
from tdrl.data.specs.multi_discrete import MultiCategorical, MultiOneHot
from tdrl.data.specs.non_tensor import NonTensor
from tdrl.data.specs.stacked import Stacked, StackedComposite

__all__ = [
    "BinaryDiscreteTensorSpec",
    "BoundedTensorSpec",
    "CompositeSpec",
    "DiscreteTensorSpec",
    "LazyStackedCompositeSpec",
    "LazyStackedTensorSpec",
    "MultiDiscreteTensorSpec",
    "MultiOneHotDiscreteTensorSpec",
    "NonTensorSpec",
    "OneHotDiscreteTensorSpec",
    "TensorSpec",
    "UnboundedContinuousTensorSpec",
    "UnboundedDiscreteTensorSpec",
]

BinaryDiscreteTensorSpec = Binary
BoundedTensorSpec = Bounded
CompositeSpec = Composite
DiscreteTensorSpec = Categorical
LazyStackedCompositeSpec = StackedComposite
LazyStackedTensorSpec = Stacked
MultiDiscreteTensorSpec = MultiCategorical
MultiOneHotDiscreteTensorSpec = MultiOneHot
NonTensorSpec = NonTensor
OneHotDiscreteTensorSpec = OneHot
UnboundedContinuousTensorSpec = UnboundedContinuous
UnboundedDiscreteTensorSpec = UnboundedDiscrete
