"""Collector: one constructor for collection in this process, in worker processes or on Ray.

``Collector(env_fn, policy, ...)`` collects in the calling process (it is then a
:class:`~tdrl.collectors.SyncDataCollector`); ``num_collectors`` / ``backend`` place the same
collection in worker processes (``"process"``) or Ray actors (``"ray"``) and return the matching
collector class, with the same iteration, replay-buffer, lifecycle and weight-update interface.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tdrl.collectors.sync import SyncDataCollector

__all__ = ["BACKENDS", "Collector"]

#: backend name -> the kind of collector it builds
BACKENDS = {
    "direct": "direct",
    "process": "process",
    "multiprocessing": "process",
    "ray": "ray",
}
#: keyword arguments the dispatch sets itself, so backend_options may not
_RESERVED = ("sync", "num_collectors", "create_env_fn")


def _check_num_collectors(num_collectors: Any) -> int | None:
    if num_collectors is None:
        return None
    if isinstance(num_collectors, bool) or not isinstance(num_collectors, int):
        raise TypeError(
            "num_collectors: expected a positive integer, got "
            f"{type(num_collectors).__name__} {num_collectors!r}"
        )
    if num_collectors < 1:
        raise ValueError(f"num_collectors: expected a positive integer, got {num_collectors}")
    return num_collectors


def _env_fns(create_env_fn: Any, num_collectors: int | None) -> tuple[list, int]:
    """The list of env constructors, one per collector, and their number."""
    if isinstance(create_env_fn, Sequence) and not isinstance(create_env_fn, str):
        fns = list(create_env_fn)
        if not fns:
            raise ValueError("create_env_fn: expected at least one env constructor, got []")
        if num_collectors is not None and num_collectors != len(fns):
            raise ValueError(
                f"num_collectors={num_collectors} does not match the {len(fns)} env "
                "constructors given in create_env_fn"
            )
        return fns, len(fns)
    count = num_collectors or 1
    return [create_env_fn] * count, count


def _merge_options(backend_options: Mapping[str, Any] | None, kwargs: dict) -> dict:
    options = dict(backend_options or {})
    reserved = sorted(key for key in options if key in _RESERVED)
    if reserved:
        raise ValueError(
            f"backend_options: {reserved} are reserved (set by Collector itself); pass them "
            "as Collector arguments instead"
        )
    duplicate = sorted(set(options) & set(kwargs))
    if duplicate:
        raise ValueError(
            f"backend_options: {duplicate} given both there and as keyword arguments; "
            "expected each option once (duplicate)"
        )
    return {**kwargs, **options}


class Collector(SyncDataCollector):
    """Collect batches of steps with a policy, in this process or spread over workers.

    With the default backend and one env constructor this is a
    :class:`~tdrl.collectors.SyncDataCollector` (see it for every collection argument).
    Several collectors (``num_collectors=N`` or a list of env constructors) run in worker
    processes: the result is a :class:`~tdrl.collectors.MultiSyncDataCollector` when
    ``sync=True`` (batches gathered from every worker) and a
    :class:`~tdrl.collectors.MultiaSyncDataCollector` otherwise (the first batch ready).
    ``backend="ray"`` runs the collectors as Ray actors (:class:`~tdrl.collectors.RayCollector`).

    Args:
        create_env_fn: an env or env constructor, or a list of constructors (one per collector).
        policy: the collection policy.
        backend: ``None`` (in process for one collector, worker processes for more),
            ``"direct"``, ``"process"`` (or ``"multiprocessing"``) or ``"ray"``.
        backend_options: extra keyword arguments of the backend's collector class (for Ray,
            ``remote_configs``, ``ray_init_config``...).
        num_collectors: the number of collectors (the length of a list of constructors by
            default).
        sync: with several collectors, gather every worker's batch (True) or yield batches
            as they come (False, the default).
        **kwargs: the collection arguments of :class:`~tdrl.collectors.SyncDataCollector`.

    Examples:
        >>> from tdrl.collectors import Collector
        >>> from tdrl.envs import PendulumEnv
        >>> collector = Collector(PendulumEnv(), frames_per_batch=20, total_frames=40)
        >>> type(collector).__name__
        'Collector'
        >>> [data.batch_size for data in collector]
        [torch.Size([20]), torch.Size([20])]
        >>> collector.shutdown()
    """

    def __new__(
        cls,
        *args: Any,
        backend: str | None = None,
        backend_options: Mapping[str, Any] | None = None,
        num_collectors: int | None = None,
        sync: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Build the collector class that matches ``backend`` and the number of collectors."""
        if len(args) > 2:
            raise TypeError(
                f"Collector takes at most 2 positional arguments (create_env_fn, policy), got "
                f"{len(args)}; pass the other arguments by keyword"
            )
        if cls is not Collector:
            return super().__new__(cls)
        if backend is not None and backend not in BACKENDS:
            raise ValueError(
                f"backend: expected one of {sorted(BACKENDS)} or None, got {backend!r}"
            )
        num_collectors = _check_num_collectors(num_collectors)
        named = dict(zip(("create_env_fn", "policy"), args))
        duplicate = sorted(set(named) & set(kwargs))
        if duplicate:
            raise TypeError(f"Collector got multiple values for {duplicate}")
        kwargs = {**named, **kwargs}
        create_env_fn = kwargs.pop("create_env_fn", None)
        if create_env_fn is None:
            raise TypeError("Collector: create_env_fn is required (an env or env constructor)")
        fns, count = _env_fns(create_env_fn, num_collectors)
        kind = BACKENDS[backend] if backend is not None else ("direct" if count == 1 else "process")
        if kind == "direct":
            if num_collectors not in (None, 1):
                raise ValueError(
                    f"backend='direct' runs at most one collector in this process, got "
                    f"num_collectors={num_collectors}"
                )
            if count != 1:
                raise ValueError(f"backend='direct' needs exactly one env constructor, got {count}")
            if backend_options:
                raise ValueError(
                    f"backend_options: the direct backend takes none, got {sorted(backend_options)}"
                )
            return super().__new__(cls)
        options = _merge_options(backend_options, kwargs)
        if kind == "ray":
            from tdrl.collectors.ray_collector import RayCollector

            return RayCollector(fns, sync=bool(sync), **options)
        from tdrl.collectors.multi import MultiaSyncDataCollector, MultiSyncDataCollector

        target: Callable[..., Any] = MultiSyncDataCollector if sync else MultiaSyncDataCollector
        return target(fns, **options)

    def __init__(
        self,
        *args: Any,
        backend: str | None = None,
        backend_options: Mapping[str, Any] | None = None,
        num_collectors: int | None = None,
        sync: bool | None = None,
        **kwargs: Any,
    ) -> None:
        named = dict(zip(("create_env_fn", "policy"), args))
        kwargs = {**named, **kwargs}
        create_env_fn = kwargs.pop("create_env_fn")
        if isinstance(create_env_fn, Sequence) and not isinstance(create_env_fn, str):
            (create_env_fn,) = create_env_fn
        self.backend = "direct"
        super().__init__(create_env_fn, **kwargs)
