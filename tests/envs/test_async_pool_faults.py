"""AsyncEnvPool faults: env errors, killed workers, stuck envs, a dead parent, bad getattr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial
from pathlib import Path

import pytest
import torch

from tdrl.envs.async_pool import AsyncEnvPool
from tests.envs.batched._envs import SizedEnv, SleepyEnv
from tests.mocks import CountingEnv

BACKENDS = ["threading", "multiprocessing"]


class FlakyEnv(CountingEnv):
    """A counting env whose step number ``fail_at`` (and only that one) raises."""

    def __init__(self, fail_at: int = 2):
        super().__init__(max_steps=100)
        self.fail_at = fail_at
        self.steps = 0

    def _step(self, tensordict):
        self.steps += 1
        if self.steps == self.fail_at:
            raise ValueError(f"flaky failure at step {self.steps}")
        return super()._step(tensordict)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split()[1] == "Z" for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return all(_gone(pid) for pid in pids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_pool_stays_usable_after_an_env_raises(backend):
    with AsyncEnvPool([FlakyEnv, CountingEnv, CountingEnv], backend=backend) as env:
        td = env.rand_action(env.reset())
        env.step(td)
        with pytest.raises(ValueError, match="env 0 .*flaky failure at step 2") as info:
            env.step(td)
        assert "Traceback" in str(info.value) and "_step" in str(info.value)
        # no env is considered running any more: reset and step work again
        data = env.rollout(3)
        assert data.batch_size == (3, 3)
        assert data["next", "observation"][:, -1, 0].tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_failure_keeps_the_other_results(backend):
    with AsyncEnvPool([FlakyEnv, CountingEnv], backend=backend) as env:
        env.async_reset_send()
        data = env.async_reset_recv(min_get=2)
        rows = env.rand_action(data.exclude("env_index")).set("env_index", torch.tensor([0, 1]))
        env.async_step_send(rows)
        assert env.async_step_recv(min_get=2)["env_index"].tolist() == [0, 1]
        env.async_step_send(rows)
        with pytest.raises(ValueError, match="env 0 .*'step'.*flaky failure at step 2"):
            env.async_step_recv(min_get=2)
        # env 1's result is not lost: it comes with the next receive
        assert env.async_step_recv()["env_index"].tolist() == [1]
        # env 0 takes commands again
        env.async_step_send(rows[0])
        out = env.async_step_recv()
        assert out["env_index"].tolist() == [0]
        assert out["next", "observation"][0, 0].item() == 2.0


def test_a_failed_getattr_leaves_no_stale_value():
    with AsyncEnvPool([CountingEnv, partial(SizedEnv, 3)], backend="multiprocessing") as env:
        with pytest.raises(AttributeError, match="env 0 .*size"):
            _ = env.size
        assert not hasattr(env, "size")
        # the reply of env 1 to the failed getattr is not read as the next answer
        assert env.max_steps == [5, 5]
        assert env.max_steps == [5, 5]


def test_a_getattr_while_a_step_runs_is_refused():
    with AsyncEnvPool([partial(SleepyEnv, 0.2)] * 2, backend="multiprocessing") as env:
        td = env.rand_action(env.reset())[1].set("env_index", 1)
        env.async_step_send(td)
        with pytest.raises(RuntimeError, match="env 1 is still running a 'step' command"):
            _ = env.max_steps
        assert env.async_step_recv()["env_index"].tolist() == [1]
        assert env.max_steps == [100, 100]


def test_a_killed_idle_worker_is_named_with_its_pid_and_signal():
    env = AsyncEnvPool([CountingEnv] * 3, backend="multiprocessing")
    env.reset()
    pid = env._processes[1].pid
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone([pid])
    pattern = rf"env 1 of ProcessorAsyncEnvPool \(pid {pid}\) died: killed by SIGKILL"
    with pytest.raises(RuntimeError, match=pattern):
        env.reset()
    # nothing was sent to the live envs, so none of them is left running
    assert not env._running
    env.async_reset_send(env.fake_tensordict()[torch.tensor([0, 2])].set("env_index", [0, 2]))
    td = env.async_reset_recv(min_get=2)
    assert td["env_index"].tolist() == [0, 2]
    with pytest.raises(RuntimeError, match=pattern):
        env.async_step_send(env.fake_tensordict()[1].set("env_index", 1))
    env.close()


def test_a_worker_killed_inside_a_step_is_named():
    env = AsyncEnvPool(
        [CountingEnv, partial(SleepyEnv, 600)], backend="multiprocessing", timeout=None
    )
    td = env.rand_action(env.reset())
    env.async_step_send(td.clone().set("env_index", torch.tensor([0, 1])))
    time.sleep(0.5)
    pid = env._processes[1].pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(
        RuntimeError, match=rf"env 1 .*\(pid {pid}\) died: killed by SIGKILL while running 'step'"
    ):
        env.async_step_recv(min_get=2)
    assert not env._running
    assert env.async_step_recv()["env_index"].tolist() == [0]  # env 0's result is kept
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stuck_env_raises_naming_it_and_the_command(backend):
    # the thread of the threading backend cannot be stopped: keep its sleep short
    delay = 3.0 if backend == "threading" else 600.0
    env = AsyncEnvPool([CountingEnv, partial(SleepyEnv, delay)], backend=backend, timeout=0.5)
    assert env.timeout == 0.5
    td = env.rand_action(env.reset())
    pids = [p.pid for p in env._processes] if backend == "multiprocessing" else []
    start = time.monotonic()
    with pytest.raises(
        TimeoutError, match=r"env 1 of \w+AsyncEnvPool.* did not answer the 'step' command"
    ):
        env.step(td)
    assert time.monotonic() - start < 2.5
    with pytest.raises(RuntimeError, match="did not answer"):
        env.reset()
    env.close()
    assert time.monotonic() - start < 5
    assert _wait_gone(pids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_index_out_of_range_is_a_value_error(backend):
    with AsyncEnvPool([CountingEnv] * 2, backend=backend) as env:
        td = env.fake_tensordict()[0].set("env_index", 7)
        with pytest.raises(ValueError, match="env_index out of range: .* got 7"):
            env.async_step_send(td)
        assert not env._running


@pytest.mark.parametrize("timeout", [0, -2.0, "1", True])
def test_a_bad_timeout_is_rejected(timeout):
    error = ValueError if isinstance(timeout, (int, float)) and timeout is not True else TypeError
    with pytest.raises(error, match="timeout: expected"):
        AsyncEnvPool([CountingEnv], timeout=timeout)


def test_workers_exit_when_the_parent_is_killed_inside_env_code():
    script = textwrap.dedent(
        """
        from functools import partial
        import torch
        from tdrl.envs.async_pool import AsyncEnvPool
        from tests.envs.batched._envs import SleepyEnv

        env = AsyncEnvPool([partial(SleepyEnv, 600)] * 2, backend="multiprocessing")
        td = env.rand_action(env.reset()).set("env_index", torch.tensor([0, 1]))
        print(" ".join(str(p.pid) for p in env._processes), flush=True)
        env.async_step_send(td)
        env.async_step_recv(min_get=2)  # both workers sleep inside _step
        """
    )
    root = Path(__file__).resolve().parents[2]
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
        time.sleep(1.0)
        assert not any(_gone(pid) for pid in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _wait_gone(pids)
    finally:
        if parent.poll() is None:
            parent.kill()
