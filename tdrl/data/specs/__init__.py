"""TensorSpec family: leaf specs, composites, stacked specs and legacy aliases.

The package is also importable as ``tdrl.data.tensor_specs``, the module path that code
written for the reference API imports specs from.

``_CHECK_SPEC_ENCODE`` is a debug switch: when true, ``encode`` checks that the value it
produced is in the spec and ``to_numpy`` (without an explicit ``safe``) checks its input;
either raises an error that is both a ValueError / TypeError and an AssertionError. It is
off by default (checks cost time on every env step) and can be turned on for a process
with the environment variable ``TDRL_CHECK_SPEC_ENCODE=1``.
"""

from __future__ import annotations

import os
import sys

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
from tdrl.data.specs.choice import Choice
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

#: Debug switch for value checks in ``encode`` / ``to_numpy`` (read at call time).
_CHECK_SPEC_ENCODE: bool = os.environ.get("TDRL_CHECK_SPEC_ENCODE", "0") == "1"

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
    "Choice",
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

# the reference API's module path for specs is the same module
sys.modules.setdefault("tdrl.data.tensor_specs", sys.modules[__name__])
