"""Partial resets of batched envs whose data cannot be merged as plain tensors."""

import pytest
import torch

from tdrl.envs import ParallelEnv, SerialEnv
from tests.envs.batched._envs import TextEnv
from tests.mocks import EnvWithDynamicSpec

CLASSES = [SerialEnv, ParallelEnv]


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("use_buffers", [True, False])
def test_partial_reset_keeps_the_text_of_other_workers(cls, use_buffers):
    kwargs = [{"prefix": prefix} for prefix in "abc"]
    with cls(3, TextEnv, kwargs, use_buffers=use_buffers) as env:
        data = env.reset()
        for _ in range(2):
            data = env.step_mdp(env.rand_step(data))
        assert data["text"] == ["a2", "b2", "c2"]
        request = data.select("text")
        request.set("_reset", torch.tensor([[True], [False], [True]]))
        out = env.reset(request)
        assert out["text"] == ["a0", "b2", "c0"]


@pytest.mark.parametrize("cls", CLASSES)
def test_step_and_maybe_reset_resets_the_text_of_done_workers(cls):
    kwargs = [{"prefix": "a", "max_steps": 2}, {"prefix": "b", "max_steps": 5}]
    with cls(2, TextEnv, kwargs) as env:
        data = env.reset()
        for _ in range(2):
            data, next_data = env.step_and_maybe_reset(env.rand_action(data))
            if data["next", "done"].any():
                break
            data = next_data
        assert data["next", "text"] == ["a2", "b2"]
        assert next_data["text"] == ["a0", "b2"]


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
@pytest.mark.parametrize("cls", CLASSES)
def test_partial_resets_of_workers_with_different_shapes(cls):
    # the observation grows with the step count: workers at different steps differ in shape
    with cls(2, [lambda: EnvWithDynamicSpec(2), lambda: EnvWithDynamicSpec(3)]) as env:
        data = env.rollout(7, break_when_any_done=False)
        counts = [
            [worker["observation"][0, 0, 0].item() for worker in step.unbind(0)]
            for step in data.unbind(1)
        ]
        # worker 0 restarts after 2 steps, worker 1 after 3
        assert counts == [
            [0.0, 0.0],
            [1.0, 1.0],
            [0.0, 2.0],
            [1.0, 0.0],
            [0.0, 1.0],
            [1.0, 2.0],
            [0.0, 0.0],
        ]
