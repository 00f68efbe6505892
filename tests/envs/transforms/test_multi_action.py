"""MultiAction and ConditionalPolicySwitch: transforms that step their env themselves."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    Compose,
    ConditionalPolicySwitch,
    MultiAction,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import CountingEnv


def _chunked():
    return Compose(
        StepCounter(step_count_key="base_steps"),
        MultiAction(),
        StepCounter(step_count_key="outer_steps"),
    )


def _chunk_policy(size):
    def policy(td):
        return td.set("action", torch.ones(*td.batch_size, size, 1))

    return policy


# ---------------------------------------------------------------- MultiAction
def test_multi_action_runs_one_base_step_per_action():
    env = TransformedEnv(CountingEnv(max_steps=10), _chunked())
    check_env_specs(env)
    assert env.action_spec.shape == (-1, 1)
    assert env.reward_spec.shape == (-1, 1)
    rollout = env.rollout(10, _chunk_policy(3))
    assert rollout["action"].shape == (4, 3, 1)
    # the base env counts 3 per outer step and stops at its done (10) mid-chunk
    assert rollout["next", "observation"][:, 0].tolist() == [3.0, 6.0, 9.0, 10.0]
    assert rollout["next", "base_steps"].reshape(-1).tolist() == [3, 6, 9, 10]
    assert rollout["next", "outer_steps"].reshape(-1).tolist() == [1, 2, 3, 4]
    # one reward slot per action; the skipped steps get zeros
    assert rollout["next", "reward"].shape == (4, 3, 1)
    assert rollout["next", "reward"][-1].reshape(-1).tolist() == [1.0, 0.0, 0.0]


def test_multi_action_batched_envs_stop_elements_separately():
    base = SerialEnv(2, [lambda: CountingEnv(max_steps=4), lambda: CountingEnv(max_steps=8)])
    env = TransformedEnv(base, _chunked())
    check_env_specs(env)
    rollout = env.rollout(3, _chunk_policy(3), break_when_any_done=False)
    counts = rollout["next", "observation"][..., 0]
    # element 0 ends at 4 (inside the 2nd chunk), element 1 goes on
    assert counts[0, :2].tolist() == [3.0, 4.0]
    assert counts[1].tolist() == [3.0, 6.0, 8.0]
    assert rollout["next", "reward"][0, 1].reshape(-1).tolist() == [1.0, 0.0, 0.0]
    assert rollout["next", "reward"][1, 2].reshape(-1).tolist() == [1.0, 1.0, 0.0]
    assert rollout["next", "base_steps"][1].reshape(-1).tolist() == [3, 6, 8]
    base.close()


@pytest.mark.filterwarnings("ignore:SerialEnv. the sub-env specs have dynamic dims")
def test_multi_action_inside_each_sub_env():
    def make(max_steps):
        return lambda: TransformedEnv(CountingEnv(max_steps=max_steps), _chunked())

    env = SerialEnv(2, [make(5), make(50)])
    check_env_specs(env)
    rollout = env.rollout(2, _chunk_policy(2), break_when_any_done=False)
    assert rollout["next", "observation"][..., 0].tolist() == [[2.0, 4.0], [2.0, 4.0]]
    env.close()


def test_multi_action_summed_rewards_and_changing_chunk_sizes():
    env = TransformedEnv(CountingEnv(max_steps=100), MultiAction(stack_rewards=False))
    assert env.reward_spec.shape == (1,)
    td = env.reset().set("action", torch.full((4, 1), 0.5))
    assert env.step(td)["next", "reward"].tolist() == [2.0]
    td = env.reset().set("action", torch.full((2, 1), 0.5))
    assert env.step(td)["next", "observation"][0].item() == 2.0


def test_multi_action_errors():
    env = TransformedEnv(CountingEnv(), MultiAction())
    with pytest.raises(ValueError, match="no chunk dim"):
        env.step(env.reset().set("action", torch.tensor(1.0)))
    with pytest.raises(KeyError, match="action chunk"):
        env.step(env.reset())
    with pytest.raises(KeyError, match="not in the action spec"):
        TransformedEnv(CountingEnv(), MultiAction(action_key="other"))
    with pytest.raises(RuntimeError, match="TransformedEnv"):
        MultiAction()._step(TensorDict({"action": torch.ones(2, 1)}), TensorDict())


# ---------------------------------------------------- ConditionalPolicySwitch
def _with_opponent(base, condition):
    opponent = lambda td: td.set("action", torch.full((*td.batch_size, 1), -1.0))  # noqa: E731
    return TransformedEnv(
        base, Compose(StepCounter(), ConditionalPolicySwitch(opponent, condition))
    )


def test_policy_switch_plays_every_other_move():
    env = _with_opponent(CountingEnv(max_steps=8), lambda td: bool(td["step_count"] % 2 == 0))
    check_env_specs(env)
    rollout = env.rollout(20, lambda td: td.set("action", torch.ones(1)))
    # the opponent moves at even counts (the reset included): the policy sees odd ones
    assert rollout["step_count"].reshape(-1).tolist() == [1, 3, 5, 7]
    assert rollout["next", "observation"][:, 0].tolist() == [3.0, 5.0, 7.0, 8.0]
    # the reward is the opponent's (its action is -1) when it moved after the policy;
    # once the episode is over the opponent does not move
    assert rollout["next", "reward"].reshape(-1).tolist() == [-1.0, -1.0, -1.0, 1.0]
    assert rollout["next", "done"][-1].item()


def test_policy_switch_steps_only_the_elements_that_need_it():
    base = SerialEnv(3, [lambda m=m: CountingEnv(max_steps=m) for m in (6, 7, 8)])
    env = _with_opponent(base, lambda td: (td["step_count"] % 2 == 0).squeeze(-1))
    check_env_specs(env)
    rollout = env.rollout(
        12, lambda td: td.set("action", torch.ones(3, 1)), break_when_any_done=False
    )
    for element in range(3):
        counts = rollout["step_count"][element].reshape(-1)
        assert bool((counts % 2 == 1).all())
    base.close()


def test_policy_switch_keeps_other_elements_untouched():
    base = CountingEnv(max_steps=100, batch_size=(2,))
    # the opponent plays element 1 at even counts only
    env = _with_opponent(
        base, lambda td: (td["step_count"] % 2 == 0).squeeze(-1) & torch.tensor([False, True])
    )
    td = env.reset()
    assert td["step_count"].reshape(-1).tolist() == [0, 1]
    td = env.step(td.set("action", torch.ones(2, 1)))
    # element 0 keeps its own step and reward; element 1 got the opponent's move too
    assert td["next", "step_count"].reshape(-1).tolist() == [1, 3]
    assert td["next", "reward"].reshape(-1).tolist() == [1.0, -1.0]


def test_policy_switch_refuses_data_outside_an_env():
    switch = ConditionalPolicySwitch(lambda td: td, lambda td: True)
    with pytest.raises(RuntimeError, match="cannot be called independently"):
        switch(TensorDict())
    with pytest.raises(TypeError, match="condition"):
        ConditionalPolicySwitch(lambda td: td, condition=3)
