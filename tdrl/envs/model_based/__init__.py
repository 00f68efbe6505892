"""Model-based environments: a world model in place of a simulator."""

from __future__ import annotations

from tdrl.envs.model_based import common as _common
from tdrl.envs.model_based import dreamer as _dreamer
from tdrl.envs.model_based.common import *  # noqa: F403
from tdrl.envs.model_based.dreamer import *  # noqa: F403

__all__ = [*_common.__all__, *_dreamer.__all__]
