"""Value-versus-spec checks shared by ``run_type_checks`` and ``check_env_specs``."""

from __future__ import annotations

from typing import Any

import torch

SPEC_MISMATCH = "{kind} spec mismatch at key {key!r}: expected {what} {expected}, got {got}"
MISSING_ENTRY = "{kind} spec mismatch at key {key!r}: the entry is missing from the data"
OUT_OF_SPEC = (
    "{kind} value out of spec at key {key!r}: expected a value in the domain of {spec}, got {got}"
)


def check_layout(
    kind: str, key: Any, value: Any, shape: torch.Size, dtype: torch.dtype
) -> torch.Tensor:
    """The per-step check of ``value`` against a spec's ``shape`` and ``dtype``.

    Callers run it only when a cheap comparison (``value.shape != shape or value.dtype !=
    dtype``) fails. The shape must match exactly (nothing is broadcast). A value of another
    dtype is cast when every value survives the cast (a ``1.0`` for an integer spec); a
    cast that would change a value (``0.7`` to ``0``) is refused. Returns the value to use;
    raises ``ValueError`` (shape) or ``TypeError`` (dtype, or not a tensor) naming ``key``,
    what was expected and what was received.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{kind} spec mismatch at key {key!r}: expected a tensor, got {type(value).__name__}"
        )
    if value.shape != shape:
        raise ValueError(
            SPEC_MISMATCH.format(
                kind=kind, key=key, what="shape", expected=tuple(shape), got=tuple(value.shape)
            )
        )
    if value.dtype == dtype:
        return value
    cast = value.to(dtype)
    if not torch.equal(cast.to(value.dtype), value):
        message = SPEC_MISMATCH.format(
            kind=kind, key=key, what="dtype", expected=dtype, got=value.dtype
        )
        raise TypeError(f"{message}, with values that a cast to {dtype} would change")
    return cast


def shapes_match(expected: tuple, got: tuple) -> bool:
    """Compare shapes, a ``-1`` in ``expected`` matching any size."""
    if len(expected) != len(got):
        return False
    return all(e == -1 or e == g for e, g in zip(expected, got))


def expected_shape(spec: Any, data_batch: torch.Size, env_batch_ndim: int) -> tuple:
    """Shape a value must have: the data's batch dims then the spec's own dims."""
    return tuple(data_batch) + tuple(spec.shape[env_batch_ndim:])


def spec_mismatch(
    spec: Any,
    value: torch.Tensor,
    data_batch: torch.Size,
    env_batch_ndim: int,
    check_dtype: bool = True,
) -> tuple[str, Any, Any] | None:
    """How a tensor disagrees with its spec: ``("shape" | "dtype", expected, got)``, or None.

    The one spec-versus-data comparison: ``run_type_checks`` raises ValueError / TypeError
    from it, ``check_env_specs`` an AssertionError.
    """
    shape = expected_shape(spec, data_batch, env_batch_ndim)
    got = tuple(value.shape)
    if not shapes_match(shape, got):
        return "shape", shape, got
    dtype = getattr(spec, "dtype", None)
    if check_dtype and dtype is not None and value.dtype != dtype:
        return "dtype", dtype, value.dtype
    return None


def check_value(
    kind: str,
    key: Any,
    spec: Any,
    value: Any,
    data_batch: torch.Size,
    env_batch_ndim: int,
    check_dtype: bool = True,
) -> None:
    """Raise ``ValueError`` / ``TypeError`` naming ``key`` when ``value`` does not fit ``spec``."""
    if value is None:
        raise ValueError(MISSING_ENTRY.format(kind=kind, key=key))
    if not isinstance(value, torch.Tensor):
        return
    mismatch = spec_mismatch(spec, value, data_batch, env_batch_ndim, check_dtype)
    if mismatch is None:
        return
    what, expected, got = mismatch
    error = ValueError if what == "shape" else TypeError
    raise error(SPEC_MISMATCH.format(kind=kind, key=key, what=what, expected=expected, got=got))


def check_data(
    kind: str,
    spec: Any,
    keys: list,
    data: Any,
    env_batch_ndim: int,
    check_dtype: bool = True,
) -> None:
    """Check every leaf ``keys`` of a Composite ``spec`` against ``data``."""
    for key in keys:
        check_value(
            kind, key, spec[key], data.get(key, None), data.batch_size, env_batch_ndim, check_dtype
        )


def check_inputs(env: Any, tensordict: Any) -> None:
    """Check the actions of ``tensordict`` against the env's action spec: layout and values."""
    ndim = len(env.batch_size)
    spec = env.full_action_spec
    check_data("action", spec, env.action_keys, tensordict, ndim)
    for key in env.action_keys:
        leaf = spec[key]
        value = tensordict.get(key)
        if isinstance(value, torch.Tensor) and hasattr(leaf, "is_in"):
            if tuple(value.shape) != tuple(leaf.shape):
                try:
                    leaf = leaf.expand(*value.shape)
                except (RuntimeError, ValueError):
                    continue  # a dynamic spec: the layout check above is all there is
            if not leaf.is_in(value):
                raise ValueError(
                    OUT_OF_SPEC.format(kind="action", key=key, spec=type(leaf).__name__, got=value)
                )


def check_outputs(env: Any, next_tensordict: Any) -> None:
    """Check a ``_step`` output against the env's observation, reward and done specs."""
    ndim = len(env.batch_size)
    check_data(
        "observation", env.full_observation_spec, env.observation_keys, next_tensordict, ndim
    )
    check_data("reward", env.full_reward_spec, env.reward_keys, next_tensordict, ndim)
    check_data("done", env.full_done_spec, env.done_keys, next_tensordict, ndim)
