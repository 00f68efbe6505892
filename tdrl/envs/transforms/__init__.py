"""Environment transforms: the machinery (Transform, Compose, TransformedEnv) and its families."""

from __future__ import annotations

from tdrl.envs.transforms.actions import ActionMask
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.counters import InitTracker, StepCounter, TrajCounter
from tdrl.envs.transforms.dtypes import (
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    PinMemoryTransform,
)
from tdrl.envs.transforms.keys import (
    CatTensors,
    ExcludeTransform,
    Hash,
    RemoveEmptySpecs,
    RenameTransform,
    SelectTransform,
    UnaryTransform,
)
from tdrl.envs.transforms.resets import (
    AutoResetTransform,
    ConditionalSkip,
    EndOfLifeTransform,
    FrameSkipTransform,
    NoopResetEnv,
    TensorDictPrimer,
)
from tdrl.envs.transforms.shapes import (
    BatchSizeTransform,
    FlattenObservation,
    PermuteTransform,
    SqueezeTransform,
    UnsqueezeTransform,
)
from tdrl.envs.transforms.transform import ObservationTransform, Transform
from tdrl.envs.transforms.transformed_env import TransformedEnv

__all__ = [
    "ActionMask",
    "AutoResetTransform",
    "BatchSizeTransform",
    "CatTensors",
    "Compose",
    "ConditionalSkip",
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DoubleToFloat",
    "EndOfLifeTransform",
    "ExcludeTransform",
    "FlattenObservation",
    "FrameSkipTransform",
    "Hash",
    "InitTracker",
    "NoopResetEnv",
    "ObservationTransform",
    "PermuteTransform",
    "PinMemoryTransform",
    "RemoveEmptySpecs",
    "RenameTransform",
    "SelectTransform",
    "SqueezeTransform",
    "StepCounter",
    "TensorDictPrimer",
    "TrajCounter",
    "Transform",
    "TransformedEnv",
    "UnaryTransform",
    "UnsqueezeTransform",
]
