"""Transforms that change the dtype or the device of entries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Composite
from tdrl.envs.transforms.transform import (
    INPUT_ENTRIES,
    OUTPUT_ENTRIES,
    NestedKey,
    Transform,
    _unlocked_clone,
    map_input_specs,
    map_output_specs,
)

__all__ = [
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DoubleToFloat",
    "PinMemoryTransform",
]


def _keys_of_dtype(parent: Any, entries: tuple, dtype: torch.dtype) -> list:
    keys = []
    for name in entries:
        sub = parent.get(name, None)
        if sub is None:
            continue
        for key in sub.keys(True, True):
            if getattr(sub[key], "dtype", None) == dtype:
                keys.append(key)
    return keys


class DTypeCastTransform(Transform):
    """Casts entries from ``dtype_in`` to ``dtype_out`` (and inputs back to ``dtype_in``).

    Args:
        dtype_in: the dtype of the base env's entries.
        dtype_out: the dtype seen outside.
        in_keys: output entries to cast. None casts every output entry of dtype
            ``dtype_in`` (on data without an env: every entry of that dtype).
        out_keys: where to write the results (default: in place).
        in_keys_inv: input entries the base env expects in ``dtype_in``; the outside
            world provides them in ``dtype_out``. When neither ``in_keys`` nor
            ``in_keys_inv`` is given, every input entry of dtype ``dtype_in`` is cast.
        out_keys_inv: their outside names (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdrl.envs import DTypeCastTransform, GymEnv, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), DTypeCastTransform(
        ...     torch.float32, torch.float64, in_keys=["observation"], in_keys_inv=["action"]))
        >>> env.observation_spec["observation"].dtype, env.action_spec.dtype
        (torch.float64, torch.float64)
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        dtype_in: torch.dtype,
        dtype_out: torch.dtype,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        for name, dtype in (("dtype_in", dtype_in), ("dtype_out", dtype_out)):
            if not isinstance(dtype, torch.dtype):
                raise TypeError(
                    f"{type(self).__name__} {name}: expected a torch.dtype, got {dtype!r}"
                )
        self._lazy_keys = in_keys is None
        self._lazy_inv_keys = in_keys is None and in_keys_inv is None
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dtype_in = dtype_in
        self.dtype_out = dtype_out

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_out)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_in)

    @staticmethod
    def _cast_all(tensordict: TensorDictBase, source: torch.dtype, target: torch.dtype) -> Any:
        for key, value in list(tensordict.items(True, True)):
            if isinstance(value, torch.Tensor) and value.dtype == source:
                tensordict.set(key, value.to(target))
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Cast the ``in_keys`` entries (every ``dtype_in`` entry when none were given)."""
        if self._lazy_keys and not self.__dict__.get("_keys_resolved"):
            return self._cast_all(tensordict, self.dtype_in, self.dtype_out)
        return self._call(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._lazy_inv_keys and not self.__dict__.get("_inv_keys_resolved"):
            # no keys and no env specs to read them from: every dtype_out entry goes back
            return self._cast_all(tensordict, self.dtype_out, self.dtype_in)
        return super()._inv_call(tensordict)

    def _needs_inverse(self) -> bool:
        return self._lazy_inv_keys or bool(self.in_keys_inv)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        tolerance = self.missing_tolerance
        self.set_missing_tolerance(True)
        try:
            return self._call(tensordict_reset)
        finally:
            self.set_missing_tolerance(tolerance)

    def _cast_spec(self, spec: Any) -> Any:
        return spec.to(self.dtype_out)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Cast the specs of the ``in_keys`` entries (observations, rewards or done entries)."""
        output_spec = _unlocked_clone(output_spec)
        if self._lazy_keys:
            self.in_keys = [
                key
                for key in _keys_of_dtype(output_spec, OUTPUT_ENTRIES, self.dtype_in)
                if not (isinstance(key, str) and key in ("done", "terminated", "truncated"))
            ]
            self.__dict__["_keys_resolved"] = True
        return map_output_specs(self, output_spec, self.in_keys, self.out_keys, self._cast_spec)

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Cast the ``in_keys`` entries of a Composite (every ``dtype_in`` one without keys).

        A leaf spec (not a Composite) is cast as the spec of the entry.
        """
        if not isinstance(observation_spec, Composite):
            return self._cast_spec(observation_spec)
        keys = self.in_keys
        out_keys = self.out_keys
        if self._lazy_keys and not keys:
            keys = [k for k, v in observation_spec.items(True, True) if v.dtype == self.dtype_in]
            out_keys = keys
        for in_key, out_key in zip(keys, out_keys):
            if in_key in observation_spec.keys(True, True):
                observation_spec[out_key] = self._cast_spec(observation_spec[in_key])
        return observation_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Give the ``in_keys_inv`` entries their outside dtype."""
        input_spec = super().transform_input_spec(input_spec)
        if self._lazy_inv_keys:
            self.in_keys_inv = _keys_of_dtype(input_spec, INPUT_ENTRIES, self.dtype_in)
            self.__dict__["_inv_keys_resolved"] = True
        return map_input_specs(
            self, input_spec, self.in_keys_inv, self.out_keys_inv, self._cast_spec
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dtype_in={self.dtype_in}, dtype_out={self.dtype_out}, "
            f"in_keys={self.in_keys}, in_keys_inv={self.in_keys_inv})"
        )


class DoubleToFloat(DTypeCastTransform):
    """Casts ``float64`` entries to ``float32`` (and ``float32`` inputs back to ``float64``).

    Args:
        in_keys: output entries to cast (None: every ``float64`` output entry).
        out_keys: where to write the results (default: in place).
        in_keys_inv: input entries the base env expects in ``float64``.
        out_keys_inv: their outside names (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import DoubleToFloat
        >>> td = DoubleToFloat()(TensorDict({"x": torch.zeros(2, dtype=torch.float64)}, []))
        >>> td["x"].dtype
        torch.float32
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__(
            torch.float64,
            torch.float32,
            in_keys=in_keys,
            out_keys=out_keys,
            in_keys_inv=in_keys_inv,
            out_keys_inv=out_keys_inv,
        )


def _mixed(tensordict: TensorDictBase, moved_to: torch.device | None) -> TensorDictBase:
    """Drop the device of ``tensordict`` when some of its entries moved to another one."""
    if moved_to is not None and tensordict.device is not None and tensordict.device != moved_to:
        tensordict.clear_device_()
    return tensordict


class DeviceCastTransform(Transform):
    """Moves data to ``device`` (and inputs back to the base env's device).

    Without keys, whole tensordicts move and the transformed env reports ``device``
    as its device; with keys, only those entries move, and tensordicts (and the env)
    that then hold entries on several devices have no device (``None``). On the
    inverse path, entries the data lack are skipped.

    Args:
        device: the destination device.
        orig_device: the device of the base env (default: read from the env).

    Keyword Args:
        in_keys: output entries to move (None: everything).
        out_keys: where to write them (default: in place).
        in_keys_inv: input entries to move back (None: everything, when no
            ``in_keys`` were given either).
        out_keys_inv: their outside names.

    Examples:
        >>> from tdrl.envs import DeviceCastTransform, PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), DeviceCastTransform("cpu"))
        >>> env.device, env.reset().device
        (device(type='cpu'), device(type='cpu'))
    """

    def __init__(
        self,
        device: torch.device | str | int,
        orig_device: torch.device | str | int | None = None,
        *,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.device = torch.device(device)
        self.orig_device = None if orig_device is None else torch.device(orig_device)
        self._whole = in_keys is None and in_keys_inv is None

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.device, non_blocking=True)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self.orig_device is None:
            return value
        return value.to(self.orig_device, non_blocking=True)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self._whole:
            return next_tensordict.to(self.device, non_blocking=True)
        return _mixed(super()._call(next_tensordict), self.device)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._whole:
            if self.orig_device is None:
                return tensordict.clear_device_()
            return tensordict.to(self.orig_device, non_blocking=True)
        # entries the data lack have nothing to move (resets carry no action, for instance)
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            value = tensordict.get(out_key, None)
            if value is not None:
                tensordict.set(in_key, self._inv_apply_transform(value))
        return _mixed(tensordict, self.orig_device)

    def _reset_env_preprocess(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        if tensordict is None:
            return None
        return self._inv_call(tensordict)

    def _needs_inverse(self) -> bool:
        return self._whole or bool(self.in_keys_inv)

    def transform_env_device(self, device: torch.device | None) -> torch.device | None:
        """The destination device when whole tensordicts move; None when only some entries do."""
        if self.orig_device is None:
            self.orig_device = device
        if self._whole:
            return self.device
        return device if device == self.device else None

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Move the output specs (or the ``in_keys`` ones) to ``device``."""
        if self._whole:
            return output_spec.to(self.device)
        output_spec = super().transform_output_spec(output_spec)
        return map_output_specs(
            self, output_spec, self.in_keys, self.out_keys, lambda s: s.to(self.device)
        )

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Move the input specs (or the ``in_keys_inv`` ones) to ``device``."""
        if self._whole:
            return input_spec.to(self.device)
        input_spec = super().transform_input_spec(input_spec)
        return map_input_specs(
            self, input_spec, self.in_keys_inv, self.out_keys_inv, lambda s: s.to(self.device)
        )

    def __repr__(self) -> str:
        return f"DeviceCastTransform(device={self.device}, orig_device={self.orig_device})"


class PinMemoryTransform(Transform):
    """Pins the memory of env outputs so that copies to a CUDA device can be asynchronous.

    Does nothing when CUDA is not available.

    Examples:
        >>> from tdrl.envs import PendulumEnv, PinMemoryTransform, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(PendulumEnv(), PinMemoryTransform())
        >>> check_env_specs(env)
    """

    def __init__(self) -> None:
        super().__init__()
        self._active = torch.cuda.is_available()

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self._active:
            return next_tensordict.pin_memory()
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def __repr__(self) -> str:
        return "PinMemoryTransform()"
