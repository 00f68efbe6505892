"""Scale-out on a local Ray cluster: RayReplayBuffer and RayCollector with real actors.

One module, so that the suite starts Ray once (each start, and each actor start, costs seconds).
"""

from __future__ import annotations

import os
import signal
import sys
from functools import partial

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector, RayCollector
from tdrl.collectors.multi import WorkerError
from tdrl.data import LazyTensorStorage, RayReplayBuffer, TensorDictReplayBuffer
from tdrl.envs import GymEnv

ray = pytest.importorskip("ray")
# a local Ray cluster per module: slow to start, left out of `make test-min`
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _batch(start, count):
    return TensorDict({"x": torch.arange(start, start + count, dtype=torch.float32)}, [count])


@pytest.fixture(scope="module")
def shared_buffer(ray_cluster):
    # one actor for the module: each actor start imports torch in a new process
    rb = RayReplayBuffer(
        storage=LazyTensorStorage(1000), replay_buffer_cls=TensorDictReplayBuffer, batch_size=8
    )
    yield rb
    rb.close()


@pytest.fixture
def buffer(shared_buffer):
    shared_buffer.empty()
    return shared_buffer


@ray.remote(num_cpus=1)
class Writer:
    def __init__(self, rb):
        self.rb = rb

    def write(self, start, count):
        self.rb.extend(_batch(start, count))
        return len(self.rb)

    def write_forever(self):
        start = 1000
        while True:
            self.rb.extend(_batch(start, 10))
            start += 10


def test_extend_sample_and_index_from_the_driver(buffer):
    before = buffer.write_count
    buffer.extend(_batch(0, 20))
    buffer.add(TensorDict({"x": torch.tensor(20.0)}, []))
    assert len(buffer) == 21 and buffer.write_count == before + 21
    sample = buffer.sample()
    assert sample.batch_size == torch.Size([8]) and (sample["x"] <= 20).all()
    assert buffer[:5]["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    buffer.empty()
    assert len(buffer) == 0


def test_actor_writes_then_is_killed_and_the_buffer_keeps_its_data(buffer):
    # each actor start imports torch in a new process: one writer for both actor tests
    writer = Writer.remote(buffer)
    assert ray.get(writer.write.remote(0, 50)) == 50
    assert sorted(buffer[:]["x"].tolist()) == [float(i) for i in range(50)]
    buffer.empty()
    ray.get(writer.write.remote(0, 30))
    assert len(buffer) == 30
    running = writer.write_forever.remote()
    ray.kill(writer)
    with pytest.raises(ray.exceptions.RayActorError, match="Writer"):
        ray.get(running, timeout=60)
    kept = len(buffer)
    assert kept >= 30
    assert buffer[:30]["x"].tolist() == [float(i) for i in range(30)]
    assert buffer.sample().batch_size == torch.Size([8])
    # the buffer actor still serves writes (writes the killed actor sent before dying may
    # still land in between, so look for these items rather than counting)
    buffer.extend(_batch(10_000, 5))
    stored = set(buffer[:]["x"].tolist())
    assert {float(i) for i in range(10_000, 10_005)} <= stored and len(buffer) >= kept + 5


def test_errors_in_the_actor_reach_the_caller(buffer):
    with pytest.raises(Exception, match="empty|no data|0"):
        buffer.sample()
    with pytest.raises(TypeError, match="replay_buffer_cls: expected a replay buffer class"):
        RayReplayBuffer(replay_buffer_cls=3)


def test_missing_ray_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match="pip install ray"):
        RayReplayBuffer()


cartpole = partial(GymEnv, "CartPole-v1")


class _GreedyOneHot(torch.nn.Module):
    """A linear policy giving CartPole's one-hot action (the argmax of its scores)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(self.linear(observation).argmax(-1), 2)


def test_ray_collector_sync_batches_and_weight_updates(ray_cluster):
    policy = TensorDictModule(_GreedyOneHot(), ["observation"], ["action"])
    collector = Collector(
        cartpole,
        policy,
        backend="ray",
        num_collectors=2,
        sync=True,
        frames_per_batch=10,
        total_frames=60,
    )
    try:
        assert isinstance(collector, RayCollector) and len(collector.actors) == 2
        iterator = iter(collector)
        first = next(iterator)
        assert first.batch_size == torch.Size([2, 10])
        ids = first["collector", "traj_ids"]
        assert (ids[0] % 2 == 0).all() and (ids[1] % 2 == 1).all()
        zeros = {key: torch.zeros_like(value) for key, value in policy.state_dict().items()}
        collector.update_policy_weights_(zeros)
        assert (next(iterator)["action"][..., 0] == 1).all()  # zero scores: argmax 0
    finally:
        collector.shutdown()
        collector.shutdown()


def test_ray_collector_fills_a_ray_buffer_and_reports_a_killed_actor(ray_cluster):
    buffer = RayReplayBuffer(storage=LazyTensorStorage(10_000), batch_size=8)
    collector = RayCollector(
        [cartpole, cartpole], frames_per_batch=10, total_frames=-1, replay_buffer=buffer
    )
    iterator = iter(collector)
    assert [next(iterator) for _ in range(4)] == [None] * 4
    kept = len(buffer)
    assert kept >= 40
    pid = ray.get(collector.actors[1].__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerError, match="Ray collector actor 1 died"):
        for _ in range(1000):
            next(iterator)
    assert collector.closed
    # the buffer keeps what the actors wrote and still serves samples
    assert len(buffer) >= kept
    assert buffer.sample().batch_size == torch.Size([8])
