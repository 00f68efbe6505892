"""The batch pipeline shared by collectors: trajectories, replay buffers, compact obs, Collector."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import Collector, SyncDataCollector
from tdrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer, Unbounded
from tdrl.envs import InitTracker, TensorDictPrimer
from tests.mocks import CountingEnv


def constant_policy(td):
    return td.set("action", torch.full((*td.batch_size, 1), 0.5))


def policy_with_extras(td):
    td.set("action", torch.full((*td.batch_size, 1), 0.5))
    return td.set("logits", torch.ones(*td.batch_size, 3))


@pytest.mark.parametrize("batch_size", [(), (2,)])
def test_trajs_per_batch_padded_holds_whole_trajectories(batch_size):
    # CountingEnv(max_steps=3) ends every trajectory after 3 steps
    collector = SyncDataCollector(
        CountingEnv(max_steps=3, batch_size=batch_size),
        constant_policy,
        frames_per_batch=4 * max(len(batch_size) * 2, 1),
        total_frames=48,
        trajs_per_batch=2,
    )
    assert collector.trajs_per_batch == 2 and collector.traj_format == "padded"
    batches = list(collector)
    assert batches
    for data in batches:
        assert data.batch_size == torch.Size([2, 3])
        assert data["collector", "mask"].all()
        # each row is one trajectory: one id, observations counting 1..3, done at the end
        ids = data["collector", "traj_ids"]
        assert (ids == ids[:, :1]).all()
        assert data["next", "observation"][..., 0].tolist() == [[1.0, 2.0, 3.0]] * 2
        assert data["next", "done"][:, -1].all() and not data["next", "done"][:, :-1].any()


def test_trajs_per_batch_cat_concatenates():
    collector = SyncDataCollector(
        CountingEnv(max_steps=3),
        constant_policy,
        frames_per_batch=4,
        total_frames=24,
        trajs_per_batch=3,
        traj_format="cat",
    )
    data = next(iter(collector))
    assert data.batch_size == torch.Size([9])
    assert ("collector", "mask") not in data.keys(True)
    assert data["next", "observation"][:, 0].tolist() == [1.0, 2.0, 3.0] * 3


def test_trajectory_options_are_checked():
    with pytest.raises(ValueError, match="traj_format='cat' needs trajs_per_batch"):
        SyncDataCollector(CountingEnv(), frames_per_batch=4, traj_format="cat")
    with pytest.raises(ValueError, match="split_trajs=True and trajs_per_batch"):
        SyncDataCollector(CountingEnv(), frames_per_batch=4, split_trajs=True, trajs_per_batch=2)
    with pytest.raises(ValueError, match="traj_format must be 'padded' or 'cat', got 'rows'"):
        SyncDataCollector(CountingEnv(), frames_per_batch=4, trajs_per_batch=2, traj_format="rows")
    with pytest.raises(TypeError, match="replay_buffer: expected a replay buffer"):
        SyncDataCollector(CountingEnv(), frames_per_batch=4, replay_buffer=object())


def test_replay_buffer_is_extended_and_iteration_yields_none():
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    collector = SyncDataCollector(
        CountingEnv(batch_size=(2,)),
        constant_policy,
        frames_per_batch=8,
        total_frames=24,
        replay_buffer=buffer,
    )
    assert list(collector) == [None, None, None]
    assert len(buffer) == 24
    # [2, 4] batches are flattened to steps before the buffer gets them
    assert buffer.sample(5).batch_size == torch.Size([5])


def test_background_collection_fills_the_buffer():
    buffer = ReplayBuffer(storage=LazyTensorStorage(1000))
    collector = SyncDataCollector(
        CountingEnv(), constant_policy, frames_per_batch=10, total_frames=200, replay_buffer=buffer
    )
    collector.start()
    collector._thread.join(30)
    assert not collector.is_running
    collector.async_shutdown()
    assert len(buffer) == 200
    with pytest.raises(RuntimeError, match="replay_buffer=None"):
        SyncDataCollector(CountingEnv(), frames_per_batch=10).start()


def test_background_error_reaches_async_shutdown():
    def failing_policy(td):
        raise ValueError("policy exploded")

    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    collector = SyncDataCollector(
        CountingEnv(), failing_policy, frames_per_batch=10, total_frames=50, replay_buffer=buffer
    )
    collector.start()
    collector._thread.join(30)
    with pytest.raises(ValueError, match="policy exploded"):
        collector.async_shutdown()


def test_compact_obs_leaves_next_observation_out():
    collector = SyncDataCollector(
        CountingEnv(max_steps=100),
        constant_policy,
        frames_per_batch=5,
        total_frames=5,
        compact_obs=True,
    )
    data = next(iter(collector))
    assert ("next", "observation") not in data.keys(True)
    assert ("next", "reward") in data.keys(True) and ("next", "done") in data.keys(True)
    # within a trajectory, step t + 1's root holds what "next" would have held at t
    assert data["observation"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_random_phase_batches_share_the_policy_layout():
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    collector = SyncDataCollector(
        CountingEnv(),
        policy_with_extras,
        frames_per_batch=10,
        total_frames=30,
        init_random_frames=10,
        replay_buffer=buffer,
    )
    assert list(collector) == [None] * 3
    stored = buffer[:]
    assert (stored["logits"][:10] == 0).all() and (stored["logits"][10:] == 1).all()
    # the random phase did not use the policy's action
    assert not (stored["action"][:10] == 0.5).all() and (stored["action"][10:] == 0.5).all()


class RecurrentPolicy(torch.nn.Module):
    """A policy module declaring the recurrent state it reads."""

    def make_tensordict_primer(self):
        return TensorDictPrimer(hidden=Unbounded((2,)))

    def forward(self, td):
        assert "hidden" in td.keys() and "is_init" in td.keys()
        return td.set("action", torch.zeros(*td.batch_size, 1))


def test_auto_register_policy_transforms_adds_primer_and_init_tracker():
    collector = SyncDataCollector(
        CountingEnv(),
        RecurrentPolicy(),
        frames_per_batch=4,
        total_frames=4,
        auto_register_policy_transforms=True,
    )
    data = next(iter(collector))
    assert data["hidden"].shape == torch.Size([4, 2])
    assert data["is_init"][0].all()
    assert any(isinstance(t, InitTracker) for t in collector.env.transform)
    # without the flag the env is left alone and the policy fails on the missing entry
    plain = SyncDataCollector(CountingEnv(), RecurrentPolicy(), frames_per_batch=4, total_frames=4)
    with pytest.raises(AssertionError):
        next(iter(plain))


def test_collector_direct_backend_is_a_sync_collector():
    collector = Collector(CountingEnv(), constant_policy, frames_per_batch=6, total_frames=12)
    assert isinstance(collector, SyncDataCollector)
    assert collector.backend == "direct"
    assert [data.batch_size for data in collector] == [torch.Size([6])] * 2
    single = Collector([CountingEnv], constant_policy, frames_per_batch=6, backend="direct")
    assert single.env.batch_size == torch.Size([])


def test_collector_arguments_are_checked():
    with pytest.raises(ValueError, match="backend: expected one of"):
        Collector(CountingEnv(), frames_per_batch=4, backend="mpi")
    with pytest.raises(ValueError, match="num_collectors: expected a positive integer, got 0"):
        Collector(CountingEnv(), frames_per_batch=4, num_collectors=0)
    with pytest.raises(TypeError, match="create_env_fn is required"):
        Collector(frames_per_batch=4)
    with pytest.raises(ValueError, match="backend='direct' needs exactly one"):
        Collector([CountingEnv, CountingEnv], frames_per_batch=4, backend="direct")


def test_fake_tensordict_matches_a_real_batch():
    collector = SyncDataCollector(CountingEnv(), policy_with_extras, frames_per_batch=4)
    fake = collector.fake_tensordict()
    real = next(iter(collector))
    assert set(fake.keys(True, True)) == set(real.keys(True, True))
    assert fake.batch_size == real.batch_size
    assert isinstance(fake, TensorDict)
