"""TensorDictPrimer, NoopResetEnv, FrameSkipTransform, EndOfLifeTransform,
AutoResetTransform, ConditionalSkip."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.envs import (
    AutoResetTransform,
    Compose,
    ConditionalSkip,
    EndOfLifeTransform,
    FrameSkipTransform,
    GymEnv,
    GymWrapper,
    NoopResetEnv,
    PendulumEnv,
    StepCounter,
    TensorDictPrimer,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import AutoResettingCountingEnv, CountingEnv


@pytest.fixture
def cartpole():
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    yield env
    env.close()


# ------------------------------------------------------------------ primer
def test_primer_defaults_on_gym(cartpole):
    env = TransformedEnv(cartpole, TensorDictPrimer(hidden=Unbounded((2, 3))))
    assert "hidden" in env.observation_spec.keys() and "hidden" in env.state_spec.keys()
    check_env_specs(env)
    td = env.reset()
    assert torch.equal(td["hidden"], torch.zeros(2, 3))
    td = env.rand_step(td)
    assert torch.equal(td["next", "hidden"], torch.zeros(2, 3))


def test_primer_expands_to_batch_and_carries_values():
    env = TransformedEnv(
        CountingEnv(max_steps=100, batch_size=(3,)),
        TensorDictPrimer({"h": Unbounded((4,))}, default_value=1.5, expand_specs=True),
    )
    assert env.observation_spec["h"].shape == (3, 4)
    check_env_specs(env)
    td = env.reset()
    assert torch.equal(td["h"], torch.full((3, 4), 1.5))
    td = env.rand_action(td)
    td["h"] = torch.full((3, 4), 3.0)
    assert env.step(td)["next", "h"].unique().tolist() == [3.0]


def test_primer_batch_shape_must_match_or_be_handled():
    base = CountingEnv(max_steps=100, batch_size=(2,))
    with pytest.raises(RuntimeError, match="expand_specs=True"):
        TransformedEnv(base, TensorDictPrimer(h=Unbounded((4,))))
    # primers given with the env batch shape need no expansion
    primers = Composite(h=Unbounded((2, 4)), shape=(2,))
    env = TransformedEnv(base, TensorDictPrimer(primers))
    assert env.reset()["h"].shape == (2, 4)
    # without expansion, the leaf specs must start with the env batch size
    env = TransformedEnv(base, TensorDictPrimer(h=Unbounded((2, 4)), expand_specs=False))
    check_env_specs(env)
    with pytest.raises(ValueError, match="does not start with the env batch size"):
        TransformedEnv(base, TensorDictPrimer(h=Unbounded((4,)), expand_specs=False))


def test_primer_partial_reset_and_random():
    env = TransformedEnv(
        CountingEnv(max_steps=100, batch_size=(2,)),
        TensorDictPrimer(h=Bounded(-1.0, 1.0, (3,)), random=True, expand_specs=True),
    )
    td = env.reset()
    assert td["h"].shape == (2, 3) and (td["h"].abs() <= 1).all()
    first = td["h"].clone()
    td = env.step_and_maybe_reset(env.rand_action(td))[1]
    td["_reset"] = torch.tensor([[False], [True]])
    td = env.reset(td)
    assert torch.equal(td["h"][0], first[0]) and not torch.equal(td["h"][1], first[1])


def test_primer_callable_default_before_reset_and_forward():
    seen = {}

    class Reader(CountingEnv):
        def _reset(self, tensordict=None, **kwargs):
            seen["h"] = None if tensordict is None else tensordict.get("h", None)
            return super()._reset(tensordict)

    env = TransformedEnv(
        Reader(),
        TensorDictPrimer(
            h=Unbounded((2,)), default_value=lambda: torch.ones(2), call_before_env_reset=True
        ),
    )
    td = env.reset()
    assert torch.equal(seen["h"], torch.ones(2)) and torch.equal(td["h"], torch.ones(2))
    data = TensorDictPrimer(h=Unbounded((2,)))(TensorDict({}, [5]))
    assert data["h"].shape == (5, 2)
    # random draws take precedence over default values
    random = TensorDictPrimer(h=Bounded(2.0, 3.0, ()), random=True, default_value=1.0)
    assert bool((random(TensorDict({}, [50]))["h"] >= 2.0).all())


# ---------------------------------------------------------------- noop reset
def test_noop_reset_takes_random_steps(cartpole):
    env = TransformedEnv(cartpole, Compose(StepCounter(), NoopResetEnv(noops=4, random=False)))
    check_env_specs(env)
    td = env.reset()
    assert td["step_count"].item() == 4
    assert set(td.keys()) >= {"observation", "done", "step_count"} and "action" not in td.keys()
    random_env = TransformedEnv(GymEnv("CartPole-v1"), Compose(StepCounter(), NoopResetEnv(3)))
    assert 1 <= random_env.reset()["step_count"].item() <= 3


def test_noop_reset_refuses_batched_parents_and_bad_counts():
    env = TransformedEnv(CountingEnv(max_steps=100, batch_size=(2,)), NoopResetEnv(2, random=False))
    with pytest.raises(ValueError, match="batch-size is non-null"):
        env.reset()
    with pytest.raises(ValueError, match="noops"):
        NoopResetEnv(-1)
    with pytest.raises(TypeError, match="noops"):
        NoopResetEnv(2.0)


def test_noop_reset_zero_noops_and_limits():
    env = TransformedEnv(CountingEnv(max_steps=3), Compose(StepCounter(), NoopResetEnv(0)))
    assert env.reset()["step_count"].item() == 0
    done_too_soon = TransformedEnv(CountingEnv(max_steps=3), NoopResetEnv(4, random=False))
    with pytest.raises(RuntimeError, match="done within 4 random steps"):
        done_too_soon.reset()


def test_noop_reset_needs_a_parent_but_passes_data_through():
    td = TensorDict({"a": torch.ones(2)}, [2])
    assert NoopResetEnv()(td) is td
    with pytest.raises(RuntimeError, match="NoopResetEnv.parent not found"):
        NoopResetEnv()._reset(td, td.empty())


# ---------------------------------------------------------------- frame skip
def test_frame_skip_sums_rewards(cartpole):
    env = TransformedEnv(cartpole, FrameSkipTransform(3))
    check_env_specs(env)
    td = env.rand_step(env.reset())
    assert td["next", "reward"].item() == 3.0


def test_frame_skip_counts_base_steps_and_stops_at_done():
    base = CountingEnv(max_steps=5)
    env = TransformedEnv(base, FrameSkipTransform(2))
    td = env.reset()
    td["action"] = torch.ones(1)
    td = env.step(td)
    assert td["next", "observation"][0].item() == 2.0 and td["next", "reward"].item() == 2.0
    rollout = env.rollout(10)
    assert rollout["next", "observation"][:, 0].tolist() == [2.0, 4.0, 5.0]


def test_frame_skip_stateless_env_uses_fresh_state():
    env = TransformedEnv(PendulumEnv(), FrameSkipTransform(2))
    plain = PendulumEnv()
    td = env.reset()
    td["action"] = torch.ones(1)
    twice = plain.step(plain.step(td.clone())["next"].set("action", torch.ones(1)))
    assert torch.allclose(env.step(td)["next", "th"], twice["next", "th"])
    with pytest.raises(ValueError, match="frame_skip should have a value greater or equal to one"):
        FrameSkipTransform(0)


def test_frame_skip_needs_an_env():
    td = TensorDict({"next": {}}, [])
    with pytest.raises(RuntimeError, match="parent not found for FrameSkipTransform"):
        Compose(FrameSkipTransform(2))._step(td, td.get("next"))
    with pytest.raises(RuntimeError, match="can only be used when appended to a transformed env"):
        FrameSkipTransform(2)(td)


# ------------------------------------------------------------- end of life
class _Lives(gym.Wrapper):
    """CartPole with a lives counter that drops every 3 steps."""

    def __init__(self, env):
        super().__init__(env)
        self.count = 0

    def lives(self):
        return 3 - self.count // 3

    def reset(self, **kwargs):
        self.count = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        self.count += 1
        return self.env.step(action)


def test_end_of_life_flags_lost_lives():
    base = GymWrapper(_Lives(gym.make("CartPole-v1")))
    base.set_seed(0)
    env = TransformedEnv(base, EndOfLifeTransform(eol_attribute="lives"))
    check_env_specs(env)
    rollout = env.rollout(5, break_when_any_done=False)
    assert rollout["next", "lives"].tolist() == [3, 3, 2, 2, 2]
    assert rollout["next", "end-of-life"].squeeze(-1).tolist() == [False, False, True, False, False]
    with pytest.raises(AttributeError, match="simulator"):
        TransformedEnv(CountingEnv(), EndOfLifeTransform()).reset()
    alone = EndOfLifeTransform()
    with pytest.raises(RuntimeError, match="parent not found for"):
        Compose(alone)._step(TensorDict(), TensorDict({"done": torch.zeros(1, dtype=torch.bool)}))
    with pytest.raises(RuntimeError, match="forward method of .*EndOfLifeTransform"):
        alone(TensorDict())


# --------------------------------------------------------------- auto reset
def test_auto_reset_transform_reuses_step_observations():
    base = AutoResettingCountingEnv(max_steps=3)
    env = TransformedEnv(base, Compose(AutoResetTransform(), StepCounter()))
    resets = []
    original = base._reset

    def counting_reset(tensordict=None, **kwargs):
        resets.append(1)
        return original(tensordict, **kwargs)

    base.__dict__["_reset"] = counting_reset
    rollout = env.rollout(7, break_when_any_done=False)
    assert len(resets) == 1
    obs = rollout["next", "observation"][:, 0]
    assert torch.isnan(obs[2]) and torch.isnan(obs[5])
    assert rollout["observation"][:, 0].tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0]
    assert rollout["step_count"].squeeze(-1).tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_auto_reset_without_replacement_and_checks():
    env = TransformedEnv(AutoResettingCountingEnv(max_steps=2), AutoResetTransform(replace=False))
    rollout = env.rollout(4, break_when_any_done=False)
    assert rollout["next", "observation"][:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]
    check_env_specs(TransformedEnv(CountingEnv(), AutoResetTransform()))


# ----------------------------------------------------------- conditional skip
def test_conditional_skip_on_gym(cartpole):
    inner = TransformedEnv(cartpole, StepCounter(step_count_key="inner"))
    middle = TransformedEnv(inner, ConditionalSkip(lambda td: td["outer"] % 2 == 1))
    env = TransformedEnv(middle, StepCounter(step_count_key="outer"))
    check_env_specs(env)
    rollout = env.rollout(6, break_when_any_done=False)
    assert rollout["next", "outer"].squeeze(-1).tolist() == [1, 2, 3, 4, 5, 6]
    assert rollout["next", "inner"].squeeze(-1).tolist() == [1, 1, 2, 2, 3, 3]
    skipped = rollout[1]
    assert torch.equal(skipped["next", "observation"], skipped["observation"])
    assert skipped["next", "reward"].item() == 0.0


def test_conditional_skip_batch_mixed_on_locked_env():
    class StepMaskEnv(CountingEnv):
        def _step(self, tensordict):
            mask = tensordict.get("_step", None)
            out = super()._step(tensordict)
            if mask is not None:
                self.count = torch.where(mask.reshape(-1, 1), self.count, self.count - 1)
                out["observation"] = self.count * self._ones
            return out

    env = TransformedEnv(
        StepMaskEnv(max_steps=100, batch_size=(2,)),
        ConditionalSkip(lambda td: torch.tensor([True, False])),
    )
    td = env.rand_step(env.reset())
    assert td["next", "observation"][:, 0].tolist() == [0.0, 1.0]
    assert td["next", "reward"][0].item() == 0.0


def test_conditional_skip_validation():
    with pytest.raises(TypeError, match="callable"):
        ConditionalSkip(3)
    env = TransformedEnv(CountingEnv(), ConditionalSkip(lambda td: torch.ones(1)))
    with pytest.raises(TypeError, match="boolean"):
        env.rand_step(env.reset())
    skip = ConditionalSkip(lambda td: torch.zeros(td.shape, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="outside an env"):
        skip(TensorDict())
    # the inverse path alone writes the step mask (the complement of the condition)
    assert skip._inv_call(TensorDict(batch_size=(2, 3)))["_step"].all()
