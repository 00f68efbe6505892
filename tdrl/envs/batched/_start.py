"""Choice of the multiprocessing start method used by batched-env workers.

The global start method of the user's program is never changed: workers are
started from a context object (``multiprocessing.get_context(method)``).

``fork`` is the fastest (the worker inherits the loaded modules and the shared
buffers) and is picked when it is safe: on Linux, with CUDA not initialised in
the parent, no JAX runtime started (it runs native threads) and no other
Python thread running (a thread could hold a lock at fork time that the child
would then never see released). Otherwise a fork
server preloaded with torch, tensordict and tdrl is used, so that each worker
forks from a process that already imported them; ``spawn`` is the last resort
(platforms without fork).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import os
import sys
import threading
from collections.abc import Iterator
from multiprocessing.context import BaseContext

from tdrl._utils import drop_unset_tensordict_options

#: Modules imported once by the fork server so that workers start without re-importing them.
FORKSERVER_PRELOAD = ["torch", "tensordict", "tdrl.envs"]

UNKNOWN_METHOD = "mp_start_method: expected one of {expected}, got {got!r}"


def fork_unsafe_reason() -> str | None:
    """Why ``fork`` would be unsafe in this process right now, or None when it is safe."""
    if not sys.platform.startswith("linux"):
        return f"the platform is {sys.platform}, fork is only used on Linux"
    if "fork" not in multiprocessing.get_all_start_methods():
        return "fork is not available"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in this process"
    if _jax_started():
        return "JAX has started its runtime in this process (its threads do not survive a fork)"
    if threading.active_count() > 1:
        return f"{threading.active_count() - 1} other Python thread(s) are running"
    return None


def _jax_started() -> bool:
    """Whether JAX runs in this process (imported, with a backend started or unknown)."""
    if "jax" not in sys.modules:
        return False
    bridge = sys.modules.get("jax._src.xla_bridge")
    started = getattr(bridge, "backends_are_initialized", None)
    return True if started is None else bool(started())


def default_start_method() -> str:
    """The fastest safe start method: fork when safe, else forkserver, else spawn."""
    if fork_unsafe_reason() is None:
        return "fork"
    if "forkserver" in multiprocessing.get_all_start_methods():
        return "forkserver"
    return "spawn"


def validate_start_method(method: str | None) -> str | None:
    """Check a user-given start method (None means: choose at start time)."""
    if method is None:
        return None
    available = multiprocessing.get_all_start_methods()
    if not isinstance(method, str) or method not in available:
        raise ValueError(UNKNOWN_METHOD.format(expected=available, got=method))
    return method


def get_context(method: str | None) -> BaseContext:
    """A multiprocessing context for ``method`` (None: :func:`default_start_method`)."""
    method = validate_start_method(method) or default_start_method()
    if method != "fork":
        # the new interpreter imports tensordict again and must be able to parse its options
        drop_unset_tensordict_options(os.environ)
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        # Only affects the fork server process; ignored once that server runs.
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return context


@contextlib.contextmanager
def global_start_method_preserved() -> Iterator[None]:
    """Undo the side effect of starting ``forkserver`` / ``spawn`` processes.

    Starting such a process reads ``multiprocessing.get_start_method()``, which
    fixes the program's default start method when it was still unset; this
    restores the unset state so the user's program can still choose its own.
    """
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        yield
    finally:
        default = multiprocessing.context._default_context
        if before is None and multiprocessing.get_start_method(allow_none=True) is not None:
            default._actual_context = None
