import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict
from tensordict.nn import TensorDictModule

from tdrl.envs import ExplorationType, set_exploration_type
from tests.mocks import CountingEnv, MultiAgentCountingEnv, StatelessCountingEnv


def test_rollout_default_breaks_on_done_and_names_time():
    env = CountingEnv(max_steps=3, batch_size=(2,))
    data = env.rollout(10)
    assert data.batch_size == (2, 3)
    assert data.names == [None, "time"]
    assert data["next", "done"][:, -1].all()


def test_rollout_without_break_resets_and_keeps_ted_layout():
    env = CountingEnv(max_steps=2)
    data = env.rollout(6, break_when_any_done=False)
    assert data["observation"][:, 0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert data["next", "observation"][:, 0].tolist() == [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    assert data["done"].squeeze(-1).tolist() == [False] * 6
    assert data["next", "done"].squeeze(-1).tolist() == [False, True] * 3


def test_rollout_matches_tensordict_stack():
    env = MultiAgentCountingEnv(n_agents=2, max_steps=2, batch_size=(2,))
    steps = []
    data = env.rollout(
        5, break_when_any_done=False, callback=lambda e, td: steps.append(td.clone())
    )
    reference = torch.stack(steps, 1)
    assert (data == reference).all()
    assert data["agents"].batch_size == (2, 5, 2)
    assert data["next", "agents"].batch_size == (2, 5, 2)


def test_rollout_with_policy_and_callback():
    env = CountingEnv(max_steps=4)
    seen = []

    def policy(td):
        return td.set("action", torch.full((1,), 0.5))

    data = env.rollout(3, policy=policy, callback=lambda e, td: seen.append(e))
    assert data["action"].squeeze(-1).tolist() == [0.5, 0.5, 0.5]
    assert data["next", "reward"].squeeze(-1).tolist() == [0.5, 0.5, 0.5]
    assert len(seen) == 3 and seen[0] is env


def test_rollout_tensordict_module_policy_and_exploration():
    env = CountingEnv(max_steps=10)
    module = TensorDictModule(torch.nn.Linear(4, 1), in_keys=["observation"], out_keys=["action"])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        data = env.rollout(3, policy=module, auto_cast_to_device=True)
    assert data["action"].shape == (3, 1)


def test_break_when_all_done_steps_only_unfinished():
    env = StatelessCountingEnv(max_steps=4)
    init = env.reset(TensorDict(batch_size=[3]))
    init.set("count", torch.tensor([[0.0], [2.0], [3.0]]))
    data = env.rollout(10, auto_reset=False, tensordict=init, break_when_all_done=True)
    assert data.batch_size == (3, 4)
    counts = data["next", "count"].squeeze(-1)
    assert counts.tolist() == [[1, 2, 3, 4], [3, 4, 4, 4], [4, 4, 4, 4]]
    rewards = data["next", "reward"].squeeze(-1)
    assert rewards.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]
    assert "_step" not in data.keys()


def test_break_flags_conflict():
    with pytest.raises(ValueError, match="cannot both be True"):
        CountingEnv().rollout(3, break_when_any_done=True, break_when_all_done=True)


def test_auto_reset_false_requires_tensordict_and_resets_done():
    env = CountingEnv(max_steps=2)
    with pytest.raises(ValueError, match="needs an initial tensordict"):
        env.rollout(3, auto_reset=False)
    last = env.rollout(5)[-1]["next"].exclude("reward")
    assert last["done"].all()
    data = env.rollout(2, auto_reset=False, tensordict=last)
    assert data["observation"][0, 0].item() == 0.0


def test_rollout_max_steps_positive():
    with pytest.raises(ValueError, match="max_steps"):
        CountingEnv().rollout(0)


def test_rollout_lazy_stack():
    data = CountingEnv().rollout(3, return_contiguous=False)
    assert isinstance(data, LazyStackedTensorDict)
    assert data.names[-1] == "time"


def test_rollout_set_truncated():
    env = StatelessCountingEnv(max_steps=10)
    data = env.rollout(3, set_truncated=True)
    assert data["next", "truncated"].squeeze(-1).tolist() == [False, False, True]
    assert data["next", "done"][-1].all()
    with pytest.raises(RuntimeError, match="truncated"):
        CountingEnv().rollout(3, set_truncated=True)


def test_rollout_out_argument():
    env = CountingEnv(max_steps=10)
    out = env.rollout(3).clone().zero_()
    result = env.rollout(3, out=out)
    assert result is out or (result == out).all()
    assert out["next", "observation"][:, 0].tolist() == [1.0, 2.0, 3.0]


def test_rollout_batch_unlocked_uses_input_batch():
    env = StatelessCountingEnv()
    data = env.rollout(3, tensordict=TensorDict(batch_size=[5]))
    assert data.batch_size == (5, 3)


def test_step_and_maybe_reset_seeds_loop():
    env = CountingEnv(max_steps=3, batch_size=(2,))
    data_ = env.reset()
    result = []
    for _ in range(7):
        data, data_ = env.step_and_maybe_reset(env.rand_action(data_))
        result.append(data)
    result = torch.stack(result, 1)
    assert result["next", "done"][0].squeeze(-1).tolist() == [False, False, True] * 2 + [False]
    assert result["observation"][0, :, 0].tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_step_and_maybe_reset_does_not_alias_stored_data():
    env = MultiAgentCountingEnv(n_agents=2, max_steps=1)
    data_ = env.reset()
    data, data_ = env.step_and_maybe_reset(env.rand_action(data_))
    stored = data["next", "agents", "observation"].clone()
    env.rand_action(data_)
    data_.set(("agents", "observation"), torch.full_like(stored, 9.0))
    assert torch.equal(data["next", "agents", "observation"], stored)


def test_maybe_reset_noop_when_not_done():
    env = CountingEnv(max_steps=5)
    data = env.reset()
    assert env.maybe_reset(data) is data


def test_rollout_restores_automatic_garbage_collection():
    import gc

    env = CountingEnv(max_steps=3)
    assert gc.isenabled()
    env.rollout(5, break_when_any_done=False)
    assert gc.isenabled()

    def failing_policy(td):
        raise RuntimeError("policy failed")

    with pytest.raises(RuntimeError, match="policy failed"):
        env.rollout(5, failing_policy)
    assert gc.isenabled()
    gc.disable()
    try:
        env.rollout(5)
        assert not gc.isenabled()
    finally:
        gc.enable()


def _step_td(**entries):
    return TensorDict({key: torch.zeros(2, 1) for key in entries}, [2])


@pytest.mark.parametrize(
    "odd_one",
    [
        _step_td(a=0, c=0),  # same number of keys, another name
        _step_td(a=0),  # a key fewer
        _step_td(a=0, b=0, c=0),  # a key more
        TensorDict({"a": torch.zeros(2, 1), "b": torch.zeros(2, 1)}, [2, 1]),  # other batch
        LazyStackedTensorDict.lazy_stack([_step_td(a=0, b=0)[0], _step_td(a=0, b=0)[1]]),
    ],
)
def test_stacking_rejects_steps_of_another_structure(odd_one):
    from tdrl.envs._stack import Irregular, stack_steps

    steps = [_step_td(a=0, b=0) for _ in range(3)]
    assert stack_steps(steps, 1).batch_size == (2, 3)
    with pytest.raises(Irregular):
        stack_steps([*steps, odd_one], 1)
    with pytest.raises(Irregular):
        stack_steps([odd_one, *steps], 1)


def test_rollout_stacking_matches_tensordict_stack_for_nested_data():
    from tdrl.envs._stack import stack_steps

    env = MultiAgentCountingEnv(batch_size=(2,))
    steps = env.rollout(6, break_when_any_done=False, return_contiguous=False).tensordicts
    fast = stack_steps(steps, 1)
    reference = torch.stack(steps, 1)
    assert set(fast.keys(True, True)) == set(reference.keys(True, True))
    assert (fast == reference).all()
    assert fast.batch_size == reference.batch_size
    contiguous = env.rollout(3)  # no reset within the first 3 steps
    agents = contiguous["agents", "observation"]
    assert (agents[:, 1:] == contiguous["next", "agents", "observation"][:, :-1]).all()


def test_dynamic_specs_roll_out_lazily_unless_told_otherwise():
    from tests.mocks import EnvWithDynamicSpec

    env = EnvWithDynamicSpec()
    data = env.rollout(4)
    assert isinstance(data, LazyStackedTensorDict) and data.names[-1] == "time"
    with pytest.raises(
        RuntimeError, match="specs are dynamic. Call rollout with return_contiguous"
    ):
        env.rollout(4, return_contiguous=True)
    assert CountingEnv().rollout(3).__class__ is TensorDict
