"""Value-versus-spec checks shared by ``run_type_checks`` and ``check_env_specs``."""

from __future__ import annotations

from typing import Any

import torch

SPEC_MISMATCH = "{kind} spec mismatch at key {key!r}: expected {what} {expected}, got {got}"
MISSING_ENTRY = "{kind} spec mismatch at key {key!r}: the entry is missing from the data"


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
    """Check the actions of ``tensordict`` against the env's action spec."""
    ndim = len(env.batch_size)
    check_data("action", env.full_action_spec, env.action_keys, tensordict, ndim)


def check_outputs(env: Any, next_tensordict: Any) -> None:
    """Check a ``_step`` output against the env's observation, reward and done specs."""
    ndim = len(env.batch_size)
    check_data(
        "observation", env.full_observation_spec, env.observation_keys, next_tensordict, ndim
    )
    check_data("reward", env.full_reward_spec, env.reward_keys, next_tensordict, ndim)
    check_data("done", env.full_done_spec, env.done_keys, next_tensordict, ndim)
