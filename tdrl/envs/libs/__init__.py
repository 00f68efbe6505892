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
from tdrl.envs.libs.meltingpot import MeltingpotEnv, MeltingpotWrapper
from tdrl.envs.libs.openspiel import OpenSpielEnv, OpenSpielWrapper
from tdrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from tdrl.envs.libs.smacv2 import SMACv2Env, SMACv2Wrapper
from tdrl.envs.libs.vmas import VmasEnv, VmasWrapper

__all__ = [
    "GymEnv",
    "GymWrapper",
    "MeltingpotEnv",
    "MeltingpotWrapper",
    "MultiThreadedEnv",
    "MultiThreadedEnvWrapper",
    "OpenSpielEnv",
    "OpenSpielWrapper",
    "PettingZooEnv",
    "PettingZooWrapper",
    "SMACv2Env",
    "SMACv2Wrapper",
    "VecGymEnvTransform",
    "VmasEnv",
    "VmasWrapper",
    "default_info_dict_reader",
    "gym_backend",
    "set_gym_backend",
]
