"""The writers' cross-process lock: released when its holder dies, bounded waits naming the holder."""

from __future__ import annotations

import copy
import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from tdrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
from tdrl.data.replay_buffers.process_lock import LockTimeoutError, ProcessLock


def _hold_forever(lock, taken):
    lock.acquire()
    taken.set()
    time.sleep(600)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_lock_held_by_a_killed_process_is_released(start_method):
    ctx = mp.get_context(start_method)
    lock = ProcessLock("test lock", timeout=0.3)
    taken = ctx.Event()
    proc = ctx.Process(target=_hold_forever, args=(lock, taken))
    proc.start()
    try:
        assert taken.wait(60)
        assert lock.holder_pid() == proc.pid
        with pytest.raises(LockTimeoutError, match=rf"test lock .* held by pid {proc.pid}"):
            lock.acquire()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    with lock:
        assert lock.holder_pid() == os.getpid()
    assert lock.holder_pid() is None


def test_threads_of_one_process_exclude_each_other():
    lock = ProcessLock("test lock", timeout=0.2)
    inside = threading.Event()
    leave = threading.Event()

    def hold():
        with lock:
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(30)
    try:
        with pytest.raises(LockTimeoutError, match=f"held by pid {os.getpid()}"):
            lock.acquire()
    finally:
        leave.set()
        thread.join(30)
    assert lock.acquire(timeout=5)
    lock.release()


def test_release_without_holding_raises():
    lock = ProcessLock("test lock")
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()


def test_pickled_copy_names_the_same_lock_and_the_file_goes_with_its_creator():
    lock = ProcessLock("test lock", timeout=2.0)
    clone = pickle.loads(pickle.dumps(lock))
    assert clone.path == lock.path and clone.timeout == 2.0
    with lock:
        # same process: the copy shares the descriptor, so it sees the lock as this process's
        assert clone.holder_pid() == os.getpid()
    path = lock.path
    del lock, clone
    assert not os.path.exists(path)


_KEPT = []  # what a worker keeps for its whole life (a buffer it fills)


def _make_lock_and_report_its_file(queue):
    lock = ProcessLock("child lock")
    with lock:
        queue.put(lock.path)
    _KEPT.append(lock)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_lock_made_in_a_child_process_leaves_no_file(start_method):
    # forked multiprocessing children end with os._exit, which skips atexit handlers
    ctx = mp.get_context(start_method)
    queue = ctx.Queue()
    proc = ctx.Process(target=_make_lock_and_report_its_file, args=(queue,))
    proc.start()
    path = queue.get(timeout=60)
    proc.join(60)
    assert proc.exitcode == 0
    assert not os.path.exists(path)


def test_a_lock_of_a_process_that_exits_leaves_no_file():
    code = (
        "from tdrl.data.replay_buffers.process_lock import ProcessLock;"
        "lock = ProcessLock(); lock.acquire(); lock.release(); print(lock.path)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(out.stdout.strip())


# -- the writer of a shared buffer ---------------------------------------------------------------------
class _StallingStorage(LazyTensorStorage):
    """A storage whose writes stop (forever) once ``stall`` is set: a writer stuck mid-extend."""

    def __init__(self, *args, stall=None, stalled=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stall = stall
        self.stalled = stalled

    def set(self, cursor, data, *args, **kwargs):
        if self.stall is not None and self.stall.is_set():
            self.stalled.set()
            time.sleep(600)
        return super().set(cursor, data, *args, **kwargs)


def _extend_and_stall(rb):
    rb.storage.stall.set()
    rb.extend(torch.ones(3))


def test_writer_killed_inside_extend_does_not_block_the_other_writers():
    ctx = mp.get_context("fork")
    stall, stalled = ctx.Event(), ctx.Event()
    rb = ReplayBuffer(storage=_StallingStorage(20, stall=stall, stalled=stalled), shared=True)
    rb.extend(torch.zeros(2))
    proc = ctx.Process(target=_extend_and_stall, args=(rb,))
    proc.start()
    assert stalled.wait(60)
    assert rb.writer._lock.holder_pid() == proc.pid
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(60)
    stall.clear()
    start = time.monotonic()
    rb.extend(torch.full((2,), 5.0))
    assert time.monotonic() - start < 5
    assert rb[:].tolist() == [0.0, 0.0, 5.0, 5.0]


def test_writer_waiting_past_its_lock_timeout_names_the_holder():
    ctx = mp.get_context("fork")
    stall, stalled = ctx.Event(), ctx.Event()
    rb = ReplayBuffer(storage=_StallingStorage(20, stall=stall, stalled=stalled), shared=True)
    rb.writer.lock_timeout = 0.3
    proc = ctx.Process(target=_extend_and_stall, args=(rb,))
    proc.start()
    try:
        assert stalled.wait(60)
        stall.clear()
        with pytest.raises(LockTimeoutError, match=rf"writer lock .* held by pid {proc.pid}"):
            rb.extend(torch.zeros(2))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(60)
    assert len(rb) == 0
    rb.extend(torch.zeros(2))
    assert len(rb) == 2


def test_lock_timeout_is_validated_and_survives_copies():
    writer = RoundRobinWriter()
    with pytest.raises(ValueError, match="lock_timeout"):
        writer.lock_timeout = -1
    writer.lock_timeout = 7.5
    assert copy.deepcopy(writer).lock_timeout == 7.5
    writer.lock_timeout = None
    assert writer.lock_timeout is None


# -- the record lock is taken only once another process may use the lock -----------------------------
_RECORD_LOCK_HELPERS = r"""
import os, pickle, sys
from tdrl.data.replay_buffers.process_lock import ProcessLock

def record_locked(lock):
    # this process's POSIX locks on the lock file, as the kernel lists them
    inode = str(os.stat(lock.path).st_ino)
    with open("/proc/locks") as f:
        rows = [line.split() for line in f if "->" not in line]
    return any(row[4] == str(os.getpid()) and row[5].split(":")[-1] == inode for row in rows)
"""

_FORK_SCRIPT = r"""
lock = ProcessLock("test lock", timeout=5)
with lock:
    assert not record_locked(lock), "record lock taken before any other process exists"
lock.acquire()
parent = os.getpid()
read, write = os.pipe()
child = os.fork()
if child == 0:
    # the lock was held across the fork: the parent holds the record lock, the child waits
    os.write(write, str(lock.holder_pid()).encode())
    with lock:
        os.write(write, b" taken")
    os._exit(0)
assert record_locked(lock), "a lock held across a fork must get its record lock"
holder = os.read(read, 64).decode()
assert holder == str(parent), holder
lock.release()
assert not record_locked(lock)
assert os.read(read, 64) == b" taken"
os.waitpid(child, 0)
other = ProcessLock("second lock")
with other:
    assert record_locked(other), "after a fork every lock takes its record lock"
print("ok")
"""

_PICKLE_SCRIPT = r"""
lock = ProcessLock("test lock")
lock.acquire()
assert not record_locked(lock)
pickle.dumps(lock)  # the copy may go to a spawned process
assert record_locked(lock), "a lock held while pickled must get its record lock"
lock.release()
assert not record_locked(lock)
with lock:
    assert record_locked(lock)
print("ok")
"""


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads the kernel's lock table")
@pytest.mark.parametrize("script", [_FORK_SCRIPT, _PICKLE_SCRIPT], ids=["fork", "pickle"])
def test_record_lock_only_once_shared_with_another_process(script):
    # a fresh interpreter: the test process itself has forked long ago
    result = subprocess.run(
        [sys.executable, "-c", _RECORD_LOCK_HELPERS + script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
