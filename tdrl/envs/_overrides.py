"""Whether an env's step methods are still a library class's own (fast paths check this)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["override_reason"]


def override_reason(env: Any, stock: type, names: Iterable[str]) -> str | None:
    """Why ``env`` does not run ``stock``'s own methods ``names``, or None when it does.

    A method set on the instance, or one whose class attribute differs from ``stock``'s,
    is an override: a fast path replaying ``stock``'s behaviour must not run then.

    Examples:
        >>> class Env:
        ...     def step(self): ...
        >>> env = Env()
        >>> override_reason(env, Env, ["step"]) is None
        True
        >>> env.step = lambda: None
        >>> override_reason(env, Env, ["step"])
        'step set on the instance'
    """
    own = env.__dict__
    cls = type(env)
    for name in names:
        if name in own:
            return f"{name} set on the instance"
        if getattr(cls, name) is not getattr(stock, name):
            return f"{cls.__name__}.{name} overrides {stock.__name__}.{name}"
    return None
