"""Indexed views of batched envs (``env[1:]``): live views over some of the workers."""

import gc

import numpy as np
import pytest
import torch

from tdrl.envs import ParallelEnv, SerialEnv, check_env_specs
from tests.mocks import CountingEnv

CLASSES = [SerialEnv, ParallelEnv]


def _counts(env):
    return torch.stack([count.reshape(()) for count in env.count]).tolist()


def _ones(env):
    data = env.full_action_spec.zero()
    data["action"] = torch.ones_like(data["action"])
    return data


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("use_buffers", [True, False])
@pytest.mark.parametrize(
    ("index", "selected"),
    [
        (2, [2]),
        (-1, [3]),
        (slice(1, 3), [1, 2]),
        ([3, 0], [3, 0]),
        (np.array([0, 3]), [0, 3]),
        (torch.tensor([1, 3]), [1, 3]),
    ],
)
def test_view_steps_only_its_workers(cls, use_buffers, index, selected):
    with cls(4, CountingEnv, use_buffers=use_buffers) as env:
        env.reset()
        view = env[index]
        assert isinstance(view, cls)
        assert view.num_workers == len(selected) and view.batch_size == (len(selected),)
        out = view.step(_ones(view))
        assert out.batch_size == (len(selected),)
        assert (out["next", "observation"] == 1).all()
        expected = [1.0 if w in selected else 0.0 for w in range(4)]
        assert _counts(env) == expected
        assert _counts(view) == [expected[w] for w in selected]
        view.close()
        assert view.is_closed and not env.is_closed
        env.rand_step()


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
@pytest.mark.parametrize("cls", CLASSES)
def test_view_steps_with_and_without_an_input_device(cls):
    # without buffers, the workers not in a view keep the data of their last step; a
    # step of the view whose input has a device, then one without, must still stack
    with cls(4, CountingEnv, use_buffers=False) as env:
        env.reset()
        view = env[1:3]
        view.step(_ones(view).to("cpu"))
        out = view.rand_step()
        assert out.batch_size == (2,)
        assert _counts(env) == [0.0, 2.0, 2.0, 0.0]
        check_env_specs(view)


@pytest.mark.parametrize("cls", CLASSES)
def test_view_reset_rollout_and_specs(cls):
    with cls(3, CountingEnv) as env:
        env.rollout(2, break_when_any_done=False)
        view = env[1:]
        check_env_specs(view)
        reset = view.reset()
        assert _counts(env) == [2.0, 0.0, 0.0]
        assert (reset["observation"] == 0).all()
        data = view.rollout(3, break_when_any_done=False)
        assert data.batch_size == (2, 3)
        assert _counts(env) == [2.0, 3.0, 3.0]
        assert view.set_seed(5) == env[1:].set_seed(5)
        nested = view[1]  # a view of a view addresses the parent's worker 2
        nested.reset()
        assert _counts(env) == [2.0, 3.0, 0.0]


@pytest.mark.parametrize("cls", CLASSES)
def test_closed_views_and_closed_parents_raise(cls):
    env = cls(2, CountingEnv)
    env.reset()
    view = env[1:]
    view.close()
    with pytest.raises(RuntimeError, match="closed indexed view"):
        view.reset()
    other = env[:1]
    env.close()
    with pytest.raises(RuntimeError, match="parent environment has been closed"):
        other.rand_step()


@pytest.mark.parametrize("cls", CLASSES)
def test_view_keeps_its_parent_alive(cls):
    env = cls(3, CountingEnv)
    env.reset()
    env = env[:1]
    gc.collect()
    try:
        assert env.rand_step()["next", "observation"].shape == (1, 4)
    finally:
        env.close()


def test_bad_indices():
    with SerialEnv(2, CountingEnv) as env:
        for mask in (torch.ones(2, dtype=torch.bool), np.ones(2, dtype=bool)):
            with pytest.raises(NotImplementedError, match="Boolean masks"):
                env[mask]
        with pytest.raises(IndexError, match="out of range for 2 workers"):
            env[5]
        with pytest.raises(IndexError, match="selects no worker"):
            env[2:]
        with pytest.raises(TypeError, match="got str"):
            env["a"]
        with pytest.raises(NotImplementedError, match="replacing a sub-env"):
            env[0] = CountingEnv()
