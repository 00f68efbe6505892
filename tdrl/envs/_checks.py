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
    shape = expected_shape(spec, data_batch, env_batch_ndim)
    if not shapes_match(shape, tuple(value.shape)):
        raise ValueError(
            SPEC_MISMATCH.format(
                kind=kind, key=key, what="shape", expected=shape, got=tuple(value.shape)
            )
        )
    dtype = getattr(spec, "dtype", None)
    if check_dtype and dtype is not None and value.dtype != dtype:
        raise TypeError(
            SPEC_MISMATCH.format(kind=kind, key=key, what="dtype", expected=dtype, got=value.dtype)
        )


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
