"""Policy-side helpers the environment API relies on: masked distributions, random and
spec-aware policies, and the world-model container of model-based envs."""

from __future__ import annotations

from tdrl.modules.masked_categorical import MaskedCategorical
from tdrl.modules.random_policy import RandomPolicy
from tdrl.modules.safe_module import SafeModule
from tdrl.modules.world_model import WorldModelWrapper

__all__ = ["MaskedCategorical", "RandomPolicy", "SafeModule", "WorldModelWrapper"]
