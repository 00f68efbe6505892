"""Multi-process collectors: one SyncDataCollector per worker process.

:class:`MultiSyncDataCollector` gathers one batch from every worker per iteration;
:class:`MultiaSyncDataCollector` yields each worker's batch as soon as it is ready;
:class:`aSyncDataCollector` runs a single collector in a worker process. The newer names
``MultiSyncCollector``, ``MultiAsyncCollector`` and ``AsyncCollector`` are the same classes.

Batches come back through shared memory (see :mod:`tdrl.collectors._worker`), and a module
policy's parameters live in shared memory owned by the parent, so
:meth:`~MultiSyncDataCollector.update_policy_weights_` reaches every worker without a copy. A
worker that raises makes the parent raise with its traceback; a worker that dies makes the
parent raise within seconds, naming it; :meth:`~MultiSyncDataCollector.shutdown` (also run at
interpreter exit) stops every process.
"""

from __future__ import annotations

import gc
import inspect
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle
import torch
import torch.multiprocessing  # noqa: F401 - registers the shared-memory tensor reductions
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from tdrl.collectors._worker import worker_main
from tdrl.collectors.base import DataCollectorBase, Policy, as_weights, check_frames, make_policy
from tdrl.envs.batched._start import get_context, global_start_method_preserved

__all__ = [
    "AsyncCollector",
    "MultiAsyncCollector",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "aSyncDataCollector",
]

TRAJ_IDS_KEY = ("collector", "traj_ids")
#: seconds between two checks that the workers are alive while waiting for a reply
_POLL = 1.0
#: seconds a worker gets to exit after "close" before it is terminated
_CLOSE_TIMEOUT = 10.0


class WorkerError(RuntimeError):
    """An error raised in (or the death of) a collector worker process."""


def _stop(processes: list, connections: list) -> None:
    """Ask every worker to close, then terminate those that do not exit (finalizer)."""
    for conn in connections:
        try:
            conn.send(("close", None))
        except (OSError, ValueError):
            pass
    for process in processes:
        process.join(_CLOSE_TIMEOUT)
        if process.is_alive():
            process.terminate()
            process.join(_CLOSE_TIMEOUT)
        if process.is_alive():
            process.kill()
            process.join()
    for conn in connections:
        conn.close()


def _check_worker_kwargs(owner: str, kwargs: Mapping[str, Any]) -> None:
    from tdrl.collectors.sync import SyncDataCollector

    accepted = inspect.signature(SyncDataCollector.__init__).parameters
    unknown = sorted(key for key in kwargs if key not in accepted or key == "self")
    if unknown:
        raise TypeError(f"{owner}: unexpected keyword arguments {unknown}")


class _MultiCollector(DataCollectorBase):
    """Worker management shared by the multi-process collectors."""

    def __init__(
        self,
        create_env_fn: Sequence[Callable[..., Any]],
        policy: Policy | None = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        policy_factory: Callable[[], Policy] | None = None,
        create_env_kwargs: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        split_trajs: bool | None = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        replay_buffer: Any = None,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
        mp_start_method: str | None = None,
        num_threads: int | None = None,
        **collector_kwargs: Any,
    ) -> None:
        if isinstance(create_env_fn, (str, bytes)) or not isinstance(create_env_fn, Sequence):
            raise TypeError(
                "create_env_fn: expected a list of env constructors (one per worker), got "
                f"{type(create_env_fn).__name__}"
            )
        if not create_env_fn:
            raise ValueError("create_env_fn: expected at least one env constructor, got []")
        self.num_workers = len(create_env_fn)
        _check_worker_kwargs(type(self).__name__, collector_kwargs)
        self.frames_per_batch, self.total_frames = check_frames(frames_per_batch, total_frames)
        self.requested_frames_per_batch = frames_per_batch
        self._set_pipeline(
            split_trajs=split_trajs,
            postproc=postproc,
            replay_buffer=replay_buffer,
            trajs_per_batch=trajs_per_batch,
            traj_format=traj_format,
        )
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        policy = make_policy(policy, policy_factory)
        self.policy = policy
        self._shared_weights = self._share_weights(policy)
        env_kwargs = self._env_kwargs(create_env_kwargs)
        worker_frames = self._worker_frames_per_batch()
        self._frames = 0
        self._iter = -1
        self.closed = True
        self._processes: list = []
        self._connections: list[Connection] = []
        self._finalizer: Any = None
        #: each worker's shared batch buffer, once it has sent it
        self._buffers: dict[int, TensorDictBase] = {}
        #: workers asked for a batch that has not been received yet
        self._pending: set[int] = set()
        self._start(
            [
                (
                    fn,
                    policy,
                    {
                        **collector_kwargs,
                        "create_env_kwargs": kwargs,
                        "frames_per_batch": worker_frames,
                        "total_frames": -1,
                    },
                )
                for fn, kwargs in zip(create_env_fn, env_kwargs)
            ],
            mp_start_method,
        )

    # ----------------------------------------------------------------- set-up
    def _worker_frames_per_batch(self) -> int:
        return self.frames_per_batch

    def _env_kwargs(self, create_env_kwargs: Any) -> list:
        if create_env_kwargs is None or isinstance(create_env_kwargs, Mapping):
            return [dict(create_env_kwargs or {}) or None] * self.num_workers
        kwargs = list(create_env_kwargs)
        if len(kwargs) != self.num_workers:
            raise ValueError(
                f"create_env_kwargs: expected {self.num_workers} dicts (one per env constructor), "
                f"got {len(kwargs)}"
            )
        return [dict(k) or None for k in kwargs]

    @staticmethod
    def _share_weights(policy: Any) -> TensorDictBase | None:
        if not isinstance(policy, torch.nn.Module):
            return None
        weights = TensorDict.from_module(policy).data
        if weights.is_empty():
            return None
        # moves the parameters' storage to shared memory in place: the parent's policy, its
        # optimizer and every worker read the same values
        return weights.share_memory_()

    def _start(self, payloads: list, mp_start_method: str | None) -> None:
        context = get_context(mp_start_method)
        self.mp_start_method = context.get_start_method()
        fork = self.mp_start_method == "fork"
        parent_ends = []
        with global_start_method_preserved():
            try:
                for worker, payload in enumerate(payloads):
                    parent_end, child_end = context.Pipe()
                    process = context.Process(
                        target=worker_main,
                        args=(
                            worker,
                            child_end,
                            payload if fork else cloudpickle.dumps(payload),
                            self._shared_weights,
                            list(parent_ends) if fork else None,
                        ),
                        name=f"{type(self).__name__}-worker-{worker}",
                        daemon=True,
                    )
                    process.start()
                    child_end.close()
                    parent_ends.append(parent_end)
                    self._processes.append(process)
                    self._connections.append(parent_end)
            finally:
                self._finalizer = weakref.finalize(self, _stop, self._processes, self._connections)
        self.closed = False
        try:
            for worker in range(self.num_workers):
                self._reply(worker, "start")
        except BaseException:
            self.shutdown()
            raise

    # ---------------------------------------------------------- communication
    def _send(self, worker: int, command: str, argument: Any = None) -> None:
        if self.closed:
            raise RuntimeError(
                f"{type(self).__name__} is shut down: build a new collector to collect again"
            )
        try:
            self._connections[worker].send((command, argument))
        except (OSError, BrokenPipeError):
            self._raise_dead(worker, command)

    def _reply(self, worker: int, command: str) -> Any:
        """Wait for ``worker``'s reply to ``command``; raise if it failed or died."""
        conn = self._connections[worker]
        process = self._processes[worker]
        while True:
            ready = wait([conn, process.sentinel], timeout=_POLL)
            if conn in ready:
                try:
                    status, value = conn.recv()
                except (EOFError, OSError):
                    self._raise_dead(worker, command)
                if status == "error":
                    message, text = value
                    self.shutdown()
                    raise WorkerError(
                        f"collector worker {worker} failed during {command!r}: {message}\n"
                        f"--- worker traceback ---\n{text}"
                    )
                return value
            if process.sentinel in ready or not process.is_alive():
                self._raise_dead(worker, command)

    def _raise_dead(self, worker: int, command: str) -> None:
        process = self._processes[worker]
        process.join(1.0)
        code = process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        self.shutdown()
        raise WorkerError(
            f"collector worker {worker} (pid {process.pid}) died during {command!r} ({how}); "
            "the collector was shut down"
        )

    def _request_batch(self, worker: int) -> None:
        """Ask ``worker`` for its next batch (received by :meth:`_receive_batch`)."""
        self._send(worker, "collect")
        self._pending.add(worker)

    def _receive_batch(self, worker: int, buffers: dict) -> tuple[TensorDictBase, bool]:
        """The batch a worker reports ready, and whether it is the worker's shared buffer.

        A shared buffer is overwritten by the worker's next batch: copy it before asking
        for one.
        """
        value = self._reply(worker, "collect")
        self._pending.discard(worker)
        if value is None:
            return buffers[worker], True
        if isinstance(value, TensorDict) and value.is_shared():
            buffers[worker] = value
            return value, True
        buffers.pop(worker, None)
        return value, False

    def _renumber(self, data: TensorDictBase, worker: int) -> TensorDictBase:
        """Make trajectory ids unique over the workers (``id * num_workers + worker``)."""
        ids = data.get(TRAJ_IDS_KEY, None)
        if ids is not None and self.num_workers > 1:
            data.set(TRAJ_IDS_KEY, ids * self.num_workers + worker)
        return data

    # -------------------------------------------------------------- interface
    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the workers, in worker order."""
        return [process.pid for process in self._processes]

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the workers' envs one after the other and return the next seed.

        Worker ``i`` is seeded with the seed returned by worker ``i - 1``.
        """
        self._sync_pending()
        for worker in range(self.num_workers):
            self._send(worker, "seed", (seed, static_seed))
            seed = self._reply(worker, "seed")
        return seed

    def reset(self, reset_idx: Sequence[bool] | None = None) -> None:
        """Reset the envs of every worker (or those where ``reset_idx`` is True)."""
        self._clear_pipeline()
        workers = (
            range(self.num_workers)
            if reset_idx is None
            else [worker for worker, flag in enumerate(reset_idx) if flag]
        )
        self._sync_pending()
        for worker in workers:
            self._send(worker, "reset")
            self._reply(worker, "reset")

    def state_dict(self) -> OrderedDict:
        """The state of every worker's collector (``worker0``, ...) and the frame counter."""
        self._sync_pending()
        state = OrderedDict()
        for worker in range(self.num_workers):
            self._send(worker, "state_dict")
            state[f"worker{worker}"] = self._reply(worker, "state_dict")
        state["frames"] = self._frames
        state["iter"] = self._iter
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        self._sync_pending()
        for worker in range(self.num_workers):
            key = f"worker{worker}"
            if key in state_dict:
                self._send(worker, "load_state_dict", state_dict[key])
                self._reply(worker, "load_state_dict")
        self._frames = state_dict.get("frames", self._frames)
        self._iter = state_dict.get("iter", self._iter)

    def update_policy_weights_(self, policy_weights: Any = None, **kwargs: Any) -> None:
        """Write new weights into the shared parameters every worker's policy reads.

        Args:
            policy_weights: a TensorDict of parameters, a module or a state dict; None keeps
                the current values (the parent's policy already shares its memory with the
                workers, so changes made to it in place are seen at once).
            **kwargs: ``weights=`` is accepted as another name of ``policy_weights``.
        """
        if policy_weights is None:
            policy_weights = kwargs.pop("weights", None)
        if kwargs:
            raise TypeError(
                f"update_policy_weights_: unexpected keyword arguments {sorted(kwargs)}"
            )
        if policy_weights is None:
            return
        if self._shared_weights is None:
            raise TypeError(
                "update_policy_weights_: expected the collector's policy to be a torch.nn.Module "
                f"with parameters to receive weights, got {type(self.policy).__name__}"
            )
        if isinstance(policy_weights, Mapping) and not isinstance(policy_weights, TensorDictBase):
            # copies into the shared parameters in place
            self.policy.load_state_dict(policy_weights)
            return
        self._shared_weights.update_(as_weights(policy_weights))

    def shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop every worker process (their envs are closed); idempotent.

        The workers' shared batch buffers are released too (the yielded batches are copies).
        """
        self._iterator = None
        self.closed = True
        pending = self.__dict__.get("_pending")
        if pending:
            pending.clear()
        finalizer = self.__dict__.get("_finalizer")
        if finalizer is not None:
            finalizer()
        buffers = self.__dict__.get("_buffers")
        if buffers:
            buffers.clear()
            # older tensordict versions (0.14) keep a received tensordict in a reference
            # cycle: collect it now so that its shared memory is unmapped at shutdown
            gc.collect()

    def _sync_pending(self) -> None:
        """Wait for the batches still being collected, and drop them.

        The asynchronous collector has some between iterations; the synchronous one only
        when an iteration was interrupted while it waited (Ctrl-C): its workers then answer
        an old request, which must not be taken for the answer to the next one.
        """
        for worker in sorted(self._pending):
            self._receive_batch(worker, self._buffers)
        self._pending.clear()

    def __repr__(self) -> str:
        total = "endless" if math.isinf(self.total_frames) else int(self.total_frames)
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={total}, "
            f"frames={self._frames})"
        )


class MultiSyncDataCollector(_MultiCollector):
    """Collect in several worker processes and yield one batch gathered from all of them.

    Each worker runs a :class:`~tdrl.collectors.SyncDataCollector` over the env built by its
    constructor and collects ``frames_per_batch / num_workers`` frames (rounded up to a
    multiple of its env's batch size) per iteration. Trajectory ids are made unique over the
    workers (``worker_id + num_workers * id``).

    Args:
        create_env_fn: a list of env constructors, one per worker.
        policy: the collection policy (a module's parameters are shared with the workers).
        frames_per_batch: the frames of one batch, summed over the workers.
        total_frames: frames to collect before the iteration stops; ``-1`` never stops.
        cat_results: ``"stack"`` (default) stacks the worker batches along a new leading
            dim; an int concatenates them along that dim (``-1``: time).
        mp_start_method: the multiprocessing start method (default: fork when safe).
        **kwargs: the other arguments of :class:`~tdrl.collectors.SyncDataCollector`,
            applied to every worker (``split_trajs``, ``postproc``, ``replay_buffer``,
            ``trajs_per_batch`` and ``traj_format`` act on the gathered batches).

    Examples:
        >>> from tdrl.collectors import MultiSyncDataCollector
        >>> from tdrl.envs import PendulumEnv
        >>> collector = MultiSyncDataCollector(
        ...     [PendulumEnv, PendulumEnv], frames_per_batch=20, total_frames=40
        ... )
        >>> [data.batch_size for data in collector]
        [torch.Size([2, 10]), torch.Size([2, 10])]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Sequence[Callable[..., Any]],
        policy: Policy | None = None,
        *,
        cat_results: str | int | None = None,
        **kwargs: Any,
    ) -> None:
        if cat_results is None:
            cat_results = "stack"
        if cat_results != "stack" and (
            isinstance(cat_results, bool) or not isinstance(cat_results, int)
        ):
            raise ValueError(f"cat_results: expected 'stack' or an int dim, got {cat_results!r}")
        self.cat_results = cat_results
        super().__init__(create_env_fn, policy, **kwargs)

    def _worker_frames_per_batch(self) -> int:
        return -(-self.frames_per_batch // self.num_workers)

    def _raw_batches(self) -> Iterator[TensorDictBase]:
        # a collection starts when a batch is asked for: an interrupted iteration's
        # requests are answered and dropped first
        self._sync_pending()
        while self._frames < self.total_frames:
            self._iter += 1
            for worker in range(self.num_workers):
                self._request_batch(worker)
            batches = [
                self._receive_batch(worker, self._buffers)[0] for worker in range(self.num_workers)
            ]
            data = self._gather(batches)
            self._frames += data.numel()
            yield data

    def _gather(self, batches: list[TensorDictBase]) -> TensorDictBase:
        same = all(b.batch_size == batches[0].batch_size for b in batches)
        contiguous = all(isinstance(b, TensorDict) for b in batches)
        if self.cat_results == "stack":
            if same and contiguous:
                data = torch.stack(batches, 0)  # a copy: the workers may overwrite theirs
            else:
                data = LazyStackedTensorDict(*[b.clone() for b in batches], stack_dim=0)
        else:
            data = torch.cat(batches, self.cat_results)
        if self.num_workers > 1 and TRAJ_IDS_KEY in data.keys(True):
            ids = data.get(TRAJ_IDS_KEY)
            if self.cat_results == "stack":
                worker = torch.arange(self.num_workers).reshape(-1, *([1] * (ids.ndim - 1)))
            else:
                worker = torch.cat(
                    [torch.full(b.batch_size, w) for w, b in enumerate(batches)], self.cat_results
                )
            data.set(TRAJ_IDS_KEY, ids * self.num_workers + worker)
        if data.names[-1] != "time" and isinstance(data, TensorDict):
            data.refine_names(*([None] * (data.batch_dims - 1)), "time")
        return data


class MultiaSyncDataCollector(_MultiCollector):
    """Collect in several worker processes and yield each worker's batch as soon as it is ready.

    Every worker collects ``frames_per_batch`` frames per batch and starts its next batch
    as soon as the previous one was handed over, so the data of a batch may come from a
    policy one update older than the latest. Trajectory ids are made unique over the
    workers (``worker_id + num_workers * id``).

    Args:
        create_env_fn: a list of env constructors, one per worker.
        policy: the collection policy (a module's parameters are shared with the workers).
        frames_per_batch: the frames of each batch (one worker's batch).
        total_frames: frames to collect before the iteration stops; ``-1`` never stops.
        mp_start_method: the multiprocessing start method (default: fork when safe).
        **kwargs: the other arguments of :class:`~tdrl.collectors.SyncDataCollector`.

    Examples:
        >>> from tdrl.collectors import MultiaSyncDataCollector
        >>> from tdrl.envs import PendulumEnv
        >>> collector = MultiaSyncDataCollector(
        ...     [PendulumEnv, PendulumEnv], frames_per_batch=10, total_frames=30
        ... )
        >>> [data.batch_size for data in collector]
        [torch.Size([10]), torch.Size([10]), torch.Size([10])]
        >>> collector.shutdown()
    """

    def _raw_batches(self) -> Iterator[TensorDictBase]:
        for worker in range(self.num_workers):
            if worker not in self._pending:
                self._request_batch(worker)
        while self._frames < self.total_frames:
            ready = wait([self._connections[w] for w in sorted(self._pending)], timeout=_POLL)
            if not ready:
                for worker in self._pending:
                    if not self._processes[worker].is_alive():
                        self._raise_dead(worker, "collect")
                continue
            worker = self._connections.index(ready[0])
            data, shared = self._receive_batch(worker, self._buffers)
            data = self._renumber(data.clone() if shared else data, worker)
            self._iter += 1
            self._frames += data.numel()
            if self._frames < self.total_frames:
                self._request_batch(worker)
            yield data


class aSyncDataCollector(MultiaSyncDataCollector):  # noqa: N801 - the reference API's name
    """Collect in one worker process while the caller works on the previous batch.

    Args:
        create_env_fn: an env constructor (or a list holding one).
        policy: the collection policy (a module's parameters are shared with the worker).
        **kwargs: the arguments of :class:`MultiaSyncDataCollector`.

    Examples:
        >>> from tdrl.collectors import aSyncDataCollector
        >>> from tdrl.envs import PendulumEnv
        >>> collector = aSyncDataCollector(PendulumEnv, frames_per_batch=10, total_frames=20)
        >>> [data.batch_size for data in collector]
        [torch.Size([10]), torch.Size([10])]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: Policy | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(create_env_fn, Sequence):
            create_env_fn = [create_env_fn]
        if len(create_env_fn) != 1:
            raise ValueError(
                f"create_env_fn: aSyncDataCollector runs one env constructor, got {len(create_env_fn)}"
            )
        super().__init__(create_env_fn, policy, **kwargs)


MultiSyncCollector = MultiSyncDataCollector
MultiAsyncCollector = MultiaSyncDataCollector
AsyncCollector = aSyncDataCollector
