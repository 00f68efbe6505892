"""DataCollectorBase: the interface every collector shares, and the batch pipeline.

A collector produces raw batches (its :meth:`DataCollectorBase._raw_batches`); the base class
turns them into what the user sees, the same way for every collector: private keys dropped,
complete trajectories assembled (``trajs_per_batch``), trajectories split (``split_trajs``),
``postproc`` applied, and the result either yielded or written to the collector's replay
buffer. It also runs a collector in a background thread that fills its replay buffer
(:meth:`DataCollectorBase.start`).
"""

from __future__ import annotations

import abc
import contextlib
import math
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.collectors.trajectories import TrajectoryAssembler
from tdrl.collectors.utils import split_trajectories
from tdrl.envs.common import EnvBase

__all__ = ["DataCollectorBase"]

Policy = Callable[[TensorDictBase], TensorDictBase]

#: How long ``async_shutdown`` waits for the background thread by default (seconds).
_JOIN_TIMEOUT = 30.0


class DataCollectorBase(abc.ABC):
    """Base of the data collectors: iteration, length, background collection, common interface.

    Subclasses implement :meth:`_raw_batches` (an iterator of collected batches, each
    counting ``frames_per_batch`` frames), :meth:`shutdown`, :meth:`set_seed`,
    :meth:`state_dict`, :meth:`load_state_dict` and :meth:`update_policy_weights_`.

    Batches whose keys (or any part of a nested key) start with ``"_"`` lose those entries
    unless ``collector._exclude_private_keys`` is set to False.

    Examples:
        >>> from tdrl.collectors import DataCollectorBase, SyncDataCollector
        >>> issubclass(SyncDataCollector, DataCollectorBase)
        True
    """

    frames_per_batch: int
    total_frames: float
    replay_buffer: Any = None
    split_trajs: bool = False
    postproc: Callable[[TensorDictBase], TensorDictBase] | None = None
    _exclude_private_keys: bool = True
    _assembler: TrajectoryAssembler | None = None

    # ------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[TensorDictBase | None]:
        return self.iterator()

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yield the batches (None per batch when a replay buffer receives them)."""
        for data in self._raw_batches():
            for out in self._postprocess(data):
                if self.replay_buffer is not None:
                    self._extend_buffer(out)
                else:
                    yield out
            if self.replay_buffer is not None:
                yield None

    @abc.abstractmethod
    def _raw_batches(self) -> Iterator[TensorDictBase]:
        """Yield collected batches until ``total_frames`` frames are reached."""

    def next(self) -> TensorDictBase | None:
        """Collect and return the next batch (an iterator is kept between calls)."""
        iterator = self.__dict__.get("_iterator")
        if iterator is None:
            iterator = self._iterator = iter(self)
        try:
            return next(iterator)
        except StopIteration:
            self._iterator = None
            raise

    def __len__(self) -> int:
        if math.isinf(self.total_frames):
            raise RuntimeError(
                "a collector with total_frames=-1 runs forever and has no length; "
                "pass a positive total_frames to get one"
            )
        return -(-int(self.total_frames) // self.frames_per_batch)

    # ------------------------------------------------------------- pipeline
    def _set_pipeline(
        self,
        *,
        split_trajs: bool | None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None,
        replay_buffer: Any,
        trajs_per_batch: int | None,
        traj_format: str | None,
    ) -> None:
        """Validate and store the options of the batch pipeline (called by constructors)."""
        self.split_trajs = bool(split_trajs)
        self.postproc = postproc
        if replay_buffer is not None and not callable(getattr(replay_buffer, "extend", None)):
            raise TypeError(
                "replay_buffer: expected a replay buffer with an extend method, got "
                f"{type(replay_buffer).__name__}"
            )
        self.replay_buffer = replay_buffer
        if trajs_per_batch is None:
            if traj_format is not None:
                raise ValueError(
                    f"traj_format={traj_format!r} needs trajs_per_batch: pass trajs_per_batch "
                    "to collect whole trajectories, or drop traj_format"
                )
            self._assembler = None
        else:
            if self.split_trajs:
                raise ValueError(
                    "split_trajs=True and trajs_per_batch: expected one of them, got both; "
                    "trajs_per_batch already yields one row per trajectory"
                )
            if replay_buffer is not None:
                # a buffer stores flat transitions: whole trajectories, one after the other
                traj_format = "cat"
            self._assembler = TrajectoryAssembler(trajs_per_batch, traj_format or "padded")

    @property
    def trajs_per_batch(self) -> int | None:
        """The number of whole trajectories per batch (None: fixed-size batches)."""
        return None if self._assembler is None else self._assembler.trajs_per_batch

    @property
    def traj_format(self) -> str | None:
        """The layout of trajectory batches, ``"padded"`` or ``"cat"`` (None without them)."""
        return None if self._assembler is None else self._assembler.traj_format

    def _postprocess(self, data: TensorDictBase) -> list[TensorDictBase]:
        if self._exclude_private_keys:
            data = _drop_private_keys(data)
        if self._assembler is not None:
            self._assembler.ingest(data)
            outputs = []
            while self._assembler.ready():
                outputs.append(self._assembler.pop())
        else:
            outputs = [data]
        if self.split_trajs:
            outputs = [split_trajectories(out, prefix="collector") for out in outputs]
        if self.postproc is not None:
            outputs = [self.postproc(out) for out in outputs]
        return outputs

    def _extend_buffer(self, data: TensorDictBase) -> None:
        buffer = self.replay_buffer
        # a buffer over flat storage takes the steps one by one: flatten [*B, T] batches
        if data.batch_dims > 1 and getattr(buffer, "dim_extend", 0) == 0:
            data = data.reshape(-1)
        buffer.extend(data)

    def _clear_pipeline(self) -> None:
        # batches already collected for next() belong to the state being reset
        self._iterator = None
        if self._assembler is not None:
            self._assembler.clear()

    # --------------------------------------------------- background collection
    def start(self) -> None:
        """Collect in a background thread, writing every batch into the replay buffer.

        The thread runs until ``total_frames`` are collected or :meth:`async_shutdown` is
        called; an error raised while collecting is re-raised by :meth:`async_shutdown`.

        Raises:
            RuntimeError: without a replay buffer, or when already started.
        """
        if self.replay_buffer is None:
            raise RuntimeError(
                "start(): expected a collector built with a replay_buffer to fill, got "
                "replay_buffer=None; iterate over the collector instead"
            )
        thread = self.__dict__.get("_thread")
        if thread is not None and thread.is_alive():
            raise RuntimeError("start(): the collector is already running in the background")
        self._stop_event = threading.Event()
        self._resume_event = threading.Event()
        self._resume_event.set()
        self._thread_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run_in_background, name=f"{type(self).__name__}-background", daemon=True
        )
        self._thread.start()

    def _run_in_background(self) -> None:
        try:
            for _ in self:
                if self._stop_event.is_set():
                    break
                self._resume_event.wait()
                if self._stop_event.is_set():
                    break
        except BaseException as err:  # noqa: BLE001 - re-raised by async_shutdown
            self._thread_error = err

    @property
    def is_running(self) -> bool:
        """True while a background collection started by :meth:`start` runs."""
        thread = self.__dict__.get("_thread")
        return thread is not None and thread.is_alive()

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Hold the background collection after its current batch, for the ``with`` block."""
        thread = self.__dict__.get("_thread")
        if thread is None:
            raise RuntimeError("pause(): the collector was not started with start()")
        self._resume_event.clear()
        try:
            yield
        finally:
            self._resume_event.set()

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop the background collection, wait for it, then shut the collector down.

        Args:
            timeout: seconds to wait for the current batch to finish (30 by default).
            close_env: also close the env(s).

        Raises:
            the error that stopped the background collection, if any.
        """
        thread = self.__dict__.get("_thread")
        if thread is not None:
            self._stop_event.set()
            self._resume_event.set()
            thread.join(_JOIN_TIMEOUT if timeout is None else timeout)
            if thread.is_alive():
                warnings.warn(
                    f"async_shutdown: the background collection did not stop within "
                    f"{_JOIN_TIMEOUT if timeout is None else timeout}s; shutting down anyway",
                    stacklevel=2,
                )
            self._thread = None
        self.shutdown(timeout=timeout, close_env=close_env)
        error = self.__dict__.get("_thread_error")
        if error is not None:
            self._thread_error = None
            raise error

    # ------------------------------------------------------------ interface
    @abc.abstractmethod
    def shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Release the collector's resources."""

    @abc.abstractmethod
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the collector's env(s) and return the next seed."""

    @abc.abstractmethod
    def state_dict(self) -> OrderedDict:
        """Return the collector's state."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""

    @abc.abstractmethod
    def update_policy_weights_(self, policy_weights: Any = None, **kwargs: Any) -> None:
        """Refresh the weights of the policy used for collection."""

    def __enter__(self) -> DataCollectorBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _drop_private_keys(data: TensorDictBase) -> TensorDictBase:
    """``data`` without the entries whose key has a part starting with ``"_"``."""
    private = [
        key
        for key in data.keys(include_nested=True)
        if (key.startswith("_") if isinstance(key, str) else any(k.startswith("_") for k in key))
    ]
    return data.exclude(*private) if private else data


def make_env(create_env_fn: Any, create_env_kwargs: Mapping[str, Any] | None) -> EnvBase:
    """Return the env given, or build it by calling ``create_env_fn(**create_env_kwargs)``."""
    if isinstance(create_env_fn, EnvBase):
        if create_env_kwargs:
            raise ValueError(
                "create_env_kwargs: expected None when an env instance is passed, got "
                f"{dict(create_env_kwargs)!r}"
            )
        return create_env_fn
    if not callable(create_env_fn):
        raise TypeError(
            "create_env_fn: expected an EnvBase or a callable returning one, got "
            f"{type(create_env_fn).__name__}"
        )
    env = create_env_fn(**(create_env_kwargs or {}))
    if not isinstance(env, EnvBase):
        raise TypeError(
            f"create_env_fn: expected the callable to return an EnvBase, got {type(env).__name__}"
        )
    return env


def make_policy(policy: Policy | None, policy_factory: Callable[[], Policy] | None) -> Any:
    """The policy given, or the one built by ``policy_factory`` (never both)."""
    if policy_factory is None:
        return policy
    if policy is not None:
        raise ValueError(
            "policy and policy_factory: expected one of them, got both; pass the policy or "
            "a callable that builds it"
        )
    if not callable(policy_factory):
        raise TypeError(f"policy_factory: expected a callable, got {type(policy_factory).__name__}")
    return policy_factory()


def check_frames(frames_per_batch: Any, total_frames: Any) -> tuple[int, float]:
    """Validate ``frames_per_batch`` and ``total_frames`` (``-1`` or None: endless)."""
    if not isinstance(frames_per_batch, int) or isinstance(frames_per_batch, bool):
        raise TypeError(f"frames_per_batch: expected an int, got {type(frames_per_batch).__name__}")
    if frames_per_batch < 1:
        raise ValueError(f"frames_per_batch: expected a positive int, got {frames_per_batch}")
    if total_frames is None or total_frames == -1:
        return frames_per_batch, math.inf
    if not isinstance(total_frames, int) or isinstance(total_frames, bool):
        raise TypeError(f"total_frames: expected an int, got {type(total_frames).__name__}")
    if total_frames < 1:
        raise ValueError(
            f"total_frames: expected a positive int or -1 (endless), got {total_frames}"
        )
    return frames_per_batch, total_frames


def weights_of(policy: Any) -> TensorDictBase | None:
    """The parameters and buffers of a module policy as a TensorDict (None for other policies)."""
    from tensordict import TensorDict

    if isinstance(policy, torch.nn.Module):
        return TensorDict.from_module(policy).data
    return None


def as_weights(policy_weights: Any) -> TensorDictBase:
    """New weights (a TensorDict, a module or a state dict) as a TensorDict of the module tree."""
    from tensordict import TensorDict

    if isinstance(policy_weights, torch.nn.Module):
        return TensorDict.from_module(policy_weights).data
    if isinstance(policy_weights, TensorDictBase):
        return policy_weights
    if isinstance(policy_weights, Mapping):
        flat = TensorDict(dict(policy_weights), batch_size=[])
        return flat.unflatten_keys(".")
    raise TypeError(
        "policy_weights: expected a TensorDict, an nn.Module or a state dict, got "
        f"{type(policy_weights).__name__}"
    )
