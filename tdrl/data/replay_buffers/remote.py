"""RemoteTensorDictReplayBuffer: a TensorDict replay buffer other processes reach over RPC.

The buffer lives in one process (the buffer node). Other processes hold an RRef to it
(``torch.distributed.rpc.remote``) and call its methods through ``rpc.rpc_sync`` /
``rpc.rpc_async`` / ``rpc.remote``, or through the RRef's proxies (``rref.rpc_sync().sample(4)``).
"""

from __future__ import annotations

import functools
import inspect
import pickle
import traceback
from collections.abc import Callable
from typing import Any

from tdrl.data.replay_buffers.tensordict_buffers import TensorDictReplayBuffer

__all__ = ["RemoteTensorDictReplayBuffer"]

# dunder methods that make sense as remote calls (they take and return picklable values)
_REMOTE_DUNDERS = ("__len__", "__getitem__", "__setitem__")


def _rref_type() -> type | None:
    from torch.distributed import rpc

    return getattr(rpc, "PyRRef", None)


def _call_on_owner(rref: Any, name: str, args: tuple, kwargs: dict) -> tuple[bool, Any]:
    """Run ``name`` on the buffer ``rref`` holds; an error comes back as a value.

    RPC itself re-raises only some exception types as themselves (an ``IndexError`` arrives
    as a ``RuntimeError``); returning the exception keeps its type for the caller.
    """
    try:
        return True, getattr(rref.local_value(), name)(*args, **kwargs)
    except Exception as err:
        remote_trace = traceback.format_exc()
        try:  # the caller must be able to rebuild it
            pickle.loads(pickle.dumps(err))
        except Exception:
            err = RuntimeError(f"{type(err).__name__}: {err}")
        if hasattr(err, "add_note"):  # Python >= 3.11
            err.add_note(f"raised in the process that holds the replay buffer:\n{remote_trace}")
        return False, err


def _remote_method(cls: type, name: str, func: Callable) -> Callable:
    """Wrap ``func`` so that its ``self`` may be an RRef to a buffer instead of the buffer."""

    @functools.wraps(func)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self, RemoteTensorDictReplayBuffer):
            return func(self, *args, **kwargs)
        rref_type = _rref_type()
        if rref_type is None or not isinstance(self, rref_type):
            raise TypeError(
                f"{cls.__name__}.{name} expects a {cls.__name__} or an RRef to one as its first "
                f"argument, got {type(self).__name__}"
            )
        if not self.is_owner():
            # this process does not hold the buffer: run the same call on its owner
            from torch.distributed import rpc

            ok, value = rpc.rpc_sync(self.owner(), _call_on_owner, args=(self, name, args, kwargs))
            if not ok:
                raise value
            return value
        buffer = self.local_value()
        if not isinstance(buffer, RemoteTensorDictReplayBuffer):
            raise TypeError(
                f"{cls.__name__}.{name} expects an RRef to a {cls.__name__}, the RRef holds a "
                f"{type(buffer).__name__}"
            )
        return getattr(buffer, name)(*args, **kwargs)

    # pickled by reference in RPC messages: the name must resolve to this very function
    method.__module__ = cls.__module__
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    method._accepts_rref = True
    return method


def _wrap_public_methods(cls: type, names: Any) -> None:
    for name in names:
        if name.startswith("_") and name not in _REMOTE_DUNDERS:
            continue
        attr = inspect.getattr_static(cls, name, None)
        if not inspect.isfunction(attr) or getattr(attr, "_accepts_rref", False):
            continue
        setattr(cls, name, _remote_method(cls, name, attr))


class RemoteTensorDictReplayBuffer(TensorDictReplayBuffer):
    """A TensorDict replay buffer whose methods can be called through ``torch.distributed.rpc``.

    Used in one process it is a :class:`~tdrl.data.TensorDictReplayBuffer` with the same
    arguments and results. Built on one RPC worker with ``rpc.remote(node, cls, args=...)``,
    it becomes a buffer node the other workers share: every public method (``add``, ``extend``,
    ``sample``, ``update_priority``, ``update_tensordict_priority``, ``empty``, ``state_dict``,
    ``__len__``, ``__getitem__``, ...) accepts the RRef as its first argument, so
    ``rpc.rpc_sync(rref.owner(), cls.sample, args=(rref, 32))`` samples on the node and returns
    the batch to the caller. A call made with the RRef in a process that does not own it is
    forwarded to the owner. Arguments and results travel by pickling (TensorDicts and tensors
    are copied), so the ``"index"`` entry that a local ``extend`` writes into the given
    TensorDict is only in the returned indices for a remote caller. An error raised by the
    buffer (a bad argument, an empty buffer) is raised again in the caller with its type and
    message. Subclasses (a node that configures its storage, or calls ``rpc.init_rpc``) get
    the same treatment for the public methods they define.

    Args:
        priority_key: the entry read by :meth:`update_tensordict_priority` (``"td_error"``).
        **kwargs: as in :class:`~tdrl.data.ReplayBuffer` (``storage``, ``sampler``, ``writer``,
            ``transform``, ``batch_size``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, RemoteTensorDictReplayBuffer
        >>> rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
        >>> rb.extend(TensorDict({"obs": torch.arange(4)}, [4]))
        tensor([0, 1, 2, 3])
        >>> len(rb), sorted(rb.sample().keys())
        (4, ['index', 'obs'])
        >>> RemoteTensorDictReplayBuffer.__len__(rb)  # the form used with an RRef over RPC
        4
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _wrap_public_methods(cls, list(vars(cls)))


_wrap_public_methods(RemoteTensorDictReplayBuffer, dir(RemoteTensorDictReplayBuffer))
