"""ActionScaling and FlattenAction."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from tdrl.envs import (
    ActionScaling,
    Compose,
    EnvBase,
    FlattenAction,
    GymEnv,
    SerialEnv,
    TransformedEnv,
    check_env_specs,
)


class RecordingEnv(EnvBase):
    """Records the action it receives; the action spec is given (leaf or nested key)."""

    def __init__(self, action_spec, action_key="action", batch_size=()):
        super().__init__(batch_size=batch_size)
        if action_key == "action":
            self.action_spec = action_spec
        else:
            self.full_action_spec = Composite({action_key: action_spec}, shape=self.batch_size)
        self._recorded_key = action_key
        self.observation_spec = Composite(
            observation=Unbounded((*self.batch_size, 2)), shape=self.batch_size
        )
        self.reward_spec = Unbounded((*self.batch_size, 1))
        self.last_action = None

    def _reset(self, tensordict=None, **kwargs):
        return TensorDict(
            {
                "observation": torch.zeros(*self.batch_size, 2),
                "done": torch.zeros(*self.batch_size, 1, dtype=torch.bool),
            },
            self.batch_size,
        )

    def _step(self, tensordict):
        self.last_action = tensordict.get(self._recorded_key).clone()
        out = self._reset()
        out.set("reward", torch.zeros(*self.batch_size, 1))
        return out

    def _set_seed(self, seed):
        pass


def _step_with(env, key, action):
    td = env.reset()
    td[key] = action
    env.step(td)
    return env.base_env.last_action


# -------------------------------------------------------------- ActionScaling
def test_action_scaling_from_the_bounds():
    env = TransformedEnv(RecordingEnv(Bounded(-2.0, 4.0, (3,))), ActionScaling())
    check_env_specs(env)
    assert env.action_spec == Bounded(-1.0, 1.0, (3,))
    assert env.transform.loc.tolist() == [1.0] * 3 and env.transform.scale.tolist() == [3.0] * 3
    assert _step_with(env, "action", torch.ones(3)).tolist() == [4.0] * 3
    assert _step_with(env, "action", -torch.ones(3)).tolist() == [-2.0] * 3
    assert _step_with(env, "action", torch.zeros(3)).tolist() == [1.0] * 3
    rollout = env.rollout(5)
    assert bool((rollout["action"].abs() <= 1).all())


def test_action_scaling_unit_range_and_per_dim_bounds():
    low, high = torch.tensor([-1.0, 0.0, -5.0]), torch.tensor([1.0, 2.0, 5.0])
    env = TransformedEnv(
        RecordingEnv(Bounded(low, high, (3,))), ActionScaling(standard_normal=False)
    )
    assert env.action_spec == Bounded(0.0, 1.0, (3,))
    assert torch.equal(_step_with(env, "action", torch.zeros(3)), low)
    assert torch.equal(_step_with(env, "action", torch.ones(3)), high)


def test_action_scaling_nested_key_and_batched_env():
    base = RecordingEnv(Bounded(-2.0, 4.0, (2,)), action_key=("agent", "action"))
    env = TransformedEnv(base, ActionScaling(in_keys_inv=[("agent", "action")]))
    assert env.full_action_spec["agent", "action"] == Bounded(-1.0, 1.0, (2,))
    assert _step_with(env, ("agent", "action"), torch.ones(2)).tolist() == [4.0, 4.0]
    batched = TransformedEnv(SerialEnv(2, lambda: GymEnv("Pendulum-v1")), ActionScaling())
    check_env_specs(batched)
    assert batched.action_spec.shape == (2, 1)
    batched.close()


def test_action_scaling_explicit_statistics():
    t = ActionScaling(loc=2.0, scale=3.0)
    out = t._inv_apply_transform(torch.tensor([1.0, -1.0, 0.0]))
    assert out.tolist() == [5.0, -1.0, 2.0]
    assert t._apply_transform(out).tolist() == [1.0, -1.0, 0.0]
    stats = ActionScaling.from_stats(mean=torch.zeros(3), std=torch.full((3,), 2.0))
    env = TransformedEnv(RecordingEnv(Bounded(-1.0, 1.0, (3,))), stats)
    check_env_specs(env)
    assert env.action_spec == Bounded(-0.5, 0.5, (3,))
    unbounded = TransformedEnv(
        RecordingEnv(Unbounded((3,))),
        ActionScaling.from_stats(mean=torch.ones(3), std=torch.full((3,), 3.0)),
    )
    assert isinstance(unbounded.action_spec, Unbounded)
    assert _step_with(unbounded, "action", torch.ones(3)).tolist() == [4.0] * 3


def test_action_scaling_from_stats_variants_and_checks():
    t = ActionScaling.from_stats(low=torch.tensor([-2.0, 0.0]), high=torch.tensor([2.0, 10.0]))
    assert t.normalize(torch.tensor([[-2.0, 10.0], [0.0, 5.0]])).tolist() == [
        [-1.0, 1.0],
        [0.0, 0.0],
    ]
    constant = ActionScaling.from_stats(mean=torch.tensor([5.0]), std=torch.tensor([0.0]))
    assert constant.normalize(torch.tensor([[5.0]])).tolist() == [[0.0]]
    with pytest.raises(ValueError, match="exactly one"):
        ActionScaling.from_stats()
    with pytest.raises(ValueError, match="together"):
        ActionScaling.from_stats(mean=torch.zeros(2))
    with pytest.raises(ValueError, match="same shape"):
        ActionScaling.from_stats(mean=torch.zeros(3), std=torch.ones(2))
    per_dim = ActionScaling(loc=torch.arange(7.0), scale=torch.ones(7))
    with pytest.raises(ValueError, match="does not match"):
        per_dim.normalize(torch.zeros(4, 1))
    scalar = ActionScaling(loc=1.0, scale=2.0)
    assert torch.equal(scalar.normalize(torch.full((4, 5), 3.0)), torch.ones(4, 5))
    action = torch.randn(4, 5)
    mixed = ActionScaling(loc=torch.randn(5), scale=torch.rand(5) + 0.5)
    torch.testing.assert_close(mixed.denormalize(mixed.normalize(action)), action)


def test_action_scaling_refusals():
    with pytest.raises(ValueError, match="loc and scale"):
        ActionScaling(loc=1.0)
    with pytest.raises(ValueError, match="scale"):
        ActionScaling(loc=0.0, scale=0.0)
    with pytest.raises(ValueError, match="single action key"):
        ActionScaling(in_keys_inv=["a", "b"])
    with pytest.raises(ValueError, match="forward-only"):
        ActionScaling(in_keys_inv=[])
    for spec in (Unbounded((3,)), Bounded(float("-inf"), 1.0, (3,))):
        with pytest.raises(RuntimeError, match="ActionScaling"):
            TransformedEnv(RecordingEnv(spec), ActionScaling())
    finfo = torch.finfo(torch.float32).max
    with pytest.raises(RuntimeError, match="finite bounds"):
        TransformedEnv(RecordingEnv(Bounded(-2.0, finfo, (3,))), ActionScaling())


def test_action_scaling_on_buffers_and_forward_only():
    t = ActionScaling(loc=1.0, scale=3.0)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), transform=t)
    normalized = torch.tensor([-1.0, -0.5, 0.0, 0.5])
    rb.extend(TensorDict({"action": normalized}, [4]))
    assert sorted(rb.storage[:]["action"].tolist()) == [-2.0, -0.5, 1.0, 2.5]
    assert set(rb.sample(16)["action"].tolist()) <= set(normalized.tolist())
    forward_only = ActionScaling(in_keys_inv=[], loc=torch.tensor([1.0, 2.0]), scale=2.0)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), transform=forward_only)
    rb.extend(TensorDict({"action": torch.tensor([[3.0, 4.0]]).expand(4, 2)}, [4]))
    assert rb.storage[:]["action"][0].tolist() == [3.0, 4.0]
    assert rb.sample(2)["action"][0].tolist() == [1.0, 1.0]
    env = TransformedEnv(RecordingEnv(Bounded(-1.0, 1.0, (2,))), forward_only.clone())
    assert env.action_spec == Bounded(-1.0, 1.0, (2,))
    assert _step_with(env, "action", torch.full((2,), 0.5)).tolist() == [0.5, 0.5]


# -------------------------------------------------------------- FlattenAction
@pytest.mark.parametrize(
    ("shape", "dims", "flat"),
    [((3, 5), (-2, -1), (15,)), ((2, 3, 5), (-2, -1), (2, 15)), ((2, 3, 5), (-3, -2), (6, 5))],
)
def test_flatten_action_spec_and_steps(shape, dims, flat):
    base = RecordingEnv(Bounded(-1.0, 1.0, shape))
    env = TransformedEnv(base, FlattenAction(*dims))
    check_env_specs(env)
    assert env.action_spec.shape == flat
    assert env.action_spec.space.low.shape == flat
    action = torch.arange(float(torch.Size(shape).numel())).reshape(flat)
    assert torch.equal(_step_with(env, "action", action), action.reshape(shape))
    assert env.rollout(3)["action"].shape == (3, *flat)


def test_flatten_action_nested_batched_and_positive_dims():
    base = RecordingEnv(Bounded(-1.0, 1.0, (3, 5)), action_key=("nested", "action"))
    env = TransformedEnv(base, FlattenAction(in_keys_inv=[("nested", "action")]))
    check_env_specs(env)
    assert env.full_action_spec["nested", "action"].shape == (15,)
    batched = TransformedEnv(
        RecordingEnv(Bounded(-1.0, 1.0, (2, 3, 5)), batch_size=(2,)), Compose(FlattenAction())
    )
    check_env_specs(batched)
    # the env batch dim stays, the (3, 5) feature dims merge
    assert batched.action_spec.shape == (2, 15)
    positive = TransformedEnv(
        RecordingEnv(Bounded(-1.0, 1.0, (3, 5))),
        FlattenAction(first_dim=0, last_dim=1, allow_positive_dim=True),
    )
    assert positive.action_spec.shape == (15,)
    assert _step_with(positive, "action", torch.arange(15.0)).shape == (3, 5)


def test_flatten_action_without_env_and_checks():
    t = FlattenAction(action_shape=(3, 5))
    rb = ReplayBuffer(storage=LazyTensorStorage(4), transform=t)
    rb.extend(TensorDict({"action": torch.arange(60.0).reshape(4, 15)}, [4]))
    assert rb.storage[:]["action"].shape == (4, 3, 5)
    assert rb.sample(8)["action"].shape == (8, 15)
    assert FlattenAction()._apply_transform(torch.zeros(3, 5)).shape == (15,)
    with pytest.raises(ValueError, match="first_dim"):
        FlattenAction(first_dim=0)
    with pytest.raises(ValueError, match="last_dim"):
        FlattenAction(last_dim=0)
    with pytest.raises(ValueError, match="first_dim"):
        FlattenAction(first_dim=-1, last_dim=-2)
    with pytest.raises(RuntimeError, match="disambiguate"):
        FlattenAction(in_keys_inv=["a", "b"], action_shape=(3, 5))._inv_apply_transform(
            torch.zeros(15)
        )
    with pytest.raises(RuntimeError, match="unknown"):
        FlattenAction().inv(TensorDict({"action": torch.zeros(15)}))
