"""TransformedEnv options and the helpers that reference-API code imports from transforms.transforms."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.envs import (
    Compose,
    FrameSkipTransform,
    NoopResetEnv,
    PendulumEnv,
    RenameTransform,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.transforms import transforms as transforms_module
from tests.mocks import CountingEnv


def test_assigning_the_transform_attribute_replaces_the_chain():
    env = TransformedEnv(CountingEnv(), FrameSkipTransform(3))
    old = env.transform
    assert old.parent is not None
    env.transform = NoopResetEnv(0)
    assert isinstance(env.transform, NoopResetEnv)
    assert old.parent is None and old.container is None
    env.transform = lambda td: td.set("flag", torch.ones(1))
    assert "flag" in env.reset().keys()
    env.transform = Compose(StepCounter())
    assert env.reset()["step_count"].item() == 0


def test_device_and_spec_lock_options():
    env = TransformedEnv(CountingEnv(), StepCounter(), device="cpu")
    assert env.device == torch.device("cpu")
    assert env.full_observation_spec.device == torch.device("cpu")
    unlocked = TransformedEnv(CountingEnv(), StepCounter(), spec_locked=False)
    assert not unlocked.spec_locked
    assert TransformedEnv(CountingEnv(), StepCounter()).spec_locked


def test_batch_locked_is_read_only():
    env = TransformedEnv(CountingEnv(), StepCounter())
    with pytest.raises(RuntimeError, match="batch_locked is a read-only property"):
        env.batch_locked = False
    assert env.batch_locked


def test_input_specs_chain_from_the_env_outwards():
    chain = Compose(
        RenameTransform(in_keys=(), out_keys=(), in_keys_inv=("action",), out_keys_inv=("a1",)),
        RenameTransform(in_keys=(), out_keys=(), in_keys_inv=("a1",), out_keys_inv=("a2",)),
    )
    assert chain[0].in_keys == [] and chain[0].in_keys_inv == ["action"]
    env = TransformedEnv(CountingEnv(), chain)
    assert list(env.full_action_spec.keys()) == ["a2"]
    check_env_specs(env)
    assert "a2" in env.rand_action().keys()
    td = env.rand_step(env.reset())
    assert "a2" in td.keys() and "action" not in td.keys()


class Sin(transforms_module.Transform):
    """The pattern of the custom-env tutorial: a leaf spec hook lifted to the Composite."""

    def _apply_transform(self, value):
        return value.sin()

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    @transforms_module._apply_to_composite
    def transform_observation_spec(self, observation_spec):
        return Bounded(
            -1.0,
            1.0,
            shape=observation_spec.shape,
            dtype=observation_spec.dtype,
            device=observation_spec.device,
        )


def test_apply_to_composite_in_a_custom_transform():
    env = TransformedEnv(PendulumEnv(), Sin(in_keys=["th"], out_keys=["sin"]))
    check_env_specs(env)
    assert env.observation_spec["sin"] == Bounded(-1.0, 1.0, ())
    assert isinstance(env.observation_spec["th"], Bounded)
    td = env.reset()
    assert torch.allclose(td["sin"], td["th"].sin())
    # a leaf spec is mapped directly; keys absent from a Composite are left alone
    assert Sin(in_keys=["x"]).transform_observation_spec(Unbounded((2,))) == Bounded(
        -1.0, 1.0, (2,)
    )
    untouched = Sin(in_keys=["x"]).transform_observation_spec(Composite(y=Unbounded(())))
    assert list(untouched.keys()) == ["y"]


def test_transforms_module_gathers_every_transform():
    for name in ("Compose", "StepCounter", "TransformedEnv", "ActionScaling", "MultiAction"):
        assert getattr(transforms_module, name) is getattr(__import__("tdrl.envs").envs, name)
    message = transforms_module.FORWARD_NOT_IMPLEMENTED.format(type(StepCounter()))
    assert "StepCounter" in message
    assert isinstance(transforms_module._has_tv, bool)
    with pytest.raises(RuntimeError, match="forward method of .*ActionMask"):
        transforms_module.ActionMask()(TensorDict())


def test_compose_takes_a_transforms_keyword():
    chain = Compose(transforms=[StepCounter(), RenameTransform(["step_count"], ["t"])])
    assert len(chain) == 2
    assert "t" in TransformedEnv(CountingEnv(), chain).reset().keys()
    with pytest.raises(TypeError, match="either as positional arguments"):
        Compose(StepCounter(), transforms=[StepCounter()])
    with pytest.raises(TypeError, match="unexpected keyword"):
        Compose(other=StepCounter())


def test_skipped_steps_live_on_the_env_device():
    from tdrl.envs import ConditionalSkip

    env = TransformedEnv(
        CountingEnv(device="cpu"), ConditionalSkip(lambda td: torch.ones((), dtype=torch.bool))
    )
    # an input without device (as data assembled by hand often is)
    td = env.reset().clear_device_()
    td["action"] = torch.ones(1)
    out = env._step(td)
    assert out.device == env.device == torch.device("cpu")
    assert out["observation"].tolist() == td["observation"].tolist()


def test_transforms_run_in_eval_mode_until_train():
    from tdrl.envs import RewardScaling

    env = TransformedEnv(CountingEnv(), RewardScaling(0.0, 1.0))
    assert not env.transform.training
    assert env.base_env.training  # the base env keeps its own mode
    env.append_transform(RewardScaling(0.0, 2.0))
    assert not env.transform[1].training
    env.train()
    assert env.transform.training and all(t.training for t in env.transform)
    env.append_transform(RewardScaling(0.0, 3.0))
    assert env.transform[2].training  # a transform added later takes the env's mode
    env.eval()
    env.insert_transform(0, RewardScaling(0.0, 4.0))
    assert not any(t.training for t in env.transform)
    assert not TransformedEnv(CountingEnv()).transform.training


def test_appending_a_free_compose_adds_its_transforms_to_the_chain():
    from tdrl.envs import RewardScaling, StepCounter

    env = TransformedEnv(CountingEnv(), StepCounter())
    scaling, counter = RewardScaling(0.0, 2.0), StepCounter(step_count_key="other_count")
    env.append_transform(Compose(scaling, counter))
    assert len(env.transform) == 3
    assert env.transform[1] is scaling and env.transform[2] is counter
    assert scaling.parent is not None and counter.parent is not None
    data = env.rollout(3)
    assert data["next", "other_count"][-1].item() == 3
    assert data["next", "step_count"][-1].item() == 3
