"""Faults in ParallelEnv workers: errors, killed workers, closing, leftovers, misspecified envs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial

import pytest
import torch

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tests.envs.batched._envs import DriftingSpecEnv, FailingEnv, MisspecifiedEnv, SleepyEnv
from tests.mocks import CountingEnv


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); its state in /proc tells
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def test_worker_exception_carries_message_and_traceback():
    env = ParallelEnv(2, [partial(FailingEnv, 5), partial(FailingEnv, 1)])
    data = env.rand_step(env.reset())
    with pytest.raises(ValueError) as info:
        env.rand_step(data["next"].clone())
    message = str(info.value)
    assert "worker 1" in message
    assert "boom at step 2" in message
    assert "Traceback in the worker" in message and "_step" in message
    # the worker survives its env's error and can still answer
    assert env.steps == [2, 2]
    env.close()


def test_error_while_building_the_env_is_reported_at_start():
    env = ParallelEnv(2, [partial(FailingEnv), partial(FailingEnv)])
    env.update_kwargs([{}, {"fail_at_init": True}])
    with pytest.raises(ValueError, match="boom at construction"):
        env.start()
    assert env.is_closed


def test_killed_worker_is_detected_without_hanging():
    env = ParallelEnv(2, CountingEnv)
    data = env.reset()
    pids = [p.pid for p in env._processes]
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(RuntimeError, match="worker 1 .* died .* SIGKILL"):
        env.rand_step(data)
    with pytest.raises(RuntimeError, match="died"):
        env.reset()
    env.close()
    assert _wait_gone(pids)
    # closing twice is fine, and a closed env restarts with fresh workers
    env.close()
    assert env.reset().batch_size == (2,)
    env.close()


def test_close_is_idempotent_and_stops_every_worker():
    env = ParallelEnv(3, CountingEnv)
    env.start()
    pids = [p.pid for p in env._processes]
    env.close()
    env.close()
    assert env.is_closed
    assert _wait_gone(pids)


def test_context_manager_closes():
    with ParallelEnv(2, CountingEnv) as env:
        env.reset()
        pids = [p.pid for p in env._processes]
    assert env.is_closed
    assert _wait_gone(pids)


def test_no_worker_left_after_interpreter_exit(tmp_path):
    script = tmp_path / "leak.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            sys.path.insert(0, sys.argv[1])
            from tdrl.envs.batched import ParallelEnv
            from tests.mocks import CountingEnv
            env = ParallelEnv(2, CountingEnv)
            env.reset()
            print(" ".join(str(p.pid) for p in env._processes), flush=True)
            """
        )
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    out = subprocess.run(
        [sys.executable, str(script), root], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    assert _wait_gone(pids)


def test_workers_exit_when_the_parent_is_killed(tmp_path):
    script = tmp_path / "orphan.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal, sys
            sys.path.insert(0, sys.argv[1])
            from tdrl.envs.batched import ParallelEnv
            from tests.mocks import CountingEnv
            env = ParallelEnv(3, CountingEnv)
            env.reset()
            print(" ".join(str(p.pid) for p in env._processes), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    out = subprocess.run(
        [sys.executable, str(script), root], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == -signal.SIGKILL
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 3
    assert _wait_gone(pids)


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_misspecified_env_names_the_key(cls):
    env = cls(2, MisspecifiedEnv)
    with pytest.raises(ValueError, match=r"'observation'.*expected shape \(3,\), got \(4,\)"):
        env.reset()
    env.close()


def test_sub_env_disagreeing_with_parent_specs_fails_at_start():
    env = ParallelEnv(2, DriftingSpecEnv, {"parent_pid": os.getpid()})
    with pytest.raises(ValueError, match=r"observation.*shape \(4,\).*shape \(7,\)"):
        env.start()
    env.close()


def test_bad_action_shape_names_the_key():
    with ParallelEnv(2, CountingEnv) as env:
        data = env.reset()
        data.set("action", data["observation"])
        with pytest.raises(ValueError, match="'action'"):
            env.step(data)


def test_interrupted_wait_does_not_desynchronise_the_workers():
    import _thread
    import threading

    env = ParallelEnv(2, SleepyEnv, {"delay": 1.5})
    data = env.reset()
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        env.rand_step(data)
    timer.join()
    # the late replies of the interrupted step are dropped, not taken for the next command
    assert env.count == [torch.ones(1), torch.ones(1)]
    out = env.rand_step(data)
    assert out["next", "observation"][:, 0].tolist() == [2.0, 2.0]
    env.close()
