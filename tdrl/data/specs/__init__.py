"""TensorSpec family: leaf specs, composites, stacked specs and legacy aliases."""

from __future__ import annotations

from tdrl.data.specs.aliases import (
    BinaryDiscreteTensorSpec,
    BoundedTensorSpec,
    CompositeSpec,
    DiscreteTensorSpec,
    LazyStackedCompositeSpec,
    LazyStackedTensorSpec,
    MultiDiscreteTensorSpec,
    MultiOneHotDiscreteTensorSpec,
    NonTensorSpec,
    OneHotDiscreteTensorSpec,
    UnboundedContinuousTensorSpec,
    UnboundedDiscreteTensorSpec,
)
from tdrl.data.specs.base import DEVICE_TYPING, TensorSpec
from tdrl.data.specs.categorical import Binary, Categorical, OneHot
from tdrl.data.specs.composite import Composite
from tdrl.data.specs.continuous import (
    Bounded,
    BoundedContinuous,
    BoundedDiscrete,
    Unbounded,
    UnboundedContinuous,
    UnboundedDiscrete,
)
from tdrl.data.specs.multi_discrete import MultiCategorical, MultiOneHot
from tdrl.data.specs.non_tensor import NonTensor
from tdrl.data.specs.spaces import BinaryBox, BoxList, CategoricalBox, ContinuousBox
from tdrl.data.specs.stacked import Stacked, StackedComposite, stack_specs
from tdrl.data.specs.utils import (
    check_no_exclusive_keys,
    consolidate_spec,
    contains_lazy_spec,
    make_composite_from_td,
)

__all__ = [
    "DEVICE_TYPING",
    "Binary",
    "BinaryBox",
    "BinaryDiscreteTensorSpec",
    "Bounded",
    "BoundedContinuous",
    "BoundedDiscrete",
    "BoundedTensorSpec",
    "BoxList",
    "Categorical",
    "CategoricalBox",
    "Composite",
    "CompositeSpec",
    "ContinuousBox",
    "DiscreteTensorSpec",
    "LazyStackedCompositeSpec",
    "LazyStackedTensorSpec",
    "MultiCategorical",
    "MultiDiscreteTensorSpec",
    "MultiOneHot",
    "MultiOneHotDiscreteTensorSpec",
    "NonTensor",
    "NonTensorSpec",
    "OneHot",
    "OneHotDiscreteTensorSpec",
    "Stacked",
    "StackedComposite",
    "TensorSpec",
    "Unbounded",
    "UnboundedContinuous",
    "UnboundedContinuousTensorSpec",
    "UnboundedDiscrete",
    "UnboundedDiscreteTensorSpec",
    "check_no_exclusive_keys",
    "consolidate_spec",
    "contains_lazy_spec",
    "make_composite_from_td",
    "stack_specs",
]
