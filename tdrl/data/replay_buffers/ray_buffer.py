"""RayReplayBuffer: a replay buffer held by a Ray actor, usable from any actor or the driver.

Follows the Ray 2.x core API (``ray.remote``, ``ray.get``, actor handles); ``ray`` is imported
only when a buffer is built (``pip install ray``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["RayReplayBuffer"]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise ImportError(
            "RayReplayBuffer needs the 'ray' package: pip install ray (or tdrl[ray])"
        ) from err
    return ray


class _BufferHost:
    """The actor body: owns one replay buffer and runs the calls made on it."""

    def __init__(self, replay_buffer_cls: Any, args: tuple, kwargs: dict) -> None:
        torch.set_num_threads(1)
        self.buffer = replay_buffer_cls(*args, **kwargs)

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.buffer, name)(*args, **kwargs)

    def length(self) -> int:
        return len(self.buffer)

    def getitem(self, index: Any) -> Any:
        return self.buffer[index]

    def write_count(self) -> int:
        return self.buffer.write_count


class RayReplayBuffer:
    """A replay buffer living in a Ray actor: extend and sample it from anywhere in the cluster.

    The buffer (``replay_buffer_cls(*args, **kwargs)``) is built inside one actor; this
    object holds the actor's handle and forwards each call to it, so it can be passed to other
    actors (it pickles as the handle) which then write into and read from the same buffer.
    Calls block until the actor answers; an error raised in the actor is raised here.

    Args:
        *args: positional arguments of ``replay_buffer_cls``.
        replay_buffer_cls: the buffer class to build in the actor (default:
            :class:`~tdrl.data.ReplayBuffer`).
        ray_init_config: keyword arguments of ``ray.init``, used when Ray is not running yet.
        remote_config: options of the actor (``num_cpus``, ``name``, ...; ``num_cpus=0`` by
            default, so the buffer does not hold a CPU that collectors need).
        **kwargs: keyword arguments of ``replay_buffer_cls``.

    Examples:
        >>> import ray, torch  # doctest: +SKIP
        >>> from tensordict import TensorDict  # doctest: +SKIP
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer  # doctest: +SKIP
        >>> rb = RayReplayBuffer(  # doctest: +SKIP
        ...     storage=LazyTensorStorage(100), replay_buffer_cls=TensorDictReplayBuffer
        ... )
        >>> rb.extend(TensorDict({"x": torch.arange(10)}, [10]))  # doctest: +SKIP
        >>> len(rb), rb.sample(4).batch_size  # doctest: +SKIP
        (10, torch.Size([4]))
    """

    def __init__(
        self,
        *args: Any,
        replay_buffer_cls: type | None = None,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        ray = _import_ray()
        if replay_buffer_cls is None:
            from tdrl.data.replay_buffers.replay_buffers import ReplayBuffer

            replay_buffer_cls = ReplayBuffer
        if not callable(replay_buffer_cls):
            raise TypeError(
                "replay_buffer_cls: expected a replay buffer class, got "
                f"{type(replay_buffer_cls).__name__}"
            )
        if not ray.is_initialized():
            ray.init(**dict(ray_init_config or {}))
        options = {"num_cpus": 0, **dict(remote_config or {})}
        actor_cls = ray.remote(_BufferHost).options(**options)
        self._actor = actor_cls.remote(replay_buffer_cls, args, kwargs)
        # fail here, with the actor's error, when the buffer cannot be built
        ray.get(self._actor.length.remote())

    @property
    def actor(self) -> Any:
        """The handle of the Ray actor that holds the buffer."""
        return self._actor

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        ray = _import_ray()
        return ray.get(self._actor.call.remote(name, args, kwargs))

    def extend(self, data: Any) -> Any:
        """Write a batch of items; returns their indices."""
        return self._call("extend", data)

    def add(self, data: Any) -> Any:
        """Write one item; returns its index."""
        return self._call("add", data)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Sample a batch from the buffer (see the buffer class's ``sample``)."""
        return self._call("sample", batch_size, return_info=return_info)

    def update_priority(self, index: Any, priority: Any) -> None:
        """Update the priorities of sampled items (prioritized buffers)."""
        self._call("update_priority", index, priority)

    def empty(self) -> None:
        """Remove every item."""
        self._call("empty")

    def state_dict(self) -> dict[str, Any]:
        """The state of the buffer held by the actor."""
        return self._call("state_dict")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        self._call("load_state_dict", state_dict)

    def dumps(self, path: Any) -> None:
        """Save the buffer to ``path`` (written by the actor, on its node)."""
        self._call("dumps", str(path))

    def loads(self, path: Any) -> None:
        """Load the buffer from ``path`` (read by the actor, on its node)."""
        self._call("loads", str(path))

    @property
    def write_count(self) -> int:
        """The number of items written so far."""
        return _import_ray().get(self._actor.write_count.remote())

    def __len__(self) -> int:
        return _import_ray().get(self._actor.length.remote())

    def __getitem__(self, index: Any) -> Any:
        return _import_ray().get(self._actor.getitem.remote(index))

    def close(self) -> None:
        """Stop the actor (its data is dropped)."""
        _import_ray().kill(self._actor)

    def __getstate__(self) -> dict[str, Any]:
        return {"_actor": self._actor}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._actor = state["_actor"]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(actor={self._actor!r})"
