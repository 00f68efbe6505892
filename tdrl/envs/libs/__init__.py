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
from tdrl.envs.libs.mo_gym import MOGymEnv, MOGymWrapper
from tdrl.envs.libs.openml import OpenMLEnv
from tdrl.envs.libs.robohive import RoboHiveEnv
from tdrl.envs.libs.unity_mlagents import UnityMLAgentsEnv, UnityMLAgentsWrapper

__all__ = [
    "BraxEnv",
    "BraxWrapper",
    "HabitatEnv",
    "IsaacGymEnv",
    "IsaacGymWrapper",
    "IsaacLabWrapper",
    "JumanjiEnv",
    "JumanjiWrapper",
    "DMControlEnv",
    "DMControlWrapper",
    "GymEnv",
    "GymWrapper",
    "MOGymEnv",
    "MOGymWrapper",
    "OpenMLEnv",
    "RoboHiveEnv",
    "UnityMLAgentsEnv",
    "UnityMLAgentsWrapper",
    "MultiThreadedEnv",
    "MultiThreadedEnvWrapper",
    "VecGymEnvTransform",
    "default_info_dict_reader",
    "gym_backend",
    "set_gym_backend",
]
