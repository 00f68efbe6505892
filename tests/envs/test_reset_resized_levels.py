"""A reset may give a nested level of another length than the step before it (a history)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.data import Composite, Unbounded
from tdrl.envs import TransformedEnv
from tdrl.envs.transforms import Transform
from tests.mocks import CountingEnv


class GrowingHistory(Transform):
    """Keeps a ``"history"`` level that a reset restarts at length 2 and each step extends."""

    def transform_observation_spec(self, observation_spec):
        observation_spec["history"] = Composite(content=Unbounded((-1,)), shape=(-1,))
        return observation_spec

    def _reset(self, tensordict, tensordict_reset):
        tensordict_reset["history"] = TensorDict(content=torch.zeros(2), batch_size=[2])
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        content = tensordict["history", "content"]
        grown = torch.cat([content, content[-1:] + 1])
        next_tensordict["history"] = TensorDict(content=grown, batch_size=[len(grown)])
        return next_tensordict


def make_env():
    return TransformedEnv(CountingEnv(max_steps=3), GrowingHistory())


def test_rollout_resets_a_longer_history():
    data = make_env().rollout(8, break_when_any_done=False, return_contiguous=False)
    steps = data.unbind(0)
    assert [len(step["next", "history", "content"]) for step in steps] == [3, 4, 5] * 2 + [3, 4]
    # the step after a reset starts from the reset's history, not from the ended one
    assert [len(step["history", "content"]) for step in steps] == [2, 3, 4] * 2 + [2, 3]
    assert steps[3]["history", "content"].tolist() == [0.0, 0.0]


def test_collector_batches_cross_resets_of_a_history():
    env = make_env()
    collector = SyncDataCollector(env, env.rand_action, frames_per_batch=5, total_frames=20)
    lengths = []
    for batch in collector:
        for step in batch.unbind(0):
            history = step["history", "content"]
            following = step["next", "history", "content"]
            assert following[: len(history)].tolist() == history.tolist()
            lengths.append(len(following))
    collector.shutdown()
    assert lengths == [3, 4, 5] * 6 + [3, 4]
