"""RLHF rollout utilities: :class:`RolloutFromModel` and the KL-coefficient controllers."""

from __future__ import annotations

from tdrl.data.llm.kl_controllers import (
    AdaptiveKLController,
    ConstantKLController,
    KLControllerBase,
)
from tdrl.data.llm.rollout import RolloutFromModel

__all__ = ["AdaptiveKLController", "ConstantKLController", "KLControllerBase", "RolloutFromModel"]
