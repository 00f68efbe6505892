"""Wrappers of external simulator libraries; each imports its library lazily."""

from __future__ import annotations

from tdrl.envs.libs.envpool import MultiThreadedEnv, MultiThreadedEnvWrapper
from tdrl.envs.libs.gym import (
    GymEnv,
    GymWrapper,
    VecGymEnvTransform,
    default_info_dict_reader,
    gym_backend,
    set_gym_backend,
)
from tdrl.envs.libs.openspiel import OpenSpielEnv, OpenSpielWrapper
from tdrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from tdrl.envs.libs.vmas import VmasEnv, VmasWrapper

__all__ = [
    "GymEnv",
    "GymWrapper",
    "MultiThreadedEnv",
    "MultiThreadedEnvWrapper",
    "OpenSpielEnv",
    "OpenSpielWrapper",
    "PettingZooEnv",
    "PettingZooWrapper",
    "VecGymEnvTransform",
    "default_info_dict_reader",
    "gym_backend",
    "set_gym_backend",
    "VmasEnv",
    "VmasWrapper",
]
