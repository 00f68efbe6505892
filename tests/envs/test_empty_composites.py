"""Empty Composite entries in an env's specs travel through steps and rollouts."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Categorical, Composite, Unbounded
from tdrl.envs import (
    EnvBase,
    ParallelEnv,
    RemoveEmptySpecs,
    SerialEnv,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.utils import step_mdp


class EmptyLevelsEnv(EnvBase):
    """Observations and rewards next to empty Composites (which hold no entry)."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_spec = Composite(
            observation=Unbounded(3), other=Composite(inner=Composite())
        )
        self.action_spec = Unbounded(3)
        self.done_spec = Categorical(2, (1,), dtype=torch.bool)
        self.reward_spec = Composite(reward=Unbounded(1), reward_group=Composite())

    def _reset(self, tensordict):
        return self.observation_spec.rand().update(self.full_done_spec.zero())

    def _step(self, tensordict):
        out = TensorDict().update(self.observation_spec.rand())
        return out.update(self.full_done_spec.zero()).update(self.full_reward_spec.rand())

    def _set_seed(self, seed):
        return seed


def test_rollout_keeps_empty_observation_levels_and_leaves_reward_ones_under_next():
    env = EmptyLevelsEnv()
    rollout = env.rollout(3)
    keys = set(rollout.keys(True))
    assert {("other", "inner"), ("next", "other", "inner"), ("next", "reward_group")} <= keys
    assert "reward_group" not in rollout.keys()  # a reward entry: not carried to the root
    step = env.step_mdp(env.rand_step(env.reset()))
    assert ("other", "inner") in step.keys(True) and "reward_group" not in step.keys()


def test_env_checks_pass_with_empty_levels():
    check_env_specs(EmptyLevelsEnv())


def test_step_mdp_function_still_drops_levels_without_entries():
    td = TensorDict(
        {"obs": torch.zeros(2), "next": {"obs": torch.ones(2), "empty": TensorDict()}}, []
    )
    assert set(step_mdp(td).keys()) == {"obs"}


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_batched_envs_refuse_empty_specs_and_take_them_removed(batched):
    with pytest.raises(RuntimeError, match=r"passed to \w+Env has empty specs .*'other', 'inner'"):
        batched(2, EmptyLevelsEnv)
    env = batched(2, lambda: TransformedEnv(EmptyLevelsEnv(), RemoveEmptySpecs()))
    try:
        check_env_specs(env)
        assert "other" not in env.rollout(2).keys()
    finally:
        env.close()
