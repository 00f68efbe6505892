"""Batched environments: SerialEnv, ParallelEnv and EnvCreator."""

from __future__ import annotations

from tdrl.envs.batched.env_creator import EnvCreator, env_creator, get_env_metadata
from tdrl.envs.batched.parallel import ParallelEnv
from tdrl.envs.batched.serial import BatchedEnvBase, SerialEnv

__all__ = [
    "BatchedEnvBase",
    "EnvCreator",
    "ParallelEnv",
    "SerialEnv",
    "env_creator",
    "get_env_metadata",
]
