"""TerminateTransform and RandomTruncationTransform."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import (
    Compose,
    RandomTruncationTransform,
    SerialEnv,
    StepCounter,
    TerminateTransform,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import CountingEnv


# ---------------------------------------------------------- TerminateTransform
def test_terminate_transform_ends_episodes_where_the_predicate_holds():
    env = TransformedEnv(
        CountingEnv(max_steps=100),
        TerminateTransform(lambda td: td["observation"][..., :1] >= 3),
    )
    check_env_specs(env)
    rollout = env.rollout(50)
    assert rollout.shape == (3,)
    assert rollout["next", "terminated"].reshape(-1).tolist() == [False, False, True]
    assert rollout["next", "done"][-1].item()


def test_terminate_transform_python_bool_and_write_done():
    env = TransformedEnv(CountingEnv(max_steps=100), TerminateTransform(lambda td: True))
    td = env.rand_step(env.reset())
    assert td["next", "terminated"].item() and td["next", "done"].item()
    env = TransformedEnv(
        CountingEnv(max_steps=100), TerminateTransform(lambda td: True, write_done=False)
    )
    td = env.rand_step(env.reset())
    assert td["next", "terminated"].item() and not td["next", "done"].item()


def test_terminate_transform_batched_predicate():
    env = TransformedEnv(
        CountingEnv(max_steps=100, batch_size=(3,)),
        TerminateTransform(lambda td: torch.tensor([True, False, True])),
    )
    td = env.rand_step(env.reset())
    assert td["next", "terminated"].reshape(-1).tolist() == [True, False, True]


def test_terminate_transform_errors():
    with pytest.raises(ValueError, match="callable"):
        TerminateTransform(stop=3)
    with pytest.raises(RuntimeError, match="without a parent environment"):
        TerminateTransform(lambda td: True)(TensorDict())
    env = TransformedEnv(CountingEnv(), TerminateTransform(lambda td: torch.zeros(1)))
    with pytest.raises(TypeError, match="boolean"):
        env.rand_step(env.reset())


# --------------------------------------------------- RandomTruncationTransform
def _truncated_env(batch_size=(), **kwargs):
    return TransformedEnv(
        CountingEnv(max_steps=1000, batch_size=batch_size),
        Compose(StepCounter(), RandomTruncationTransform(**kwargs)),
    )


def test_random_truncation_caps_episodes_at_the_horizon():
    torch.manual_seed(0)
    env = _truncated_env(min_horizon=2, max_horizon=5, prob=1.0)
    check_env_specs(env)
    assert "truncated" in env.done_keys
    for _ in range(5):
        rollout = env.rollout(100)
        assert len(rollout) <= 5
        assert rollout["next", "truncated"][-1].item()
        assert rollout["next", "done"][-1].item()


def test_random_truncation_first_reset_spreads_the_horizons():
    torch.manual_seed(0)
    env = _truncated_env(batch_size=(64,), min_horizon=50, max_horizon=100)
    transform = env.transform[-1]
    assert transform.horizons is None
    env.reset()
    horizons = transform.horizons
    assert horizons.shape == (64, 1) and transform.first_episode.all()
    assert horizons.unique().numel() > 1
    assert bool((horizons >= 1).all()) and bool((horizons <= 100).all())


def test_random_truncation_later_resets_draw_with_prob():
    torch.manual_seed(0)
    env = _truncated_env(batch_size=(8,), min_horizon=1, max_horizon=4, prob=0.0)
    transform = env.transform[-1]
    td = env.reset()
    for _ in range(12):
        td = env.step_and_maybe_reset(env.rand_action(td))[1]
    renewed = ~transform.first_episode.squeeze(-1)
    assert renewed.any()
    # prob=0: every renewed episode runs to max_horizon
    assert bool((transform.horizons[renewed] == 4).all())


def test_random_truncation_in_a_batched_env_and_without_first_spread():
    torch.manual_seed(0)

    def make():
        return TransformedEnv(
            CountingEnv(max_steps=1000),
            Compose(
                StepCounter(),
                RandomTruncationTransform(max_horizon=3, first_episode_prob=0.0),
            ),
        )

    env = SerialEnv(2, make)
    check_env_specs(env)
    rollout = env.rollout(7, break_when_any_done=False)
    assert rollout["next", "truncated"].squeeze(-1)[:, :3].tolist() == [[False, False, True]] * 2


def test_random_truncation_validation_and_misuse():
    with pytest.raises(ValueError, match="prob must be in"):
        RandomTruncationTransform(prob=1.5)
    with pytest.raises(ValueError, match="first_episode_prob must be in"):
        RandomTruncationTransform(first_episode_prob=-0.1)
    with pytest.raises(ValueError, match="min_horizon must be >= 1"):
        RandomTruncationTransform(min_horizon=0)
    with pytest.raises(ValueError, match="min_horizon .* must be <= max_horizon"):
        RandomTruncationTransform(min_horizon=10, max_horizon=5)
    with pytest.raises(RuntimeError, match="requires a StepCounter"):
        TransformedEnv(CountingEnv(), RandomTruncationTransform(max_horizon=5))
    # before any reset the transform leaves steps alone
    t = RandomTruncationTransform(max_horizon=5)
    next_td = TensorDict({"step_count": torch.tensor([9]), "done": torch.tensor([False])})
    assert not t._step(TensorDict(), next_td)["done"].any()
    rb = ReplayBuffer(storage=LazyTensorStorage(4), transform=t)
    rb.extend(TensorDict({"a": torch.zeros(4)}, [4]))
    with pytest.raises(NotImplementedError):
        rb.sample(2)
