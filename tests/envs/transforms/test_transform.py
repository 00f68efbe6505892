"""The transform machinery: Transform, Compose, TransformedEnv."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Unbounded
from tdrl.envs import (
    Compose,
    ConditionalSkip,
    DoubleToFloat,
    GymEnv,
    InitTracker,
    ObservationTransform,
    PendulumEnv,
    RenameTransform,
    StepCounter,
    TrajCounter,
    Transform,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import AutoResettingCountingEnv, CountingEnv, StatelessCountingEnv


class Scale(ObservationTransform):
    """Multiplies entries by a registered buffer (shared by clones)."""

    def __init__(self, factor: float = 2.0, in_keys=("observation",), out_keys=None):
        super().__init__(in_keys=list(in_keys), out_keys=out_keys)
        self.register_buffer("factor", torch.tensor(factor))

    def _apply_transform(self, value):
        return value * self.factor


class SpecMutator(Transform):
    """Edits its argument in place, as user transforms often do."""

    def transform_observation_spec(self, observation_spec):
        observation_spec["extra"] = Unbounded(observation_spec.shape + (2,))
        observation_spec["observation"] = Unbounded(observation_spec["observation"].shape)
        return observation_spec

    def _call(self, next_tensordict):
        next_tensordict.set("extra", torch.zeros(next_tensordict.batch_size + (2,)))
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)


class CountingSpecs(Transform):
    """Counts how often its spec hook runs."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def transform_observation_spec(self, observation_spec):
        self.calls += 1
        return observation_spec


@pytest.fixture
def cartpole():
    env = GymEnv("CartPole-v1")
    yield env
    env.close()


# ---------------------------------------------------------------- Transform
def test_keys_default_and_normalise():
    t = Transform(in_keys="a", in_keys_inv=[("b", ("c",))])
    assert t.in_keys == ["a"] and t.out_keys == ["a"]
    assert t.in_keys_inv == [("b", "c")] and t.out_keys_inv == [("b", "c")]
    t.in_keys = ["x"]
    assert t.out_keys == ["x"]
    with pytest.raises(TypeError, match="in_keys"):
        Transform(in_keys=[3])


def test_forward_applies_transform_and_missing_keys():
    t = Scale(3.0, out_keys=["scaled"])
    td = t(TensorDict({"observation": torch.ones(2)}, []))
    assert torch.equal(td["scaled"], torch.full((2,), 3.0))
    with pytest.raises(KeyError, match="'observation'"):
        t(TensorDict({}, []))
    t.set_missing_tolerance(True)
    assert "scaled" not in t(TensorDict({}, [])).keys()


def test_apply_transform_not_implemented_is_clear():
    with pytest.raises(NotImplementedError, match="_apply_transform"):
        Transform(in_keys=["a"])(TensorDict({"a": torch.ones(1)}, []))


def test_inv_does_not_modify_its_input():
    t = DoubleToFloat(in_keys_inv=["action"])
    td = TensorDict({"action": torch.ones(2, dtype=torch.float32)}, [])
    out = t.inv(td)
    assert out["action"].dtype == torch.float64
    assert td["action"].dtype == torch.float32


def test_buffer_paths_forward_on_sample_inv_on_extend():
    from tdrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.append_transform(
        RenameTransform(
            in_keys=["stored"], out_keys=["obs"], in_keys_inv=["stored"], out_keys_inv=["obs"]
        )
    )
    data = TensorDict({"obs": torch.arange(4.0)}, [4])
    rb.extend(data)
    assert list(data.keys()) == ["obs"]
    assert list(rb.storage[:].keys()) == ["stored"]
    sample = rb.sample()
    assert "obs" in sample.keys() and "stored" not in sample.keys()


# ------------------------------------------------------------------ Compose
def test_compose_index_slice_append_insert():
    a, b, c = Scale(1.0), Scale(2.0), Scale(3.0)
    compose = Compose(a, b)
    assert compose[0] is a and compose[-1] is b and len(compose) == 2
    compose.append(c)
    assert list(compose) == [a, b, c]
    d = Scale(4.0)
    compose.insert(1, d)
    assert list(compose) == [a, d, b, c]
    with pytest.raises(IndexError):
        compose.insert(10, Scale())
    td = compose(TensorDict({"observation": torch.ones(1)}, []))
    assert td["observation"].item() == 24.0


def test_compose_accepts_callables_and_rejects_others():
    compose = Compose(lambda td: td.set("x", torch.ones(1)))
    assert "x" in compose(TensorDict({}, [])).keys()
    with pytest.raises(TypeError, match="callable"):
        Compose(3)


def test_compose_inverse_runs_in_reverse_order():
    seen = []

    class Recorder(Transform):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def _inv_call(self, tensordict):
            seen.append(self.name)
            return tensordict

    Compose(Recorder("first"), Recorder("second")).inv(TensorDict({}, []))
    assert seen == ["second", "first"]


# -------------------------------------------------------------- parenthood
def test_parent_is_env_up_to_transform():
    base = CountingEnv()
    env = TransformedEnv(base, Compose(Scale(2.0), SpecMutator(), StepCounter()))
    first_parent = env.transform[0].parent
    assert isinstance(first_parent, TransformedEnv) and len(first_parent.transform) == 0
    last_parent = env.transform[-1].parent
    assert last_parent.base_env is base
    assert [type(t) for t in last_parent.transform] == [Scale, SpecMutator]
    assert "extra" in last_parent.observation_spec.keys()
    assert "step_count" not in last_parent.observation_spec.keys()
    reference = TransformedEnv(base, env.transform[:-1])
    assert reference.observation_spec == last_parent.observation_spec
    assert env.transform[-1].container is env


def test_cloned_transforms_share_buffers():
    env = TransformedEnv(CountingEnv(), Compose(Scale(2.0), Scale(3.0), TrajCounter()))
    last_two = env.transform[-2:]
    assert isinstance(last_two, Compose) and last_two.parent is None
    assert last_two[0] is not env.transform[1] and isinstance(last_two[0], Scale)
    assert last_two[0].factor is env.transform[1].factor
    assert last_two[1].__dict__["_counter"] is env.transform[2].__dict__["_counter"]
    third = env.transform[2]
    assert third.parent is not None
    clone = third.clone()
    assert clone.parent is None and clone.container is None
    assert clone.__dict__["_counter"] is third.__dict__["_counter"]


def test_transform_with_parent_refuses_second_env():
    base = CountingEnv()
    env = TransformedEnv(base, Compose(Scale(), StepCounter()))
    counter = env.transform[1]
    with pytest.raises(RuntimeError, match=r"clone\(\)"):
        TransformedEnv(base, counter)
    other = TransformedEnv(base, counter.clone())
    assert "step_count" in other.observation_spec.keys()
    assert counter.parent is not None


def test_parent_cache_follows_chain_changes():
    env = TransformedEnv(CountingEnv(), Compose(Scale(), StepCounter()))
    counter = env.transform[1]
    assert "extra" not in counter.parent.observation_spec.keys()
    env.insert_transform(0, SpecMutator())
    assert "extra" in counter.parent.observation_spec.keys()


# --------------------------------------------------------------- specs
def test_specs_of_parent_never_mutated():
    base = CountingEnv()
    before_obs = base.observation_spec.clone()
    before_state = base.state_spec.clone()
    env = TransformedEnv(base, Compose(SpecMutator(), StepCounter(max_steps=3)))
    assert base.observation_spec == before_obs and base.state_spec == before_state
    assert "extra" in env.observation_spec.keys() and "extra" not in base.observation_spec.keys()
    assert "truncated" not in base.done_keys and "truncated" in env.done_keys
    check_env_specs(env)


def test_specs_are_cached_and_recomputed_on_change():
    counting = CountingSpecs()
    env = TransformedEnv(CountingEnv(), counting)
    calls = counting.calls
    env.rollout(5)
    assert counting.calls == calls
    assert env.output_spec is env.output_spec
    env.append_transform(StepCounter())
    assert counting.calls > calls and "step_count" in env.observation_spec.keys()
    calls = counting.calls
    env.transform.append(InitTracker())
    assert counting.calls > calls and "is_init" in env.observation_spec.keys()


def test_cache_specs_false_recomputes_on_access():
    counting = CountingSpecs()
    env = TransformedEnv(CountingEnv(), counting, cache_specs=False)
    calls = counting.calls
    assert env.output_spec is not None
    assert counting.calls > calls


def test_specs_cannot_be_set_directly():
    env = TransformedEnv(CountingEnv(), StepCounter())
    with pytest.raises(RuntimeError, match="base env"):
        env.observation_spec = Unbounded((3,))
    with pytest.raises(RuntimeError, match="base env"):
        env.output_spec = env.output_spec


# ----------------------------------------------------------- TransformedEnv
def test_transformed_gym_env_steps_and_checks(cartpole):
    env = TransformedEnv(cartpole, Compose(StepCounter(max_steps=4), InitTracker()))
    check_env_specs(env)
    rollout = env.rollout(10)
    assert rollout["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3, 4]
    assert rollout["is_init"].squeeze(-1).tolist() == [True, False, False, False]
    assert rollout["next", "truncated"][-1].item() and rollout["next", "done"][-1].item()


def test_inverse_transform_feeds_base_env():
    base = CountingEnv()
    base.action_spec = Bounded(-1.0, 1.0, (1,), dtype=torch.float64)
    env = TransformedEnv(base, DoubleToFloat(in_keys_inv=["action"]))
    assert env.action_spec.dtype == torch.float32
    td = env.reset()
    td["action"] = torch.zeros(1, dtype=torch.float32)
    seen = {}
    original = base._step

    def spy(tensordict):
        seen["dtype"] = tensordict["action"].dtype
        return original(tensordict)

    base.__dict__["_step"] = spy
    env.step(td)
    assert seen["dtype"] == torch.float64
    assert td["action"].dtype == torch.float32
    base.close()


def test_plain_callable_as_transform():
    env = TransformedEnv(CountingEnv(), lambda td: td.set("flag", torch.ones(1)))
    assert "flag" in env.reset().keys()
    assert "flag" in env.rand_step(env.reset())["next"].keys()
    with pytest.raises(TypeError, match="callable"):
        TransformedEnv(CountingEnv(), 3)
    with pytest.raises(TypeError, match="EnvBase"):
        TransformedEnv(object(), StepCounter())


def test_single_transform_kept_then_wrapped_on_append():
    counter = StepCounter()
    env = TransformedEnv(CountingEnv(), counter)
    assert env.transform is counter
    env.append_transform(InitTracker())
    assert isinstance(env.transform, Compose) and env.transform[0] is counter
    env.insert_transform(0, Scale())
    assert isinstance(env.transform[0], Scale)
    assert counter.container is env


def test_attribute_access_falls_through_to_base():
    base = CountingEnv(max_steps=7)
    env = TransformedEnv(base, StepCounter())
    assert env.max_steps == 7
    with pytest.raises(AttributeError):
        _ = env.not_an_attribute


def test_batch_locked_follows_base():
    assert TransformedEnv(CountingEnv(), StepCounter()).batch_locked
    env = TransformedEnv(PendulumEnv(), StepCounter())
    assert not env.batch_locked
    rollout = env.rollout(3, tensordict=TensorDict(batch_size=[4]))
    assert rollout["next", "step_count"].shape == (4, 3, 1)
    with pytest.raises(ValueError, match="batch size"):
        TransformedEnv(CountingEnv(batch_size=(2,)), StepCounter()).reset(
            TensorDict(batch_size=[3])
        )


def test_seed_close_and_nested_envs():
    base = CountingEnv()
    inner = TransformedEnv(base, StepCounter(step_count_key="inner"))
    outer = TransformedEnv(inner, StepCounter(step_count_key="outer"))
    assert outer.set_seed(3) is not None and base.seed_value == 3
    rollout = outer.rollout(3)
    assert rollout["next", "inner"].squeeze(-1).tolist() == [1, 2, 3]
    assert rollout["next", "outer"].squeeze(-1).tolist() == [1, 2, 3]
    unwrapped = TransformedEnv(inner, StepCounter(step_count_key="outer"), auto_unwrap=True)
    assert unwrapped.base_env is base and len(unwrapped.transform) == 2
    outer.close()
    assert base.is_closed


def test_partial_reset_keeps_other_elements():
    env = TransformedEnv(
        CountingEnv(max_steps=10, batch_size=(3,)), Compose(StepCounter(), InitTracker())
    )
    td = env.reset()
    for _ in range(3):
        td = env.step_and_maybe_reset(env.rand_action(td))[1]
    assert td["step_count"].squeeze(-1).tolist() == [3, 3, 3]
    td["_reset"] = torch.tensor([[True], [False], [True]])
    td = env.reset(td)
    assert td["step_count"].squeeze(-1).tolist() == [0, 3, 0]
    assert td["is_init"].squeeze(-1).tolist() == [True, False, True]
    assert "_reset" not in td.keys()


def test_partial_step_skips_base_for_masked_elements():
    base = StatelessCountingEnv(max_steps=100)
    env = TransformedEnv(base, Compose(StepCounter(), ConditionalSkip(lambda td: td["skip"])))
    td = env.reset(TensorDict(batch_size=[3]))
    td["skip"] = torch.tensor([[False], [True], [False]])
    td = env.rand_step(td)
    assert td["next", "count"].squeeze(-1).tolist() == [1.0, 0.0, 1.0]
    assert td["next", "step_count"].squeeze(-1).tolist() == [1, 0, 1]
    assert td["next", "reward"][1].item() == 0.0


def test_partial_step_all_skipped_on_batch_locked_env():
    base = CountingEnv(batch_size=(2,))
    env = TransformedEnv(base, ConditionalSkip(lambda td: torch.ones(2, 1, dtype=torch.bool)))
    td = env.rand_step(env.reset())
    assert base.count.sum().item() == 0
    assert torch.equal(td["next", "observation"], td["observation"])


def test_to_device_keeps_cpu_envs_working():
    env = TransformedEnv(CountingEnv(), StepCounter()).to("cpu")
    assert env.device == torch.device("cpu")
    assert env.rollout(2)["next", "step_count"].device == torch.device("cpu")


def test_observation_transform_applies_at_reset():
    env = TransformedEnv(CountingEnv(), Scale(2.0, out_keys=["scaled"]))
    td = env.reset()
    assert torch.equal(td["scaled"], td["observation"] * 2)
    assert "scaled" in env.observation_spec.keys()
    env = TransformedEnv(CountingEnv(), Scale(2.0, in_keys=["missing"]))
    with pytest.raises(KeyError, match="missing"):
        env.observation_spec["missing"]


def test_repr_names_transforms():
    env = TransformedEnv(CountingEnv(), Compose(StepCounter(), Scale()))
    text = repr(env)
    assert "StepCounter" in text and "Scale" in text and "CountingEnv" in text


def test_bounded_specs_survive_the_chain():
    env = TransformedEnv(CountingEnv(), Compose(Scale(), StepCounter()))
    assert isinstance(env.action_spec, Bounded)
    assert env.action_spec == CountingEnv().action_spec


def test_auto_resetting_base_env_is_not_reset_again():
    base = AutoResettingCountingEnv(max_steps=3, auto_reset=True)
    calls = []
    original = base._reset

    def counting_reset(tensordict=None, **kwargs):
        calls.append(1)
        return original(tensordict, **kwargs)

    base.__dict__["_reset"] = counting_reset
    env = TransformedEnv(base, StepCounter())
    assert env.auto_reset
    rollout = env.rollout(7, break_when_any_done=False)
    assert len(calls) == 1
    assert rollout["step_count"].squeeze(-1).tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert torch.isnan(rollout["next", "observation"][2, 0])
    assert rollout["observation"][3, 0].item() == 0.0


def test_transformed_env_pickles_with_its_transforms():
    import pickle

    env = TransformedEnv(CountingEnv(), Compose(StepCounter(3), TrajCounter()))
    env.rollout(2)
    restored = pickle.loads(pickle.dumps(env))
    assert restored.transform[0].container is restored
    assert restored.rollout(5)["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3]


def test_transforms_inside_and_around_a_batched_env():
    from tdrl.envs.batched import SerialEnv

    def make():
        return TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=4))

    inner = SerialEnv(2, make)
    assert "step_count" in inner.observation_spec.keys()
    rollout = inner.rollout(6, break_when_any_done=False)
    assert rollout["next", "step_count"][0].squeeze(-1).tolist() == [1, 2, 3, 4, 1, 2]
    outer = TransformedEnv(
        SerialEnv(2, lambda: GymEnv("CartPole-v1")),
        Compose(StepCounter(max_steps=3), InitTracker()),
    )
    check_env_specs(outer)
    rollout = outer.rollout(7, break_when_any_done=False)
    assert rollout["next", "step_count"][1].squeeze(-1).tolist() == [1, 2, 3, 1, 2, 3, 1]
    assert rollout["is_init"][0].squeeze(-1).tolist() == [True, False, False] * 2 + [True]
    inner.close()
    outer.close()
