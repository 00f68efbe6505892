"""Random-action rollouts of PettingZoo envs: the data is the generic step loop's, bit for bit.

``env.rollout(n)`` without a policy may run on a cheaper path; these tests compare it with the
generic loop (the same random actions given as a policy) on seeded envs and torch seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv as PZParallelEnv
from tensordict import TensorDictBase

from tdrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from tests.envs.libs.test_pettingzoo import FadingAgents

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _assert_same_data(fast: TensorDictBase, generic: TensorDictBase) -> None:
    assert fast.batch_size == generic.batch_size
    assert fast.names == generic.names
    # same keys in the same order, same dtypes, shapes and values
    assert list(fast.keys(True, True)) == list(generic.keys(True, True))
    for key in generic.keys(True, True):
        got, expected = fast.get(key), generic.get(key)
        assert got.dtype == expected.dtype, key
        assert got.shape == expected.shape, key
        assert torch.equal(got, expected), key
    for key in generic.keys(True):
        if isinstance(generic.get(key), TensorDictBase):
            assert fast.get(key).batch_size == generic.get(key).batch_size, key
            assert fast.get(key).names == generic.get(key).names, key


def _both(make, steps: int, torch_seed: int = 1, **rollout_kwargs):
    """The rollout of a fresh env without policy, and the generic loop's on another one."""
    fast_env, generic_env = make(), make()
    torch.manual_seed(torch_seed)
    fast = fast_env.rollout(steps, **rollout_kwargs)
    torch.manual_seed(torch_seed)
    generic = generic_env.rollout(steps, policy=generic_env.rand_action, **rollout_kwargs)
    return fast, generic, fast_env, generic_env


@pytest.mark.parametrize("steps", [1, 24, 25, 26, 80])
def test_simple_spread_across_episodes(steps):
    def make():
        return PettingZooEnv("simple_spread_v3", parallel=True, N=3, seed=0)

    fast, generic, *_ = _both(make, steps, break_when_any_done=False)
    assert fast.batch_size == (steps,)
    _assert_same_data(fast, generic)


def test_two_groups_one_hot_mask_and_state():
    def make():
        return PettingZooEnv(
            "simple_adversary_v3",
            parallel=True,
            seed=3,
            max_cycles=7,
            use_mask=True,
            return_state=True,
            categorical_actions=False,
        )

    fast, generic, *_ = _both(make, 30, torch_seed=4, break_when_any_done=False)
    assert fast["next", "done"].sum() == 4  # episodes of 7 steps: 4 ends in 30 steps
    _assert_same_data(fast, generic)


def test_stops_at_the_first_end_and_marks_truncation():
    def make():
        return PettingZooEnv("simple_spread_v3", parallel=True, N=2, seed=1, max_cycles=5)

    fast, generic, *_ = _both(make, 10)
    assert fast.batch_size == (5,)
    _assert_same_data(fast, generic)
    fast, generic, *_ = _both(make, 3, set_truncated=True)
    assert fast["next", "truncated"][-1].all()
    _assert_same_data(fast, generic)


def test_set_truncated_leaves_a_rollout_that_stopped_early_alone():
    def make():
        return PettingZooWrapper(FadingAgents(leave_at=2, length=5), use_mask=True)

    fast, generic, *_ = _both(make, 10, set_truncated=True)
    assert fast.batch_size == (2,)
    assert not fast["next", "truncated"].any()
    assert fast["next", "a", "terminated"][-1].squeeze(-1).tolist() == [True, False, False]
    _assert_same_data(fast, generic)


def test_the_envs_continue_alike_after_a_rollout():
    def make():
        return PettingZooEnv("simple_spread_v3", parallel=True, N=2, seed=2, max_cycles=4)

    _, _, fast_env, generic_env = _both(make, 10, break_when_any_done=False)
    torch.manual_seed(7)
    fast = fast_env.rollout(6, break_when_any_done=False)
    torch.manual_seed(7)
    generic = generic_env.rollout(6, policy=generic_env.rand_action, break_when_any_done=False)
    _assert_same_data(fast, generic)


@pytest.mark.parametrize("done_on_any", [True, False])
def test_leaving_agents_and_action_masks(done_on_any):
    def make():
        return PettingZooWrapper(
            FadingAgents(leave_at=2, length=5),
            use_mask=True,
            return_state=True,
            done_on_any=done_on_any,
        )

    fast, generic, *_ = _both(make, 12, break_when_any_done=False)
    _assert_same_data(fast, generic)
    # masked random actions: the agents never take the illegal action 2
    assert (fast["a", "action"] != 2).all()


def test_heterogeneous_group():
    def make():
        return PettingZooEnv(
            "simple_adversary_v3",
            parallel=True,
            seed=0,
            max_cycles=4,
            group_map={"all": ["adversary_0", "agent_0", "agent_1"]},
        )

    fast, generic, *_ = _both(make, 9, break_when_any_done=False)
    assert fast.batch_size == generic.batch_size == (9,)
    for agent in range(3):
        _assert_same_data(fast["all"][:, agent], generic["all"][:, agent])
    _assert_same_data(fast.exclude("all", ("next", "all")), generic.exclude("all", ("next", "all")))


class VanishingAgents(FadingAgents):
    """``a_0`` disappears from every dict at step ``leave_at`` without ever being done."""

    def step(self, actions):
        obs, rewards, ending, truncated, infos = super().step(actions)
        if self.t == self.leave_at:
            for values in (obs, rewards, ending, truncated, infos):
                values.pop("a_0")
            ending = {agent: False for agent in ending}
            self.agents = ["a_1", "a_2"]
        elif self.t > self.leave_at:
            ending = {agent: self.t >= self.length for agent in ending}
            self.agents = [a for a in self.agents if not ending[a]]
        return obs, rewards, ending, truncated, infos


def test_an_agent_missing_from_the_dicts_takes_the_generic_step_output():
    def make():
        return PettingZooWrapper(
            VanishingAgents(leave_at=2, length=4), use_mask=True, return_state=True
        )

    fast, generic, *_ = _both(make, 9, break_when_any_done=False)
    _assert_same_data(fast, generic)
    # the vanished agent is done (it left) and keeps its last observation
    assert fast["next", "a", "terminated"][1, 0].item()
    assert torch.equal(fast["next", "a", "observation"][1, 0], fast["a", "observation"][1, 0])


def test_a_generic_step_after_a_rollout_sees_its_last_observations():
    def make():
        return PettingZooWrapper(VanishingAgents(leave_at=2, length=4), use_mask=True)

    fast_env, generic_env = make(), make()
    torch.manual_seed(0)
    fast = fast_env.rollout(1)
    fast = fast_env.rand_step(fast_env.step_mdp(fast[-1]))
    torch.manual_seed(0)
    generic = generic_env.rollout(1, policy=generic_env.rand_action)
    generic = generic_env.rand_step(generic_env.step_mdp(generic[-1]))
    _assert_same_data(fast, generic)
    assert torch.equal(fast["next", "a", "observation"][0], torch.tensor([1.0, 0.0]))


def test_an_agent_leaving_without_mask_raises_on_both_paths():
    env = PettingZooWrapper(VanishingAgents(leave_at=2, length=4))
    with pytest.raises(ValueError, match=r"agent\(s\) \['a_0'\] left the env"):
        env.rollout(5)
    env = PettingZooWrapper(VanishingAgents(leave_at=2, length=4))
    with pytest.raises(ValueError, match=r"agent\(s\) \['a_0'\] left the env"):
        env.rollout(5, policy=env.rand_action)


def test_overridden_step_output_runs_the_generic_loop():
    class Doubled(PettingZooWrapper):
        def _output(self, *args, **kwargs):
            data = super()._output(*args, **kwargs)
            data["a", "observation"] = data["a", "observation"] * 2
            return data

    env = Doubled(FadingAgents(leave_at=3, length=3), seed=0)
    data = env.rollout(2)
    assert data["next", "a", "observation"][:, 0, 0].tolist() == [2.0, 4.0]


@pytest.mark.parametrize("policy", [False, True])
def test_rollout_matches_a_replay_on_the_raw_env(policy):
    """Every kept value is what PettingZoo itself returns for the same actions and seed."""
    from mpe2 import simple_adversary_v3

    env = PettingZooWrapper(simple_adversary_v3.parallel_env(max_cycles=6), seed=11)
    torch.manual_seed(2)
    kwargs = {"policy": env.rand_action} if policy else {}
    data = env.rollout(15, break_when_any_done=False, **kwargs)
    raw = simple_adversary_v3.parallel_env(max_cycles=6)
    raw.reset(seed=11)  # as the wrapper's seed=11; the rollout then resets without a seed
    observations, _ = raw.reset()
    groups = {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
    for step in range(15):
        actions = {}
        for group, agents in groups.items():
            for j, agent in enumerate(agents):
                expected = torch.from_numpy(observations[agent])
                assert torch.equal(data[group, "observation"][step, j], expected)
                actions[agent] = int(data[group, "action"][step, j])
        observations, rewards, terminated, truncated, _ = raw.step(actions)
        for group, agents in groups.items():
            for j, agent in enumerate(agents):
                nxt = data["next", group]
                assert torch.equal(
                    nxt["observation"][step, j], torch.from_numpy(observations[agent])
                )
                assert nxt["reward"][step, j, 0].item() == pytest.approx(rewards[agent], rel=1e-6)
                assert nxt["terminated"][step, j, 0].item() == terminated[agent]
                assert nxt["truncated"][step, j, 0].item() == truncated[agent]
        ended = any(terminated.values()) or any(truncated.values())
        assert data["next", "done"][step, 0].item() == ended
        if ended:
            observations, _ = raw.reset()


def test_rand_action_sets_each_group_with_the_action_spec_draws():
    from tdrl.envs import EnvBase

    env = PettingZooEnv(
        "simple_adversary_v3", parallel=True, seed=0, categorical_actions=False, use_mask=True
    )
    td = env.reset()
    torch.manual_seed(3)
    fast = env.rand_action(td.clone())
    torch.manual_seed(3)
    merged = EnvBase.rand_action(env, td.clone())  # the whole spec sampled, then merged
    _assert_same_data(fast, merged)
    torch.manual_seed(3)
    sample = env.full_action_spec.rand()
    for group in ("adversary", "agent"):
        assert torch.equal(fast[group, "action"], sample[group, "action"])
    # an input without the groups gets them with their agent dim
    partial = env.rand_action(td.exclude("agent"))
    assert partial["agent"].batch_size == (2,) and partial["agent", "action"].shape == (2, 5)


class CountingAgents(PZParallelEnv):
    """Two agents observing a dict of a step count (Discrete) and a float32 pair (given as
    float64 arrays); episodes of 3 steps end truncated."""

    metadata = {"name": "counting_agents_v0"}

    def __init__(self):
        self.possible_agents = ["b_0", "b_1"]
        self.agents = list(self.possible_agents)
        self._obs = spaces.Dict(
            {"count": spaces.Discrete(10), "pos": spaces.Box(-5.0, 5.0, (2,), np.float32)}
        )
        self.t = 0

    def observation_space(self, agent):
        return self._obs

    def action_space(self, agent):
        return spaces.Discrete(4)

    def _observe(self, agent, actions):
        index = self.possible_agents.index(agent)
        return {"count": self.t, "pos": np.array([index + 0.1, actions.get(agent, 0) / 3])}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: self._observe(a, {}) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs = {a: self._observe(a, actions) for a in self.agents}
        ended = {a: self.t >= 3 for a in self.agents}
        rewards = {a: float(actions[a]) / 7 for a in self.agents}
        if self.t >= 3:
            self.agents = []
        return obs, rewards, {a: False for a in obs}, ended, {a: {} for a in obs}


def test_dict_observations_with_discrete_entries():
    def make():
        return PettingZooWrapper(CountingAgents())

    fast, generic, *_ = _both(make, 8, break_when_any_done=False)
    _assert_same_data(fast, generic)
    # a Discrete observation is read one-hot
    count = fast["next", "b", "observation", "count"]
    assert count.shape == (8, 2, 10)
    assert count[:, 0].argmax(-1).tolist() == [1, 2, 3, 1, 2, 3, 1, 2]
    pos = fast["next", "b", "observation", "pos"]
    assert pos.dtype == torch.float32
    assert torch.equal(pos[..., 1], (fast["b", "action"].double() / 3).float())
    assert fast["next", "truncated"].squeeze(-1).tolist() == [False, False, True] * 2 + [False] * 2
