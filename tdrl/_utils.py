"""Small internal utilities shared across tdrl, including :class:`implement_for`.

The process-wide switches of :mod:`tdrl._settings` are importable from here too.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from collections.abc import Callable
from typing import Any

from tdrl._settings import (
    RL_WARNINGS,
    auto_unwrap_transformed_env,
    rl_warnings,
    set_auto_unwrap_transformed_env,
)

__all__ = [
    "RL_WARNINGS",
    "auto_unwrap_transformed_env",
    "implement_for",
    "rl_warnings",
    "set_auto_unwrap_transformed_env",
]

_VERSION_RE = re.compile(r"\d+(?:\.\d+)*")

#: Module names currently preferred when several implementations match (set by backend setters).
_PREFERRED_MODULES: list[str] = []


def _parse_version(version: str) -> tuple[int, ...]:
    """Turns ``"0.26.2"`` into ``(0, 26, 2)``; pre-release suffixes are ignored."""
    match = _VERSION_RE.match(str(version).strip().lstrip("v"))
    if match is None:
        raise ValueError(
            f"cannot parse version string: expected digits like '1.2.3', got {version!r}"
        )
    parts = [int(part) for part in match.group(0).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


@functools.cache
def _installed_version(module_name: str) -> str | None:
    """The installed version of a top-level module, or None when it is not installed.

    The module is not imported: the version comes from the distribution metadata, or from
    ``__version__`` only when the module is already importable without metadata.
    """
    top = module_name.split(".")[0]
    if importlib.util.find_spec(top) is None:
        return None
    try:
        return importlib.metadata.version(top)
    except importlib.metadata.PackageNotFoundError:
        module = importlib.import_module(top)
        return getattr(module, "__version__", "0")


class _Implementation:
    __slots__ = ("module_name", "from_version", "to_version", "fn")

    def __init__(
        self, module_name: str, from_version: str | None, to_version: str | None, fn: Callable
    ) -> None:
        self.module_name = module_name
        self.from_version = from_version
        self.to_version = to_version
        self.fn = fn

    def matches(self) -> bool:
        version = _installed_version(self.module_name)
        if version is None:
            return False
        parsed = _parse_version(version)
        if self.from_version is not None and parsed < _parse_version(self.from_version):
            return False
        return not (self.to_version is not None and parsed >= _parse_version(self.to_version))

    def describe(self) -> str:
        low = self.from_version or "any"
        high = self.to_version or "any"
        return f"{self.module_name} [{low}, {high})"


class _Dispatcher:
    """The callable left in place of a function decorated several times by ``implement_for``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.implementations: list[_Implementation] = []
        self._resolved: dict[tuple[str, ...], Callable] = {}

    def add(self, implementation: _Implementation) -> None:
        self.implementations.append(implementation)
        self._resolved.clear()

    def resolve(self) -> Callable:
        key = tuple(_PREFERRED_MODULES)
        fn = self._resolved.get(key)
        if fn is not None:
            return fn
        candidates = [impl for impl in self.implementations if impl.matches()]
        if not candidates:
            wanted = "; ".join(impl.describe() for impl in self.implementations)
            installed = ", ".join(
                f"{name}=={_installed_version(name)}"
                for name in dict.fromkeys(impl.module_name for impl in self.implementations)
                if _installed_version(name) is not None
            )
            raise ImportError(
                f"no implementation of {self.name} fits the installed packages: expected one of "
                f"{wanted}, got {installed or 'none of these modules installed'}"
            )
        for preferred in reversed(_PREFERRED_MODULES):
            preferred_candidates = [impl for impl in candidates if impl.module_name == preferred]
            if preferred_candidates:
                candidates = preferred_candidates
                break
        fn = candidates[-1].fn
        self._resolved[key] = fn
        return fn


_REGISTRY: dict[str, _Dispatcher] = {}


class implement_for:
    """Decorator choosing between implementations of a function by installed library version.

    Several functions (or methods) with the same qualified name can each be decorated with a
    module name and a half-open version range ``[from_version, to_version)``; ``None`` leaves a
    side open. The choice is lazy: it happens at the first call, from the installed versions
    (read from package metadata, without importing the module), and is cached. When several
    implementations fit (for instance ``gym`` and ``gymnasium`` are both installed), the one whose
    module was selected with :class:`tdrl.envs.libs.gym.set_gym_backend` wins, then the one
    decorated last. Calling a function no implementation of which fits raises ``ImportError``.

    Args:
        module_name: the top-level module whose version decides, e.g. ``"gymnasium"``.
        from_version: the lowest version (inclusive) this implementation supports.
        to_version: the first version (exclusive) this implementation no longer supports.

    Examples:
        >>> from tdrl._utils import implement_for
        >>> @implement_for("gymnasium", None, "0.1.0")
        ... def api_generation():
        ...     return "ancient"
        >>> @implement_for("gymnasium", "0.29.0", None)
        ... def api_generation():
        ...     return "five-value step API"
        >>> api_generation()
        'five-value step API'
    """

    def __init__(
        self,
        module_name: str,
        from_version: str | None = None,
        to_version: str | None = None,
    ) -> None:
        if not isinstance(module_name, str):
            raise TypeError(
                f"implement_for module_name: expected a str, got {type(module_name).__name__}"
            )
        for version in (from_version, to_version):
            if version is not None:
                _parse_version(version)
        self.module_name = module_name
        self.from_version = from_version
        self.to_version = to_version

    def __call__(self, fn: Callable) -> Callable:
        name = f"{fn.__module__}.{fn.__qualname__}"
        dispatcher = _REGISTRY.get(name)
        if dispatcher is None:
            dispatcher = _Dispatcher(name)
            _REGISTRY[name] = dispatcher
        dispatcher.add(_Implementation(self.module_name, self.from_version, self.to_version, fn))

        @functools.wraps(fn)
        def dispatch(*args: Any, **kwargs: Any) -> Any:
            return dispatcher.resolve()(*args, **kwargs)

        dispatch._implement_for_dispatcher = dispatcher  # type: ignore[attr-defined]
        return dispatch

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(module_name={self.module_name!r}, "
            f"from_version={self.from_version!r}, to_version={self.to_version!r})"
        )


#: Options tensordict reads from the environment when it is imported.
_TENSORDICT_OPTIONS = ("LAZY_LEGACY_OP", "LIST_TO_STACK", "CAPTURE_NONTENSOR_STACK")


def drop_unset_tensordict_options(environ: Any) -> None:
    """Remove tensordict options that hold the text ``"None"`` from ``environ``.

    tensordict 0.14 writes ``"None"`` into these variables when one of its option
    contexts exits with the option unset (e.g. inside ``torch.stack`` of tensordicts with
    different shapes); a child process that imports tensordict then fails to parse it.
    ``"None"`` means unset, so removing the variable changes nothing in this process.
    """
    for name in _TENSORDICT_OPTIONS:
        if environ.get(name) == "None":
            del environ[name]
