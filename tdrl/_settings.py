"""Process-wide switches read from environment variables.

Each switch is an environment variable so that worker processes (batched envs,
collectors) started from a process inherit the value that process uses:

* ``RL_WARNINGS`` (default on): tdrl's advisory warnings, the ones that point at a
  slower or unusual configuration rather than at an error.
* ``AUTO_UNWRAP_TRANSFORMED_ENV`` (default off): whether
  ``TransformedEnv(TransformedEnv(env, t1), t2)`` folds both transforms into one
  env over ``env`` when ``auto_unwrap`` is not given.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

__all__ = [
    "RL_WARNINGS",
    "auto_unwrap_transformed_env",
    "rl_warnings",
    "set_auto_unwrap_transformed_env",
]

RL_WARNINGS_VAR = "RL_WARNINGS"
AUTO_UNWRAP_VAR = "AUTO_UNWRAP_TRANSFORMED_ENV"

_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def parse_bool_var(name: str, value: str) -> bool:
    """Read the text of a boolean environment variable (``1/0``, ``true/false``, ``on/off``...)."""
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(
        f"environment variable {name}: expected a boolean such as 1/0 or true/false, got {value!r}"
    )


def rl_warnings() -> bool:
    """Whether tdrl emits its advisory warnings (the ``RL_WARNINGS`` variable, default on).

    The variable is read at each call, so setting it in ``os.environ`` takes effect at once.

    Examples:
        >>> import os
        >>> rl_warnings() == (os.environ.get("RL_WARNINGS", "1") != "0")
        True
    """
    value = os.environ.get(RL_WARNINGS_VAR)
    return True if value is None else parse_bool_var(RL_WARNINGS_VAR, value)


#: ``rl_warnings()`` when tdrl was imported.
RL_WARNINGS: bool = rl_warnings()

#: The value set by an active :class:`set_auto_unwrap_transformed_env`, else None.
_AUTO_UNWRAP: bool | None = None


def auto_unwrap_transformed_env(allow_none: bool = False) -> bool | None:
    """Whether a ``TransformedEnv`` built over another one folds the two by default.

    The value is the one of the innermost active :class:`set_auto_unwrap_transformed_env`,
    else the ``AUTO_UNWRAP_TRANSFORMED_ENV`` environment variable, else False (tdrl keeps
    nested transformed envs nested unless asked).

    Args:
        allow_none: return None instead of the default when nothing sets the value.

    Examples:
        >>> auto_unwrap_transformed_env()
        False
        >>> with set_auto_unwrap_transformed_env(True):
        ...     auto_unwrap_transformed_env()
        True
    """
    if _AUTO_UNWRAP is not None:
        return _AUTO_UNWRAP
    value = os.environ.get(AUTO_UNWRAP_VAR)
    if value is None:
        return None if allow_none else False
    return parse_bool_var(AUTO_UNWRAP_VAR, value)


class set_auto_unwrap_transformed_env(contextlib.ContextDecorator):  # noqa: N801
    """Context manager (or decorator) setting :func:`auto_unwrap_transformed_env`.

    The value is also written to the ``AUTO_UNWRAP_TRANSFORMED_ENV`` environment
    variable, so that processes started inside the block see it; on exit, both the
    setting and the variable return to what they were (the variable is removed if it
    was unset).

    Args:
        mode: True to fold nested transformed envs, False to keep them nested.

    Examples:
        >>> from tdrl.envs import PendulumEnv, StepCounter, TransformedEnv
        >>> inner = TransformedEnv(PendulumEnv(), StepCounter())
        >>> with set_auto_unwrap_transformed_env(True):
        ...     env = TransformedEnv(inner, StepCounter(step_count_key="other_count"))
        >>> type(env.base_env).__name__
        'PendulumEnv'
    """

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(
                f"set_auto_unwrap_transformed_env mode: expected a bool, got {type(mode).__name__}"
            )
        self.mode = mode
        self._saved: list[tuple[bool | None, str | None]] = []

    def __enter__(self) -> set_auto_unwrap_transformed_env:
        global _AUTO_UNWRAP
        self._saved.append((_AUTO_UNWRAP, os.environ.get(AUTO_UNWRAP_VAR)))
        _AUTO_UNWRAP = self.mode
        os.environ[AUTO_UNWRAP_VAR] = str(self.mode)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        global _AUTO_UNWRAP
        _AUTO_UNWRAP, variable = self._saved.pop()
        if variable is None:
            os.environ.pop(AUTO_UNWRAP_VAR, None)
        else:
            os.environ[AUTO_UNWRAP_VAR] = variable
