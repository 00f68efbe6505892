"""ParallelEnv: one sub-env per worker process, data exchanged through shared memory."""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
import weakref
from typing import Any

import cloudpickle

import tdrl
from tdrl.envs.batched import _start, _worker
from tdrl.envs.batched._base import BatchedEnvBase, BatchedEnvError
from tdrl.envs.batched._runner import check_specs_agree
from tdrl.envs.batched.env_creator import EnvCreator
from tdrl.envs.batched.serial import SerialEnv
from tdrl.envs.metadata import EnvMetaData

__all__ = ["ParallelEnv"]

#: How often (seconds) a waiting parent checks that silent workers are still alive.
_LIVENESS_PERIOD = 1.0
#: How long close() waits for workers to exit before terminating them (by default).
_CLOSE_TIMEOUT = 1.0

_OK_REPLY = ("ok", None)

WORKER_DIED = (
    "worker {worker} of {cls} (pid {pid}) died while running {command!r}: {how}; "
    "close the env and build a new one"
)
WORKER_FAILED = "worker {worker} of {cls} failed while running {command!r}: {message}"
WORKER_STUCK = (
    "worker {worker} of {cls} (pid {pid}) did not answer the {command!r} command within "
    "timeout={timeout} s; its workers were stopped: close the env and build a new one"
)


def _check_timeout(timeout: Any, name: str = "timeout") -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"{name}: expected a number of seconds or None, got {type(timeout).__name__}"
        )
    if not timeout > 0:
        raise ValueError(f"{name}: expected a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _exit_description(exitcode: int | None) -> str:
    if exitcode is None:
        return "its pipe was closed"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exited with code {exitcode}"


def _stop_workers(processes: list, connections: list, timeout: float = _CLOSE_TIMEOUT) -> None:
    """Ask the workers to close; terminate those still running ``timeout`` seconds later.

    Used by close and at exit.
    """
    for conn in connections:
        try:
            conn.send_bytes(_worker.CLOSE)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(0.5)
        if process.is_alive():
            process.kill()
            process.join(0.5)
    for conn in connections:
        conn.close()


def _check_same_layout(metas: list[EnvMetaData]) -> None:
    """Raise ``ValueError`` naming the first worker whose env differs from worker 0's.

    Batch sizes, spec keys, shapes and dtypes are compared.
    """
    first = metas[0]
    for w, meta in enumerate(metas[1:], 1):
        if meta.batch_size != first.batch_size:
            raise ValueError(
                f"worker {w} has batch size {tuple(meta.batch_size)}, worker 0 has "
                f"{tuple(first.batch_size)}"
            )
        for name in ("output_spec", "input_spec"):
            check_specs_agree(w, first.specs[name], meta.specs[name], (name,))


class ParallelEnv(BatchedEnvBase):
    """Runs each of ``num_workers`` sub-envs in its own process, as one batched env.

    The buffers are built once from the sub-env specs in one shared-memory
    segment: the parent writes the actions there, sends each worker a
    one-message command through a pipe, the workers step and write their
    outputs in place, and the parent returns a copy. Workers are started
    together (lazily, at the first use, or with :meth:`start`), with the fastest
    safe start method (``fork`` when safe, else a fork server preloaded with
    torch, tensordict and tdrl); the program's global start method is never
    changed. A worker whose env raises makes the parent raise with the worker's
    traceback; a worker that dies is reported at the next command. See
    :class:`BatchedEnvBase` for the arguments; warnings are silenced in the
    workers unless ``tdrl.filter_warnings_subprocess`` is False. ``timeout`` (seconds,
    default None: no limit) bounds how long a command waits for a worker (see
    :attr:`timeout`); workers exit when the parent process dies, even inside env code.
    :meth:`close` asks the workers to close their envs and stops those still running
    after ``shutdown_timeout`` seconds (default 1).
    With ``metadata_from_workers=True`` no env is built in this process: the workers
    start at construction and the specs are read from their envs (see
    :attr:`metadata_from_workers`).

    Examples:
        >>> from tdrl.envs import GymEnv, ParallelEnv
        >>> with ParallelEnv(2, lambda: GymEnv("CartPole-v1")) as env:
        ...     _ = env.set_seed(0)
        ...     data = env.rollout(5, break_when_any_done=False)
        >>> data.batch_size
        torch.Size([2, 5])
    """

    def __new__(cls, num_workers: int = 1, *args: Any, **kwargs: Any) -> Any:
        """Build a SerialEnv instead when ``serial_for_single`` and one worker."""
        if num_workers == 1 and kwargs.get("serial_for_single", False):
            parallel_only = (
                "mp_start_method",
                "timeout",
                "metadata_from_workers",
                "shutdown_timeout",
            )
            kwargs = {k: v for k, v in kwargs.items() if k not in parallel_only}
            return SerialEnv(num_workers, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        *args: Any,
        mp_start_method: str | None = None,
        timeout: float | None = None,
        metadata_from_workers: bool = False,
        shutdown_timeout: float = _CLOSE_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        state = self.__dict__
        state["_mp_start_method"] = _start.validate_start_method(mp_start_method)
        state["_timeout"] = _check_timeout(timeout)
        if shutdown_timeout is None:
            raise TypeError("shutdown_timeout: expected a number of seconds, got None")
        state["_shutdown_timeout"] = _check_timeout(shutdown_timeout, "shutdown_timeout")
        state["_processes"], state["_connections"] = [], []
        state["_broken"], state["_finalizer"] = None, None
        if not isinstance(metadata_from_workers, bool):
            raise TypeError(
                f"metadata_from_workers: expected a bool, got {type(metadata_from_workers).__name__}"
            )
        state["_metadata_from_workers"] = metadata_from_workers
        state["_early_options"] = None
        if metadata_from_workers:
            if kwargs.get("use_buffers"):
                raise BatchedEnvError(
                    "metadata_from_workers=True requires use_buffers=False: the workers' envs "
                    "are built before the specs (hence the shared buffers) are known; got "
                    "use_buffers=True"
                )
            kwargs["use_buffers"] = False
            state["_early_options"] = self._worker_options(
                kwargs.get("num_sub_threads", 1), kwargs.get("consolidate", True), False
            )
            if kwargs.get("num_threads") is not None:
                import torch

                torch.set_num_threads(kwargs["num_threads"])
        try:
            super().__init__(*args, mp_start_method=mp_start_method, **kwargs)
        except BaseException:
            self._shutdown()
            raise
        if metadata_from_workers:
            # the workers built their envs to describe them: they keep running
            state["_early_options"] = None
            self._all_workers = list(range(self.num_workers))
            self.is_closed = False
            state["_closed_by_user"] = False

    @property
    def metadata_from_workers(self) -> bool:
        """Whether the specs were read from the live workers' envs at construction.

        When True, no env is built in this process: the workers start during
        construction, each builds its env once, and the batched env's specs are read
        from those envs (the workers must agree on keys, shapes and dtypes). The data
        then travels through the pipes (``use_buffers=False``).
        """
        return self.__dict__.get("_metadata_from_workers", False)

    @property
    def timeout(self) -> float | None:
        """Seconds a command may wait for a worker's answer (None: no limit, the default).

        A worker that does not answer in time (stuck in its env's code) makes the command
        raise ``TimeoutError`` naming the worker, its pid and the command; the workers are
        stopped, and the env must be rebuilt.
        """
        return self._timeout

    @property
    def mp_start_method(self) -> str | None:
        """The start method given at construction (None: chosen when the workers start)."""
        return self._mp_start_method

    # ------------------------------------------------------------- lifecycle
    def _start(self) -> None:
        if self.num_threads is not None:
            import torch

            torch.set_num_threads(self.num_threads)
        self._start_workers(
            self.create_env_fn,
            self.create_env_kwargs,
            [(meta.output_spec, meta.input_spec) for meta in self.meta_data],
            self._worker_options(self.num_sub_threads, self.consolidate, self._use_buffers),
        )

    @staticmethod
    def _worker_options(num_sub_threads: int, consolidate: bool, use_buffers: bool) -> dict:
        return {
            "filter_warnings": tdrl.filter_warnings_subprocess,
            "num_threads": num_sub_threads,
            "consolidate": consolidate and not use_buffers,
            "parent_pid": os.getpid(),
        }

    def _start_workers(self, fns: list, kwargs: list, expected: list, options: dict) -> None:
        """Start one worker per constructor and wait until each has built its env.

        ``expected`` holds, per worker, the ``(output_spec, input_spec)`` its env must
        match (None: not checked). Runs before construction ends when
        ``metadata_from_workers`` is set, hence the state kept in ``__dict__``.
        """
        state = self.__dict__
        context = _start.get_context(self._mp_start_method)
        processes: list = []
        connections: list = []
        state["_processes"], state["_connections"] = processes, connections
        state["_finalizer"] = weakref.finalize(
            self, _stop_workers, processes, connections, self._shutdown_timeout
        )
        try:
            with _start.global_start_method_preserved():
                self._launch(context, options, fns, kwargs, expected, processes, connections)
            poller = select.poll()
            state["_poller"] = poller
            fd_worker: dict[int, int] = {}
            state["_fd_worker"] = fd_worker
            for w, conn in enumerate(connections):
                poller.register(conn.fileno(), select.POLLIN)
                fd_worker[conn.fileno()] = w
            state["_broken"] = None
            state["_stale"] = None
            self._collect(list(range(len(fns))), "start")
        except BaseException:
            self._shutdown()
            raise

    def _collect_metadata(self, fns: list, kwargs: list) -> list[EnvMetaData]:
        options = self.__dict__.get("_early_options")
        if options is None:
            return super()._collect_metadata(fns, kwargs)
        self._start_workers(fns, kwargs, [None] * len(fns), options)
        metas = self._run("metadata", workers=list(range(len(fns))))
        try:
            _check_same_layout(metas)
        except ValueError as err:
            self._shutdown()
            raise BatchedEnvError(
                f"metadata_from_workers: the workers' metadata are incompatible: {err}"
            ) from err
        return metas

    def _launch(
        self,
        context: Any,
        options: dict,
        fns: list,
        kwargs: list,
        expected: list,
        processes: list,
        connections: list,
    ) -> None:
        """Start every worker (they build their envs concurrently)."""
        fork = context.get_start_method() == "fork"
        arena = self.__dict__.get("_arena")
        layout = self.__dict__.get("_layout")
        for w, fn in enumerate(fns):
            # Under fork the constructor is inherited as is; otherwise it must be pickled.
            # An EnvCreator pickles itself (its function with cloudpickle) and is sent as
            # is, so that its shared-memory state travels as shared memory, not as a copy.
            fn_arg = fn if fork or isinstance(fn, EnvCreator) else cloudpickle.dumps(fn)
            parent_conn, child_conn = context.Pipe()
            process = context.Process(
                target=_worker.worker_main,
                args=(
                    w,
                    child_conn,
                    fn_arg,
                    kwargs[w],
                    arena,
                    layout,
                    expected[w],
                    options,
                    # A forked child inherits the parent's ends of its own pipe and of the
                    # earlier workers' pipes; it closes them so that it sees the parent die.
                    [parent_conn, *connections] if fork else [],
                ),
                daemon=True,
                name=f"{type(self).__name__}-worker-{w}",
            )
            process.start()
            # Close our copy of the child's end now, before the next fork, so that a
            # worker's death closes its pipe and the parent sees it at once.
            child_conn.close()
            processes.append(process)
            connections.append(parent_conn)

    def _shutdown(self) -> None:
        finalizer = self.__dict__.get("_finalizer")
        if finalizer is not None:
            finalizer()
        state = self.__dict__
        state["_processes"], state["_connections"] = [], []
        state["_finalizer"] = None

    # -------------------------------------------------------------- commands
    def _run(
        self,
        command: str,
        payload: Any = None,
        workers: list[int] | None = None,
        payloads: list | None = None,
    ) -> list:
        if self._broken is not None:
            raise RuntimeError(self._broken)
        stale = self.__dict__.get("_stale")
        if stale:
            # replies of a command whose wait was interrupted (Ctrl-C): read and drop them
            self.__dict__["_stale"] = None
            try:
                self._collect(sorted(stale), "an interrupted command")
            except (RuntimeError, ValueError, TypeError) as err:
                if self._broken is not None:
                    raise RuntimeError(self._broken) from err
        if workers is None:
            workers = list(range(self.num_workers))
        connections = self._connections
        try:
            if payloads is not None:
                for w, p in zip(workers, payloads):
                    connections[w].send_bytes(_worker.encode(command, p))
            else:
                if payload is None and command == "step":
                    message = _worker.STEP
                elif payload is None and command == "step_reset":
                    message = _worker.STEP_RESET
                elif payload is None and command == "reset":
                    message = _worker.RESET
                else:
                    message = _worker.encode(command, payload)
                for w in workers:
                    connections[w].send_bytes(message)
        except (OSError, ValueError):
            self._check_alive(workers, command)
            raise
        return self._collect(workers, command)

    def _collect(self, workers: list[int], command: str) -> list:
        """Wait for the replies of ``workers``; raise on errors or dead workers."""
        replies: dict[int, Any] = {}
        pending = set(workers)
        try:
            self._wait_replies(pending, replies, command)
        except KeyboardInterrupt:
            self.__dict__["_stale"] = set(pending)
            raise
        results = []
        error = None
        for w in workers:
            status, value = replies[w]
            if status == "error" and error is None:
                error = (w, value)
            results.append(value)
        if error is not None:
            self._raise_worker_error(error[0], error[1], command)
        return results

    def _wait_replies(self, pending: set, replies: dict, command: str) -> None:
        connections = self._connections
        poll = self._poller.poll
        fd_worker = self._fd_worker
        timeout = self._timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        period = _LIVENESS_PERIOD
        while pending:
            if deadline is not None:
                period = min(_LIVENESS_PERIOD, max(deadline - time.monotonic(), 0.0))
            events = poll(period * 1000)
            if not events:
                self._check_alive(pending, command)
                if deadline is not None and time.monotonic() >= deadline:
                    self._stuck(min(pending), command)
                continue
            for fd, _ in events:
                w = fd_worker[fd]
                if w not in pending:
                    continue
                try:
                    raw = connections[w].recv_bytes()
                except (EOFError, OSError):
                    self._dead(w, command)
                replies[w] = _OK_REPLY if raw == _worker.OK else pickle.loads(raw)
                pending.discard(w)

    def _check_alive(self, workers: Any, command: str) -> None:
        for w in workers:
            if not self._processes[w].is_alive():
                self._dead(w, command)

    def _dead(self, w: int, command: str) -> None:
        process = self._processes[w]
        process.join(0.5)
        self._broken = WORKER_DIED.format(
            worker=w,
            cls=type(self).__name__,
            pid=process.pid,
            command=command,
            how=_exit_description(process.exitcode),
        )
        raise RuntimeError(self._broken)

    def _stuck(self, w: int, command: str) -> None:
        """A worker missed the timeout: stop every worker (none is left hanging) and raise."""
        self._broken = WORKER_STUCK.format(
            worker=w,
            cls=type(self).__name__,
            pid=self._processes[w].pid,
            command=command,
            timeout=self._timeout,
        )
        self._shutdown()
        raise TimeoutError(self._broken)

    def _raise_worker_error(self, w: int, value: tuple, command: str) -> None:
        kind, message, text = value
        full = WORKER_FAILED.format(
            worker=w, cls=type(self).__name__, command=command, message=message
        )
        full = f"{full}\n\nTraceback in the worker:\n{text}"
        error: BaseException
        try:
            error = kind(full) if isinstance(kind, type) and issubclass(kind, Exception) else None
        except Exception:  # noqa: BLE001 - exception classes with other signatures
            error = None
        if error is None:
            error = RuntimeError(full)
        raise error
