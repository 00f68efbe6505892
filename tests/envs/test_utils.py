import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict, dense_stack_tds
from tensordict.nn.probabilistic import InteractionType, interaction_type

from tdrl.data import Bounded, Categorical, Composite, NonTensor, Unbounded
from tdrl.envs import (
    EnvBase,
    ExplorationType,
    MarlGroupMapType,
    RandomPolicy,
    check_env_specs,
    check_marl_grouping,
    exploration_type,
    get_available_libraries,
    make_composite_from_td,
    set_exploration_type,
    step_mdp,
    terminated_or_truncated,
)
from tdrl.envs.utils import _StepMDP
from tests.mocks import CountingEnv, EnvWithDynamicSpec, MultiAgentCountingEnv, StatelessCountingEnv


def _ted():
    return TensorDict(
        {
            "observation": torch.zeros(2, 3),
            "action": torch.ones(2, 1),
            "hidden": torch.ones(2, 4),
            "done": torch.zeros(2, 1, dtype=torch.bool),
            "agents": TensorDict({"action": torch.ones(2, 5, 1), "mem": torch.ones(2, 5)}, [2, 5]),
            "next": TensorDict(
                {
                    "observation": torch.ones(2, 3),
                    "reward": torch.ones(2, 1),
                    "done": torch.ones(2, 1, dtype=torch.bool),
                    "agents": TensorDict(
                        {"obs": torch.ones(2, 5, 2), "reward": torch.ones(2, 5, 1)}, [2, 5]
                    ),
                },
                [2],
            ),
        },
        [2],
    )


def test_step_mdp_defaults():
    td = _ted()
    out = step_mdp(
        td,
        reward_keys=["reward", ("agents", "reward")],
        action_keys=["action", ("agents", "action")],
    )
    assert set(out.keys(True, True)) == {
        "observation",
        "hidden",
        "done",
        ("agents", "mem"),
        ("agents", "obs"),
    }
    assert out["observation"].sum() == 6
    assert out["agents"].batch_size == (2, 5)


def test_step_mdp_flags():
    td = _ted()
    out = step_mdp(td, keep_other=False, exclude_action=False, exclude_reward=False)
    assert "hidden" not in out.keys()
    assert {"action", "reward", "observation", "done"} <= set(out.keys())
    out = step_mdp(td, exclude_done=True)
    assert "done" not in out.keys()


def test_step_mdp_fresh_containers_and_next_tensordict():
    td = _ted()
    out = step_mdp(td)
    assert out["agents"] is not td["agents"] and out["agents"] is not td["next", "agents"]
    out.set(("agents", "mem"), torch.zeros(2, 5))
    assert td["agents", "mem"].sum() == 10
    target = TensorDict(batch_size=[2])
    assert step_mdp(td, next_tensordict=target) is target
    assert "observation" in target.keys()


@pytest.mark.parametrize("keep_other", [True, False])
def test_step_mdp_leaves_out_nested_levels_without_entries(keep_other):
    td = TensorDict(
        {
            "observation": torch.zeros(4, 1),
            "group": TensorDict(action=torch.zeros(4, 3, 1), batch_size=[4, 3]),
            "unused": TensorDict(batch_size=[4, 2]),
            "next": TensorDict(
                {
                    "observation": torch.ones(4, 1),
                    "group": TensorDict(reward=torch.ones(4, 3, 1), batch_size=[4, 3]),
                    "empty": TensorDict(batch_size=[4, 5]),
                },
                [4],
            ),
        },
        [4],
    )
    out = step_mdp(
        td, keep_other=keep_other, reward_keys=("group", "reward"), action_keys=("group", "action")
    )
    assert set(out.keys()) == {"observation"}
    out = step_mdp(
        td,
        keep_other=keep_other,
        exclude_reward=False,
        reward_keys=("group", "reward"),
        action_keys=("group", "action"),
    )
    assert set(out.keys(True, True)) == {"observation", ("group", "reward")}
    assert out["group"].batch_size == (4, 3)


@pytest.mark.parametrize("keep_other", [True, False])
@pytest.mark.parametrize("exclude_reward", [True, False])
@pytest.mark.parametrize("exclude_done", [True, False])
@pytest.mark.parametrize("exclude_action", [True, False])
def test_bound_step_mdp_matches_the_function(
    keep_other, exclude_reward, exclude_done, exclude_action
):
    env = MultiAgentCountingEnv()
    data = env.rand_step(env.reset())
    flags = dict(
        keep_other=keep_other,
        exclude_reward=exclude_reward,
        exclude_done=exclude_done,
        exclude_action=exclude_action,
    )
    expected = step_mdp(
        data,
        reward_keys=env.reward_keys,
        done_keys=env.done_keys,
        action_keys=env.action_keys,
        **flags,
    )
    got = _StepMDP(env, **flags)(data)
    assert set(got.keys(True, True)) == set(expected.keys(True, True))
    assert (got == expected).all()


def test_env_step_mdp_keeps_actions_and_drops_rewards():
    env = MultiAgentCountingEnv()
    data = env.rand_step(env.reset())
    out = env.step_mdp(data)
    keys = set(out.keys(True, True))
    assert not set(env.reward_keys) & keys
    assert set(env.action_keys) <= keys and set(env.done_keys) <= keys
    for key in env.observation_keys:
        assert (out[key] == data["next", key]).all()


def _agents(*sizes, **extra):
    parts = [
        TensorDict({"obs": torch.full((2, size), float(i)), **extra}, batch_size=[2])
        for i, size in enumerate(sizes)
    ]
    return LazyStackedTensorDict.lazy_stack(parts, dim=1)


@pytest.mark.parametrize("keep_other", [True, False])
def test_step_mdp_merges_lazy_stacks_element_by_element(keep_other):
    # agents whose observations differ in size: the group is a lazy stack
    td = TensorDict(
        {
            "agents": _agents(3, 2, action=torch.ones(2, 1)),
            "next": TensorDict(agents=_agents(3, 2, reward=torch.ones(2, 1)), batch_size=[2]),
        },
        [2],
    )
    out = step_mdp(
        td,
        keep_other=keep_other,
        exclude_action=False,
        reward_keys=("agents", "reward"),
        action_keys=("agents", "action"),
    )
    group = out["agents"]
    assert isinstance(group, LazyStackedTensorDict) and group.stack_dim == 1
    for index, element in enumerate(group.tensordicts):
        assert set(element.keys()) == {"obs", "action"}
        assert element["obs"].shape == (2, 3 - index)
        assert element is not td["next", "agents"].tensordicts[index]
    # successive steps have the same structure, so they stack densely over time
    assert dense_stack_tds([out, out.clone()], dim=1)["agents"].stack_dim == 2


def test_step_mdp_drops_emptied_lazy_stacks():
    td = TensorDict(
        {"next": TensorDict(agents=_agents(3, 2), obs=torch.zeros(2, 1), batch_size=[2])}, [2]
    )
    out = step_mdp(td, reward_keys=("agents", "obs"))
    assert set(out.keys()) == {"obs"}


def test_step_mdp_requires_next():
    with pytest.raises(KeyError, match="'next'"):
        step_mdp(TensorDict(a=torch.zeros(1)))


def test_terminated_or_truncated():
    data = TensorDict(
        {
            "terminated": torch.tensor([[False], [False]]),
            "truncated": torch.tensor([[False], [True]]),
            "agents": TensorDict({"done": torch.zeros(2, 3, 1, dtype=torch.bool)}, [2, 3]),
        },
        [2],
    )
    assert terminated_or_truncated(data)
    assert data["_reset"].squeeze(-1).tolist() == [False, True]
    assert ("agents", "_reset") not in data.keys(True)
    assert terminated_or_truncated(data, key="custom", write_full_false=True)
    assert data["agents", "custom"].shape == (2, 3, 1)
    spec = Composite(terminated=Unbounded((1,), dtype=torch.bool))
    assert not terminated_or_truncated(data[:1], full_done_spec=spec, key=None)


def test_check_env_specs_passes_for_mocks():
    check_env_specs(CountingEnv(batch_size=(2,)))
    check_env_specs(MultiAgentCountingEnv(), seed=1)
    check_env_specs(StatelessCountingEnv(), tensordict=TensorDict(batch_size=[3]))
    check_env_specs(EnvWithDynamicSpec(), return_contiguous=False)


def test_check_env_specs_names_wrong_shape_key():
    class WrongShape(CountingEnv):
        def _step(self, tensordict):
            out = super()._step(tensordict)
            out.set("observation", torch.zeros(3))
            return out

    with pytest.raises(
        AssertionError,
        match=r"shape mismatch at key \('next', 'observation'\): expected \(4,\), got \(3,\)",
    ):
        check_env_specs(WrongShape())


def test_check_env_specs_names_undeclared_and_missing_keys():
    class Extra(CountingEnv):
        def _step(self, tensordict):
            return super()._step(tensordict).set("extra", torch.zeros(1))

    with pytest.raises(AssertionError, match=r"undeclared entry at key \('next', 'extra'\)"):
        check_env_specs(Extra())

    class Missing(CountingEnv):
        def _step(self, tensordict):
            return super()._step(tensordict).exclude("reward")

    with pytest.raises(AssertionError, match=r"missing entry at key \('next', 'reward'\)"):
        check_env_specs(Missing())


def test_check_env_specs_accepts_state_entries_in_next():
    class CarriesState(CountingEnv):
        def __init__(self):
            super().__init__()
            self.state_spec = Composite(memory=Unbounded((2,)))

        def _reset(self, tensordict=None, **kwargs):
            return super()._reset(tensordict).set("memory", torch.zeros(2))

        def _step(self, tensordict):
            return super()._step(tensordict).set("memory", tensordict["memory"] + 1)

    check_env_specs(CarriesState())

    class Undeclared(CarriesState):
        def _step(self, tensordict):
            return super()._step(tensordict).set("other", torch.zeros(1))

    with pytest.raises(AssertionError, match=r"undeclared entry at key \('next', 'other'\)"):
        check_env_specs(Undeclared())


def test_check_env_specs_dtype_and_domain():
    class WrongDtype(CountingEnv):
        def _step(self, tensordict):
            out = super()._step(tensordict)
            return out.set("reward", out["reward"].double())

    with pytest.raises(AssertionError, match=r"dtype mismatch at key \('next', 'reward'\)"):
        check_env_specs(WrongDtype())
    with pytest.raises(
        TypeError,
        match=r"expected reward.dtype to be torch.float32 \(the spec's\), got torch.float64",
    ):
        check_env_specs(WrongDtype())
    check_env_specs(WrongDtype(), check_dtype=False)

    done_as_int = CountingEnv()
    done_as_int.output_spec.unlock_(recurse=True)
    done_as_int.output_spec["full_done_spec", "done"].dtype = torch.int32
    with pytest.raises(TypeError, match=r"expected done.dtype to be torch.int32.*got torch.bool"):
        check_env_specs(done_as_int)

    class OutOfDomain(CountingEnv):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Bounded(0.0, 1.5, (4,)))

    with pytest.raises(AssertionError, match="value out of spec at key .*observation"):
        check_env_specs(OutOfDomain())


def test_random_policy():
    policy = RandomPolicy(Bounded(-1.0, 1.0, (3, 2)))
    td = policy(TensorDict(batch_size=[3]))
    assert td["action"].shape == (3, 2) and td["action"].abs().max() <= 1
    composite = RandomPolicy(Composite(a=Bounded(0.0, 1.0, (1,)), b=Unbounded((2,))))
    td = composite(TensorDict())
    assert set(td.keys()) == {"a", "b"}
    custom = RandomPolicy(Unbounded((1,)), action_key=("agents", "act"))
    assert custom(TensorDict())["agents", "act"].shape == (1,)


def test_exploration_type_interoperates_with_tensordict():
    assert ExplorationType is InteractionType
    with set_exploration_type(ExplorationType.RANDOM):
        assert exploration_type() is ExplorationType.RANDOM
        assert interaction_type() is InteractionType.RANDOM

    @set_exploration_type("mode")
    def inner():
        return exploration_type()

    assert inner() is ExplorationType.MODE


def test_get_available_libraries():
    libraries = get_available_libraries()
    assert libraries["gymnasium"] is True
    assert all(isinstance(v, bool) for v in libraries.values())


def test_make_composite_from_td():
    spec = make_composite_from_td(
        TensorDict(a=torch.zeros(2, 3), b={"c": torch.zeros(2)}, batch_size=[2])
    )
    assert spec["a"].shape == (2, 3)
    assert spec["b", "c"].shape == (2,)


def test_marl_group_map_and_check():
    names = ["a_0", "a_1", "b_0"]
    assert MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(names) == {"agents": names}
    assert MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(names) == {n: [n] for n in names}
    check_marl_grouping({"a": ["a_0", "a_1"], "b": ["b_0"]}, names)
    with pytest.raises(ValueError, match="'a_0' appears in more than one group"):
        check_marl_grouping({"a": ["a_0"], "b": ["a_0", "a_1", "b_0"]}, names)
    with pytest.raises(ValueError, match="group 'x' of the group map is empty"):
        check_marl_grouping({"x": []}, names)
    with pytest.raises(ValueError, match=r"missing \['b_0'\]"):
        check_marl_grouping({"a": ["a_0", "a_1"]}, names)


@pytest.mark.parametrize("group_type", list(MarlGroupMapType))
def test_check_marl_grouping_refuses_repeated_or_no_agent_names(group_type):
    check_marl_grouping(group_type.get_group_map(["walker"]), ["walker"])
    with pytest.raises(ValueError, match=r"expected unique names, got \['walker'\]"):
        check_marl_grouping(group_type.get_group_map(["walker", "walker"]), ["walker", "walker"])
    with pytest.raises(ValueError, match="expected at least one agent, got none"):
        check_marl_grouping(group_type.get_group_map([]), [])


# ------------------------------------------------- non-tensor entries and masks
class _TextEnv(EnvBase):
    """Writes a string observation next to a tensor one."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(
            observation=Unbounded((1,)), text=NonTensor(shape=(), example_data="a")
        )
        self.action_spec = Bounded(-1.0, 1.0, (1,))
        self.reward_spec = Unbounded((1,))

    def _reset(self, tensordict=None, **kwargs):
        out = TensorDict(observation=torch.zeros(1), done=torch.zeros(1, dtype=torch.bool))
        out.set_non_tensor("text", "start")
        return out

    def _step(self, tensordict):
        out = TensorDict(
            observation=torch.ones(1), reward=torch.zeros(1), done=torch.zeros(1, dtype=torch.bool)
        )
        out.set_non_tensor("text", "step")
        return out

    def _set_seed(self, seed):
        pass


class _ShrinkingMaskEnv(EnvBase):
    """Each action taken becomes illegal (as cells in tic-tac-toe); the action spec's mask
    is updated in place at each step, as the ActionMask transform does."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(action_mask=Unbounded((4,), dtype=torch.bool))
        self.action_spec = Categorical(4)
        self.reward_spec = Unbounded((1,))

    def _reset(self, tensordict=None, **kwargs):
        self.free = torch.ones(4, dtype=torch.bool)
        self.action_spec.update_mask(self.free.clone())
        return TensorDict(action_mask=self.free.clone(), done=torch.zeros(1, dtype=torch.bool))

    def _step(self, tensordict):
        action = int(tensordict["action"])
        if 0 <= action < 4:  # values outside the domain are left to check_env_specs
            if not self.free[action]:
                raise ValueError(f"illegal action {action}")
            self.free[action] = False
        self.action_spec.update_mask(self.free.clone())
        return TensorDict(
            action_mask=self.free.clone(),
            reward=torch.zeros(1),
            done=torch.tensor([not bool(self.free.any())]),
        )

    def _set_seed(self, seed):
        torch.manual_seed(seed)


def test_check_env_specs_accepts_non_tensor_entries():
    check_env_specs(_TextEnv())


def test_check_env_specs_reports_a_missing_non_tensor_entry():
    env = _TextEnv()
    env._step = lambda td: TensorDict(
        observation=torch.ones(1), reward=torch.zeros(1), done=torch.zeros(1, dtype=torch.bool)
    )
    with pytest.raises(AssertionError, match="missing entry at key .*text"):
        check_env_specs(env, return_contiguous=False)


def test_check_env_specs_with_an_action_mask_that_changes_each_step():
    env = _ShrinkingMaskEnv()
    for seed in range(5):
        check_env_specs(env, seed=seed)


def test_check_env_specs_still_checks_the_domain_of_masked_specs():
    env = _ShrinkingMaskEnv()
    env.rand_action = lambda td=None: td.set("action", torch.tensor(7))
    with pytest.raises(AssertionError, match="value out of spec at key 'action'"):
        check_env_specs(env)


def test_random_policy_follows_in_place_mask_updates():
    env = _ShrinkingMaskEnv()
    policy = RandomPolicy(env.action_spec)
    assert policy.action_spec is env.action_spec
    for seed in range(10):
        env.set_seed(seed)
        data = env.rollout(4, policy)
        assert sorted(data["action"].tolist()) == [0, 1, 2, 3]


def test_check_env_specs_follows_dynamic_specs_by_default():
    check_env_specs(EnvWithDynamicSpec())  # the steps differ in shape: not stacked
    with pytest.raises(AssertionError, match="cannot be stacked contiguously"):
        check_env_specs(EnvWithDynamicSpec(), return_contiguous=True)
