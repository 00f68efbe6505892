"""How env classes get built: ``EnvBase.__new__``, class-level specs, unbatched spec views."""

import copy
import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Categorical, Composite, Unbounded
from tdrl.envs import EnvBase, SerialEnv, check_env_specs
from tests.mocks import CountingEnv


def _class_specs(batch_size, obs_dim=3):
    """Output and input Composites as a subclass would declare them at class level."""
    output_spec = Composite(
        full_observation_spec=Composite(obs=Unbounded((*batch_size, obs_dim)), shape=batch_size),
        full_reward_spec=Composite(reward=Unbounded((*batch_size, 1)), shape=batch_size),
        full_done_spec=Composite(
            done=Categorical(2, (*batch_size, 1), dtype=torch.bool), shape=batch_size
        ),
        shape=batch_size,
    )
    input_spec = Composite(
        full_action_spec=Composite(action=Bounded(-1.0, 1.0, (*batch_size, 2)), shape=batch_size),
        full_state_spec=Composite(shape=batch_size),
        shape=batch_size,
    )
    return output_spec, input_spec


class _DriftEnv(EnvBase):
    """Observations drift by the mean action; specs are declared on the class by ``__new__``."""

    def _reset(self, tensordict=None, **kwargs):
        shape = self.batch_size if tensordict is None else tensordict.batch_size
        return TensorDict(obs=torch.zeros(*shape, 3), batch_size=shape)

    def _step(self, tensordict):
        obs = tensordict["obs"] + tensordict["action"].mean(-1, keepdim=True)
        shape = tensordict.batch_size
        return TensorDict(
            obs=obs,
            reward=torch.ones(*shape, 1),
            done=torch.zeros(*shape, 1, dtype=torch.bool),
            batch_size=shape,
        )

    def _set_seed(self, seed):
        pass


class ClassmethodNewEnv(_DriftEnv):
    """``__new__`` as a classmethod (it then also receives the class among its args)."""

    @classmethod
    def __new__(cls, *args, obs_dim=3, **kwargs):
        batch_size = torch.Size(kwargs.get("batch_size", ()))
        cls._output_spec, cls._input_spec = _class_specs(batch_size, obs_dim)
        return super().__new__(*args, **kwargs)

    def __init__(self, device="cpu", **kwargs):
        # batch_size is deliberately not forwarded: it comes from the class specs
        super().__init__(device=device)


class UnlockedNewEnv(_DriftEnv):
    """A plain ``__new__`` forwarding ``_batch_locked=False`` to EnvBase."""

    def __new__(cls, *args, **kwargs):
        cls._output_spec, cls._input_spec = _class_specs(torch.Size([]))
        return super().__new__(cls, *args, _batch_locked=False, **kwargs)

    def __init__(self, device="cpu"):
        super().__init__(device=device)


class OutputOnlyEnv(_DriftEnv):
    _output_spec = _class_specs(torch.Size([2]))[0]

    def __init__(self):
        super().__init__()


class LeafClassSpecEnv(_DriftEnv):
    _output_spec = Unbounded((3,))


def test_subclass_new_receives_constructor_arguments():
    env = ClassmethodNewEnv(batch_size=[4], obs_dim=5)
    assert env.batch_size == torch.Size([4])
    assert env.observation_spec["obs"].shape == (4, 5)
    assert env.action_spec.shape == (4, 2)


def test_class_specs_are_copied_not_shared():
    env = ClassmethodNewEnv(batch_size=[2])
    declared = type(env)._output_spec
    assert env.output_spec is not declared
    env.reward_spec = Unbounded((2, 1), dtype=torch.float64)
    assert declared["full_reward_spec", "reward"].dtype == torch.float32
    # the declared specs stay unlocked: the next construction may edit them
    assert not declared.is_locked


def test_class_specs_env_steps_and_passes_check():
    env = ClassmethodNewEnv(batch_size=[3])
    check_env_specs(env)
    assert env.done_keys == ["done", "terminated"]  # completed as for assigned specs
    rollout = env.rollout(4)
    assert rollout.batch_size == (3, 4)


def test_explicit_batch_size_overrides_class_specs_shape():
    class Explicit(_DriftEnv):
        _output_spec, _input_spec = _class_specs(torch.Size([2]))

        def __init__(self, batch_size):
            super().__init__(batch_size=batch_size)

    with pytest.raises(ValueError, match="does not start with the env batch size"):
        Explicit(batch_size=[5])
    assert Explicit(batch_size=[2]).batch_size == (2,)


def test_output_spec_alone_sets_batch_size_and_empty_inputs():
    env = OutputOnlyEnv()
    assert env.batch_size == (2,)
    assert env.full_action_spec.is_empty()
    assert env.observation_spec["obs"].shape == (2, 3)


def test_leaf_class_spec_is_a_type_error():
    with pytest.raises(TypeError, match=r"LeafClassSpecEnv\._output_spec.*Composite.*Unbounded"):
        LeafClassSpecEnv()


def test_new_can_make_a_batch_unlocked_env():
    env = UnlockedNewEnv()
    assert not env.batch_locked
    data = env.reset(TensorDict(batch_size=[5]))
    assert data["obs"].shape == (5, 3)
    data = env.rand_step(data)
    assert data["next", "reward"].shape == (5, 1)
    # a class without the keyword stays locked
    assert ClassmethodNewEnv().batch_locked


def test_envs_with_custom_new_pickle_and_copy():
    env = ClassmethodNewEnv(batch_size=[2])
    for clone in (pickle.loads(pickle.dumps(env)), copy.deepcopy(env)):
        assert clone.batch_size == (2,)
        assert clone.observation_spec["obs"].shape == (2, 3)
        clone.rollout(2)
    unlocked = pickle.loads(pickle.dumps(UnlockedNewEnv()))
    assert not unlocked.batch_locked


def test_plain_envs_ignore_constructor_arguments_in_new():
    env = CountingEnv(batch_size=(3,))
    assert env.batch_size == (3,)
    assert env.batch_locked


class _EarlySpecsEnv(_DriftEnv):
    """Assigns its specs before calling ``EnvBase.__init__``."""

    def __init__(self, **kwargs):
        self.observation_spec = Composite(obs=Unbounded((3,)))
        self.action_spec = Bounded(-1.0, 1.0, (2,))
        self.reward_spec = Unbounded((1,))
        self.action_spec = Bounded(-2.0, 2.0, (2,))  # a later assignment wins
        super().__init__(**kwargs)


def test_specs_assigned_before_init_are_applied_by_init():
    env = _EarlySpecsEnv()
    assert env.observation_spec["obs"].shape == (3,)
    assert env.action_spec.space.high.tolist() == [2.0, 2.0]
    assert env.done_keys == ["done", "terminated"]
    assert "_early_specs" not in env.__dict__
    check_env_specs(env)
    # they are checked against the batch size when applied
    with pytest.raises(ValueError, match="does not start with the env batch size"):
        _EarlySpecsEnv(batch_size=(4,))


def test_is_spec_locked_follows_the_lock():
    env = CountingEnv()
    assert env.is_spec_locked and env.output_spec.is_locked
    env.set_spec_lock_(False)
    assert not env.is_spec_locked and not env.input_spec.is_locked


# ------------------------------------------------------------ unbatched views
UNBATCHED = (
    "input_spec",
    "output_spec",
    "full_action_spec",
    "action_spec",
    "full_observation_spec",
    "observation_spec",
    "full_state_spec",
    "state_spec",
    "full_reward_spec",
    "reward_spec",
    "full_done_spec",
    "done_spec",
)


@pytest.mark.parametrize("name", UNBATCHED)
def test_unbatched_spec_drops_the_env_batch_dims(name):
    env = ClassmethodNewEnv(batch_size=[4, 2])
    batched = getattr(env, name)
    unbatched = getattr(env, f"{name}_unbatched")
    assert unbatched.shape == batched.shape[2:]
    assert type(unbatched) is type(batched)
    assert batched.is_in(unbatched.zero((4, 2)))


def test_unbatched_specs_of_an_unbatched_env_are_the_specs():
    env = ClassmethodNewEnv()
    assert env.action_spec_unbatched is env.action_spec
    assert env.full_done_spec_unbatched is env.full_done_spec


def test_unbatched_leaf_shapes_of_a_batched_env():
    env = SerialEnv(3, lambda: ClassmethodNewEnv(batch_size=[2]))
    try:
        assert env.batch_size == (3, 2)
        assert env.action_spec_unbatched.shape == (2,)
        assert env.full_observation_spec_unbatched["obs"].shape == (3,)
        assert env.reward_spec_unbatched.shape == (1,)
        # a policy written for one env can sample its action and be broadcast
        action = env.action_spec_unbatched.rand((3, 2))
        assert env.action_spec.is_in(action)
    finally:
        env.close()


def test_assigning_an_unbatched_spec_expands_it():
    env = CountingEnv(batch_size=(4,))
    env.observation_spec_unbatched = Composite(pos=Unbounded((2,)), vel=Unbounded(()))
    assert env.observation_spec["pos"].shape == (4, 2)
    assert env.observation_spec["vel"].shape == (4,)
    env.action_spec_unbatched = Bounded(-2.0, 2.0, (3,))
    assert env.action_spec.shape == (4, 3)
    assert env.action_spec_unbatched.shape == (3,)
    env.full_done_spec_unbatched = Composite(
        stop=Categorical(2, (1,), dtype=torch.bool),
        terminated=Categorical(2, (1,), dtype=torch.bool),
    )
    assert env.full_done_spec["stop"].shape == (4, 1)


def test_assigning_unbatched_specs_of_different_agents():
    agents = torch.stack([Composite(action=Unbounded((3,))), Composite(action=Unbounded((2,)))])
    env = CountingEnv(batch_size=(5,))
    env.full_action_spec_unbatched = Composite(agents=agents)
    assert env.full_action_spec.shape == (5,)
    assert env.full_action_spec["agents"].shape == (5, 2)
    sample = env.full_action_spec.rand()
    assert sample["agents"][:, 0]["action"].shape == (5, 3)
    assert sample["agents"][:, 1]["action"].shape == (5, 2)
