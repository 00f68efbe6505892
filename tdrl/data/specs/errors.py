"""Errors raised by spec checks, and the message templates they share.

tdrl raises ``ValueError`` for bad values and ``TypeError`` for bad types. Code written for
the reference API catches ``AssertionError`` when a value is not in its spec and
``RuntimeError`` when ``encode`` cannot give a value the spec's shape or when specs cannot be
stacked. The classes here
derive from both, so either ``except`` clause works.

Examples:
    >>> import torch
    >>> from tdrl.data import Bounded
    >>> try:
    ...     Bounded(0.0, 1.0, shape=(2,)).assert_is_in(torch.full((2,), 3.0))
    ... except AssertionError as err:
    ...     isinstance(err, ValueError)
    True
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SpecEncodeShapeError",
    "SpecKeyError",
    "SpecStackError",
    "SpecTypeError",
    "SpecValueError",
]

MSG_KEY = (
    "spec keys are a str or a (nested) tuple of str (key should be a Sequence<NestedKey>), "
    "got {key!r}"
)

MSG_SHAPE = "{where}: expected shape {expected}, got {got}"
MSG_DTYPE = "{where}: expected dtype {expected}, got {got}"


class SpecValueError(ValueError, AssertionError):
    """A value outside its spec: wrong shape or outside the spec's domain.

    Examples:
        >>> issubclass(SpecValueError, ValueError) and issubclass(SpecValueError, AssertionError)
        True
    """


class SpecTypeError(TypeError, AssertionError):
    """A value of the wrong kind or dtype for its spec.

    Examples:
        >>> issubclass(SpecTypeError, TypeError) and issubclass(SpecTypeError, AssertionError)
        True
    """


class SpecEncodeShapeError(ValueError, RuntimeError):
    """``encode`` got a value that cannot take the spec's shape.

    Examples:
        >>> import numpy as np
        >>> from tdrl.data import Unbounded
        >>> try:
        ...     Unbounded((3,)).encode(np.zeros(4))
        ... except SpecEncodeShapeError as err:
        ...     print(err)
        Shape mismatch: cannot encode a value of shape (4,) with a spec of shape (3,) (shape (3,) is invalid for input of size 4)
    """


class SpecKeyError(TypeError, RuntimeError):
    """A Composite key that is not a str or a (nested) tuple of str.

    tensordict reports invalid keys with a RuntimeError; this error is that and a TypeError.

    Examples:
        >>> from tdrl.data import Composite, Unbounded
        >>> try:
        ...     Composite()[0] = Unbounded(1)
        ... except SpecKeyError as err:
        ...     isinstance(err, TypeError) and isinstance(err, RuntimeError)
        True
    """


class SpecStackError(ValueError, RuntimeError):
    """Specs that cannot be stacked together (different kinds, dtypes, ndims or devices).

    Examples:
        >>> import torch
        >>> from tdrl.data import Bounded, Unbounded
        >>> try:
        ...     torch.stack([Bounded(0.0, 1.0, shape=(2,)), Unbounded((2,))])
        ... except SpecStackError as err:
        ...     str(err).startswith("Stacking specs cannot occur")
        True
    """


def _at(what: str, key: Any) -> str:
    """``"what at key 'k'"``, or just ``what`` for a spec checked on its own."""
    return what if key is None else f"{what} at key {key!r}"
