"""SerialEnv: conformance, batching, partial steps/resets, attributes, seeding, special data."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tensordict import LazyStackedTensorDict

from tdrl.data import StackedComposite
from tdrl.envs import step_mdp
from tdrl.envs.batched import SerialEnv
from tdrl.envs.libs.gym import GymEnv
from tests.envs.batched._envs import NoActionEnv, SizedEnv, TextEnv
from tests.envs.conformance import EnvConformance
from tests.mocks import CountingEnv, EnvWithDynamicSpec, MultiAgentCountingEnv, ZeroResetEnv


class TestSerialCounting(EnvConformance):
    seeded = False

    def make_env(self):
        return SerialEnv(2, CountingEnv)


class TestSerialPendulum(EnvConformance):
    def make_env(self):
        return SerialEnv(2, partial(GymEnv, "Pendulum-v1"))


class TestSerialMultiAgent(EnvConformance):
    seeded = False

    def make_env(self):
        return SerialEnv(2, partial(MultiAgentCountingEnv, batch_size=(2,)))


class TestSerialNestedResets(EnvConformance):
    seeded = False

    def make_env(self):
        return SerialEnv(3, ZeroResetEnv)


def test_batch_size_prepends_workers_to_sub_batch():
    with SerialEnv(2, partial(CountingEnv, batch_size=(3,))) as env:
        assert env.batch_size == torch.Size([2, 3])
        assert env.observation_spec["observation"].shape == torch.Size([2, 3, 4])
        data = env.rollout(4)
        assert data.batch_size == torch.Size([2, 3, 4])


def test_list_of_constructors_and_kwargs():
    env = SerialEnv(2, [CountingEnv, CountingEnv], [{"max_steps": 2}, {"max_steps": 9}])
    assert env.max_steps == [2, 9]
    data = env.rollout(10)
    # stops when the first sub-env is done
    assert data.shape[-1] == 2
    env.close()


def test_one_kwargs_dict_for_all_workers():
    with SerialEnv(3, CountingEnv, {"max_steps": 4}) as env:
        assert env.max_steps == [4, 4, 4]


def test_wrong_number_of_kwargs_raises():
    with pytest.raises(ValueError, match="one entry per worker"):
        SerialEnv(2, CountingEnv, [{}, {}, {}])
    with pytest.raises(ValueError, match="num_workers"):
        SerialEnv(0, CountingEnv)
    with pytest.raises(TypeError, match="callable"):
        SerialEnv(2, [CountingEnv, 3])


def test_heterogeneous_specs_are_lazily_stacked():
    env = SerialEnv(2, [partial(SizedEnv, 3), partial(SizedEnv, 5)])
    assert isinstance(env.full_observation_spec, StackedComposite)
    data = env.reset()
    assert isinstance(data, LazyStackedTensorDict)
    assert data[0]["observation"].shape == (3,)
    assert data[1]["observation"].shape == (5,)
    data = env.rand_step(data)
    assert data[1]["next", "observation"].shape == (5,)
    assert (data[1]["next", "observation"] == 1).all()
    env.close()


def test_partial_step_only_steps_marked_workers():
    env = SerialEnv(3, CountingEnv)
    data = env.reset()
    data = env.rand_step(data)
    data = env.rand_action(step_mdp(data))
    data.set("_step", torch.tensor([True, False, True]))
    data = env.step(data)
    counts = data["next", "observation"][:, 0]
    assert counts.tolist() == [2.0, 1.0, 2.0]
    assert data["next", "reward"][1].eq(0).all()
    assert env.count == [torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([2.0])]
    env.close()


def test_partial_reset_only_resets_marked_workers():
    env = SerialEnv(3, CountingEnv)
    data = env.reset()
    for _ in range(2):
        data = env.rand_step(data)["next"]
    data.set("_reset", torch.tensor([[False], [True], [False]]))
    out = env.reset(data)
    assert out["observation"][:, 0].tolist() == [2.0, 0.0, 2.0]
    assert "_reset" not in out.keys()
    assert [c.item() for c in env.count] == [2.0, 0.0, 2.0]
    env.close()


def test_attribute_and_method_dispatch():
    env = SerialEnv(2, [partial(SizedEnv, 3), partial(SizedEnv, 5)])
    assert env.size == [3, 5]
    assert env.describe("!") == ["size=3!", "size=5!"]
    assert env.settings.size == [3, 5]  # attributes of attributes, per sub-env
    assert env.settings.doubled() == [6, 10]
    with pytest.raises(AttributeError):
        env._no_such_private_attribute  # noqa: B018
    env.close()


def test_gym_attribute_per_worker():
    with SerialEnv(4, partial(GymEnv, "Pendulum-v1", g=9.81)) as env:
        a, b, c, d = env.g
        assert a == b == c == d == 9.81


def test_set_seed_gives_distinct_deterministic_seeds():
    env = SerialEnv(3, CountingEnv)
    final = env.set_seed(7)
    seeds = env.seed_value
    assert len(set(seeds)) == 3 and seeds[0] == 7
    assert env.set_seed(7) == final
    assert env.seed_value == seeds
    assert env.set_seed(7, static_seed=True) == 7
    env.close()


def test_update_kwargs_applies_at_next_start():
    env = SerialEnv(2, CountingEnv, {"max_steps": 3})
    env.start()
    env.update_kwargs({"max_steps": 6})
    assert env.max_steps == [3, 3]
    env.close()
    env.update_kwargs([{"max_steps": 7}, {"max_steps": 8}])
    assert env.max_steps == [7, 8]
    env.close()


def test_per_worker_lists_of_the_wrong_length_raise_value_and_runtime_errors():
    for make in (
        lambda: SerialEnv(3, [CountingEnv, CountingEnv]),
        lambda: SerialEnv(3, CountingEnv, [{}, {}]),
    ):
        with pytest.raises(ValueError, match=r"expected one entry per worker \(3\), got 2"):
            make()
        with pytest.raises(RuntimeError, match=r"len\(create_env_(fn|kwargs)\) and num_workers"):
            make()
    env = SerialEnv(2, CountingEnv)
    with pytest.raises(RuntimeError, match=r"len\(kwargs\) and num_workers mismatch.*got 1"):
        env.update_kwargs([{"max_steps": 4}])
    assert env.create_env_kwargs == [{}, {}]


def test_close_is_idempotent_and_restarts_lazily():
    env = SerialEnv(2, CountingEnv)
    assert env.is_closed
    env.start()
    assert not env.is_closed
    env.close()
    env.close()
    assert env.is_closed
    assert env.reset().batch_size == (2,)
    env.close()


def test_non_tensor_entries_are_stacked():
    env = SerialEnv(2, TextEnv, [{"prefix": "a"}, {"prefix": "b"}])
    data = env.reset()
    assert data["text"] == ["a0", "b0"]
    data = env.rand_step(data)
    assert data["next", "text"] == ["a1", "b1"]
    env.close()


def test_dynamic_specs_warn_and_stack_lazily():
    with pytest.warns(UserWarning, match="dynamic"):
        env = SerialEnv(2, EnvWithDynamicSpec)
    data = env.rollout(3, return_contiguous=False)
    assert data[0, 2]["next", "observation"].shape == (3, 4, 2)
    env.close()


def test_output_is_a_copy_of_the_buffers():
    env = SerialEnv(2, CountingEnv)
    first = env.rand_step(env.reset())
    kept = first["next", "observation"].clone()
    env.rand_step(first["next"].clone())
    assert (first["next", "observation"] == kept).all()
    env.close()


def test_device_argument_sets_output_device():
    with SerialEnv(2, CountingEnv, device="cpu") as env:
        assert env.device == torch.device("cpu")
        assert env.reset().device == torch.device("cpu")


def test_reset_with_state_input():
    from tests.mocks import StatelessCountingEnv

    env = SerialEnv(2, StatelessCountingEnv)
    data = env.reset()
    assert "count" in data.keys()
    data = env.rand_step(data)
    assert data["next", "count"].squeeze(-1).tolist() == [1.0, 1.0]
    env.close()


def test_repr_mentions_workers():
    env = SerialEnv(2, CountingEnv)
    assert "num_workers=2" in repr(env)


def test_sub_env_configuration_changes_reach_the_in_place_step():
    env = SerialEnv(2, partial(GymEnv, "CartPole-v1"))
    env.start()
    assert all(runner.direct_step is not None for runner in env._runners)
    # a command changing the sub-envs' configuration re-plans their step path
    env._run("setattr", ("run_type_checks", True))
    assert all(runner.direct_step is None for runner in env._runners)
    env._run("call", ("__setattr__", ("run_type_checks", False), {}))
    assert all(runner.direct_step is not None for runner in env._runners)
    env.close()


def test_sub_envs_without_actions():
    env = SerialEnv(2, NoActionEnv)
    assert env.action_keys == []
    data = env.rollout(4, break_when_any_done=False)
    assert data["next", "steps"][0].squeeze(-1).tolist() == [1.0, 2.0, 3.0, 1.0]
    env.close()


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
def test_device_less_sub_envs_stay_device_less_without_buffers():
    with SerialEnv(2, TextEnv, use_buffers=False) as env:
        assert env.device is None
        data = env.rand_step(env.reset())
        assert data.device is None and data["next"].device is None
        assert all(part.device is None for part in data["next"].tensordicts)


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
@pytest.mark.parametrize("use_buffers", [True, False])
def test_sub_envs_read_their_previous_observations_from_the_input(use_buffers):
    from tests.envs.batched._envs import EchoEnv

    with SerialEnv(2, EchoEnv, use_buffers=use_buffers) as env:
        data = env.rollout(4, lambda td: td.set("action", torch.ones(2, 1)))
        assert data["next", "total"][0].squeeze(-1).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_dynamic_non_tensor_entries_are_exchanged_without_buffers():
    from tests.envs.batched._envs import EchoEnv

    with pytest.warns(UserWarning, match="dynamic"):
        env = SerialEnv(2, EchoEnv, [{"words": 1}, {"words": 1}])
    with env:
        env.check_env_specs()  # dynamic specs: the steps are checked one by one
        data = env.rollout(3, break_when_any_done=False)
        assert data[0][-1]["next", "words"] == ["w"] * 4  # 1 at reset, +1 per step
