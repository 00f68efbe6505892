"""EnvCreator: a picklable env constructor that knows the env's metadata in advance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle
import torch
from tensordict import TensorDictBase

from tdrl.data.replay_buffers.process_lock import ProcessLock
from tdrl.envs.metadata import EnvMetaData

__all__ = ["EnvCreator", "env_creator", "get_env_metadata"]


def get_env_metadata(
    create_env_fn: Callable[..., Any],
    create_env_kwargs: dict | None = None,
    check: Callable[[Any], None] | None = None,
) -> EnvMetaData:
    """Build an env, read its :class:`EnvMetaData` and close it.

    An :class:`EnvCreator` called without extra keyword arguments answers from
    the metadata it already holds, without building an env. ``check``, if given,
    is called with the built env before its metadata is read.
    """
    kwargs = create_env_kwargs or {}
    if isinstance(create_env_fn, EnvCreator) and not kwargs:
        return create_env_fn.meta_data
    env = create_env_fn(**kwargs)
    try:
        if check is not None:
            check(env)
        return EnvMetaData.metadata_from_env(env)
    finally:
        env.close()


def _to_shared(value: Any) -> Any:
    """``value`` with its tensors (also inside dicts and tensordicts) in shared memory."""
    if isinstance(value, torch.Tensor):
        return value.share_memory_() if value.device.type == "cpu" else value
    if isinstance(value, TensorDictBase):
        return value.share_memory_()
    if isinstance(value, dict):
        return type(value)((key, _to_shared(item)) for key, item in value.items())
    return value


class EnvCreator:
    """Wraps an env constructor; builds one env at creation to read its metadata and state.

    Batched envs read the specs of an ``EnvCreator`` from its
    :attr:`meta_data` instead of building a throwaway env, and pass them to their
    workers. An ``EnvCreator`` pickles with cloudpickle, so lambdas and local
    functions can be sent to worker processes.

    With ``share_memory`` (the default), the env built at creation is reset and takes
    one random step (so that state built from the first data exists), then its state
    (its ``state_dict()``: parameters, buffers and transform statistics such as
    :class:`~tdrl.envs.VecNorm`'s) is moved to shared memory, and every env the
    creator builds, in this process or in worker processes, loads it by reference:
    they all read and update the same tensors, which :meth:`state_dict` returns. Their
    statistics updates take turns under one :class:`ProcessLock` of the creator (given to
    every module with a ``use_process_lock`` method).

    Args:
        create_env_fn: a callable returning an env.
        create_env_kwargs: keyword arguments passed to ``create_env_fn``.
        share_memory: share the env state between the envs this creator builds.
        **kwargs: merged into ``create_env_kwargs``.

    Examples:
        >>> import pickle
        >>> from tdrl.envs import PendulumEnv
        >>> creator = EnvCreator(lambda: PendulumEnv())
        >>> creator.meta_data.batch_size
        torch.Size([])
        >>> env = pickle.loads(pickle.dumps(creator))()
        >>> env.observation_spec["th"].shape
        torch.Size([])
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any],
        create_env_kwargs: dict | None = None,
        share_memory: bool = True,
        **kwargs: Any,
    ) -> None:
        if not callable(create_env_fn):
            raise TypeError(
                f"EnvCreator create_env_fn: expected a callable, got {type(create_env_fn).__name__}"
            )
        if create_env_kwargs is not None and not isinstance(create_env_kwargs, dict):
            raise TypeError(
                "EnvCreator create_env_kwargs: expected a dict, "
                f"got {type(create_env_kwargs).__name__}"
            )
        self.create_env_fn = create_env_fn
        self.create_env_kwargs = {**(create_env_kwargs or {}), **kwargs}
        self.share_memory = share_memory
        self._lock = ProcessLock("EnvCreator shared-state lock") if share_memory else None
        env = create_env_fn(**self.create_env_kwargs)
        try:
            self._meta_data = EnvMetaData.metadata_from_env(env)
            state = {}
            if share_memory:
                # one reset and one random step build the state that transforms create on
                # their first data, so that it exists (and is shared) before any worker starts
                env.rand_step(env.reset())
                state = env.state_dict()
            self._shared_state = _to_shared(dict(state))
        finally:
            env.close()

    @property
    def meta_data(self) -> EnvMetaData:
        """The metadata (specs, batch size, device, batch lock) of the env this creator builds."""
        return self._meta_data

    def state_dict(self) -> dict:
        """The state shared by the envs this creator builds (live shared-memory tensors)."""
        return self._shared_state

    def __call__(self, **kwargs: Any) -> Any:
        """Build an env; ``kwargs`` override the stored keyword arguments.

        The env loads the shared state by reference (``load_state_dict(..., assign=True)``),
        so its updates are seen by the other envs of this creator.
        """
        env = self.create_env_fn(**{**self.create_env_kwargs, **kwargs})
        if self._shared_state:
            env.load_state_dict(self._shared_state, strict=False, assign=True)
            for module in env.modules():
                if hasattr(module, "use_process_lock"):
                    module.use_process_lock(self._lock)
        return env

    def make_variant(self, **kwargs: Any) -> EnvCreator:
        """A creator of the same env with some keyword arguments changed, sharing this state.

        The envs built by both creators read and update the same shared state (see
        :meth:`state_dict`: :class:`~tdrl.envs.VecNorm`'s statistics, for instance) under
        the same lock; the variant's metadata are read from an env built with its arguments.

        Examples:
            >>> from tdrl.envs import PendulumEnv
            >>> creator = EnvCreator(PendulumEnv, seed=0)
            >>> variant = creator.make_variant(seed=1)
            >>> variant.create_env_kwargs, creator.create_env_kwargs
            ({'seed': 1}, {'seed': 0})
            >>> variant.state_dict() is creator.state_dict()
            True
        """
        variant = object.__new__(type(self))
        variant.__dict__.update(self.__dict__)  # the same shared state and lock
        variant.create_env_kwargs = {**self.create_env_kwargs, **kwargs}
        env = self.create_env_fn(**variant.create_env_kwargs)
        try:
            variant._meta_data = EnvMetaData.metadata_from_env(env)
        finally:
            env.close()
        return variant

    def __getstate__(self) -> dict:
        return {
            "create_env_fn": cloudpickle.dumps(self.create_env_fn),
            "create_env_kwargs": self.create_env_kwargs,
            "share_memory": self.share_memory,
            "meta_data": self._meta_data,
            "shared_state": self._shared_state,
            "lock": self._lock,
        }

    def __setstate__(self, state: dict) -> None:
        self.create_env_fn = cloudpickle.loads(state["create_env_fn"])
        self.create_env_kwargs = state["create_env_kwargs"]
        self.share_memory = state["share_memory"]
        self._meta_data = state["meta_data"]
        self._shared_state = _to_shared(state["shared_state"])
        self._lock = state["lock"]

    def __repr__(self) -> str:
        name = getattr(self.create_env_fn, "__name__", type(self.create_env_fn).__name__)
        return f"EnvCreator({name}, create_env_kwargs={self.create_env_kwargs})"


def env_creator(fn: Callable[..., Any]) -> EnvCreator:
    """Shorthand for ``EnvCreator(fn)``.

    Examples:
        >>> from tdrl.envs import PendulumEnv
        >>> env_creator(PendulumEnv).meta_data.batch_locked
        False
    """
    return EnvCreator(fn)
