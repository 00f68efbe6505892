"""Choice of the gym-like library (gymnasium or gym) used by the gym wrappers."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tdrl import _utils

__all__ = ["gym_backend", "set_gym_backend"]

#: Libraries tried, in order, when no backend was chosen explicitly.
_DEFAULT_BACKENDS = ("gymnasium", "gym")

_current_backend: ModuleType | None = None


def _import_backend(name: str) -> ModuleType:
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(
            f"gym backend {name!r} is not installed: expected an importable module such as "
            f"'gymnasium' (pip install gymnasium), got {name!r}"
        )
    return importlib.import_module(name)


def _default_backend() -> ModuleType:
    for name in _DEFAULT_BACKENDS:
        if importlib.util.find_spec(name) is not None:
            return importlib.import_module(name)
    raise ModuleNotFoundError(
        "no gym backend installed: expected 'gymnasium' or 'gym', got neither "
        "(pip install gymnasium)"
    )


def _set_current(backend: ModuleType | None) -> None:
    global _current_backend
    _current_backend = backend
    preferred = [name for name in _utils._PREFERRED_MODULES if name not in _DEFAULT_BACKENDS]
    if backend is not None:
        preferred.append(backend.__name__)
    _utils._PREFERRED_MODULES[:] = preferred


def gym_backend(submodule: str | None = None) -> ModuleType:
    """Returns the gym library in use, or one of its submodules.

    The library is the one chosen with :class:`set_gym_backend`, or gymnasium when it is
    installed, else gym. It is imported on the first call, never when tdrl is imported.

    Args:
        submodule: dotted name of a submodule to return instead, e.g. ``"wrappers"`` or
            ``"spaces"``.

    Examples:
        >>> from tdrl.envs.libs.gym import gym_backend, set_gym_backend
        >>> with set_gym_backend("gymnasium"):
        ...     print(gym_backend().__name__, gym_backend("spaces").__name__)
        gymnasium gymnasium.spaces
    """
    backend = _current_backend if _current_backend is not None else _default_backend()
    if submodule is None:
        return backend
    if not isinstance(submodule, str):
        raise TypeError(f"gym_backend submodule: expected a str, got {type(submodule).__name__}")
    return importlib.import_module(f"{backend.__name__}.{submodule}")


class set_gym_backend(contextlib.ContextDecorator):
    """Selects the gym library used by the gym wrappers: a context manager and a decorator.

    Inside the block (or the decorated function), :func:`gym_backend` returns the chosen library
    and the wrappers built there use it; the previous choice is restored on exit. Calling
    :meth:`set` makes the choice global instead. Implementations registered with
    :class:`tdrl._utils.implement_for` for the chosen library take precedence over those for
    another installed one.

    Args:
        backend: the library, as a module (``gymnasium``), a module name (``"gymnasium"``,
            ``"gym"``) or a callable returning the module. A name is imported only when the
            backend is entered.

    Examples:
        >>> import gymnasium
        >>> from tdrl.envs.libs.gym import GymEnv, gym_backend, set_gym_backend
        >>> with set_gym_backend(gymnasium):
        ...     env = GymEnv("Pendulum-v1")
        ...     print(gym_backend().__name__)
        gymnasium
        >>> @set_gym_backend("gymnasium")
        ... def make_env():
        ...     return GymEnv("CartPole-v1")
        >>> make_env().batch_size
        torch.Size([])
    """

    def __init__(self, backend: str | ModuleType | Callable[[], ModuleType]) -> None:
        if not isinstance(backend, (str, ModuleType)) and not callable(backend):
            raise TypeError(
                "set_gym_backend backend: expected a module, a module name or a callable "
                f"returning a module, got {type(backend).__name__}"
            )
        self._backend = backend
        self._previous: list[ModuleType | None] = []

    @property
    def backend(self) -> ModuleType:
        """The selected library, imported on first access."""
        backend = self._backend
        if isinstance(backend, str):
            backend = _import_backend(backend)
        elif not isinstance(backend, ModuleType):
            backend = backend()
            if not isinstance(backend, ModuleType):
                raise TypeError(
                    "set_gym_backend backend callable: expected it to return a module, got "
                    f"{type(backend).__name__}"
                )
        self._backend = backend
        return backend

    def set(self) -> None:
        """Makes the selected library the global backend (outside any ``with`` block)."""
        _set_current(self.backend)

    def __enter__(self) -> set_gym_backend:
        backend = self.backend
        self._previous.append(_current_backend)
        _set_current(backend)
        return self

    def __exit__(self, *exc: Any) -> None:
        _set_current(self._previous.pop())

    def __repr__(self) -> str:
        backend = self._backend
        name = backend.__name__ if isinstance(backend, ModuleType) else backend
        return f"{type(self).__name__}({name!r})"
