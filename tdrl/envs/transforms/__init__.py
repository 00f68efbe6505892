"""Environment transforms: the machinery (Transform, Compose, TransformedEnv) and its families."""

from __future__ import annotations

from tdrl.envs.transforms.action_chunks import ActionChunkTransform
from tdrl.envs.transforms.action_maps import ActionScaling, FlattenAction
from tdrl.envs.transforms.actions import ActionMask
from tdrl.envs.transforms.auto_reset_env import AutoResetEnv
from tdrl.envs.transforms.checks import FiniteTensorDictCheck
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.counters import InitTracker, StepCounter, TrajCounter
from tdrl.envs.transforms.deltas import NextObservationDelta
from tdrl.envs.transforms.dtypes import (
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    PinMemoryTransform,
)
from tdrl.envs.transforms.expand_as import ExpandAs
from tdrl.envs.transforms.frames import CatFrames, TimeMaxPool
from tdrl.envs.transforms.images import CenterCrop, Crop, GrayScale, Resize, ToTensorImage
from tdrl.envs.transforms.keys import (
    CatTensors,
    ExcludeTransform,
    RemoveEmptySpecs,
    RenameTransform,
    SelectTransform,
)
from tdrl.envs.transforms.kl import KLRewardTransform
from tdrl.envs.transforms.macro_actions import (
    HumanoidMacroAction,
    MacroPrimitive,
    MacroPrimitiveTransform,
    TargetMacroAction,
)
from tdrl.envs.transforms.multi_action import MultiAction
from tdrl.envs.transforms.normalization import ObservationNorm
from tdrl.envs.transforms.policy_switch import ConditionalPolicySwitch
from tdrl.envs.transforms.projections import (
    ActionDiscretizer,
    DiscreteActionProjection,
    gSDENoise,
)
from tdrl.envs.transforms.r3m import R3MTransform
from tdrl.envs.transforms.rb_transforms import (
    MultiStepTransform,
    NextStateReconstructor,
    PolicyAgeFilter,
)
from tdrl.envs.transforms.resets import (
    AutoResetTransform,
    ConditionalSkip,
    EndOfLifeTransform,
    FrameSkipTransform,
    NoopResetEnv,
    TensorDictPrimer,
)
from tdrl.envs.transforms.returns import Reward2GoTransform, RewardSum, TargetReturn
from tdrl.envs.transforms.rewards import (
    BinarizeReward,
    ClipTransform,
    LineariseReward,
    LineariseRewards,
    RewardClipping,
    RewardScaling,
    SignTransform,
    SuccessReward,
)
from tdrl.envs.transforms.sequences import BurnInTransform, RandomCropTensorDict
from tdrl.envs.transforms.shapes import (
    BatchSizeTransform,
    FlattenObservation,
    PermuteTransform,
    SqueezeTransform,
    UnsqueezeTransform,
)
from tdrl.envs.transforms.stack import Stack
from tdrl.envs.transforms.terminations import RandomTruncationTransform, TerminateTransform
from tdrl.envs.transforms.transform import ObservationTransform, Transform
from tdrl.envs.transforms.transformed_env import TransformedEnv
from tdrl.envs.transforms.unary import Hash, UnaryTransform
from tdrl.envs.transforms.vc1 import VC1Transform
from tdrl.envs.transforms.vecnorm import VecNorm
from tdrl.envs.transforms.vecnorm_v2 import VecNormV2
from tdrl.envs.transforms.vip import VIPRewardTransform, VIPTransform

__all__ = [
    "ActionDiscretizer",
    "BurnInTransform",
    "CatFrames",
    "CenterCrop",
    "Crop",
    "DiscreteActionProjection",
    "GrayScale",
    "KLRewardTransform",
    "RandomCropTensorDict",
    "Resize",
    "TimeMaxPool",
    "ToTensorImage",
    "gSDENoise",
    "ActionChunkTransform",
    "ActionMask",
    "ActionScaling",
    "AutoResetEnv",
    "AutoResetTransform",
    "BatchSizeTransform",
    "CatTensors",
    "Compose",
    "ConditionalPolicySwitch",
    "ConditionalSkip",
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DoubleToFloat",
    "EndOfLifeTransform",
    "ExpandAs",
    "ExcludeTransform",
    "FlattenAction",
    "FlattenObservation",
    "FrameSkipTransform",
    "Hash",
    "HumanoidMacroAction",
    "InitTracker",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "MultiAction",
    "MultiStepTransform",
    "NextObservationDelta",
    "NextStateReconstructor",
    "NoopResetEnv",
    "ObservationTransform",
    "PermuteTransform",
    "PinMemoryTransform",
    "PolicyAgeFilter",
    "RandomTruncationTransform",
    "RemoveEmptySpecs",
    "RenameTransform",
    "SelectTransform",
    "SqueezeTransform",
    "Stack",
    "StepCounter",
    "TensorDictPrimer",
    "TerminateTransform",
    "TrajCounter",
    "Transform",
    "TransformedEnv",
    "UnaryTransform",
    "UnsqueezeTransform",
    "BinarizeReward",
    "ClipTransform",
    "FiniteTensorDictCheck",
    "LineariseReward",
    "LineariseRewards",
    "ObservationNorm",
    "Reward2GoTransform",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SignTransform",
    "SuccessReward",
    "TargetMacroAction",
    "TargetReturn",
    "VecNorm",
    "VecNormV2",
    "R3MTransform",
    "VC1Transform",
    "VIPRewardTransform",
    "VIPTransform",
]


def __getattr__(name: str) -> object:
    # VecGymEnvTransform lives with the gym wrappers (which import this package): resolved
    # on first access so that both import orders work
    if name == "VecGymEnvTransform":
        from tdrl.envs.libs._gym_vector import VecGymEnvTransform

        return VecGymEnvTransform
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
