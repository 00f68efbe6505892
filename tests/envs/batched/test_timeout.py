"""ParallelEnv(timeout=...): a stuck worker raises naming itself; workers die with the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tdrl.envs import ParallelEnv
from tests.envs.batched._envs import SlowCloseEnv
from tests.mocks import CountingEnv


class StuckEnv(CountingEnv):
    """A counting env whose step ``stuck_at`` sleeps (far longer than any test)."""

    def __init__(self, stuck_at: int = 2):
        super().__init__(max_steps=100)
        self.stuck_at = stuck_at
        self.steps = 0

    def _step(self, tensordict):
        self.steps += 1
        if self.steps == self.stuck_at:
            time.sleep(600)
        return super()._step(tensordict)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split()[1] == "Z" for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("timeout", [0, -1.0, "1"])
def test_a_bad_timeout_is_rejected(timeout):
    error = TypeError if isinstance(timeout, str) else ValueError
    with pytest.raises(error, match="timeout: expected"):
        ParallelEnv(1, CountingEnv, timeout=timeout)


def test_a_stuck_worker_raises_naming_the_worker_and_the_command():
    env = ParallelEnv(2, StuckEnv, [{"stuck_at": 100}, {"stuck_at": 2}], timeout=1.0)
    assert env.timeout == 1.0
    td = env.rand_action(env.reset())
    env.step(td)
    pids = [process.pid for process in env._processes]
    start = time.monotonic()
    with pytest.raises(
        TimeoutError,
        match=r"worker 1 of ParallelEnv \(pid \d+\) did not answer "
        r"the 'step' command within timeout=1.0 s",
    ):
        env.step(env.rand_action(td))
    assert time.monotonic() - start < 5
    # no worker is left behind, and the env says why it cannot be used any more
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="did not answer"):
        env.step(td)
    env.close()


def test_workers_exit_when_the_parent_is_killed_inside_env_code(tmp_path: Path):
    script = textwrap.dedent(
        """
        import sys
        from tdrl.envs import ParallelEnv
        from tests.envs.batched.test_timeout import StuckEnv

        env = ParallelEnv(2, StuckEnv, {"stuck_at": 1})
        env.reset()
        print(" ".join(str(p.pid) for p in env._processes), flush=True)
        env.rand_step()  # both workers sleep inside _step; this waits for ever
        """
    )
    root = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2
        time.sleep(1.0)  # the workers are inside env code now
        assert not any(_gone(pid) for pid in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in pids)
    finally:
        if parent.poll() is None:
            parent.kill()


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_shutdown_timeout_bounds_how_long_close_waits_for_a_worker():
    env = ParallelEnv(2, SlowCloseEnv, shutdown_timeout=0.2)
    pids = env.pid()
    start = time.monotonic()
    env.close()
    # the envs' close would take 10 s: the workers were stopped long before
    assert time.monotonic() - start < 8.0
    assert all(_gone(pid) for pid in pids)


def test_shutdown_timeout_is_checked():
    with pytest.raises(ValueError, match="shutdown_timeout: expected a positive number"):
        ParallelEnv(2, SlowCloseEnv, shutdown_timeout=0)
    with pytest.raises(TypeError, match="shutdown_timeout: expected a number of seconds"):
        ParallelEnv(2, SlowCloseEnv, shutdown_timeout="1")
