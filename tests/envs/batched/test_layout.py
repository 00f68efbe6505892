"""Shared-buffer layout of batched envs: the data read back keeps the sub-envs' structure."""

import pytest
import torch

from tdrl.envs import ParallelEnv, SerialEnv
from tdrl.envs.batched import _shared
from tests.mocks import MultiAgentCountingEnv


def test_group_shapes_lists_every_nested_level():
    env = MultiAgentCountingEnv(n_agents=3, batch_size=(4,))
    shapes = _shared.group_shapes(env.output_spec, env.input_spec)
    assert shapes == {("agents",): torch.Size([4, 3])}


@pytest.mark.parametrize("batched_cls", [SerialEnv, ParallelEnv])
@pytest.mark.parametrize("per_worker_buffers", [False, True])
def test_nested_levels_keep_their_batch_dims(batched_cls, per_worker_buffers):
    # False: one stacked buffer per leaf; True: buffers per worker, lazily stacked
    env = batched_cls(
        2,
        lambda: MultiAgentCountingEnv(n_agents=3, batch_size=(4,)),
        share_individual_td=per_worker_buffers,
    )
    try:
        reset = env.reset()
        data = env.rollout(3, break_when_any_done=False)
        assert reset["agents"].batch_size == (2, 4, 3)
        assert data["agents"].batch_size == (2, 4, 3, 3)
        assert data["next", "agents"].batch_size == (2, 4, 3, 3)
        assert data["next", "agents", "reward"].shape == (2, 4, 3, 3, 1)
    finally:
        env.close()
