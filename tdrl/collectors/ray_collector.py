"""RayCollector: collectors running as Ray actors, on one machine or across a cluster.

Follows the Ray 2.x core API (``ray.remote``, ``ray.get``, ``ray.wait``, ``ray.put``); ``ray``
is imported only when a collector is built (``pip install ray``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.collectors.base import DataCollectorBase, Policy, as_weights, check_frames
from tdrl.collectors.multi import WorkerError

__all__ = ["RayCollector"]

TRAJ_IDS_KEY = ("collector", "traj_ids")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise ImportError(
            "RayCollector needs the 'ray' package: pip install ray (or tdrl[ray])"
        ) from err
    return ray


class _CollectorHost:
    """The actor body: one SyncDataCollector, collecting a batch per call."""

    def __init__(self, index: int, num: int, create_env_fn: Any, policy: Any, kwargs: dict) -> None:
        from tdrl.collectors.sync import SyncDataCollector

        torch.set_num_threads(1)
        self.index, self.num = index, num
        self.collector = SyncDataCollector(create_env_fn, policy, **kwargs)
        self.iterator = iter(self.collector)

    def _next(self) -> TensorDictBase:
        data = next(self.iterator)
        ids = data.get(TRAJ_IDS_KEY, None)
        if ids is not None and self.num > 1:
            data.set(TRAJ_IDS_KEY, ids * self.num + self.index)
        return data

    def collect(self) -> TensorDictBase:
        return self._next()

    def collect_into(self, replay_buffer: Any) -> int:
        data = self._next()
        if data.batch_dims > 1 and getattr(replay_buffer, "dim_extend", 0) == 0:
            data = data.reshape(-1)
        replay_buffer.extend(data)
        return data.numel()

    def update_weights(self, weights: TensorDictBase) -> None:
        self.collector.update_policy_weights_(weights)

    def set_seed(self, seed: int, static_seed: bool) -> int:
        return self.collector.set_seed(seed, static_seed=static_seed)

    def state_dict(self) -> OrderedDict:
        return self.collector.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.collector.load_state_dict(state)

    def shutdown(self) -> None:
        self.collector.shutdown()


class RayCollector(DataCollectorBase):
    """Run one :class:`~tdrl.collectors.SyncDataCollector` per Ray actor and gather their batches.

    With ``sync=True`` each iteration yields the batches of every actor stacked along a new
    leading dim; otherwise (the default) each actor's batch is yielded as soon as it is ready
    while the actor collects its next one. Given a :class:`~tdrl.data.RayReplayBuffer`, the
    actors write their batches straight into it (the driver receives no data and each
    iteration yields None). A dead actor or an error in one makes the driver raise
    :class:`~tdrl.collectors.multi.WorkerError` naming the actor; :meth:`shutdown` stops them.

    Args:
        create_env_fn: an env constructor, or a list of them (one per actor).
        policy: the collection policy (sent to each actor once).
        frames_per_batch: the frames of one actor's batch.
        total_frames: frames to collect before the iteration stops; ``-1`` never stops.
        num_collectors: the number of actors (the length of a list of constructors by default).
        sync: stack every actor's batch per iteration (True) or yield batches as they come.
        ray_init_config: keyword arguments of ``ray.init`` when Ray is not running yet.
        remote_configs: options of the actors (``num_cpus`` 1 by default), one dict for all
            or a list with one per actor.
        replay_buffer: a buffer to fill: a :class:`~tdrl.data.RayReplayBuffer` is written
            by the actors, any other buffer by the driver.
        **kwargs: the other arguments of :class:`~tdrl.collectors.SyncDataCollector`
            (``split_trajs``, ``postproc``, ``trajs_per_batch`` and ``traj_format`` act in the
            driver).

    Examples:
        >>> from tdrl.collectors import RayCollector  # doctest: +SKIP
        >>> from tdrl.envs import PendulumEnv  # doctest: +SKIP
        >>> collector = RayCollector(  # doctest: +SKIP
        ...     PendulumEnv, num_collectors=2, frames_per_batch=10, total_frames=40
        ... )
        >>> [data.batch_size for data in collector]  # doctest: +SKIP
        [torch.Size([10]), torch.Size([10]), torch.Size([10]), torch.Size([10])]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: Policy | None = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_collectors: int | None = None,
        sync: bool = False,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_configs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        replay_buffer: Any = None,
        split_trajs: bool | None = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        from tdrl.collectors.multi import _check_worker_kwargs
        from tdrl.data.replay_buffers.ray_buffer import RayReplayBuffer

        ray = _import_ray()
        _check_worker_kwargs(type(self).__name__, kwargs)
        if isinstance(create_env_fn, Sequence):
            fns = list(create_env_fn)
            if num_collectors is not None and num_collectors != len(fns):
                raise ValueError(
                    f"num_collectors={num_collectors} does not match the {len(fns)} env "
                    "constructors given in create_env_fn"
                )
        else:
            fns = [create_env_fn] * (num_collectors or 1)
        if not fns:
            raise ValueError("create_env_fn: expected at least one env constructor, got []")
        self.num_workers = len(fns)
        self.frames_per_batch, self.total_frames = check_frames(frames_per_batch, total_frames)
        self.sync = bool(sync)
        self.policy = policy
        # a Ray buffer is written by the actors themselves
        self._remote_buffer = replay_buffer if isinstance(replay_buffer, RayReplayBuffer) else None
        self._set_pipeline(
            split_trajs=split_trajs,
            postproc=postproc,
            replay_buffer=replay_buffer,
            trajs_per_batch=trajs_per_batch,
            traj_format=traj_format,
        )
        if self._remote_buffer is not None and (
            split_trajs or postproc is not None or trajs_per_batch is not None
        ):
            raise ValueError(
                "replay_buffer: a RayReplayBuffer is filled by the actors with raw batches; "
                "expected no split_trajs, postproc or trajs_per_batch with it"
            )
        configs = self._remote_configs(remote_configs)
        if not ray.is_initialized():
            ray.init(**dict(ray_init_config or {}))
        host = ray.remote(_CollectorHost)
        worker_kwargs = {**kwargs, "frames_per_batch": frames_per_batch, "total_frames": -1}
        self._actors = [
            host.options(**config).remote(index, self.num_workers, fn, policy, worker_kwargs)
            for index, (fn, config) in enumerate(zip(fns, configs))
        ]
        self._pending: dict[Any, int] = {}
        self._frames = 0
        self._iter = -1
        self.closed = False

    def _remote_configs(self, remote_configs: Any) -> list[dict]:
        if remote_configs is None or isinstance(remote_configs, Mapping):
            return [{"num_cpus": 1, **dict(remote_configs or {})}] * self.num_workers
        configs = [dict(config) for config in remote_configs]
        if len(configs) != self.num_workers:
            raise ValueError(
                f"remote_configs: expected {self.num_workers} dicts (one per actor), got "
                f"{len(configs)}"
            )
        return configs

    # ------------------------------------------------------------- iteration
    def _submit(self, index: int) -> None:
        actor = self._actors[index]
        if self._remote_buffer is not None:
            ref = actor.collect_into.remote(self._remote_buffer)
        else:
            ref = actor.collect.remote()
        self._pending[ref] = index

    def _get(self, ref: Any) -> Any:
        ray = _import_ray()
        index = self._pending.pop(ref)
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            self.shutdown()
            raise WorkerError(
                f"Ray collector actor {index} died while collecting; the collector was shut "
                f"down ({type(err).__name__}: {err})"
            ) from err
        except ray.exceptions.RayTaskError as err:
            self.shutdown()
            raise WorkerError(
                f"Ray collector actor {index} failed while collecting:\n{err}"
            ) from err

    def _raw_batches(self) -> Iterator[TensorDictBase]:
        if self.closed:
            raise RuntimeError("RayCollector is shut down: build a new collector to collect again")
        ray = _import_ray()
        while self._frames < self.total_frames:
            self._iter += 1
            if self.sync:
                for index in range(self.num_workers):
                    self._submit(index)
                results = [self._get(ref) for ref in list(self._pending)]
            else:
                for index in set(range(self.num_workers)) - set(self._pending.values()):
                    self._submit(index)
                (ref,), _ = ray.wait(list(self._pending), num_returns=1)
                results = [self._get(ref)]
            if self._remote_buffer is not None:
                self._frames += sum(results)
                yield None
                continue
            data = results[0] if len(results) == 1 and not self.sync else torch.stack(results, 0)
            self._frames += data.numel()
            yield data

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yield the batches (None per batch when a replay buffer receives them)."""
        if self._remote_buffer is None:
            yield from super().iterator()
            return
        yield from self._raw_batches()

    # ------------------------------------------------------------- interface
    @property
    def actors(self) -> list:
        """The handles of the collector actors, in order."""
        return list(self._actors)

    def update_policy_weights_(self, policy_weights: Any = None, **kwargs: Any) -> None:
        """Send new weights (one object in the Ray store) to every actor's policy.

        Args:
            policy_weights: a TensorDict of parameters, a module or a state dict; None sends
                the current weights of the policy given at construction.
            **kwargs: ``weights=`` is accepted as another name of ``policy_weights``.
        """
        ray = _import_ray()
        if policy_weights is None:
            policy_weights = kwargs.pop("weights", None)
        if kwargs:
            raise TypeError(
                f"update_policy_weights_: unexpected keyword arguments {sorted(kwargs)}"
            )
        if policy_weights is None:
            if not isinstance(self.policy, torch.nn.Module):
                return
            policy_weights = self.policy
        if isinstance(policy_weights, Mapping) and not isinstance(policy_weights, TensorDictBase):
            weights: Any = dict(policy_weights)
        else:
            weights = as_weights(policy_weights)
        ref = ray.put(weights)
        ray.get([actor.update_weights.remote(ref) for actor in self._actors])

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the actors' envs one after the other and return the next seed."""
        ray = _import_ray()
        for actor in self._actors:
            seed = ray.get(actor.set_seed.remote(seed, static_seed))
        return seed

    def state_dict(self) -> OrderedDict:
        """The state of every actor's collector (``worker0``, ...) and the frame counter."""
        ray = _import_ray()
        states = ray.get([actor.state_dict.remote() for actor in self._actors])
        state = OrderedDict((f"worker{i}", value) for i, value in enumerate(states))
        state["frames"] = self._frames
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        ray = _import_ray()
        ray.get(
            [
                actor.load_state_dict.remote(state_dict[f"worker{i}"])
                for i, actor in enumerate(self._actors)
                if f"worker{i}" in state_dict
            ]
        )
        self._frames = state_dict.get("frames", self._frames)

    def shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop every actor (their envs are closed when they still answer); idempotent."""
        if self.__dict__.get("closed", True):
            return
        self.closed = True
        ray = _import_ray()
        self._pending.clear()
        done = [actor.shutdown.remote() for actor in self._actors]
        try:
            ray.wait(done, num_returns=len(done), timeout=10.0 if timeout is None else timeout)
        finally:
            for actor in self._actors:
                ray.kill(actor)

    def __repr__(self) -> str:
        total = "endless" if math.isinf(self.total_frames) else int(self.total_frames)
        return (
            f"{type(self).__name__}(num_collectors={self.num_workers}, sync={self.sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={total})"
        )
