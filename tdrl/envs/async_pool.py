"""AsyncEnvPool: envs stepped and reset asynchronously, by env index, in threads or processes."""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

import tdrl
from tdrl.envs.batched import _start
from tdrl.envs.batched._specs import stack_env_specs
from tdrl.envs.batched._worker import OK, encode, error_reply, exit_with_parent
from tdrl.envs.batched.env_creator import get_env_metadata
from tdrl.envs.batched.parallel import _check_timeout, _exit_description, _stop_workers
from tdrl.envs.common import EnvBase

__all__ = ["AsyncEnvPool", "ProcessorAsyncEnvPool", "ThreadingAsyncEnvPool"]

ENV_INDEX = "env_index"
_BACKENDS = ("threading", "multiprocessing")
_STACKS = ("dense", "maybe_dense", "lazy")
_LIVENESS_PERIOD = 1.0


def _pool_worker(
    index: int, conn: Connection, env_fn: Any, kwargs: dict, options: dict, inherited: list
) -> None:
    """Process loop of ProcessorAsyncEnvPool: run step / reset / getattr / call commands."""
    import signal
    import warnings

    for other in inherited:
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if options.get("filter_warnings", True):
        warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if options.get("parent_pid") is not None:
        exit_with_parent(options["parent_pid"])
    try:
        env_fn = cloudpickle.loads(env_fn) if isinstance(env_fn, bytes) else env_fn
        env = env_fn(**kwargs)
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        conn.send_bytes(error_reply(err))
        return
    conn.send_bytes(OK)
    while True:
        try:
            command, payload = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            break
        try:
            if command == "step":
                result = env.step(payload)
            elif command == "reset":
                tensordict, reset_kwargs = payload
                result = env.reset(tensordict, **reset_kwargs)
            elif command == "getattr":
                result = getattr(env, payload)
            elif command == "call":
                name, args, call_kwargs = payload
                result = getattr(env, name)(*args, **call_kwargs)
            elif command == "close":
                env.close()
                conn.send_bytes(OK)
                break
            else:
                raise ValueError(
                    f"unknown pool command: expected step, reset, getattr, call or close; got {command!r}"
                )
            conn.send_bytes(encode("ok", result))
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            conn.send_bytes(error_reply(err))


def _worker_error(index: int, value: tuple, command: str) -> BaseException:
    kind, message, text = value
    full = (
        f"env {index} of the pool failed while running {command!r}: {message}\n\nTraceback:\n{text}"
    )
    try:
        if isinstance(kind, type) and issubclass(kind, Exception):
            return kind(full)
    except Exception:  # noqa: BLE001 - exception classes with other signatures
        pass
    return RuntimeError(full)


def _first_failure(failures: list[tuple[int, BaseException]]) -> BaseException:
    """The failure of the lowest env index, noting the other envs that failed too."""
    failures = sorted(failures, key=lambda item: item[0])
    error = failures[0][1]
    if len(failures) > 1:
        others = ", ".join(str(index) for index, _ in failures[1:])
        error.args = (f"{error.args[0] if error.args else error} (envs {others} failed too)",)
    return error


class AsyncEnvPool(EnvBase):
    """A pool of envs stepped and reset asynchronously, addressed by ``"env_index"``.

    ``step`` / ``reset`` / ``rollout`` run every env and wait for all of them.
    ``async_step_send(td)`` / ``async_reset_send(td)`` start the envs named by
    the ``"env_index"`` entry of ``td`` (one row per env) and return at once;
    ``async_step_recv()`` / ``async_reset_recv()`` return the results that are
    ready (at least ``min_get``), stacked, each with its ``"env_index"``. The
    envs may differ: their specs are stacked lazily and ``stack="lazy"`` gives
    lazily stacked outputs.

    ``AsyncEnvPool(..., backend="threading")`` builds a
    :class:`ThreadingAsyncEnvPool` (one thread per running env) and
    ``backend="multiprocessing"`` a :class:`ProcessorAsyncEnvPool` (one process
    per env; data is pickled through pipes).

    Args:
        env_makers: one env constructor per env (a single constructor is used once).
        backend: ``"threading"`` or ``"multiprocessing"``.
        stack: ``"dense"`` (contiguous outputs), ``"lazy"`` (lazy stacks) or
            ``"maybe_dense"`` (dense when the shapes allow it).
        create_env_kwargs: keyword arguments of the constructors (one dict or one per env).
        timeout: seconds a command may wait for an env (None, the default: no limit). An
            env that does not answer in time makes the call raise ``TimeoutError`` naming
            the env and the command; the pool is then unusable (worker processes are
            stopped; a thread stuck in env code cannot be stopped and is left behind).

    An env that raises makes the call raise the same exception type with the env
    index and the env's traceback; the other envs' results of a synchronous call
    are discarded, those of ``async_*_recv`` are kept for the next call, and the
    pool stays usable. A worker process that dies makes the calls that use it raise
    ``RuntimeError`` naming the env index, the pid and the signal or exit code;
    worker processes exit when the parent process dies.

    Examples:
        >>> from functools import partial
        >>> import torch
        >>> from tdrl.envs import AsyncEnvPool, GymEnv
        >>> env = AsyncEnvPool(
        ...     [partial(GymEnv, "Pendulum-v1"), partial(GymEnv, "CartPole-v1")], stack="lazy"
        ... )
        >>> s = env.rand_step(env.reset())
        >>> s0 = s[0]
        >>> s0["action"] = torch.randn(1).clamp(-1, 1)
        >>> s0["env_index"] = 0
        >>> env.async_step_send(s0)
        >>> result = env.async_step_recv()
        >>> result["env_index"].tolist(), result["next", "observation"].shape
        ([0], torch.Size([1, 3]))
        >>> env.close()
    """

    def __new__(cls, *args: Any, backend: str = "threading", **kwargs: Any) -> AsyncEnvPool:
        """Pick the subclass of the requested backend."""
        if cls is AsyncEnvPool:
            if backend not in _BACKENDS:
                raise ValueError(
                    f"AsyncEnvPool backend: expected one of {_BACKENDS}, got {backend!r}"
                )
            cls = ThreadingAsyncEnvPool if backend == "threading" else ProcessorAsyncEnvPool
        return super().__new__(cls)

    def __init__(
        self,
        env_makers: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        *,
        backend: str = "threading",
        stack: str = "dense",
        create_env_kwargs: dict | Sequence[dict] | None = None,
        timeout: float | None = None,
    ) -> None:
        if stack not in _STACKS:
            raise ValueError(f"AsyncEnvPool stack: expected one of {_STACKS}, got {stack!r}")
        makers = list(env_makers) if isinstance(env_makers, (list, tuple)) else [env_makers]
        for maker in makers:
            if not callable(maker):
                raise TypeError(
                    f"AsyncEnvPool env_makers: expected callables, got {type(maker).__name__}"
                )
        count = len(makers)
        if isinstance(create_env_kwargs, (list, tuple)):
            if len(create_env_kwargs) != count:
                raise ValueError(
                    f"create_env_kwargs: expected one dict per env ({count}), got {len(create_env_kwargs)}"
                )
            kwargs = [dict(k) for k in create_env_kwargs]
        else:
            kwargs = [dict(create_env_kwargs or {}) for _ in range(count)]
        self.__dict__["_ready"] = False
        self.__dict__["_timeout"] = _check_timeout(timeout)
        self.__dict__["_broken"] = None
        self.__dict__["_running"] = {}
        metas = self._setup(makers, kwargs)
        sub_batch = metas[0].batch_size
        for i, meta in enumerate(metas):
            if meta.batch_size != sub_batch:
                raise ValueError(
                    f"pool envs have different batch sizes: env 0 {tuple(sub_batch)}, env {i} {tuple(meta.batch_size)}"
                )
        super().__init__(device=metas[0].device, batch_size=torch.Size([count, *sub_batch]))
        specs, _ = stack_env_specs([m.specs for m in metas])
        self._sub_specs = [m.specs for m in metas]
        self.output_spec = specs["output_spec"]
        self.input_spec = specs["input_spec"]
        self.backend = backend
        self.stack = stack
        self.num_envs = count
        self._inbox: dict[str, deque] = {"step": deque(), "reset": deque()}
        self.__dict__["_ready"] = True

    @property
    def timeout(self) -> float | None:
        """Seconds a command may wait for an env's answer (None: no limit)."""
        return self._timeout

    # ----------------------------------------------------------------- backend
    def _setup(self, makers: list, kwargs: list) -> list:
        raise NotImplementedError

    def _send(self, index: int, command: str, payload: Any) -> None:
        raise NotImplementedError

    def _receive(self, timeout: float | None) -> tuple[int, str, Any] | None:
        """One finished command ``(env index, status, value)``, or None after ``timeout``.

        ``status`` is ``"ok"`` (value: the result), ``"error"`` (value: the
        ``(type, message, traceback)`` of the env's exception) or ``"died"`` (value:
        a description of the worker's death).
        """
        raise NotImplementedError

    def _check_ready(self, indices: list[int]) -> None:
        """Raise if one of these envs can no longer take commands (its worker died)."""

    def _worker_name(self, index: int) -> str:
        return f"env {index} of {type(self).__name__}"

    def _abandon(self) -> None:
        """Stop what can be stopped after a timeout."""

    def _call_all(self, command: str, payload: Any) -> list:
        raise NotImplementedError

    # ------------------------------------------------------------ async API
    def _rows(self, tensordict: TensorDictBase) -> list[tuple[int, TensorDictBase]]:
        index = tensordict.get(ENV_INDEX, None)
        sub_ndim = len(self.batch_size) - 1
        if index is None:
            raise KeyError(f"async commands need an {ENV_INDEX!r} entry naming the env of each row")
        if tensordict.batch_dims == sub_ndim:
            rows = [(int(torch.as_tensor(index).reshape(-1)[0]), tensordict.exclude(ENV_INDEX))]
        else:
            index = torch.as_tensor(index).reshape(tensordict.batch_size[0], -1)[:, 0].tolist()
            rows = [(int(i), tensordict[row].exclude(ENV_INDEX)) for row, i in enumerate(index)]
        for i, _ in rows:
            self._check_index(i)
        return rows

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self.num_envs:
            raise ValueError(
                f"{ENV_INDEX} out of range: expected 0 <= index < {self.num_envs}, got {index}"
            )

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise RuntimeError(f"{self._broken}; this pool cannot be used any more")

    def _stuck(self, index: int, command: str) -> None:
        """Env ``index`` missed the timeout: stop what can be stopped and raise."""
        self.__dict__["_broken"] = (
            f"{self._worker_name(index)} did not answer the {command!r} command within "
            f"timeout={self._timeout} s"
        )
        self._abandon()
        raise TimeoutError(f"{self._broken}; close the pool and build a new one")

    def _dispatch(self, command: str, index: int, payload: Any) -> None:
        self._check_usable()
        self._check_index(index)
        if index in self._running:
            raise RuntimeError(
                f"env {index} is still running a {self._running[index]!r} command; receive it first"
            )
        self._running[index] = command
        self._send(index, command, payload)

    def async_step_send(self, tensordict: TensorDictBase) -> None:
        """Start a step of the envs named by ``tensordict["env_index"]``; returns at once."""
        rows = self._rows(tensordict)
        self._check_ready([index for index, _ in rows])
        for index, row in rows:
            self._dispatch("step", index, row)

    def async_reset_send(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> None:
        """Start a reset of the envs named by ``tensordict["env_index"]`` (all envs if None)."""
        if tensordict is None:
            self._check_ready(list(range(self.num_envs)))
            for index in range(self.num_envs):
                self._dispatch("reset", index, (None, kwargs))
            return
        rows = self._rows(tensordict)
        self._check_ready([index for index, _ in rows])
        for index, row in rows:
            self._dispatch("reset", index, (row if not row.is_empty() else None, kwargs))

    def async_step_recv(self, min_get: int = 1) -> TensorDictBase:
        """At least ``min_get`` finished steps (all that are ready), with their ``"env_index"``."""
        return self._recv("step", min_get)

    def async_reset_recv(self, min_get: int = 1) -> TensorDictBase:
        """At least ``min_get`` finished resets (all that are ready), with their ``"env_index"``."""
        return self._recv("reset", min_get)

    def _pump(self, timeout: float | None, failures: list) -> bool:
        """Receive one finished command (results to the inbox, errors to ``failures``)."""
        item = self._receive(timeout)
        if item is None:
            return False
        index, status, value = item
        command = self._running.pop(index, "step")
        if status == "ok":
            self._inbox[command].append((index, value))
        elif status == "died":
            failures.append((index, RuntimeError(f"{value} while running {command!r}")))
        else:
            failures.append((index, _worker_error(index, value, command)))
        return True

    def _pump_until(self, done: Callable[[], bool], command: str, failures: list) -> None:
        """Receive finished commands until ``done()``, raising TimeoutError past the timeout."""
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while not done():
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not self._pump(remaining, failures) and deadline is not None:
                if time.monotonic() >= deadline:
                    late = [i for i, c in self._running.items() if c == command] or list(
                        self._running
                    )
                    self._stuck(min(late), command)

    def _recv(self, command: str, min_get: int) -> TensorDictBase:
        self._check_usable()
        inbox = self._inbox[command]
        outstanding = sum(1 for c in self._running.values() if c == command)
        if len(inbox) + outstanding < min_get:
            raise RuntimeError(
                f"async_{command}_recv(min_get={min_get}): only {len(inbox) + outstanding} "
                f"{command}(s) were sent and not received yet"
            )
        failures: list = []
        self._pump_until(lambda: bool(failures) or len(inbox) >= min_get, command, failures)
        while self._pump(0.0, failures):
            pass
        if failures:
            raise _first_failure(failures)  # the results received stay for the next call
        items = sorted(inbox, key=lambda item: item[0])
        inbox.clear()
        return self._stack_results(items)

    def _stack_results(self, items: list) -> TensorDictBase:
        parts = []
        for index, td in items:
            td.set(ENV_INDEX, torch.full(td.batch_size, index, dtype=torch.int64))
            parts.append(td)
        return self._stack(parts)

    def _stack(self, parts: list) -> TensorDictBase:
        if self.stack == "lazy":
            return LazyStackedTensorDict.lazy_stack(parts, 0)
        try:
            return torch.stack(parts, 0)
        except RuntimeError as err:
            if self.stack == "maybe_dense":
                return LazyStackedTensorDict.lazy_stack(parts, 0)
            raise ValueError(
                "the pool's envs return entries of different shapes, which cannot be stacked "
                "densely; build the pool with stack='lazy'"
            ) from err

    # ------------------------------------------------------------- sync API
    def _run_all(self, command: str, rows: list) -> TensorDictBase:
        self._check_usable()
        wanted = {index for index, _ in rows}
        for index in sorted(wanted & self._running.keys()):
            raise RuntimeError(
                f"env {index} is still running a {self._running[index]!r} command; receive it first"
            )
        self._check_ready(sorted(wanted))
        for index, payload in rows:
            self._dispatch(command, index, payload)
        inbox = self._inbox[command]
        failures: list = []
        # wait for every env, even after a failure, so that none is left running
        self._pump_until(lambda: not (wanted & self._running.keys()), command, failures)
        results = {index: td for index, td in inbox if index in wanted}
        kept = [(index, td) for index, td in inbox if index not in wanted]
        inbox.clear()
        inbox.extend(kept)
        if failures:
            raise _first_failure(failures)
        return self._stack([results[index] for index, _ in rows])

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        rows = []
        for index in range(self.num_envs):
            row = None
            if tensordict is not None:
                row = tensordict[index].exclude(ENV_INDEX)
                if row.is_empty():
                    row = None
            rows.append((index, (row, kwargs)))
        return self._run_all("reset", rows)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        rows = [
            (index, tensordict[index].exclude(ENV_INDEX, "_step")) for index in range(self.num_envs)
        ]
        mask = tensordict.get("_step", None)
        if mask is not None:
            keep = mask.reshape(self.num_envs, -1).any(-1).tolist()
            rows = [row for row, stepped in zip(rows, keep) if stepped]
        out = self._run_all("step", rows)
        return (
            self._stack([out[i].get("next") for i in range(len(rows))])
            if mask is None
            else self._merge_partial(tensordict, out, rows)
        )

    def _merge_partial(
        self, tensordict: TensorDictBase, out: TensorDictBase, rows: list
    ) -> TensorDictBase:
        stepped = {index: out[i].get("next") for i, (index, _) in enumerate(rows)}
        parts = []
        for index in range(self.num_envs):
            if index in stepped:
                parts.append(stepped[index])
                continue
            template = next(iter(stepped.values())) if stepped else tensordict[index]
            part = template.clone().zero_() if stepped else template.empty()
            for key, value in part.items(True, True):
                previous = tensordict[index].get(key, None)
                if isinstance(previous, torch.Tensor) and previous.shape == value.shape:
                    part.set(key, previous.clone())
            parts.append(part)
        return self._stack(parts)

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed the envs one after the other (each with the seed the previous one returned)."""
        for index in range(self.num_envs):
            seed = self._call_one(index, "set_seed", (seed,), {"static_seed": static_seed})
        return seed

    def _call_one(self, index: int, name: str, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or not self.__dict__.get("_ready", False):
                raise
        return self._call_all("getattr", name)

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the envs (and stop the threads or processes). Closing twice is a no-op."""
        if self.__dict__.get("is_closed", False):
            return
        self.is_closed = True
        self._close_backend()

    def _close_backend(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> AsyncEnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ThreadingAsyncEnvPool(AsyncEnvPool):
    """AsyncEnvPool whose envs live in this process and run in a thread pool.

    Examples:
        >>> from tdrl.envs import GymEnv, ThreadingAsyncEnvPool
        >>> env = ThreadingAsyncEnvPool([lambda: GymEnv("CartPole-v1")] * 2)
        >>> env.async_reset_send()
        >>> env.async_reset_recv(min_get=2)["env_index"].tolist()
        [0, 1]
        >>> env.close()
    """

    def _setup(self, makers: list, kwargs: list) -> list:
        from tdrl.envs.metadata import EnvMetaData

        self._envs = [maker(**kw) for maker, kw in zip(makers, kwargs)]
        self._executor = ThreadPoolExecutor(max_workers=len(makers), thread_name_prefix="tdrl-pool")
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        return [EnvMetaData.metadata_from_env(env) for env in self._envs]

    def _work(self, index: int, command: str, payload: Any) -> None:
        env = self._envs[index]
        try:
            if command == "step":
                result = env.step(payload)
            else:
                tensordict, kwargs = payload
                result = env.reset(tensordict, **kwargs)
            self._results.put((index, "ok", result))
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            self._results.put((index, "error", (type(err), f"{type(err).__name__}: {err}", text)))

    def _send(self, index: int, command: str, payload: Any) -> None:
        self._executor.submit(self._work, index, command, payload)

    def _receive(self, timeout: float | None) -> tuple[int, str, Any] | None:
        try:
            if timeout == 0.0:
                return self._results.get_nowait()
            return self._results.get(timeout=timeout)
        except queue.Empty:
            return None

    def _call_all(self, command: str, payload: Any) -> list:
        return [getattr(env, payload) for env in self._envs]

    def _call_one(self, index: int, name: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self._envs[index], name)(*args, **kwargs)

    def _close_backend(self) -> None:
        if self._broken is None:
            self._executor.shutdown(wait=True)
            busy: set = set()
        else:  # a thread is stuck in env code: do not wait for it, nor close its env
            self._executor.shutdown(wait=False, cancel_futures=True)
            busy = set(self._running)
        for index, env in enumerate(self._envs):
            if index not in busy:
                env.close()


class ProcessorAsyncEnvPool(AsyncEnvPool):
    """AsyncEnvPool whose envs each run in their own process (data pickled through pipes).

    Examples:
        >>> from tdrl.envs import GymEnv, ProcessorAsyncEnvPool
        >>> env = ProcessorAsyncEnvPool([lambda: GymEnv("CartPole-v1")] * 2)
        >>> env.reset().batch_size
        torch.Size([2])
        >>> env.close()
    """

    def _setup(self, makers: list, kwargs: list) -> list:
        metas = [get_env_metadata(maker, kw) for maker, kw in zip(makers, kwargs)]
        context = _start.get_context(None)
        fork = context.get_start_method() == "fork"
        options = {"filter_warnings": tdrl.filter_warnings_subprocess, "parent_pid": os.getpid()}
        processes: list = []
        connections: list = []
        self._processes, self._connections = processes, connections
        self._finalizer = weakref.finalize(self, _stop_workers, processes, connections)
        with _start.global_start_method_preserved():
            for index, (maker, kw) in enumerate(zip(makers, kwargs)):
                parent_conn, child_conn = context.Pipe()
                process = context.Process(
                    target=_pool_worker,
                    args=(
                        index,
                        child_conn,
                        maker if fork else cloudpickle.dumps(maker),
                        kw,
                        options,
                        [parent_conn, *connections] if fork else [],
                    ),
                    daemon=True,
                    name=f"tdrl-pool-{index}",
                )
                process.start()
                child_conn.close()
                processes.append(process)
                connections.append(parent_conn)
        self._lock = threading.Lock()
        for index in range(len(makers)):
            status, value = self._wait_reply(index, "start", None)
            if status != "ok":
                self._finalizer()
                if status == "died":
                    raise RuntimeError(f"{value} while starting")
                raise _worker_error(index, value, "start")
        return metas

    def _worker_name(self, index: int) -> str:
        return f"env {index} of {type(self).__name__} (pid {self._processes[index].pid})"

    def _death(self, index: int) -> str:
        """Describe how the worker of env ``index`` died (it is known to be gone)."""
        process = self._processes[index]
        process.join(0.5)
        return f"{self._worker_name(index)} died: {_exit_description(process.exitcode)}"

    def _check_ready(self, indices: list[int]) -> None:
        for index in indices:
            if not self._processes[index].is_alive():
                raise RuntimeError(f"{self._death(index)}; close the pool and build a new one")

    def _abandon(self) -> None:
        self._finalizer()

    def _wait_reply(self, index: int, command: str, timeout: float | None) -> tuple[str, Any]:
        """The reply of env ``index``: ``(status, value)`` as in :meth:`_receive`."""
        conn = self._connections[index]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            period = _LIVENESS_PERIOD
            if deadline is not None:
                period = min(period, max(deadline - time.monotonic(), 0.0))
            if conn.poll(period):
                break
            if not self._processes[index].is_alive():
                return "died", self._death(index)
            if deadline is not None and time.monotonic() >= deadline:
                self._stuck(index, command)
        try:
            return pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return "died", self._death(index)

    def _send(self, index: int, command: str, payload: Any) -> None:
        try:
            self._connections[index].send_bytes(encode(command, payload))
        except (OSError, ValueError):
            self._running.pop(index, None)
            raise RuntimeError(
                f"{self._death(index)}; {command!r} could not be sent: close the pool and "
                "build a new one"
            ) from None

    def _receive(self, timeout: float | None) -> tuple[int, str, Any] | None:
        busy = list(self._running)
        if not busy:
            return None
        conns = {self._connections[i]: i for i in busy}
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            period = _LIVENESS_PERIOD
            if deadline is not None:
                period = min(period, max(deadline - time.monotonic(), 0.0))
            ready = wait(list(conns), period)
            if ready:
                index = conns[ready[0]]
                try:
                    status, value = pickle.loads(ready[0].recv_bytes())
                except (EOFError, OSError):
                    return index, "died", self._death(index)
                return index, status, value
            for index in busy:
                if not self._processes[index].is_alive():
                    return index, "died", self._death(index)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _ask(self, indices: list[int], command: str, payload: Any, name: str) -> list:
        """Send one command to these envs and read every reply before raising a failure."""
        self._check_usable()
        for index in indices:
            if index in self._running:
                raise RuntimeError(
                    f"env {index} is still running a {self._running[index]!r} command; "
                    f"receive it before {name!r}"
                )
        self._check_ready(indices)
        for index in indices:
            self._send(index, command, payload)
        out, failures = [], []
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        for index in indices:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            status, value = self._wait_reply(index, name, left)
            if status == "ok":
                out.append(value)
            elif status == "died":
                failures.append((index, RuntimeError(f"{value} while running {name!r}")))
            else:
                failures.append((index, _worker_error(index, value, name)))
        if failures:
            raise _first_failure(failures)
        return out

    def _call_one(self, index: int, name: str, args: tuple, kwargs: dict) -> Any:
        return self._ask([index], "call", (name, args, kwargs), name)[0]

    def _call_all(self, command: str, payload: Any) -> list:
        return self._ask(list(range(self.num_envs)), command, payload, payload)

    def _close_backend(self) -> None:
        self._finalizer()
