"""Multi-process collectors with real worker processes: batches, weights, faults, shutdown."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import (
    AsyncCollector,
    Collector,
    MultiAsyncCollector,
    MultiaSyncDataCollector,
    MultiSyncCollector,
    MultiSyncDataCollector,
    aSyncDataCollector,
)
from tdrl.collectors.multi import WorkerError
from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tests.mocks import CountingEnv


def counting_env():
    return CountingEnv(max_steps=4)


def batched_counting_env():
    return CountingEnv(max_steps=4, batch_size=(2,))


class FailingEnv(CountingEnv):
    """Raises on its third step."""

    def _step(self, tensordict):
        if int(self.count.max()) >= 2:
            raise ValueError("the simulator broke on step three")
        return super()._step(tensordict)


def failing_env():
    return FailingEnv(max_steps=10)


def linear_policy():
    return TensorDictModule(torch.nn.Linear(4, 1), ["observation"], ["action"])


def _all_dead(pids):
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        # a zombie still answers: check its state
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().split()[2] != "Z":
                return False
    return True


def test_multisync_gathers_one_batch_from_every_worker():
    collector = MultiSyncDataCollector(
        [counting_env, counting_env], frames_per_batch=20, total_frames=60
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert len(batches) == 3 == len(collector)
    for data in batches:
        assert data.batch_size == torch.Size([2, 10])
        assert data.names[-1] == "time"
    ids = torch.stack([data["collector", "traj_ids"] for data in batches], 0)
    # worker w only holds ids congruent to w modulo the number of workers
    assert (ids[:, 0] % 2 == 0).all() and (ids[:, 1] % 2 == 1).all()
    # each worker's trajectories keep their ids across batches
    assert ids[0, 0, -1] == ids[1, 0, 0] or batches[0]["next", "done"][0, -1].item()


def test_multisync_cat_results_along_time_and_batched_envs():
    collector = MultiSyncCollector(
        [batched_counting_env, batched_counting_env],
        frames_per_batch=16,
        total_frames=16,
        cat_results=-1,
    )
    try:
        (data,) = list(collector)
    finally:
        collector.shutdown()
    assert data.batch_size == torch.Size([2, 8])
    assert data.names[-1] == "time"
    with pytest.raises(ValueError, match="cat_results: expected 'stack' or an int dim"):
        MultiSyncDataCollector([counting_env], frames_per_batch=4, cat_results="cat")


def test_multiasync_and_async_yield_worker_batches():
    collector = MultiaSyncDataCollector(
        [counting_env, counting_env], frames_per_batch=8, total_frames=40
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert len(batches) == 5
    assert all(data.batch_size == torch.Size([8]) for data in batches)
    # each batch comes from one worker: its ids share that worker's residue
    for data in batches:
        residues = data["collector", "traj_ids"] % 2
        assert (residues == residues[0]).all()
    assert MultiAsyncCollector is MultiaSyncDataCollector
    single = AsyncCollector(counting_env, frames_per_batch=5, total_frames=10)
    try:
        assert isinstance(single, aSyncDataCollector)
        assert [data.batch_size for data in single] == [torch.Size([5])] * 2
    finally:
        single.shutdown()


def test_weight_updates_reach_every_worker_without_new_collector():
    policy = linear_policy()
    collector = MultiSyncDataCollector(
        [counting_env, counting_env], policy, frames_per_batch=8, total_frames=24
    )
    try:
        iterator = iter(collector)
        first = next(iterator)
        assert (first["action"] != 0).any()
        zeros = {key: torch.zeros_like(value) for key, value in policy.state_dict().items()}
        collector.update_policy_weights_(zeros)
        second = next(iterator)
        assert (second["action"] == 0).all()
        # in-place changes of the parent's policy are seen too: its memory is shared
        with torch.no_grad():
            policy.module.bias.fill_(0.25)
        third = next(iterator)
        assert (third["action"] == 0.25).all()
    finally:
        collector.shutdown()
    with pytest.raises(TypeError, match="expected the collector's policy to be a torch.nn.Module"):
        plain = MultiSyncDataCollector([counting_env], frames_per_batch=4)
        try:
            plain.update_policy_weights_({"weight": torch.zeros(1)})
        finally:
            plain.shutdown()


def test_worker_error_reaches_the_parent_with_its_traceback():
    collector = MultiSyncDataCollector(
        [counting_env, failing_env], frames_per_batch=20, total_frames=40
    )
    pids = collector.worker_pids
    with pytest.raises(WorkerError, match="collector worker 1 failed during 'collect'") as info:
        list(collector)
    message = str(info.value)
    assert "the simulator broke on step three" in message
    assert "--- worker traceback ---" in message and "in _step" in message
    # the collector shut itself down: every worker process is gone
    assert collector.closed
    assert _all_dead(pids)


def test_worker_construction_error_is_reported():
    def broken_env():
        raise RuntimeError("cannot build this env")

    with pytest.raises(WorkerError, match="worker 0 failed during 'start'.*cannot build this env"):
        MultiaSyncDataCollector([broken_env], frames_per_batch=4)


def test_killed_worker_makes_the_parent_raise_and_nothing_hangs():
    collector = MultiaSyncDataCollector(
        [counting_env, counting_env], frames_per_batch=4, total_frames=-1
    )
    pids = collector.worker_pids
    iterator = iter(collector)
    next(iterator)
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=rf"collector worker 1 \(pid {pids[1]}\) died.*signal 9"):
        for _ in range(10_000):
            next(iterator)
    assert time.monotonic() - start < 30
    assert _all_dead(pids)


def test_shutdown_stops_every_worker_and_is_idempotent():
    collector = MultiSyncDataCollector([counting_env, counting_env], frames_per_batch=8)
    pids = collector.worker_pids
    assert len(set(pids)) == 2
    next(iter(collector))
    collector.shutdown()
    collector.shutdown()
    assert _all_dead(pids)
    with pytest.raises(RuntimeError, match="is shut down"):
        next(iter(collector))


@pytest.mark.parametrize("cls", [MultiSyncDataCollector, MultiaSyncDataCollector])
def test_commands_after_shutdown_say_the_collector_is_shut_down(cls):
    collector = cls([counting_env, counting_env], frames_per_batch=8)
    next(iter(collector))  # the asynchronous collector has batches in flight now
    collector.shutdown()
    for command in (collector.state_dict, collector.reset, lambda: collector.set_seed(1)):
        with pytest.raises(RuntimeError, match=f"{cls.__name__} is shut down"):
            command()


def test_seed_state_dict_and_reset_go_to_every_worker():
    collector = MultiSyncDataCollector(
        [counting_env, counting_env], frames_per_batch=8, total_frames=16
    )
    try:
        next_seed = collector.set_seed(3)
        assert isinstance(next_seed, int)
        list(collector)
        state = collector.state_dict()
        assert sorted(state) == ["frames", "iter", "worker0", "worker1"]
        assert state["frames"] == 16
        collector.load_state_dict(state)
        collector.reset()
    finally:
        collector.shutdown()


def test_replay_buffer_and_trajectories_in_the_parent():
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(200))
    collector = MultiSyncDataCollector(
        [counting_env, counting_env], frames_per_batch=16, total_frames=48, replay_buffer=buffer
    )
    try:
        assert list(collector) == [None] * 3
    finally:
        collector.shutdown()
    assert len(buffer) == 48
    collector = MultiaSyncDataCollector(
        [counting_env, counting_env], frames_per_batch=6, total_frames=60, trajs_per_batch=3
    )
    try:
        data = next(iter(collector))
    finally:
        collector.shutdown()
    assert data.batch_size == torch.Size([3, 4])
    assert data["collector", "mask"].all()


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="expected a list of env constructors"):
        MultiSyncDataCollector(counting_env, frames_per_batch=4)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['frames_per_step'\]"):
        MultiSyncDataCollector([counting_env], frames_per_batch=4, frames_per_step=2)
    with pytest.raises(ValueError, match="create_env_kwargs: expected 2 dicts"):
        MultiSyncDataCollector(
            [counting_env, counting_env], frames_per_batch=4, create_env_kwargs=[{}]
        )


def test_collector_dispatches_to_worker_processes():
    collector = Collector(counting_env, num_collectors=2, sync=True, frames_per_batch=8)
    try:
        assert isinstance(collector, MultiSyncCollector)
        assert not isinstance(collector, Collector)
        assert next(iter(collector)).numel() == 8
    finally:
        collector.shutdown()
    collector = Collector([counting_env, counting_env], frames_per_batch=4, backend="process")
    try:
        assert isinstance(collector, MultiaSyncDataCollector)
    finally:
        collector.shutdown()


def test_forkserver_workers_receive_pickled_constructors_and_shared_weights():
    policy = linear_policy()
    collector = MultiSyncDataCollector(
        [lambda: CountingEnv(max_steps=4)],
        policy,
        frames_per_batch=4,
        total_frames=8,
        mp_start_method="forkserver",
    )
    try:
        assert collector.mp_start_method == "forkserver"
        iterator = iter(collector)
        next(iterator)
        collector.update_policy_weights_(linear_policy().apply(_zero))
        assert (next(iterator)["action"] == 0).all()
    finally:
        collector.shutdown()


def _zero(module):
    if isinstance(module, torch.nn.Linear):
        torch.nn.init.zeros_(module.weight)
        torch.nn.init.zeros_(module.bias)


def test_a_new_iterator_reuses_the_workers_shared_buffers():
    collector = MultiSyncDataCollector([counting_env, counting_env], frames_per_batch=8)
    try:
        first = next(iter(collector))
        second = next(iter(collector))
        assert first.batch_size == second.batch_size == torch.Size([2, 4])
        # the first batch was copied out: the workers' next batch did not overwrite it
        assert not torch.equal(first["collector", "traj_ids"], second["collector", "traj_ids"]) or (
            not torch.equal(first["observation"], second["observation"])
        )
    finally:
        collector.shutdown()


def _shm_mappings() -> int:
    """How many mappings of /dev/shm files this process holds."""
    with open("/proc/self/maps") as maps:
        return sum("/dev/shm/" in line for line in maps)


def _shm_files_of(pids) -> list[str]:
    """Shared-memory files named after one of ``pids`` (torch names them torch_<pid>_...)."""
    prefixes = tuple(f"torch_{pid}_" for pid in pids)
    return [name for name in os.listdir("/dev/shm") if name.startswith(prefixes)]


needs_proc = pytest.mark.skipif(
    not (os.path.exists("/proc/self/maps") and os.path.isdir("/dev/shm")),
    reason="reads /proc/self/maps and /dev/shm",
)


@needs_proc
def test_shutdown_releases_the_shared_batch_buffers():
    before = _shm_mappings()
    collector = MultiSyncDataCollector(
        [counting_env, counting_env], frames_per_batch=8, total_frames=24
    )
    pids = [os.getpid(), *collector.worker_pids]
    batches = list(collector)
    assert _shm_mappings() > before  # the workers' buffers are mapped here
    collector.shutdown()
    # released at shutdown, not when the collector object is collected
    assert _shm_mappings() == before
    assert _shm_files_of(pids) == []
    # the yielded batches were copies: still readable, and intact
    assert [data["observation"].shape for data in batches] == [torch.Size([2, 4, 4])] * 3
    assert (batches[0]["observation"][:, 0] == 0).all()


class SlowEnv(CountingEnv):
    """Sleeps 10 ms per step: a batch of 500 steps takes seconds."""

    def _step(self, tensordict):
        time.sleep(0.01)
        return super()._step(tensordict)


def slow_env():
    return SlowEnv(max_steps=50)


@needs_proc
def test_multisync_worker_killed_mid_batch_is_reported():
    collector = MultiSyncDataCollector([slow_env, slow_env], frames_per_batch=1000)
    pids = collector.worker_pids
    iterator = iter(collector)
    killer = threading.Timer(0.5, os.kill, (pids[0], signal.SIGKILL))
    killer.start()
    start = time.monotonic()
    try:
        with pytest.raises(
            WorkerError, match=rf"collector worker 0 \(pid {pids[0]}\) died during 'collect'"
        ):
            next(iterator)  # both workers are mid-batch when worker 0 is killed
    finally:
        killer.join()
    assert time.monotonic() - start < 30
    assert collector.closed
    assert _all_dead(pids)
    assert _shm_files_of([os.getpid(), *pids]) == []


class StepTally(CountingEnv):
    """Counts its steps in a counter shared with the test; each step takes 20 ms."""

    tally = None

    def _step(self, tensordict):
        time.sleep(0.02)
        with self.tally.get_lock():
            self.tally.value += 1
        return super()._step(tensordict)


def tally_env():
    return StepTally(max_steps=1000)


@pytest.fixture
def tally(monkeypatch):
    import multiprocessing

    counter = multiprocessing.get_context("fork").Value("i", 0)
    monkeypatch.setattr(StepTally, "tally", counter)
    return counter


def _interrupt_next(iterator, after: float) -> None:
    """``next(iterator)`` interrupted by a real SIGINT to this process while it waits."""
    timer = threading.Timer(after, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(iterator)
    finally:
        timer.join()


@needs_proc
def test_multisync_after_ctrl_c_collects_only_when_asked(tally):
    collector = MultiSyncDataCollector(
        [tally_env, tally_env], frames_per_batch=20, mp_start_method="fork"
    )
    try:
        iterator = iter(collector)
        next(iterator)
        _interrupt_next(iterator, 0.05)  # both workers are mid-batch (10 steps of 20 ms)
        # the interrupted request is answered and dropped: every batch is one asked for,
        # and no worker steps between batches (the synchronous contract)
        for _, data in zip(range(3), collector):
            idle_from = tally.value
            time.sleep(0.4)
            assert tally.value == idle_from
            counts = data["observation"][..., 0]
            assert ((counts[:, 1:] - counts[:, :-1]) == 1).all()
        # 1 batch, the interrupted one, then 3: each collected once
        assert tally.value == 20 * 5
        # commands after an interruption get their own answers
        _interrupt_next(iter(collector), 0.05)
        state = collector.state_dict()
        assert set(state) >= {"worker0", "worker1"} and state["worker0"] is not None
        assert collector.set_seed(3) != 3
    finally:
        collector.shutdown()


@needs_proc
def test_multiasync_after_ctrl_c_keeps_its_pending_batches(tally):
    collector = MultiaSyncDataCollector(
        [tally_env, tally_env], frames_per_batch=10, mp_start_method="fork"
    )
    try:
        _interrupt_next(iter(collector), 0.05)
        batches = [data for _, data in zip(range(4), collector)]
        assert [data.shape for data in batches] == [torch.Size([10])] * 4
        state = collector.state_dict()
        assert state["worker0"] is not None and state["worker1"] is not None
    finally:
        collector.shutdown()
