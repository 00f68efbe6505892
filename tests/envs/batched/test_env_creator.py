"""EnvCreator: metadata read once, pickling of lambdas, use by batched envs."""

from __future__ import annotations

import pickle

import pytest
import torch

from tdrl.envs.batched import EnvCreator, SerialEnv, env_creator, get_env_metadata
from tests.mocks import CountingEnv


def test_metadata_is_read_once_at_creation():
    built = []

    def make(max_steps=5):
        built.append(max_steps)
        return CountingEnv(max_steps=max_steps)

    creator = EnvCreator(make, {"max_steps": 3})
    assert built == [3]
    meta = creator.meta_data
    assert meta.batch_size == torch.Size([])
    assert "observation" in meta.output_spec["full_observation_spec"].keys()
    assert get_env_metadata(creator) is meta
    assert built == [3]
    env = creator()
    assert env.max_steps == 3 and built == [3, 3]
    assert creator(max_steps=9).max_steps == 9


def test_lambdas_pickle():
    size = 7
    creator = EnvCreator(lambda: CountingEnv(max_steps=size))
    clone = pickle.loads(pickle.dumps(creator))
    assert clone().max_steps == 7
    assert clone.meta_data.batch_size == creator.meta_data.batch_size


def test_batched_env_uses_the_creator_metadata():
    creator = env_creator(lambda: CountingEnv(batch_size=(2,)))
    with SerialEnv(3, creator) as env:
        assert env.batch_size == (3, 2)
        assert env.rollout(2).batch_size == (3, 2, 2)


def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        EnvCreator(3)
    with pytest.raises(TypeError, match="dict"):
        EnvCreator(CountingEnv, [1])


def _normalized_pendulum():
    from tdrl.envs import GymEnv, TransformedEnv, VecNorm

    return TransformedEnv(GymEnv("Pendulum-v1"), VecNorm(in_keys=["observation"]))


def _count(creator):
    return creator.state_dict()["_extra_state"]["observation_count"].item()


@pytest.mark.parametrize("batched", ["serial", "parallel"])
def test_envs_built_by_a_creator_share_its_state(batched):
    from tdrl.envs.batched import ParallelEnv

    creator = EnvCreator(_normalized_pendulum)
    state = creator.state_dict()
    assert all(value.is_shared() for value in state["_extra_state"].values())
    assert _count(creator) > 0  # the creator reset its env and took one step
    cls = SerialEnv if batched == "serial" else ParallelEnv
    with cls(2, creator) as env:
        env.rollout(5, break_when_any_done=False)
    first = _count(creator)
    assert first > 0  # the workers' updates reached the creator
    # a second env of the same creator continues from the same statistics
    single = creator()
    single.rollout(3, break_when_any_done=False)
    assert _count(creator) > first


def test_shared_state_survives_pickling_and_can_be_disabled():
    # a plain pickle copies the tensors: the copy shares its own state with its envs
    creator = pickle.loads(pickle.dumps(EnvCreator(_normalized_pendulum)))
    env = creator()
    env.rollout(2)
    assert _count(creator) > 0
    private = EnvCreator(_normalized_pendulum, share_memory=False)
    assert private.state_dict() == {}
    private().rollout(2)
    assert private.state_dict() == {}


def _normalized_counter(max_steps=4):
    from tdrl.envs import TransformedEnv, VecNorm

    return TransformedEnv(CountingEnv(max_steps=max_steps), VecNorm(in_keys=["observation"]))


@pytest.mark.parametrize("batched", ["serial", "parallel"])
def test_a_variant_changes_arguments_and_shares_the_state(batched):
    from tdrl.envs.batched import ParallelEnv

    creator = EnvCreator(_normalized_counter)
    variant = creator.make_variant(max_steps=5)
    assert variant.create_env_kwargs == {"max_steps": 5}
    assert creator.create_env_kwargs == {}
    assert variant.state_dict() is creator.state_dict()
    before = _count(creator)
    cls = SerialEnv if batched == "serial" else ParallelEnv
    with cls(2, [creator, variant]) as env:
        data = env.rollout(40, break_when_any_done=False)
    # each sub-env ran with its own episode length
    assert int(data[0]["next", "done"].sum()) == 10
    assert int(data[1]["next", "done"].sum()) == 8
    # both sub-envs updated the one set of statistics (at least their 40 steps each)
    assert _count(creator) >= before + 2 * 40
