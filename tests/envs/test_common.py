import pickle

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from tdrl.data import Bounded, Categorical, Composite, Unbounded
from tdrl.envs import (
    AutoResetEnv,
    AutoResetHandler,
    AutoResetTransform,
    BatchSizeError,
    Compose,
    EnvBase,
    EnvMetaData,
    StepCounter,
    TransformedEnv,
    check_env_specs,
    seed_generator,
)
from tests.mocks import (
    AutoResettingCountingEnv,
    CountingEnv,
    EnvWithDynamicSpec,
    MultiAgentCountingEnv,
    StatelessCountingEnv,
    ZeroResetEnv,
)


class BareEnv(EnvBase):
    def _reset(self, tensordict=None, **kwargs):
        return TensorDict()

    def _step(self, tensordict):
        return TensorDict()

    def _set_seed(self, seed):
        pass


# ----------------------------------------------------------------- spec plumbing
def test_default_done_spec_and_keys():
    env = BareEnv(batch_size=(3,))
    assert env.done_keys == ["done", "terminated"]
    assert env.full_done_spec["done"].shape == (3, 1)
    assert env.reset_keys == ["_reset"]
    assert env.done_key == "done"
    assert env.action_keys == [] and env.observation_keys == []


def test_leaf_spec_goes_under_default_key():
    env = BareEnv()
    env.action_spec = Bounded(-1.0, 1.0, (2,))
    env.reward_spec = Unbounded((1,))
    env.observation_spec = Unbounded((3,))
    assert env.action_keys == ["action"] and env.action_key == "action"
    assert env.reward_keys == ["reward"]
    assert env.observation_keys == ["observation"]
    assert env.action_spec == env.full_action_spec["action"]
    assert isinstance(env.observation_spec, Composite)


def test_done_spec_completion_each_level():
    env = BareEnv()
    env.full_done_spec = Composite(
        terminated=Categorical(2, (1,), dtype=torch.bool),
        agents=Composite(done=Categorical(2, (2, 1), dtype=torch.bool), shape=(2,)),
    )
    keys = set(env.done_keys)
    assert {"done", "terminated", ("agents", "done"), ("agents", "terminated")} <= keys
    assert env.reset_keys == ["_reset", ("agents", "_reset")]
    assert [sorted(map(str, g)) for g in env.done_keys_groups] == [
        ["done", "terminated"],
        ["('agents', 'done')", "('agents', 'terminated')"],
    ]


def test_truncated_only_completion_data():
    env = StatelessCountingEnv(max_steps=2)
    assert set(env.done_keys) == {"done", "terminated", "truncated"}
    data = env.rollout(5)
    assert data["next", "done"].squeeze(-1).tolist() == [False, True]
    assert torch.equal(data["next", "done"], data["next", "terminated"] | data["next", "truncated"])


def test_specs_locked():
    env = CountingEnv()
    env.reset()
    with pytest.raises(RuntimeError):
        env.full_observation_spec["other"] = Unbounded((1,))
    env.set_spec_lock_(False)
    env.full_observation_spec["other"] = Unbounded((1,))
    env.set_spec_lock_(True)
    assert "other" in env.observation_keys


class _EditsSpecsInPlace(CountingEnv):
    """Adds entries to its specs in place in its constructor (a common subclass idiom)."""

    def __init__(self):
        super().__init__()
        self.full_done_spec["truncated"] = self.full_done_spec["done"].clone()
        self.full_observation_spec["extra"] = Unbounded((2,))
        self.full_done_spec[("agent", "done")] = Categorical(2, (1,), dtype=torch.bool)

    def _reset(self, tensordict=None, **kwargs):
        return super()._reset(tensordict, **kwargs).update({"extra": torch.zeros(2)})

    def _step(self, tensordict):
        out = super()._step(tensordict).update({"extra": torch.ones(2)})
        out["truncated"] = torch.zeros(1, dtype=torch.bool)
        out["agent", "done"] = out["done"].clone()
        return out


class _EditsCompositeDoneSpec(CountingEnv):
    """Reads ``done_spec`` (a Composite: several done entries) in its constructor to add one."""

    def __init__(self):
        super().__init__()
        self.done_spec = Composite(
            done=Categorical(2, (1,), dtype=torch.bool),
            terminated=Categorical(2, (1,), dtype=torch.bool),
        )
        self.done_spec["env_done"] = Categorical(2, (1,), dtype=torch.bool)

    def _step(self, tensordict):
        out = super()._step(tensordict)
        out["terminated"] = out["done"].clone()
        out["env_done"] = out["done"].clone()
        return out

    def _reset(self, tensordict=None, **kwargs):
        out = super()._reset(tensordict, **kwargs)
        out["terminated"] = out["done"].clone()
        out["env_done"] = out["done"].clone()
        return out


def test_constructor_may_edit_specs_read_through_the_leaf_properties():
    # done_spec read in a constructor does not lock the specs (with several done entries it
    # is the Composite the env holds, so an entry added to it is an entry of the env)
    env = _EditsCompositeDoneSpec()
    assert "env_done" in env.done_keys
    check_env_specs(env)
    # once used, they are locked as every spec is
    with pytest.raises(RuntimeError, match="locked"):
        env.done_spec["other"] = Categorical(2, (1,), dtype=torch.bool)


def test_constructor_may_edit_specs_in_place_until_first_use():
    env = _EditsSpecsInPlace()
    assert "extra" in env.observation_keys
    # the nested level edited in place is completed like an assigned one
    assert set(env.done_keys) == {
        "done",
        "terminated",
        "truncated",
        ("agent", "done"),
        ("agent", "terminated"),
    }
    assert env.reset_keys == ["_reset", ("agent", "_reset")]
    assert env.output_spec.is_locked and env.is_spec_locked
    with pytest.raises(RuntimeError, match="locked"):
        env.full_observation_spec["late"] = Unbounded((1,))
    data = env.rand_step(env.reset())
    assert data["next", "agent", "terminated"].shape == (1,)
    check_env_specs(env)


def test_reading_specs_locks_them_and_assignment_still_works():
    env = CountingEnv()
    assert env.input_spec.is_locked and env.full_action_spec.is_locked
    env.observation_spec = Composite(observation=Unbounded((1,)), more=Unbounded((3,)))
    assert set(env.observation_keys) == {"more", "observation"}
    assert env.full_observation_spec.is_locked


def test_keys_recomputed_on_assignment():
    env = CountingEnv()
    env.observation_spec = Composite(a=Unbounded((1,)), b=Unbounded((2,)))
    assert env.observation_keys == ["a", "b"]


def test_spec_batch_dims_error_names_key():
    env = BareEnv(batch_size=(4,))
    with pytest.raises(ValueError, match=r"action_spec at key 'action' has shape \(2,\).*\(4,\)"):
        env.action_spec = Bounded(-1.0, 1.0, (2,))
    with pytest.raises(ValueError, match="observation_spec"):
        env.observation_spec = Composite(obs=Unbounded((3,)))
    env.observation_spec = Composite(obs=Unbounded((4, 3)), shape=(4,))


def test_state_spec_must_be_composite():
    env = BareEnv()
    with pytest.raises(TypeError, match="state_spec must be a Composite"):
        env.state_spec = Unbounded((1,))


def test_multiple_keys_raise_on_single_accessor():
    env = MultiAgentCountingEnv()
    assert env.action_key == ("agents", "action")
    with pytest.raises(KeyError, match="done_key"):
        _ = env.done_key
    assert env.done_keys_groups[0] == ["done", "terminated"]


def test_marl_leaf_accessor_matches_full_spec():
    env = MultiAgentCountingEnv(n_agents=2)
    assert env.reward_spec == env.output_spec["full_reward_spec"][env.reward_key]
    assert env.reward_spec.shape == (2, 1)
    assert env.action_spec == env.input_spec["full_action_spec"][env.action_key]
    assert env.full_action_spec["agents"].shape == (2,)


def test_batch_size_setter_rebuilds_default_done():
    env = BareEnv()
    env.batch_size = (5,)
    assert env.full_done_spec["done"].shape == (5, 1)
    env.observation_spec = Composite(o=Unbounded((5, 1)), shape=(5,))
    with pytest.raises(ValueError, match="full_observation_spec"):
        env.batch_size = (2,)


# ----------------------------------------------------------------- reset / step
def test_reset_seeds_example_root():
    env = ZeroResetEnv()
    data = TensorDict({"val": [1, 1], "_reset": [False, True]}, [])
    env.reset(data)
    assert data.get("val").tolist() == [1, 0]
    assert "_reset" not in data.keys()


def test_reset_seeds_example_nested():
    env = ZeroResetEnv()
    data = TensorDict(
        {
            ("agent0", "val"): [1, 1],
            ("agent0", "_reset"): [False, True],
            ("agent1", "val"): [2, 2],
            ("agent1", "_reset"): [True, False],
        },
        [],
    )
    env.reset(data)
    assert data.get(("agent0", "val")).tolist() == [1, 0]
    assert data.get(("agent1", "val")).tolist() == [0, 2]


def test_reset_seeds_example_root_override():
    env = ZeroResetEnv()
    data = TensorDict(
        {
            "_reset": [True, True],
            ("agent0", "val"): [1, 1],
            ("agent0", "_reset"): [False, True],
            ("agent1", "val"): [2, 2],
            ("agent1", "_reset"): [True, False],
        },
        [],
    )
    out = env.reset(data)
    assert data.get(("agent0", "val")).tolist() == [0, 0]
    assert data.get(("agent1", "val")).tolist() == [0, 0]
    assert out is data
    assert all(data.get(k, None) is None for k in env.reset_keys)


def test_partial_reset_of_stateful_batched_env():
    env = CountingEnv(max_steps=10, batch_size=(3,))
    data = env.reset()
    for _ in range(2):
        data = env.rand_step(data)["next"].exclude("reward")
    data.set("_reset", torch.tensor([[True], [False], [True]]))
    out = env.reset(data)
    assert out["observation"][:, 0].tolist() == [0.0, 2.0, 0.0]
    assert env.count.squeeze(-1).tolist() == [0.0, 2.0, 0.0]


def test_done_after_reset_raises():
    class BadEnv(CountingEnv):
        def _reset(self, tensordict=None, **kwargs):
            out = super()._reset(tensordict)
            out.set("done", torch.ones_like(out["done"]))
            return out

    with pytest.raises(RuntimeError, match="'done' is True after reset"):
        BadEnv().reset()
    assert BadEnv(allow_done_after_reset=True).reset()["done"].all()


def test_reset_must_return_tensordict():
    class NoneEnv(BareEnv):
        def _reset(self, tensordict=None, **kwargs):
            return None

    with pytest.raises(TypeError, match="must return a TensorDictBase"):
        NoneEnv().reset()


def test_batch_locked_rejects_other_batch():
    env = CountingEnv(batch_size=(3,))
    with pytest.raises(ValueError, match=r"shape==env.batch_size, got batch size \(2,\).*\(3,\)"):
        env.step(TensorDict({"action": torch.zeros(2, 1)}, [2]))
    # also a RuntimeError, for code that catches what other implementations raise
    with pytest.raises(RuntimeError) as info:
        env.reset(TensorDict(batch_size=[4]))
    assert isinstance(info.value, BatchSizeError)


def test_batch_unlocked_env_checks_the_trailing_dims():
    class UnlockedCountingEnv(CountingEnv):
        _batch_locked = False

    env = UnlockedCountingEnv(batch_size=(2,))
    env.rand_step(env.reset())
    # leading dims are free, the trailing ones must be the env batch size
    with pytest.raises(
        BatchSizeError,
        match=r"env.batch_size=\(2,\) or a batch size ending with it.*got batch size \(4,\)",
    ):
        env.step(TensorDict({"action": torch.zeros(4, 1)}, [4]))
    with pytest.raises(BatchSizeError, match="ending with"):
        env.reset(TensorDict(batch_size=[2, 3]))


def test_step_writes_under_next_and_completes_terminated():
    env = CountingEnv()
    data = env.rand_step(env.reset())
    assert set(data["next"].keys()) == {"observation", "reward", "done", "terminated"}
    assert data["next", "observation"].tolist() == [1.0] * 4


def test_run_type_checks_wrong_action_shape_names_key():
    env = MultiAgentCountingEnv(n_agents=3, batch_size=(2,))
    env.run_type_checks = True
    data = env.reset()
    data.set(("agents", "action"), torch.zeros(2, 3, 5))
    with pytest.raises(
        ValueError,
        match=r"action spec mismatch at key \('agents', 'action'\): expected shape \(2, 3, 2\), got \(2, 3, 5\)",
    ):
        env.step(data)


def test_run_type_checks_wrong_output_dtype():
    class WrongDtype(CountingEnv):
        def _step(self, tensordict):
            out = super()._step(tensordict)
            out.set("observation", out["observation"].double())
            return out

    env = WrongDtype(run_type_checks=True)
    with pytest.raises(TypeError, match="observation spec mismatch at key 'observation'"):
        env.rand_step(env.reset())


def test_partial_step_unbatched_env_skips():
    env = CountingEnv()
    data = env.reset()
    data = env.rand_action(data)
    data.set("_step", torch.tensor(False))
    out = env.step(data)
    assert env.count.item() == 0
    assert out["next", "observation"].tolist() == [0.0] * 4
    assert out["next", "reward"].tolist() == [0.0]
    assert "_step" not in out.keys()


def test_partial_step_batch_unlocked():
    env = StatelessCountingEnv(max_steps=10)
    data = env.reset(TensorDict(batch_size=[3]))
    data = env.rand_action(data)
    data.set("_step", torch.tensor([True, False, True]))
    out = env.step(data)
    assert out["next", "count"].squeeze(-1).tolist() == [1.0, 0.0, 1.0]
    assert out["next", "reward"].squeeze(-1).tolist() == [1.0, 0.0, 1.0]


def test_all_false_step_mask_skips_a_batch_locked_env():
    env = CountingEnv(batch_size=(4,))
    assert env.batch_locked
    data = env.rand_step(env.reset())
    data = env.step_mdp(data)
    data.set("_step", torch.zeros(4, dtype=torch.bool))
    data.set("action", torch.ones(4, 1))
    out = env.step(data)
    assert (env.count == 1).all()  # _step never ran
    assert (out["next", "observation"] == out["observation"]).all()
    assert (out["next", "reward"] == 0).all()


def test_rand_action_batch_unlocked_shape():
    env = StatelessCountingEnv()
    data = env.rand_action(TensorDict(batch_size=[7]))
    assert data["action"].shape == (7, 1)


@pytest.mark.parametrize("batch_size", [(), (2,)])
def test_rand_action_with_a_nested_action_keeps_the_group_batch_size(batch_size):
    env = MultiAgentCountingEnv(batch_size=batch_size)
    assert env.action_keys == [("agents", "action")]
    for start in (None, TensorDict(batch_size=batch_size), env.reset()):
        data = env.rand_action(start)
        assert data["agents"].batch_size == (*batch_size, 3)
        assert env.action_spec.is_in(data["agents", "action"])


def test_rand_step_without_input():
    env = CountingEnv(batch_size=(2,))
    env.reset()
    data = env.rand_step()
    assert data["next", "observation"].shape == (2, 4)


def test_fake_tensordict():
    env = MultiAgentCountingEnv(batch_size=(2,))
    fake = env.fake_tensordict()
    assert fake["agents", "action"].shape == (2, 3, 2)
    assert fake["next", "agents", "reward"].shape == (2, 3, 1)
    assert fake["next", "done"].shape == (2, 1)


def test_set_seed_returns_deterministic_next_seed():
    env = CountingEnv()
    assert env.set_seed(7) == seed_generator(7) != 7
    assert env.seed_value == 7
    assert env.set_seed(7, static_seed=True) == 7
    assert env.set_seed(None) is None
    assert seed_generator(1) != seed_generator(2)


def test_missing_protocol_methods():
    class Empty(EnvBase):
        pass

    env = Empty()
    with pytest.raises(NotImplementedError, match="_reset"):
        env.reset()
    with pytest.raises(NotImplementedError, match="_set_seed"):
        env.set_seed(0)


def test_repr_lists_specs():
    text = repr(CountingEnv(batch_size=(2,)))
    assert text.startswith("CountingEnv(")
    assert "'observation': Unbounded(2, 4)" in text
    assert "batch_size=torch.Size([2])" in text


def test_to_device_and_close():
    env = CountingEnv()
    env.to("cpu")
    assert env.device == torch.device("cpu")
    assert env.full_observation_spec.device == torch.device("cpu")
    env.close()
    assert env.is_closed


def test_nn_module_and_batch_locked_class_attribute():
    env = StatelessCountingEnv()
    assert isinstance(env, torch.nn.Module)
    assert not env.batch_locked and not env._batch_locked
    env2 = CountingEnv()
    with pytest.raises(RuntimeError, match="batch_locked is a read-only property"):
        env2.batch_locked = False
    assert env2.batch_locked


# ---------------------------------------------------------------- dynamic specs
def test_dynamic_spec_seeds_example():
    env = EnvWithDynamicSpec()
    data = env.rollout(5, return_contiguous=False)
    assert isinstance(data, LazyStackedTensorDict)
    assert data.batch_size == (5,) and data.names[-1] == "time"
    assert set(data.keys()) == {"action", "done", "next", "observation", "terminated", "truncated"}
    assert [t["next", "observation"].shape[1] for t in data.tensordicts] == [2, 3, 4, 5, 6]
    assert data.tensordicts[-1]["next", "done"].all()
    text = str(data)
    assert "observation" in text and "LazyStackedTensorDict" in text


# ------------------------------------------------------------------- auto reset
def test_auto_reset_constructor_argument_replaces_with_nan():
    env = AutoResettingCountingEnv(max_steps=3, auto_reset=True)
    assert env.auto_reset
    data = env.rollout(7, break_when_any_done=False)
    obs = data["next", "observation"][:, 0]
    assert torch.isnan(obs[2]) and torch.isnan(obs[5])
    assert obs[[0, 1, 3, 4, 6]].tolist() == [1.0, 2.0, 1.0, 2.0, 1.0]
    # the root observation after the done step is the stashed first observation
    assert data["observation"][3, 0].item() == 0.0
    assert data["next", "done"].squeeze(-1).tolist() == [
        False,
        False,
        True,
        False,
        False,
        True,
        False,
    ]


def test_auto_reset_without_replace_keeps_values():
    env = AutoResettingCountingEnv(max_steps=2, auto_reset=True, auto_reset_replace=False)
    data = env.rollout(4, break_when_any_done=False)
    assert not torch.isnan(data["next", "observation"]).any()


def test_auto_reset_env_wrapper_and_handler_fill_values():
    env = AutoResetEnv(AutoResettingCountingEnv(max_steps=2), AutoResetTransform(fill_float=-5.0))
    data = env.rollout(4, break_when_any_done=False)
    assert data["next", "observation"][1, 0].item() == -5.0
    handler = AutoResetHandler(fill_int=-7)
    step = TensorDict(
        observation=torch.tensor([[3], [4]]), done=torch.tensor([[True], [False]]), batch_size=[2]
    )
    step = handler.on_step(step, ["observation"], ["done"])
    assert step["observation"].squeeze(-1).tolist() == [-7, 4]
    assert handler.has_stash()


def test_auto_reset_env_is_a_transformed_env_like_the_constructor_argument():
    wrapped = AutoResetEnv(AutoResettingCountingEnv(max_steps=2, batch_size=(2,)))
    assert isinstance(wrapped, TransformedEnv) and wrapped.auto_reset
    assert isinstance(wrapped.transform, AutoResetTransform)
    built = AutoResettingCountingEnv(max_steps=2, batch_size=(2,), auto_reset=True)
    torch.manual_seed(0)
    expected = built.rollout(5, break_when_any_done=False)
    torch.manual_seed(0)
    got = wrapped.rollout(5, break_when_any_done=False)
    torch.testing.assert_close(got.to_dict(), expected.to_dict(), equal_nan=True)
    assert torch.isnan(got["next", "observation"][:, 1]).all()


def test_auto_reset_env_takes_a_compose_starting_with_the_transform():
    env = AutoResetEnv(
        AutoResettingCountingEnv(max_steps=2),
        Compose(AutoResetTransform(replace=False), StepCounter()),
    )
    data = env.rollout(4, break_when_any_done=False)
    assert data["next", "step_count"].squeeze(-1).tolist() == [1, 2, 1, 2]
    assert not torch.isnan(data["next", "observation"]).any()


@pytest.mark.parametrize("transform", [StepCounter(), Compose(StepCounter(), AutoResetTransform())])
def test_auto_reset_env_rejects_other_transforms(transform):
    with pytest.raises(TypeError, match="AutoResetTransform.*got StepCounter"):
        AutoResetEnv(AutoResettingCountingEnv(max_steps=2), transform)


def test_auto_reset_step_and_maybe_reset_skips_real_reset():
    env = AutoResettingCountingEnv(max_steps=2, batch_size=(2,), auto_reset=True)
    calls = []
    original = env._reset

    def counting_reset(tensordict=None, **kwargs):
        calls.append(tensordict)
        return original(tensordict, **kwargs)

    env._reset = counting_reset
    data_ = env.reset()
    for _ in range(5):
        _, data_ = env.step_and_maybe_reset(env.rand_action(data_))
    assert len(calls) == 1


# --------------------------------------------------------------------- metadata
def test_env_metadata_pickle_expand_to():
    env = MultiAgentCountingEnv(batch_size=(2,))
    meta = EnvMetaData.metadata_from_env(env)
    loaded = pickle.loads(pickle.dumps(meta))
    assert loaded.batch_size == (2,)
    assert loaded.batch_locked
    assert loaded.tensordict["agents"].batch_size == (2, 3)
    assert loaded.output_spec == env.output_spec.to("cpu")
    expanded = meta.expand(4)
    assert expanded.batch_size == (4, 2)
    assert expanded.tensordict.batch_size == (4, 2)
    assert expanded.input_spec["full_action_spec", "agents", "action"].shape == (4, 2, 3, 2)
    assert meta.to("cpu").device == torch.device("cpu")
    assert "EnvMetaData" in repr(meta)


def test_int_batch_size_shape_alias_and_pickle():
    env = CountingEnv(batch_size=2)
    assert env.batch_size == env.shape == (2,)
    loaded = pickle.loads(pickle.dumps(env))
    assert loaded.rollout(2).batch_size == (2, 2)
    env.check_env_specs()


def test_append_transform_builds_transformed_env():
    transforms = pytest.importorskip("tdrl.envs.transforms")
    env = CountingEnv().append_transform(transforms.Compose())
    assert isinstance(env, transforms.TransformedEnv)


def test_default_done_spec_completes_data():
    class OnlyDone(BareEnv):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded((1,)))

        def _reset(self, tensordict=None, **kwargs):
            return TensorDict(observation=torch.zeros(1))

        def _step(self, tensordict):
            return TensorDict(observation=torch.ones(1), done=torch.ones(1, dtype=torch.bool))

    env = OnlyDone()
    data = env.rollout(3)
    assert data["terminated"].shape == (1, 1) and not data["done"].any()
    assert data["next", "terminated"].all()


def test_reset_with_all_false_masks_does_not_call_reset():
    env = CountingEnv(max_steps=10)
    data = env.rand_step(env.reset())["next"].exclude("reward")
    data.set("_reset", torch.zeros(1, dtype=torch.bool))
    out = env.reset(data)
    assert env.count.item() == 1.0
    assert out["observation"][0].item() == 1.0 and "_reset" not in out.keys()


# ------------------------------------------------------- entries preset under "next"
def test_step_keeps_next_entries_written_by_the_policy():
    env = CountingEnv(max_steps=5, batch_size=(2,))
    td = env.rand_action(env.reset())
    td.set(("next", "policy_state"), torch.full((2, 3), 7.0))
    td.set(("next", "reward"), torch.full((2, 1), 99.0))
    out = env.step(td)
    assert (out["next", "policy_state"] == 7.0).all()
    # the env's own output wins over a preset entry with the same key
    assert (out["next", "reward"] == td["action"]).all()
    assert (out["next", "observation"] == 1.0).all()


def test_partial_step_keeps_next_entries_written_by_the_policy():
    env = StatelessCountingEnv()
    td = env.reset(TensorDict(batch_size=[3]))
    td = env.rand_action(td)
    td.set("_step", torch.tensor([True, False, True]))
    td.set(("next", "extra"), torch.arange(3.0))
    out = env.step(td)
    assert out["next", "extra"].tolist() == [0.0, 1.0, 2.0]
