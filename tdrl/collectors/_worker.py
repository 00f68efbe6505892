"""The worker process of the multi-process collectors: one collector, one command loop.

Each worker builds a :class:`~tdrl.collectors.SyncDataCollector` over its own env and serves
the parent's ``(command, payload)`` messages. A batch is written into a shared-memory
tensordict that the worker sends once (its first batch); later batches overwrite it in place
and the reply only says that it is ready, so no batch is pickled. The policy's parameters
point at shared memory owned by the parent: a weight update in the parent is seen by every
worker at its next step, without a copy. Errors are answered with the worker's traceback;
the worker exits on ``"close"`` or when the parent's end of the pipe is gone.

Everything the worker inherits from a forked parent is moved to the garbage collector's
permanent generation first: its collections then never walk (and write to) the parent's
objects, whose memory pages would otherwise be copied one by one into the worker.
"""

from __future__ import annotations

import gc
import signal
import traceback
import warnings
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["worker_main"]


def _error_reply(err: BaseException) -> tuple:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return ("error", (f"{type(err).__name__}: {err}", text))


def _same_layout(shared: TensorDictBase | None, data: TensorDictBase) -> bool:
    if shared is None or not isinstance(data, TensorDict) or shared.batch_size != data.batch_size:
        return False
    keys = set(data.keys(True, True))
    return keys == set(shared.keys(True, True)) and all(
        shared.get(key).shape == data.get(key).shape for key in keys
    )


def worker_main(
    worker: int,
    conn: Connection,
    payload: bytes | tuple,
    shared_weights: TensorDictBase | None,
    inherited: list | None = None,
) -> None:
    """Build one collector and serve the parent's commands until ``"close"``.

    Args:
        worker: the index of this worker.
        conn: the worker's end of its pipe to the parent.
        payload: ``(create_env_fn, policy, collector_kwargs)``, or its cloudpickle bytes.
        shared_weights: the policy's parameters in shared memory (None for other policies).
        inherited: connections of the parent inherited through fork, closed at once.
    """
    from tdrl.collectors.sync import SyncDataCollector

    gc.freeze()
    for other in inherited or ():
        other.close()
    # Ctrl-C reaches the whole process group: the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    try:
        create_env_fn, policy, kwargs = (
            cloudpickle.loads(payload) if isinstance(payload, bytes) else payload
        )
        if shared_weights is not None:
            shared_weights.to_module(policy)
        collector = SyncDataCollector(create_env_fn, policy, **kwargs)
        iterator = iter(collector)
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        conn.send(_error_reply(err))
        conn.close()
        return
    conn.send(("ok", None))
    shared: TensorDictBase | None = None
    while True:
        try:
            command, argument = conn.recv()
        except (EOFError, OSError):
            break  # the parent is gone
        try:
            if command == "collect":
                data = next(iterator)
                if _same_layout(shared, data):
                    shared.update_(data)
                    result: Any = None
                elif data.is_contiguous() and isinstance(data, TensorDict):
                    shared = data.clone().share_memory_()
                    result = shared
                else:
                    # batches whose shapes vary are sent whole, each time
                    shared = None
                    result = data
            elif command == "seed":
                result = collector.set_seed(*argument)
            elif command == "reset":
                collector.reset()
                result = None
            elif command == "state_dict":
                result = collector.state_dict()
            elif command == "load_state_dict":
                collector.load_state_dict(argument)
                result = None
            elif command == "close":
                collector.shutdown()
                conn.send(("ok", None))
                break
            else:
                raise ValueError(
                    "unknown collector worker command: expected one of collect, seed, reset, "
                    f"state_dict, load_state_dict, close; got {command!r}"
                )
            conn.send(("ok", result))
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            try:
                conn.send(_error_reply(err))
            except (EOFError, OSError):
                break
    conn.close()
