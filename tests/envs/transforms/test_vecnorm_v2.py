"""Tests of VecNormV2 (tdrl/envs/transforms/vecnorm_v2.py) and VecNorm(new_api=True)."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    Compose,
    GymEnv,
    SerialEnv,
    TransformedEnv,
    VecNorm,
    VecNormV2,
    check_env_specs,
)
from tests.mocks import CountingEnv


def _pendulum():
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    return env


def test_new_api_builds_a_vecnorm_v2():
    transform = VecNorm(in_keys=["observation"], decay=0.5, new_api=True, stateful=False)
    assert isinstance(transform, VecNormV2) and not transform.stateful
    assert transform.decay == 0.5
    assert type(VecNorm(in_keys=["observation"])) is VecNorm
    with pytest.raises(TypeError, match="shapes="):
        VecNorm(in_keys=["x"], shapes=[(1,)], new_api=True)


def test_decay_one_gives_the_exact_running_moments():
    transform = VecNormV2(in_keys=["x"], out_keys=["x_n"], decay=1.0, reduce_batch_dims=True)
    seen = []
    for _ in range(6):
        batch = torch.randn(4, 3) * 2 + 1
        seen.append(batch)
        out = transform._step(TensorDict(), TensorDict({"x": batch}, [4]))
        data = torch.cat(seen)
        torch.testing.assert_close(transform.loc["x"], data.mean(0))
        torch.testing.assert_close(transform.scale["x"], data.std(0, unbiased=False))
    torch.testing.assert_close(out["x_n"], (batch - data.mean(0)) / data.std(0, unbiased=False))
    assert transform._count["x"].item() == 24


def test_decay_weighs_old_samples_less():
    transform = VecNormV2(in_keys=["x"], decay=0.5, reduce_batch_dims=True)
    for value in (0.0, 0.0, 6.0):
        transform._step(TensorDict(), TensorDict({"x": torch.tensor([[value]])}, [1]))
    # a new sample weighs at least 1 - decay = 0.5: (0 + 6) / 2, not the exact mean 2
    assert transform.loc["x"].item() == pytest.approx(3.0)
    assert transform._count["x"].item() == 3


def test_statistics_per_env_of_a_batch_unless_reduced():
    per_env = VecNormV2(in_keys=["observation"])
    env = TransformedEnv(CountingEnv(max_steps=50, batch_size=(2,)), per_env)
    assert per_env.initialized and per_env._loc["observation"].shape == (2, 4)
    assert per_env._count["observation"].shape == (2,)
    check_env_specs(env)
    pooled = VecNormV2(in_keys=["observation"], reduce_batch_dims=True)
    TransformedEnv(CountingEnv(max_steps=50, batch_size=(2,)), pooled).rollout(3)
    assert pooled._loc["observation"].shape == (4,)
    assert pooled._count["observation"].item() == 8  # reset + 3 steps, 2 envs


def test_partial_reset_only_counts_the_reset_envs():
    transform = VecNormV2(in_keys=["observation"])
    env = TransformedEnv(CountingEnv(max_steps=50, batch_size=(2,)), transform)
    td = env.reset()
    td = env.step(env.rand_action(td))["next"]
    assert transform._count["observation"].tolist() == [2.0, 2.0]
    td["_reset"] = torch.tensor([[True], [False]])
    env.reset(td)
    assert transform._count["observation"].tolist() == [3.0, 2.0]


def test_stateless_matches_stateful_and_keeps_stats_in_the_data():
    outputs = {}
    for stateful in (True, False):
        env = TransformedEnv(
            _pendulum(), VecNormV2(in_keys=["observation"], out_keys=["obs_n"], stateful=stateful)
        )
        env.set_seed(0)
        torch.manual_seed(0)
        outputs[stateful] = (env.rollout(10), env.transform)
    stateful_rollout, stateful_transform = outputs[True]
    stateless_rollout, _ = outputs[False]
    torch.testing.assert_close(
        stateless_rollout["next", "obs_n"], stateful_rollout["next", "obs_n"]
    )
    last = stateless_rollout[-1]["next"]
    torch.testing.assert_close(
        last["_vecnorm_loc", "observation"], stateful_transform._loc["observation"]
    )
    torch.testing.assert_close(
        last["_vecnorm_var", "observation"], stateful_transform._var["observation"]
    )
    assert last["_vecnorm_count", "observation"].item() == 11
    check_env_specs(TransformedEnv(_pendulum(), VecNormV2(in_keys=["observation"], stateful=False)))


def test_stateless_statistics_travel_through_batched_envs():
    def make():
        return TransformedEnv(
            CountingEnv(max_steps=50), VecNormV2(in_keys=["observation"], stateful=False)
        )

    env = SerialEnv(2, make)
    assert ("_vecnorm_count", "observation") in env.full_state_spec.keys(True, True)
    rollout = env.rollout(4)
    assert rollout["next", "_vecnorm_count", "observation"][:, -1].tolist() == [5.0, 5.0]
    env.close()


def test_stateless_refuses_what_needs_stored_statistics():
    transform = VecNormV2(in_keys=["observation"], stateful=False)
    with pytest.raises(NotImplementedError, match="stateless"):
        transform.denorm(TensorDict({"observation": torch.zeros(2)}, []))
    with pytest.raises(NotImplementedError, match="stateless"):
        _ = transform.loc
    with pytest.raises(ValueError, match="reduce_batch_dims=True needs stateful=True"):
        VecNormV2(in_keys=["x"], stateful=False, reduce_batch_dims=True)
    with pytest.raises(ValueError, match="decay"):
        VecNormV2(in_keys=["x"], decay=1.5)


def test_denorm_inverts_the_normalisation():
    transform = VecNormV2(in_keys=["x"])
    data = torch.randn(10, 2)
    out = transform._step(TensorDict(), TensorDict({"x": data.clone()}, [10]))
    assert not torch.allclose(out["x"], data)
    torch.testing.assert_close(transform.denorm(out)["x"], data, atol=1e-5, rtol=1e-5)


def test_state_dict_shares_the_tensors_and_guards_empty_states():
    transform = VecNormV2(in_keys=["a", ("b", "c")])
    with pytest.warns(UserWarning, match="uninitialized"):
        empty = transform.state_dict()
    transform._step(
        TensorDict(), TensorDict({"a": torch.randn(3), ("b", "c"): torch.randn(3)}, [3])
    )
    with pytest.raises(RuntimeError, match="void state-dict while the instance is initialized"):
        transform.load_state_dict(empty)
    state = transform.state_dict()
    assert f"loc{VecNormV2.SEP}b{VecNormV2.SEP}c" in state["_extra_state"]
    other = VecNormV2(in_keys=["a", ("b", "c")])
    with pytest.warns(UserWarning, match="not shared"):
        other.load_state_dict(state)
    assert other._loc["b", "c"].data_ptr() == transform._loc["b", "c"].data_ptr()
    clone = transform.clone()
    assert clone._loc["a"].data_ptr() != transform._loc["a"].data_ptr()
    torch.testing.assert_close(clone._loc["a"], transform._loc["a"])


def test_frozen_copy_and_observation_norm():
    transform = VecNormV2(in_keys=["x"], out_keys=["y"])
    with pytest.raises(RuntimeError, match="Make sure the VecNorm has been initialized"):
        transform.frozen_copy()
    for _ in range(3):
        data = TensorDict({"x": torch.randn(4, 2)}, [4])
        expected = transform._step(TensorDict(), data.clone())
    frozen = transform.frozen_copy()
    counts = frozen._count["x"].clone()
    torch.testing.assert_close(frozen._step(TensorDict(), data.clone())["y"], expected["y"])
    assert torch.equal(frozen._count["x"], counts)
    static = transform.to_observation_norm()
    torch.testing.assert_close(static(data.clone())["y"], expected["y"], atol=1e-5, rtol=1e-5)
    composed = VecNormV2(in_keys=["x", "z"])
    composed._step(TensorDict(), TensorDict({"x": torch.randn(2), "z": torch.randn(2)}, [2]))
    assert isinstance(composed.to_observation_norm(), Compose)


def test_pickles_with_a_fresh_lock():
    transform = VecNormV2(in_keys=["observation"])
    TransformedEnv(CountingEnv(), transform)
    restored = pickle.loads(pickle.dumps(transform))
    assert restored.__dict__.keys() == transform.__dict__.keys()
    assert restored.lock is not transform.lock
    torch.testing.assert_close(restored._loc["observation"], transform._loc["observation"])


def test_shape_mismatch_names_the_key():
    transform = VecNormV2(in_keys=["x"])
    transform._step(TensorDict(), TensorDict({"x": torch.zeros(2, 3)}, [2]))
    with pytest.raises(ValueError, match="entry 'x' of shape \\(2, 4\\)"):
        transform._step(TensorDict(), TensorDict({"x": torch.zeros(2, 4)}, [2]))


def test_entries_first_seen_later_get_their_statistics():
    transform = VecNormV2(in_keys=["observation", "reward"], reduce_batch_dims=True)
    transform._reset(TensorDict(), TensorDict({"observation": torch.randn(2, 3)}, [2]))
    assert transform._count["observation"].item() == 2 and "reward" not in transform._count.keys()
    transform._step(
        TensorDict(),
        TensorDict({"observation": torch.randn(2, 3), "reward": torch.ones(2, 1)}, [2]),
    )
    assert transform._count["reward"].item() == 2 and transform._count["observation"].item() == 4
