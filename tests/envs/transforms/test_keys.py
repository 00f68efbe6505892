"""RenameTransform, SelectTransform, ExcludeTransform, CatTensors, RemoveEmptySpecs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite
from tdrl.envs import (
    CatTensors,
    Compose,
    ExcludeTransform,
    GymEnv,
    RemoveEmptySpecs,
    RenameTransform,
    SelectTransform,
    StepCounter,
    TransformedEnv,
    UnaryTransform,
    check_env_specs,
)
from tests.mocks import CountingEnv, StatelessCountingEnv


@pytest.fixture
def pendulum():
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    yield env
    env.close()


# ----------------------------------------------------------------- rename
def test_rename_outputs_and_inputs(pendulum):
    env = TransformedEnv(
        pendulum,
        RenameTransform(
            ["observation", "reward"], ["obs", "r"], in_keys_inv=["action"], out_keys_inv=["u"]
        ),
    )
    check_env_specs(env)
    assert env.observation_keys == ["obs"] and env.reward_keys == ["r"]
    assert env.action_keys == ["u"]
    td = env.rand_step(env.reset())
    assert "u" in td.keys() and "action" not in td.keys()
    assert {"obs", "r"} <= set(td["next"].keys()) and "observation" not in td["next"].keys()
    assert pendulum.observation_keys == ["observation"]


def test_rename_create_copy(pendulum):
    env = TransformedEnv(pendulum, RenameTransform(["observation"], ["obs"], create_copy=True))
    check_env_specs(env)
    td = env.reset()
    assert torch.equal(td["obs"], td["observation"])


def test_rename_stateless_state_entries():
    env = TransformedEnv(
        StatelessCountingEnv(max_steps=100),
        RenameTransform(["count"], ["c"], in_keys_inv=["count"], out_keys_inv=["c"]),
    )
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["next", "c"].squeeze(-1).tolist() == [1.0, 2.0, 3.0]


def test_rename_nested_and_partial_reset():
    env = TransformedEnv(
        CountingEnv(max_steps=100, batch_size=(2,)),
        RenameTransform(["observation"], [("group", "obs")]),
    )
    check_env_specs(env)
    td = env.rand_step(env.reset())
    td = env.step_and_maybe_reset(env.rand_action(td))[1]
    td["_reset"] = torch.tensor([[True], [False]])
    td = env.reset(td)
    assert td["group", "obs"][:, 0].tolist() == [0.0, 2.0]


def test_rename_errors():
    with pytest.raises(ValueError, match="in_keys and out_keys"):
        RenameTransform(["a", "b"], ["c"])
    with pytest.warns(
        UserWarning, match="RenameTransform: key 'nope' is not in the env output specs"
    ):
        env = TransformedEnv(CountingEnv(), RenameTransform(["nope"], ["x"]))
    assert "x" not in env.observation_spec.keys()
    with pytest.raises(KeyError, match="'a'"):
        RenameTransform(["a"], ["b"])(TensorDict({}, []))


# ----------------------------------------------------------- select / exclude
def test_select_keeps_selected_rewards_dones(pendulum):
    env = TransformedEnv(
        pendulum,
        Compose(RenameTransform(["observation"], ["o"], create_copy=True), SelectTransform("o")),
    )
    check_env_specs(env)
    assert env.observation_keys == ["o"]
    td = env.rand_step(env.reset())
    assert set(td["next"].keys()) == {"o", "reward", "done", "terminated", "truncated"}


def test_select_without_rewards_and_forward():
    env = TransformedEnv(CountingEnv(), SelectTransform("observation", keep_rewards=False))
    assert env.reward_keys == []
    assert "reward" not in env.rand_step(env.reset())["next"].keys()
    td = TensorDict({"a": torch.ones(1), "b": torch.ones(1)}, [])
    assert list(SelectTransform("a")(td).keys()) == ["a"]


def test_exclude_outputs(pendulum):
    env = TransformedEnv(pendulum, Compose(StepCounter(), ExcludeTransform("truncated")))
    check_env_specs(env)
    assert "truncated" not in env.done_keys
    assert "truncated" not in env.rand_step(env.reset())["next"].keys()
    td = TensorDict({"a": torch.ones(1), "b": torch.ones(1)}, [])
    assert list(ExcludeTransform("a")(td).keys()) == ["b"]


@pytest.mark.parametrize(
    "transform, done_keys",
    [
        (lambda: ExcludeTransform("done"), ["terminated", "truncated"]),
        (lambda: SelectTransform("observation", "done", keep_dones=False), ["done"]),
        (lambda: SelectTransform("observation", keep_dones=False), []),
    ],
    ids=["exclude-done", "select-done-only", "select-no-done"],
)
def test_done_entries_a_transform_removes_stay_removed(pendulum, transform, done_keys):
    env = TransformedEnv(pendulum, transform())
    assert sorted(env.done_keys) == done_keys
    check_env_specs(env)
    rollout = env.rollout(3)
    for key in ("done", "terminated", "truncated"):
        assert (key in rollout["next"].keys()) == (key in done_keys)
        assert (key in rollout.keys()) == (key in done_keys)


def test_done_entries_a_transform_adds_are_kept_with_the_base_ones():
    env = TransformedEnv(CountingEnv(max_steps=10), StepCounter(max_steps=2))
    assert sorted(env.done_keys) == ["done", "terminated", "truncated"]
    check_env_specs(env)
    rollout = env.rollout(5, break_when_any_done=True)
    assert rollout["next", "truncated"].squeeze(-1).tolist() == [False, True]
    assert rollout["next", "done"].squeeze(-1).tolist() == [False, True]


def test_exclude_inverse_drops_inputs():
    seen = {}
    base = CountingEnv()
    original = base._step

    def spy(tensordict):
        seen["keys"] = set(tensordict.keys())
        return original(tensordict)

    base.__dict__["_step"] = spy
    env = TransformedEnv(base, ExcludeTransform("junk", inverse=True))
    td = env.reset()
    td["junk"] = torch.ones(1)
    env.rand_step(td)
    assert "junk" not in seen["keys"] and "junk" in td.keys()


# ------------------------------------------------------------------- cat
def test_cat_tensors_on_gym(pendulum):
    env = TransformedEnv(
        pendulum,
        Compose(
            UnaryTransform(["observation"], ["double"], fn=lambda x: x * 2),
            CatTensors(["observation", "double"], "vector"),
        ),
    )
    check_env_specs(env)
    td = env.reset()
    assert td["vector"].shape == (6,) and "double" not in td.keys()
    assert torch.equal(td["vector"][:3], td["vector"][3:] * 2)  # sorted: double first
    assert env.observation_spec["vector"].shape == (6,)


def test_cat_tensors_lazy_keys_keep_inputs_and_unsqueeze():
    env = TransformedEnv(
        StatelessCountingEnv(),
        CatTensors(out_key="all", del_keys=False, unsqueeze_if_oor=True),
    )
    assert env.transform.in_keys == ["count", "observation"]
    check_env_specs(env)
    td = env.reset()
    assert td["all"].shape == (5,) and "count" in td.keys()
    with pytest.raises(ValueError, match="negative"):
        CatTensors(["a"], "b", dim=0)
    with pytest.raises(KeyError, match="missing"):
        TransformedEnv(CountingEnv(), CatTensors(["observation", "missing"]))


def test_cat_tensors_batched_partial_reset():
    env = TransformedEnv(
        CountingEnv(max_steps=100, batch_size=(2,)),
        CatTensors(["observation"], "vec", del_keys=False),
    )
    td = env.step_and_maybe_reset(env.rand_action(env.reset()))[1]
    td["_reset"] = torch.tensor([[False], [True]])
    td = env.reset(td)
    assert td["vec"][:, 0].tolist() == [1.0, 0.0]


# ----------------------------------------------------------- remove empty
def test_remove_empty_specs_and_data():
    class WithEmpty(CountingEnv):
        def __init__(self):
            super().__init__()
            spec = self.observation_spec.clone()
            spec["empty"] = Composite()
            self.observation_spec = spec

        def _reset(self, tensordict=None, **kwargs):
            out = super()._reset(tensordict)
            out["empty"] = TensorDict({}, [])
            return out

    env = TransformedEnv(WithEmpty(), RemoveEmptySpecs())
    assert "empty" not in env.observation_spec.keys()
    check_env_specs(env)
    assert "empty" not in env.reset().keys()
    td = TensorDict({"a": {}, "b": torch.ones(1)}, [])
    assert list(RemoveEmptySpecs()(td).keys()) == ["b"]
    # the transform keys every transform takes are accepted; it still applies to all entries
    keyed = RemoveEmptySpecs(in_keys=["b"], out_keys=["b"])
    assert list(keyed(td.clone()).keys()) == ["b"]


def test_remove_empty_specs_rebuilds_nested_empty_state_on_the_way_in():
    transform = RemoveEmptySpecs()
    state = Composite(state=Composite(sub=Composite(), deeper=Composite(leaf=Composite())))
    assert transform.transform_state_spec(state).is_empty()
    rebuilt = transform.inv(TensorDict())
    assert {("state", "sub"), ("state", "deeper", "leaf")} <= set(rebuilt.keys(True))


def test_cat_tensors_spec_hook_on_a_leaf_spec():
    single = CatTensors(["x"], "x_out", dim=-2, unsqueeze_if_oor=True)
    assert single.transform_observation_spec(Bounded(0.0, 1.0, (1, 4, 32))).shape == (1, 4, 32)
    with pytest.raises(ValueError, match="leaf spec describes one entry"):
        CatTensors(["x", "y"], "xy").transform_observation_spec(Bounded(0.0, 1.0, (3,)))


def test_remove_empty_specs_on_gym(pendulum):
    env = TransformedEnv(pendulum, RemoveEmptySpecs())
    check_env_specs(env)
    assert env.observation_keys == ["observation"]
