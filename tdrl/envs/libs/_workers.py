"""``num_workers=N`` for simulator env classes: N copies of the env in a ParallelEnv."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

__all__ = ["parallel_copies", "pop_num_workers"]


def pop_num_workers(kwargs: dict, owner: str) -> int | None:
    """Remove ``num_workers`` from ``kwargs`` and validate it (None: a single env)."""
    num_workers = kwargs.pop("num_workers", None)
    if num_workers is None:
        return None
    if isinstance(num_workers, bool) or not isinstance(num_workers, int):
        raise TypeError(f"{owner} num_workers: expected an int >= 1, got {num_workers!r}")
    if num_workers < 1:
        raise ValueError(f"{owner} num_workers: expected an int >= 1, got {num_workers}")
    return num_workers


def parallel_copies(
    env_cls: type, num_workers: int, args: tuple, kwargs: dict, *, start: bool = True
) -> Any:
    """A :class:`~tdrl.envs.ParallelEnv` of ``num_workers`` envs ``env_cls(*args, **kwargs)``.

    A ``device`` given as a list holds one device per worker.
    """
    from tdrl.envs.batched import ParallelEnv

    kwargs = dict(kwargs)
    device = kwargs.pop("device", None)
    if isinstance(device, Sequence) and not isinstance(device, str):
        if len(device) != num_workers:
            raise ValueError(
                f"{env_cls.__name__} device: expected one device per worker "
                f"({num_workers}), got {len(device)}"
            )
        per_worker = [{"device": item} for item in device]
        parent_device = device[0] if len(set(map(str, device))) == 1 else None
    else:
        per_worker = [{"device": device}] * num_workers
        parent_device = device
    make = functools.partial(env_cls, *args, **kwargs)
    env = ParallelEnv(num_workers, make, per_worker, device=parent_device)
    if start:
        env.start()
    return env
