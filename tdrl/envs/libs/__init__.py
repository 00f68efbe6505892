"""Wrappers of external simulator libraries; each imports its library lazily."""

from __future__ import annotations

from tdrl.envs.libs.brax import BraxEnv, BraxWrapper
from tdrl.envs.libs.dm_control import DMControlEnv, DMControlWrapper
from tdrl.envs.libs.envpool import MultiThreadedEnv, MultiThreadedEnvWrapper
from tdrl.envs.libs.gym import (
    GymEnv,
    GymWrapper,
    VecGymEnvTransform,
    default_info_dict_reader,
    gym_backend,
    set_gym_backend,
)
from tdrl.envs.libs.habitat import HabitatEnv
from tdrl.envs.libs.isaac_lab import IsaacLabWrapper
from tdrl.envs.libs.isaacgym import IsaacGymEnv, IsaacGymWrapper
from tdrl.envs.libs.jumanji import JumanjiEnv, JumanjiWrapper
from tdrl.envs.libs.meltingpot import MeltingpotEnv, MeltingpotWrapper
from tdrl.envs.libs.mo_gym import MOGymEnv, MOGymWrapper
from tdrl.envs.libs.openml import OpenMLEnv
from tdrl.envs.libs.openspiel import OpenSpielEnv, OpenSpielWrapper
from tdrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from tdrl.envs.libs.robohive import RoboHiveEnv
from tdrl.envs.libs.smacv2 import SMACv2Env, SMACv2Wrapper
from tdrl.envs.libs.unity_mlagents import UnityMLAgentsEnv, UnityMLAgentsWrapper
from tdrl.envs.libs.vmas import VmasEnv, VmasWrapper

__all__ = [
    "BraxEnv",
    "BraxWrapper",
    "DMControlEnv",
    "DMControlWrapper",
    "GymEnv",
    "GymWrapper",
    "HabitatEnv",
    "IsaacGymEnv",
    "IsaacGymWrapper",
    "IsaacLabWrapper",
    "JumanjiEnv",
    "JumanjiWrapper",
    "MOGymEnv",
    "MOGymWrapper",
    "MeltingpotEnv",
    "MeltingpotWrapper",
    "MultiThreadedEnv",
    "MultiThreadedEnvWrapper",
    "OpenMLEnv",
    "OpenSpielEnv",
    "OpenSpielWrapper",
    "PettingZooEnv",
    "PettingZooWrapper",
    "RoboHiveEnv",
    "SMACv2Env",
    "SMACv2Wrapper",
    "UnityMLAgentsEnv",
    "UnityMLAgentsWrapper",
    "VecGymEnvTransform",
    "VmasEnv",
    "VmasWrapper",
    "default_info_dict_reader",
    "gym_backend",
    "set_gym_backend",
]
