"""ParallelEnv workers keep the objects they inherit out of their garbage collections."""

from __future__ import annotations

import gc
import os

from tdrl.envs import ParallelEnv
from tests.mocks import CountingEnv

PARENT_PID = os.getpid()


def env_frozen_in_workers():
    """A CountingEnv that a worker can only build once its inherited objects are frozen."""
    if os.getpid() != PARENT_PID and gc.get_freeze_count() == 0:
        raise RuntimeError("the worker's garbage collector still walks the objects it inherited")
    return CountingEnv(max_steps=4)


def test_forked_workers_freeze_inherited_objects():
    assert gc.get_freeze_count() == 0
    env = ParallelEnv(2, env_frozen_in_workers, mp_start_method="fork")
    try:
        assert env.rollout(3).batch_size == (2, 3)
    finally:
        env.close()
    assert gc.get_freeze_count() == 0  # the parent is left alone
