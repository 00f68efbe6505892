"""Exceptions of the replay-buffer components.

tdrl raises ``ValueError`` for bad values and ``TypeError`` for bad types. Where the reference
API raises ``RuntimeError`` for the same mistake, the exception is also a ``RuntimeError``, so
code written for that API (``except RuntimeError``) keeps working.
"""

from __future__ import annotations

__all__ = ["DataTypeError", "DataValueError"]


class DataTypeError(TypeError, RuntimeError):
    """Data of a type a component cannot take (also a ``RuntimeError``).

    Examples:
        >>> isinstance(DataTypeError("x"), TypeError), isinstance(DataTypeError("x"), RuntimeError)
        (True, True)
    """


class DataValueError(ValueError, RuntimeError):
    """Data of a shape or value a component cannot take (also a ``RuntimeError``).

    Examples:
        >>> isinstance(DataValueError("x"), ValueError), isinstance(DataValueError("x"), RuntimeError)
        (True, True)
    """
