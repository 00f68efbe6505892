"""StepCounter + RewardSum + InitTracker through a TransformedEnv: values checked by hand.

These cover the per-step and reset paths of the three counting transforms together, the
reset input that a TransformedEnv passes on to its base env and transforms, and the
changes of the chain that must refresh that input.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Unbounded
from tdrl.envs import (
    Compose,
    GymEnv,
    InitTracker,
    RewardSum,
    SerialEnv,
    StepCounter,
    TransformedEnv,
)
from tdrl.envs.transforms.transformed_env import _select
from tests.mocks import CountingEnv, MultiAgentCountingEnv


def _chain() -> Compose:
    return Compose(StepCounter(), RewardSum(), InitTracker())


def _expected_counts(done: torch.Tensor, reward: torch.Tensor):
    """Step counts, running sums and first-step flags of a rollout, computed step by step."""
    step_count, episode_reward, is_init = [], [], []
    count, total, first = 0, 0.0, True
    for index in range(done.shape[0]):
        is_init.append(first)
        count += 1
        total = float(torch.tensor(total, dtype=reward.dtype) + reward[index, 0])
        step_count.append(count)
        episode_reward.append(total)
        first = bool(done[index, 0])
        if first:
            count, total = 0, 0.0
    return (
        torch.tensor(step_count, dtype=torch.int64).unsqueeze(-1),
        torch.tensor(episode_reward, dtype=reward.dtype).unsqueeze(-1),
        torch.tensor(is_init).unsqueeze(-1),
    )


def test_gym_rollout_matches_counts_computed_by_hand():
    env = TransformedEnv(GymEnv("CartPole-v1"), _chain())
    env.set_seed(0)
    rollout = env.rollout(200, env.rand_action, break_when_any_done=False)
    done = rollout["next", "done"]
    assert done.sum() >= 3, "the rollout should span several episodes"
    step_count, episode_reward, is_init = _expected_counts(done, rollout["next", "reward"])
    for key, expected in (
        (("next", "step_count"), step_count),
        (("next", "episode_reward"), episode_reward),
        ("is_init", is_init),
    ):
        value = rollout[key]
        assert value.dtype == expected.dtype, key
        assert torch.equal(value, expected), key
    # the root entries are the previous step's "next" entries, restarted after each done
    assert torch.equal(rollout["step_count"][1:], torch.where(done[:-1], 0, step_count[:-1]))
    assert not rollout["next", "is_init"].any()


def test_entries_of_different_steps_do_not_share_memory():
    env = TransformedEnv(GymEnv("CartPole-v1"), _chain())
    env.set_seed(0)
    td = env.reset()
    outputs = []
    for _ in range(5):
        td = env.step(env.rand_action(td))
        outputs.append(td["next"])
        td = env.step_mdp(td)
    before = [out.clone() for out in outputs]
    for out in outputs[1:]:
        out["step_count"].add_(1)
        out["episode_reward"].add_(1)
        out["is_init"].fill_(True)
    # writing into later steps in place leaves the first one untouched
    for key in ("step_count", "episode_reward", "is_init"):
        assert torch.equal(outputs[0][key], before[0][key]), key


def test_partial_reset_of_a_batched_env_keeps_the_other_elements():
    env = TransformedEnv(SerialEnv(2, lambda: CountingEnv(max_steps=100)), _chain())
    td = env.reset()
    for _ in range(3):
        td = env.step_mdp(env.rand_step(td))
    reward_sum = td["episode_reward"].clone()
    td["_reset"] = torch.tensor([[True], [False]])
    td = env.reset(td)
    assert td["step_count"].reshape(-1).tolist() == [0, 3]
    assert td["step_count"].dtype is torch.int64
    assert td["episode_reward"][0].item() == 0.0
    assert torch.equal(td["episode_reward"][1], reward_sum[1])
    assert td["is_init"].reshape(-1).tolist() == [True, False]
    td = env.rand_step(td)
    assert td["next", "step_count"].reshape(-1).tolist() == [1, 4]


class RecordingEnv(CountingEnv):
    """A counting env that records the keys its reset receives."""

    def _reset(self, tensordict=None, **kwargs):
        self.seen = None if tensordict is None else set(tensordict.keys())
        return super()._reset(tensordict, **kwargs)


def test_reset_passes_on_the_state_of_transforms_appended_later():
    # what a reset hands to the base env follows the chain: a transform appended after
    # the env was built adds its state entries (here "step_count") to it
    base = RecordingEnv(max_steps=100, batch_size=(2,))
    env = TransformedEnv(base, Compose())
    td = env.step_mdp(env.rand_step(env.reset()))
    td["_reset"] = torch.tensor([[True], [False]])
    env.reset(td)
    assert base.seen == {"_reset"}
    env.append_transform(StepCounter())
    td = env.step_mdp(env.rand_step(env.reset()))
    td["_reset"] = torch.tensor([[True], [False]])
    td["extra"] = torch.zeros(2)
    td = env.reset(td)
    assert base.seen == {"_reset", "step_count"}
    assert td["step_count"].reshape(-1).tolist() == [0, 1]
    # so does a state entry added to the base env's own specs
    state_spec = env.base_env.full_state_spec.clone().unlock_()
    state_spec["memory"] = Unbounded((2, 3))
    env.base_env.full_state_spec = state_spec
    td["_reset"] = torch.tensor([[True], [False]])
    td["memory"] = torch.zeros(2, 3)
    env.reset(td)
    assert base.seen == {"_reset", "step_count", "memory"}


def test_max_steps_change_through_a_new_chain_truncates_at_the_new_limit():
    env = TransformedEnv(CountingEnv(max_steps=100), StepCounter(max_steps=5))
    assert env.rollout(10).shape == (5,)
    env.transform = Compose(StepCounter(max_steps=2), RewardSum(), InitTracker())
    rollout = env.rollout(10)
    assert rollout.shape == (2,)
    assert rollout["next", "truncated"].reshape(-1).tolist() == [False, True]


def test_nested_done_levels_count_and_reset():
    env = TransformedEnv(MultiAgentCountingEnv(n_agents=2, max_steps=3), _chain())
    rollout = env.rollout(3)
    assert rollout["next", "step_count"].reshape(-1).tolist() == [1, 2, 3]
    assert rollout["is_init"].reshape(-1).tolist() == [True, False, False]
    td = env.reset(rollout[-1]["next"].clone())
    assert td["step_count"].reshape(-1).tolist() == [0]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: TensorDict({"a": torch.zeros(2, 1), "b": torch.ones(2)}, [2]), id="flat"
        ),
        pytest.param(
            lambda: TensorDict({"a": torch.zeros(2, 1), "n": {"c": torch.ones(2)}}, [2]),
            id="nested",
        ),
        pytest.param(
            lambda: TensorDict({"a": torch.zeros(2, 1), "b": torch.ones(2)}, [2], names=["x"]),
            id="names",
        ),
        pytest.param(
            lambda: TensorDict({"a": torch.zeros(2, 1), "b": torch.ones(2)}, [2]).lock_(),
            id="locked",
        ),
    ],
)
@pytest.mark.parametrize("keys", [("a", "missing"), ("b",), ("a", ("n", "c")), ("n",), ()], ids=str)
def test_reset_input_selection_matches_select(make, keys):
    source = make()
    got = _select(source, keys)
    expected = source.select(*keys, strict=False)
    assert type(got) is type(expected)
    assert got.batch_size == expected.batch_size
    assert got.names == expected.names
    assert got.device == expected.device
    assert got.is_locked == expected.is_locked
    assert sorted(got.keys(True, True), key=str) == sorted(expected.keys(True, True), key=str)
    for key in expected.keys(True, True):
        assert got.get(key) is expected.get(key)


def test_chain_edits_change_what_a_step_writes():
    env = TransformedEnv(CountingEnv(max_steps=100), Compose(StepCounter()))
    td = env.rand_step(env.reset())
    assert "episode_reward" not in td["next"].keys()
    env.transform.append(RewardSum())
    env.transform.insert(0, InitTracker())
    td = env.rand_step(env.reset())
    assert {"step_count", "episode_reward", "is_init"} <= set(td["next"].keys())
    popped = env.transform.pop(1)
    assert isinstance(popped, StepCounter)
    td = env.rand_step(env.reset())
    assert "step_count" not in td["next"].keys()
    assert td["next", "is_init"].reshape(-1).tolist() == [False]


def test_a_cloned_chain_steps_its_own_transforms():
    chain = Compose(StepCounter(max_steps=5), RewardSum())
    clone = chain.clone()
    clone[0].max_steps = 1
    first = TransformedEnv(CountingEnv(max_steps=100), chain)
    second = TransformedEnv(CountingEnv(max_steps=100), clone)
    assert first.rollout(10).shape == (5,)
    assert second.rollout(10).shape == (1,)
