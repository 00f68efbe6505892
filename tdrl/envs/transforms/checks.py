"""Transforms that validate data without changing it."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from tdrl.envs.transforms.transform import Transform

__all__ = ["FiniteTensorDictCheck"]

NON_FINITE_ERROR = (
    "FiniteTensorDictCheck: Encountered a non-finite tensor at key {key!r}: expected finite "
    "values, got {count} non-finite value(s) (nan or inf) out of {numel}"
)


def _check_finite(tensordict: TensorDictBase, prefix: tuple = ()) -> None:
    for key, value in tensordict.items(include_nested=True, leaves_only=True):
        if not isinstance(value, torch.Tensor):
            continue
        if not (value.is_floating_point() or value.is_complex()):
            continue
        if not bool(torch.isfinite(value).all()):
            count = int((~torch.isfinite(value)).sum())
            full_key = (*prefix, *(key if isinstance(key, tuple) else (key,)))
            raise ValueError(
                NON_FINITE_ERROR.format(
                    key=full_key[0] if len(full_key) == 1 else full_key,
                    count=count,
                    numel=value.numel(),
                )
            )


class FiniteTensorDictCheck(Transform):
    """Raises ``ValueError`` when an env output (reset or step) holds a nan or an inf.

    Floating-point and complex entries are checked; other entries cannot be
    non-finite. On data that does not come from an env (``forward``), every entry
    is checked. The error names the first offending key.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import FiniteTensorDictCheck, GymEnv, TransformedEnv, check_env_specs
        >>> check_env_specs(TransformedEnv(GymEnv("Pendulum-v1"), FiniteTensorDictCheck()))
        >>> FiniteTensorDictCheck()(TensorDict({"x": torch.tensor([1.0, float("nan")])}))
        Traceback (most recent call last):
        ...
        ValueError: FiniteTensorDictCheck: Encountered a non-finite tensor at key 'x': expected finite values, got 1 non-finite value(s) (nan or inf) out of 2
    """  # noqa: E501

    def __init__(self) -> None:
        super().__init__()

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        _check_finite(next_tensordict)
        return next_tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        _check_finite(next_tensordict, ("next",))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        _check_finite(tensordict_reset)
        return tensordict_reset

    def __repr__(self) -> str:
        return "FiniteTensorDictCheck()"
