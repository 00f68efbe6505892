"""ObservationNorm and VecNorm."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.envs import (
    Compose,
    FiniteTensorDictCheck,
    GymEnv,
    ObservationNorm,
    PendulumEnv,
    SqueezeTransform,
    TransformedEnv,
    VecNorm,
    check_env_specs,
    step_mdp,
)
from tests.mocks import CountingEnv


@pytest.fixture
def pendulum():
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    yield env
    env.close()


@pytest.fixture
def cartpole2():
    env = GymEnv("CartPole-v1", num_envs=2)
    env.set_seed(0)
    yield env
    env.close()


# ------------------------------------------------------------ ObservationNorm
def test_observation_norm_given_stats_on_gym(pendulum):
    before = pendulum.output_spec.clone()
    norm = ObservationNorm(loc=1.0, scale=2.0, in_keys=["observation"])
    env = TransformedEnv(pendulum, norm)
    assert pendulum.output_spec == before
    check_env_specs(env)
    spec = env.observation_spec["observation"]
    assert isinstance(spec, Bounded)
    assert spec.low.tolist() == [-1.0, -1.0, -15.0] and spec.high.tolist() == [3.0, 3.0, 17.0]
    pendulum.set_seed(3)
    raw = pendulum.reset()["observation"]
    pendulum.set_seed(3)
    assert torch.allclose(env.reset()["observation"], raw * 2 + 1)


def test_observation_norm_standard_normal_and_inverse():
    norm = ObservationNorm(loc=torch.tensor([1.0, 2.0]), scale=2.0, standard_normal=True)
    td = norm(TensorDict({"observation": torch.tensor([3.0, 2.0])}))
    assert td["observation"].tolist() == [1.0, 0.0]
    assert norm._inv_apply_transform(td["observation"]).tolist() == [3.0, 2.0]
    inverse = ObservationNorm(loc=0.5, scale=2.0, in_keys=[], in_keys_inv=["action"])
    env = TransformedEnv(CountingEnv(), inverse)
    assert env.action_spec.low.tolist() == [-1.5] and env.action_spec.high.tolist() == [2.5]
    check_env_specs(env)
    td = env.reset()
    td["action"] = torch.tensor([1.5])
    assert env.step(td)["next", "reward"].tolist() == [0.5]


def test_observation_norm_init_stats(pendulum):
    norm = ObservationNorm(standard_normal=True, in_keys=["observation"])
    env = TransformedEnv(pendulum, norm)
    assert not norm.initialized
    assert isinstance(env.observation_spec["observation"], Unbounded)
    with pytest.raises(RuntimeError, match="not initialized"):
        env.reset()
    torch.manual_seed(0)
    norm.init_stats(num_iter=250)
    assert norm.initialized and norm.loc.shape == (3,) and norm.scale.shape == (3,)
    assert isinstance(env.observation_spec["observation"], Bounded)
    check_env_specs(env)
    with pytest.raises(RuntimeError, match="already initialized"):
        norm.init_stats(10)


def test_observation_norm_init_stats_keep_dims_and_batched_env(cartpole2):
    norm = ObservationNorm(in_keys=["observation"])
    env = TransformedEnv(cartpole2, norm)
    norm.init_stats(num_iter=40, reduce_dim=[0, 1], cat_dim=1, keep_dims=[1])
    assert norm.loc.shape == (1, 4)
    check_env_specs(env)
    data = env.rollout(30, break_when_any_done=False)["observation"]
    assert data.shape == (2, 30, 4)
    with pytest.raises(ValueError, match="cat_dim"):
        ObservationNorm().init_stats(10, reduce_dim=[0, 1])


def test_observation_norm_init_stats_errors():
    with pytest.raises(RuntimeError, match="TransformedEnv"):
        ObservationNorm().init_stats(10)
    first, second = ObservationNorm(), ObservationNorm()
    TransformedEnv(CountingEnv(max_steps=100), Compose(first, second))
    with pytest.raises(RuntimeError, match="preceding ObservationNorm"):
        second.init_stats(10)
    with pytest.raises(RuntimeError, match="multiple in_keys.*pass key="):
        ObservationNorm(in_keys=["a", "b"]).init_stats(10)
    # arguments are checked first, whatever the state of the transform
    given = ObservationNorm(loc=0.0, scale=1.0)
    with pytest.raises(ValueError, match="cat_dim must be part of or equal to reduce_dim"):
        given.init_stats(10, cat_dim=1)
    with pytest.raises(
        ValueError, match="cat_dim must be part of.*cat_dim=2 with reduce_dim=\\(0, 1\\)"
    ):
        given.init_stats(10, cat_dim=2, reduce_dim=(0, 1))
    with pytest.raises(
        ValueError, match="cat_dim must be specified if reduce_dim is not an integer"
    ):
        given.init_stats(10, reduce_dim=(0, 1))


def test_observation_norm_maps_leaf_and_composite_specs():
    norm = ObservationNorm(loc=1.0, scale=2.0, in_keys=["x"], standard_normal=True)
    leaf = norm.transform_observation_spec(Bounded(0.0, 1.0, (3,)))
    assert leaf.low.tolist() == [-0.5] * 3 and leaf.high.tolist() == [0.0] * 3
    composite = norm.transform_observation_spec(
        Composite(x=Bounded(0.0, 1.0, (3,)), y=Bounded(0.0, 1.0, (3,)))
    )
    assert composite["x"].low.tolist() == [-0.5] * 3
    assert composite["y"].low.tolist() == [0.0] * 3  # not an in_key
    # in an env, the entry may be a reward as well as an observation
    env = TransformedEnv(
        CountingEnv(), ObservationNorm(loc=1.0, scale=2.0, in_keys=["observation", "reward"])
    )
    assert isinstance(env.full_reward_spec["reward"], Unbounded)
    check_env_specs(env)


def test_observation_norm_keys_the_env_lacks():
    norm = ObservationNorm(in_keys=["observation", "extra"], standard_normal=True)
    env = TransformedEnv(CountingEnv(max_steps=100), norm)
    assert "extra" not in env.observation_spec.keys()
    torch.manual_seed(0)
    norm.init_stats(12, key="observation")
    assert norm.loc.shape == (4,)
    with pytest.raises(KeyError, match="'extra'"):
        env.rollout(2)


def test_observation_norm_clones_share_initialised_stats():
    norm = ObservationNorm(in_keys=["observation"])
    clone = norm.clone()
    TransformedEnv(CountingEnv(max_steps=100), norm)
    torch.manual_seed(0)
    norm.init_stats(20)
    assert clone.initialized and torch.equal(clone.loc, norm.loc)


def test_observation_norm_state_dict_round_trip():
    source = ObservationNorm(loc=torch.tensor([1.0, 2.0]), scale=torch.tensor([3.0, 4.0]))
    target = ObservationNorm()
    assert target.state_dict() == {}
    target.load_state_dict(source.state_dict())
    assert target.initialized and target.scale.tolist() == [3.0, 4.0]
    restored = pickle.loads(pickle.dumps(source))
    assert restored.loc.tolist() == [1.0, 2.0]


# ------------------------------------------------------------------- VecNorm
def test_vecnorm_on_gym_normalises(pendulum):
    before = pendulum.output_spec.clone()
    env = TransformedEnv(pendulum, VecNorm(in_keys=["observation", "reward"], decay=0.99))
    assert pendulum.output_spec == before
    check_env_specs(env)
    assert isinstance(env.observation_spec["observation"], Unbounded)
    rollout = env.rollout(200)
    observation = rollout["next", "observation"][50:]
    assert bool((observation.mean(0).abs() < 0.6).all())
    assert bool(((observation.std(0) - 1).abs() < 0.6).all())


def test_vecnorm_scalar_entries_keep_their_shape(pendulum):
    chain = Compose(SqueezeTransform(-1, in_keys=["reward"]), VecNorm(), FiniteTensorDictCheck())
    env = TransformedEnv(pendulum, chain)
    check_env_specs(env)
    assert env.rollout(3)["next", "reward"].shape == (3,)


def test_vecnorm_statistics_and_freeze():
    vecnorm = VecNorm(in_keys=["x"], decay=1.0)
    data = torch.tensor([[1.0], [3.0]])
    out = vecnorm(TensorDict({"x": data}, [2]))
    assert out["x"].reshape(-1).tolist() == pytest.approx([-1.0, 1.0], abs=1e-3)
    assert vecnorm.loc["x"].tolist() == [2.0]
    counts = vecnorm._td["x_count"].clone()
    vecnorm.freeze()
    vecnorm(TensorDict({"x": torch.tensor([[10.0]])}, [1]))
    assert torch.equal(vecnorm._td["x_count"], counts)
    # eval mode (the default inside a TransformedEnv) still updates; only freeze() stops it
    vecnorm.unfreeze().eval()
    vecnorm(TensorDict({"x": torch.tensor([[10.0]])}, [1]))
    assert vecnorm._td["x_count"].item() == 3.0


def test_vecnorm_partial_reset_batched(cartpole2):
    vecnorm = VecNorm(in_keys=["observation"])
    env = TransformedEnv(cartpole2, vecnorm)
    td = step_mdp(env.rand_step(env.reset()))
    kept = td["observation"][1].clone()
    td["_reset"] = torch.tensor([[True], [False]])
    td = env.reset(td)
    assert torch.equal(td["observation"][1], kept)
    assert vecnorm._td["observation_count"].item() > 0


def test_vecnorm_clones_and_frozen_copy_follow_the_shared_stats():
    vecnorm = VecNorm(in_keys=["observation"])
    with pytest.raises(RuntimeError, match="Make sure the VecNorm has been initialized"):
        vecnorm.frozen_copy()
    env = TransformedEnv(CountingEnv(max_steps=100), vecnorm)
    clone = vecnorm.clone()
    frozen = vecnorm.frozen_copy()
    env.rollout(5)
    assert clone._td is vecnorm._td
    # the frozen copy reads the statistics the original keeps updating, and updates nothing
    assert frozen.frozen and frozen._td["observation_count"].item() > 0
    td = TensorDict({"observation": torch.full((4,), 3.0)}, [])
    counts = vecnorm._td["observation_count"].clone()
    torch.testing.assert_close(
        frozen(td.clone())["observation"], vecnorm.to_observation_norm()(td)["observation"]
    )
    assert torch.equal(vecnorm._td["observation_count"], counts)
    static = vecnorm.to_observation_norm()
    assert isinstance(static, ObservationNorm) and static.standard_normal


def test_vecnorm_state_dict_round_trip(tmp_path):
    source = VecNorm(in_keys=["observation"])
    env = TransformedEnv(CountingEnv(max_steps=100), source)
    env.rollout(4)
    path = tmp_path / "vecnorm.pt"
    torch.save(source.state_dict(), path)
    target = VecNorm(in_keys=["observation"])
    TransformedEnv(CountingEnv(max_steps=100), target)
    shared = target._td["observation_sum"]
    target.load_state_dict(torch.load(path, weights_only=True))
    assert torch.equal(target._td["observation_sum"], source._td["observation_sum"])
    assert target._td["observation_sum"] is shared and shared.is_shared()


def test_vecnorm_nested_keys_state_dict_and_denorm():
    vecnorm = VecNorm(in_keys=["a", ("b", "c")], out_keys=["a_n", ("b", "c_n")], decay=1.0)
    with pytest.warns(UserWarning, match="uninitialized VecNorm"):
        empty = vecnorm.state_dict()
    data = TensorDict({"a": torch.randn(5, 2), ("b", "c"): torch.randn(5, 3)}, [5])
    out = vecnorm(data.clone())
    # statistics of nested keys sit next to them
    assert ("b", "c_sum") in vecnorm._td.keys(True, True)
    state = vecnorm.state_dict()["_extra_state"]
    assert f"b{VecNorm.SEP}c_ssq" in state
    restored = vecnorm.denorm(out.exclude("a", ("b", "c")))
    torch.testing.assert_close(restored["a"], data["a"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(restored["b", "c"], data["b", "c"], atol=1e-4, rtol=1e-4)
    with pytest.raises(KeyError, match="Could not find a tensordict"):
        vecnorm.load_state_dict(empty)
    fresh = VecNorm(in_keys=["a", ("b", "c")], out_keys=["a_n", ("b", "c_n")])
    with pytest.warns(UserWarning, match="VecNorm wasn't initialized"):
        fresh.load_state_dict(vecnorm.state_dict())
    assert fresh._td["b", "c_count"].item() == 5.0 and fresh._td["a_sum"].is_shared()


def test_vecnorm_missing_key_and_bad_arguments():
    with pytest.warns(UserWarning, match="VecNorm: key 'obs' is not in the env output specs"):
        TransformedEnv(CountingEnv(), VecNorm(in_keys=["obs"]))
    with pytest.raises(ValueError, match="decay"):
        VecNorm(decay=0.0)
    with pytest.raises(ValueError, match="shared memory"):
        VecNorm(in_keys=["x"], shared_td=TensorDict({"x_sum": torch.zeros(1)}, []))


def test_vecnorm_pickles_without_lock_on_batch_unlocked_env():
    vecnorm = VecNorm(in_keys=["th"])
    env = TransformedEnv(PendulumEnv(), vecnorm)
    env.rollout(3, tensordict=env.reset(TensorDict(batch_size=[3])))
    assert vecnorm._td["th_count"].item() > 3
    restored = pickle.loads(pickle.dumps(vecnorm))
    assert restored.lock is not None and restored.in_keys == ["th"]
    assert torch.equal(restored._td["th_sum"], vecnorm._td["th_sum"])


def _step_in_child(env_vecnorm):
    env = TransformedEnv(CountingEnv(max_steps=100), env_vecnorm)
    env.rollout(10)


def test_vecnorm_shared_td_across_processes():
    base = CountingEnv(max_steps=100)
    shared = VecNorm.build_td_for_shared_vecnorm(base, keys=["observation"])
    assert shared.is_shared()
    vecnorm = VecNorm(in_keys=["observation"], shared_td=shared)
    context = multiprocessing.get_context("fork")
    process = context.Process(target=_step_in_child, args=(vecnorm,))
    process.start()
    process.join(timeout=30)
    assert process.exitcode == 0
    assert shared["observation_count"].item() > 5
