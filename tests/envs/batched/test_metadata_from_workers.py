"""ParallelEnv(metadata_from_workers=True): the specs come from the workers' live envs."""

from __future__ import annotations

import os

import pytest
import torch

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tests.envs.batched._envs import MarkedEnv
from tests.mocks import CountingEnv


def _files(folder, prefix):
    return sorted(name for name in os.listdir(folder) if name.startswith(prefix))


@pytest.mark.parametrize("start_method", [None, "spawn"])
def test_envs_are_built_once_in_the_workers_and_stay_live(tmp_path, start_method):
    env = ParallelEnv(
        2,
        MarkedEnv,
        [{"index": i, "folder": str(tmp_path)} for i in range(2)],
        metadata_from_workers=True,
        mp_start_method=start_method,
    )
    try:
        assert env.metadata_from_workers
        assert not env.is_closed
        built = _files(tmp_path, "built-")
        assert len(built) == 2
        assert all(not name.endswith(f"-{os.getpid()}") for name in built)
        assert env.observation_spec["observation"].shape == (2, 4)
        data = env.rollout(3)
        assert data.batch_size == (2, 3)
        assert torch.equal(data["next", "observation"][:, -1], torch.full((2, 4), 3.0))
        assert len(_files(tmp_path, "built-")) == 2  # the rollout rebuilt nothing
        assert env.index == [0, 1]
    finally:
        env.close()
    assert len(_files(tmp_path, "closed-")) == 2


def test_use_buffers_true_is_refused():
    with pytest.raises(ValueError, match="requires use_buffers=False.*got use_buffers=True"):
        ParallelEnv(2, CountingEnv, metadata_from_workers=True, use_buffers=True)
    with pytest.raises(RuntimeError, match="requires use_buffers=False"):
        ParallelEnv(2, CountingEnv, metadata_from_workers=True, use_buffers=True)
    with pytest.raises(TypeError, match="metadata_from_workers: expected a bool, got str"):
        ParallelEnv(2, CountingEnv, metadata_from_workers="yes")


def test_workers_with_different_specs_are_refused_and_closed(tmp_path):
    with pytest.raises(ValueError, match="metadata are incompatible.*'observation'.*\\(5,\\)"):
        ParallelEnv(
            2,
            MarkedEnv,
            [
                {"index": 0, "folder": str(tmp_path), "size": 4},
                {"index": 1, "folder": str(tmp_path), "size": 5},
            ],
            metadata_from_workers=True,
        )
    assert len(_files(tmp_path, "closed-")) == 2


def test_a_worker_failing_to_build_its_env_is_reported_and_the_others_closed(tmp_path):
    with pytest.raises(RuntimeError, match="sub-env 1 refuses to be built"):
        ParallelEnv(
            2,
            MarkedEnv,
            [
                {"index": 0, "folder": str(tmp_path)},
                {"index": 1, "folder": str(tmp_path), "fail": True},
            ],
            metadata_from_workers=True,
        )
    assert _files(tmp_path, "closed-") == [
        name.replace("built", "closed") for name in _files(tmp_path, "built-0")
    ]


def test_closed_env_restarts_with_new_envs(tmp_path):
    env = ParallelEnv(
        2,
        MarkedEnv,
        [{"index": i, "folder": str(tmp_path)} for i in range(2)],
        metadata_from_workers=True,
    )
    env.close()
    env.reset()
    assert len(_files(tmp_path, "built-")) == 4
    env.close()


def test_single_worker_with_serial_for_single_gives_a_serial_env():
    env = ParallelEnv(
        1, CountingEnv, serial_for_single=True, metadata_from_workers=True, use_buffers=False
    )
    try:
        assert isinstance(env, SerialEnv)
        assert env.reset().batch_size == (1,)
    finally:
        env.close()
