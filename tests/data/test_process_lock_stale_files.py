"""Lock files left by a SIGKILLed creator are removed by the next lock made; live ones are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tdrl.data.replay_buffers import process_lock

# makes a lock, reports its file, then (optionally) forks a child that holds it, and waits
_CHILD = r"""
import multiprocessing as mp, sys, time
from tdrl.data.replay_buffers.process_lock import ProcessLock

def hold(lock, taken):
    lock.acquire()
    taken.set()
    time.sleep(600)

if __name__ == "__main__":
    lock = ProcessLock("child lock")
    if sys.argv[1] == "hold-in-grandchild":
        ctx = mp.get_context("fork")
        taken = ctx.Event()
        grandchild = ctx.Process(target=hold, args=(lock, taken), daemon=False)
        grandchild.start()
        assert taken.wait(60)
        print(grandchild.pid, flush=True)
    print(lock.path, flush=True)
    time.sleep(600)
"""


def _start_child(mode: str = "plain") -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, mode], stdout=subprocess.PIPE, text=True)
    lines = [proc.stdout.readline().strip()]
    if mode == "hold-in-grandchild":
        lines.append(proc.stdout.readline().strip())
    return proc, lines


def _make_a_lock_in_a_new_process() -> None:
    # a process sweeps the lock directory when it makes its first lock
    code = "from tdrl.data.replay_buffers.process_lock import ProcessLock; ProcessLock()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)  # reaped: its pid names no process any more
    proc.stdout.close()


def test_the_file_of_a_sigkilled_creator_is_removed_by_the_next_lock():
    proc, (path,) = _start_child()
    assert os.path.basename(path).startswith(f"tdrl-lock-{process_lock._NAMESPACE}-{proc.pid}-")
    _kill(proc)
    assert os.path.exists(path), "SIGKILL runs no finalizer: the file stays until cleaned"
    _make_a_lock_in_a_new_process()
    assert not os.path.exists(path)


def test_the_file_of_a_live_creator_is_kept():
    proc, (path,) = _start_child()
    try:
        _make_a_lock_in_a_new_process()
        assert os.path.exists(path)
    finally:
        _kill(proc)


def test_a_file_still_locked_by_a_surviving_child_is_kept():
    proc, (grandchild, path) = _start_child("hold-in-grandchild")
    grandchild = int(grandchild)
    try:
        _kill(proc)  # the creator dies; its forked child still holds the lock
        _make_a_lock_in_a_new_process()
        assert os.path.exists(path)
    finally:
        os.kill(grandchild, signal.SIGKILL)
        os.unlink(path)


def test_files_of_another_pid_namespace_or_another_format_are_left_alone(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    other_namespace = tmp_path / f"tdrl-lock-1{process_lock._NAMESPACE}-{pid}-abc"
    old_format = tmp_path / "tdrl-lock-k2j3h4"
    ours = tmp_path / f"tdrl-lock-{process_lock._NAMESPACE}-{pid}-abc_9"
    for path in (other_namespace, old_format, ours):
        path.touch()
    process_lock._remove_stale_lock_files(str(tmp_path), force=True)
    assert other_namespace.exists() and old_format.exists()
    assert not ours.exists()


def test_two_processes_cleaning_at_once_both_succeed():
    procs = [_start_child() for _ in range(4)]
    for proc, _ in procs:
        _kill(proc)
    code = (
        "from tdrl.data.replay_buffers.process_lock import ProcessLock;"
        "locks = [ProcessLock() for _ in range(20)]; print('ok')"
    )
    cleaners = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    for cleaner in cleaners:
        out, err = cleaner.communicate(timeout=120)
        assert cleaner.returncode == 0, err
        assert out.strip() == "ok"
    for _, (path,) in procs:
        assert not os.path.exists(path)
