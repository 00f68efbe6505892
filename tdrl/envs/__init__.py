"""Environments: the EnvBase protocol, wrappers, transforms and batched envs."""

from __future__ import annotations

from tdrl.envs import async_pool as _async_pool
from tdrl.envs import auto_reset as _auto_reset
from tdrl.envs import batched as _batched
from tdrl.envs import common as _common
from tdrl.envs import custom as _custom
from tdrl.envs import gym_like as _gym_like
from tdrl.envs import libs as _libs
from tdrl.envs import metadata as _metadata
from tdrl.envs import model_based as _model_based
from tdrl.envs import transforms as _transforms
from tdrl.envs import utils as _utils
from tdrl.envs.async_pool import *  # noqa: F403
from tdrl.envs.auto_reset import *  # noqa: F403
from tdrl.envs.batched import *  # noqa: F403
from tdrl.envs.common import *  # noqa: F403
from tdrl.envs.custom import *  # noqa: F403
from tdrl.envs.gym_like import *  # noqa: F403
from tdrl.envs.libs import *  # noqa: F403
from tdrl.envs.metadata import *  # noqa: F403
from tdrl.envs.model_based import *  # noqa: F403
from tdrl.envs.transforms import *  # noqa: F403
from tdrl.envs.utils import *  # noqa: F403

__all__ = [
    *_common.__all__,
    *_auto_reset.__all__,
    *_metadata.__all__,
    *_gym_like.__all__,
    *_utils.__all__,
    *_custom.__all__,
    *_libs.__all__,
    *_transforms.__all__,
    *_batched.__all__,
    *_async_pool.__all__,
    *_model_based.__all__,
]
