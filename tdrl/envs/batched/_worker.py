"""The worker process of ParallelEnv: one function, one command loop.

Messages are pickled ``(command, payload)`` tuples sent with
``Connection.send_bytes``; the hot commands (a step or reset of every worker)
are pre-pickled constants and carry no tensors, since the data lives in the
shared buffers. Each command is answered with ``("ok", payload)`` or
``("error", (exception, message, traceback))``. The worker exits on ``"close"``,
when the parent's end of the pipe is gone, and, through a watchdog thread, when the parent
process dies while the worker is busy in its env's code.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import torch

from tdrl.envs.batched._runner import EnvRunner

#: Pre-pickled messages of the hot path.
STEP = pickle.dumps(("step", None), protocol=pickle.HIGHEST_PROTOCOL)
STEP_RESET = pickle.dumps(("step_reset", None), protocol=pickle.HIGHEST_PROTOCOL)
RESET = pickle.dumps(("reset", None), protocol=pickle.HIGHEST_PROTOCOL)
OK = pickle.dumps(("ok", None), protocol=pickle.HIGHEST_PROTOCOL)
CLOSE = pickle.dumps(("close", None), protocol=pickle.HIGHEST_PROTOCOL)


def encode(command: str, payload: Any) -> bytes:
    """Pickle a message (plain pickle: tensors travel by value, never as shared handles)."""
    return pickle.dumps((command, payload), protocol=pickle.HIGHEST_PROTOCOL)


def error_reply(err: BaseException) -> bytes:
    """The reply describing an exception raised in the worker."""
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    try:
        pickle.dumps(type(err))
        kind: Any = type(err)
    except Exception:  # noqa: BLE001 - any unpicklable exception class
        kind = None
    return encode("error", (kind, f"{type(err).__name__}: {err}", text))


#: How often (seconds) a worker's watchdog checks that its parent is alive.
PARENT_CHECK_PERIOD = 0.5


def exit_with_parent(parent_pid: int) -> None:
    """Start a daemon thread that ends this process as soon as ``parent_pid`` is gone.

    A worker blocked in env code never reads its pipe, so the pipe's end-of-file cannot
    stop it; the watchdog sees the parent die (the worker is re-parented, or the pid is
    gone) and exits.
    """

    # Under fork the parent is the process that owns the env; under spawn or forkserver
    # the direct parent may be a server process: either one going away ends the worker.
    direct_parent = os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != direct_parent:
                os._exit(1)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass  # the pid exists (owned by someone else): the parent is alive
            time.sleep(PARENT_CHECK_PERIOD)

    threading.Thread(target=watch, name="tdrl-parent-watchdog", daemon=True).start()


def worker_main(
    worker: int,
    conn: Connection,
    env_fn: bytes | Callable[..., Any],
    env_kwargs: dict,
    arena: torch.Tensor | None,
    layout: Any,
    expected_specs: Any,
    options: dict,
    inherited: list | None = None,
) -> None:
    """Build one sub-env and serve the parent's commands until ``"close"``.

    Args:
        worker: the index of this worker.
        conn: the worker's end of its pipe to the parent.
        env_fn: the env constructor, or its cloudpickle bytes (start methods other than fork).
        env_kwargs: keyword arguments of the constructor.
        arena: the shared buffers (None: data travels in the replies).
        layout: where each leaf lives in ``arena``.
        expected_specs: the ``(output_spec, input_spec)`` the parent built the buffers from.
        options: ``filter_warnings``, ``num_threads``, ``device``, ``consolidate`` and
            ``parent_pid`` (the worker exits when that process is gone).
        inherited: connections of the parent inherited through fork, closed at once.
    """
    # what a forked worker inherits is never collected here: moving it to the permanent
    # generation keeps the worker's collections from walking (and writing to) the parent's
    # objects, whose memory pages would otherwise be copied into the worker one by one
    gc.freeze()
    for other in inherited or ():
        other.close()
    # Ctrl-C reaches the whole process group: the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if options.get("filter_warnings", True):
        warnings.filterwarnings("ignore")
    if options.get("num_threads"):
        torch.set_num_threads(options["num_threads"])
    if options.get("parent_pid") is not None:
        exit_with_parent(options["parent_pid"])
    try:
        env_fn = cloudpickle.loads(env_fn) if isinstance(env_fn, bytes) else env_fn
        runner = EnvRunner(
            worker,
            env_fn,
            env_kwargs,
            arena,
            layout,
            expected_specs,
            options.get("device"),
            consolidate=options.get("consolidate", False),
        )
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        conn.send_bytes(error_reply(err))
        return
    conn.send_bytes(OK)
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            break  # the parent is gone
        command, payload = pickle.loads(message)
        try:
            if command == "step":
                result = runner.step(payload)
            elif command == "step_reset":
                result = runner.step_and_maybe_reset(payload)
            elif command == "reset":
                result = runner.reset(payload)
            elif command == "seed":
                result = runner.seed(payload)
            elif command == "getattr":
                result = runner.get_attribute(payload)
            elif command == "setattr":
                result = runner.set_attribute(payload)
            elif command == "call":
                result = runner.call(payload)
            elif command == "metadata":
                result = runner.metadata()
            elif command == "close":
                runner.close()
                conn.send_bytes(OK)
                break
            else:
                raise ValueError(
                    f"unknown worker command: expected one of step, step_reset, reset, seed, getattr, "
                    f"setattr, call, metadata, close; got {command!r}"
                )
            conn.send_bytes(OK if result is None else encode("ok", result))
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            try:
                conn.send_bytes(error_reply(err))
            except (EOFError, OSError):
                break
    conn.close()
