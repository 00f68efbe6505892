"""Transforms that reshape rewards and values entry by entry.

Value maps (:class:`RewardScaling`, :class:`RewardClipping`, :class:`BinarizeReward`,
:class:`SignTransform`, :class:`ClipTransform`, :class:`LineariseReward`) act entry by
entry. Episode returns and targets live in :mod:`tdrl.envs.transforms.returns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Binary, Bounded, Categorical, Unbounded
from tdrl.envs.transforms.transform import (
    OUTPUT_ENTRIES,
    NestedKey,
    Transform,
    _apply_to_composite,
    _unlocked_clone,
    locate_spec,
    map_input_specs,
    map_output_specs,
)

__all__ = [
    "BinarizeReward",
    "ClipTransform",
    "LineariseReward",
    "LineariseRewards",
    "RewardClipping",
    "RewardScaling",
    "SignTransform",
    "SuccessReward",
]

KEY_SPEC_ERROR = "{owner}: {kind} key {key!r} is not in the env specs; available keys: {keys}"


# --------------------------------------------------------------------- helpers
def _keys_or(keys: Sequence[NestedKey] | NestedKey | None, default: list) -> Any:
    return default if keys is None else keys


def _bounds(spec: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Low / high tensors of a leaf spec (the dtype's range when it has none)."""
    if isinstance(spec, Bounded):
        return spec.low.clone(), spec.high.clone()
    dtype = spec.dtype
    if dtype.is_floating_point:
        lo, hi = -float("inf"), float("inf")
    elif dtype == torch.bool:
        lo, hi = 0, 1
    else:
        info = torch.iinfo(dtype)
        lo, hi = info.min, info.max
    shape = spec.shape
    return (
        torch.full(shape, lo, dtype=dtype, device=spec.device),
        torch.full(shape, hi, dtype=dtype, device=spec.device),
    )


def _clipped_spec(spec: Any, low: Any, high: Any) -> Any:
    """The spec of ``spec`` values clamped to ``[low, high]`` (None: no bound)."""
    lo, hi = _bounds(spec)
    if low is not None:
        lo = lo.clamp_min(low)
        hi = hi.clamp_min(low)
    if high is not None:
        lo = lo.clamp_max(high)
        hi = hi.clamp_max(high)
    return Bounded(lo, hi, shape=spec.shape, device=spec.device, dtype=spec.dtype)


def _affine_spec(spec: Any, fn: Any, dtype: torch.dtype) -> Any:
    """The spec of ``fn(value)`` for an increasing affine ``fn``: bounds mapped when finite."""
    if isinstance(spec, Bounded):
        lo, hi = fn(spec.low), fn(spec.high)
        lo, hi = torch.minimum(lo, hi), torch.maximum(lo, hi)
        if bool(torch.isfinite(lo).all()) and bool(torch.isfinite(hi).all()):
            return Bounded(
                lo.to(dtype), hi.to(dtype), shape=spec.shape, device=spec.device, dtype=dtype
            )
    return Unbounded(shape=spec.shape, device=spec.device, dtype=dtype)


# --------------------------------------------------------------- value maps
class RewardScaling(Transform):
    """Affine map of the reward: ``reward * scale + loc``, or ``(reward - loc) / scale``.

    Args:
        loc: the offset (number or tensor broadcastable to the reward).
        scale: the factor (number or tensor); clamped to at least ``1e-6``.
        in_keys: the entries to map (default ``["reward"]``).
        out_keys: where to write them (default: in place).
        standard_normal: use ``(reward - loc) / scale`` instead of ``reward * scale + loc``.

    Examples:
        >>> from tdrl.envs import GymEnv, RewardScaling, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1"), RewardScaling(loc=1.0, scale=0.5))
        >>> env.rollout(3)["next", "reward"].squeeze(-1)
        tensor([1.5000, 1.5000, 1.5000])
    """

    def __init__(
        self,
        loc: float | torch.Tensor,
        scale: float | torch.Tensor,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        standard_normal: bool = False,
    ) -> None:
        super().__init__(in_keys=_keys_or(in_keys, ["reward"]), out_keys=out_keys)
        dtype = torch.get_default_dtype()
        loc = torch.as_tensor(loc, dtype=dtype if not torch.is_tensor(loc) else None)
        scale = torch.as_tensor(scale, dtype=dtype if not torch.is_tensor(scale) else None)
        self.register_buffer("loc", loc)
        self.register_buffer("scale", scale.clamp_min(1e-6))
        self.standard_normal = bool(standard_normal)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        if self.standard_normal:
            return (reward - self.loc) / self.scale
        return reward * self.scale + self.loc

    def _spec(self, spec: Any) -> Any:
        dtype = torch.result_type(spec.zero(), self.scale)
        return _affine_spec(spec, self._apply_transform, dtype)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Map the bounds of bounded entries; other entries become unbounded."""
        output_spec = super().transform_output_spec(output_spec)
        return map_output_specs(self, output_spec, self.in_keys, self.out_keys, self._spec)

    def __repr__(self) -> str:
        return (
            f"RewardScaling(loc={self.loc.tolist()}, scale={self.scale.tolist()}, "
            f"standard_normal={self.standard_normal}, in_keys={self.in_keys})"
        )


class RewardClipping(Transform):
    """Clamps the reward to ``[clamp_min, clamp_max]``.

    Args:
        clamp_min: the lower bound (None: no lower bound).
        clamp_max: the upper bound (None: no upper bound).
        in_keys: the entries to clamp (default ``["reward"]``).
        out_keys: where to write them (default: in place).

    Examples:
        >>> from tdrl.envs import GymEnv, RewardClipping, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1"), RewardClipping(-0.5, 0.5))
        >>> env.reward_spec.high
        tensor([0.5000])
        >>> env.rollout(2)["next", "reward"].squeeze(-1)
        tensor([0.5000, 0.5000])
    """

    def __init__(
        self,
        clamp_min: float | None = None,
        clamp_max: float | None = None,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        _check_range(type(self).__name__, clamp_min, clamp_max, "clamp_min", "clamp_max")
        super().__init__(in_keys=_keys_or(in_keys, ["reward"]), out_keys=out_keys)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        return reward.clamp(self.clamp_min, self.clamp_max)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Give the clamped entries bounded specs."""
        output_spec = super().transform_output_spec(output_spec)
        return map_output_specs(
            self,
            output_spec,
            self.in_keys,
            self.out_keys,
            lambda spec: _clipped_spec(spec, self.clamp_min, self.clamp_max),
        )

    def __repr__(self) -> str:
        return (
            f"RewardClipping(clamp_min={self.clamp_min}, clamp_max={self.clamp_max}, "
            f"in_keys={self.in_keys})"
        )


def _check_range(owner: str, low: Any, high: Any, low_name: str, high_name: str) -> None:
    for name, value in ((low_name, low), (high_name, high)):
        if value is not None and not isinstance(value, (int, float)):
            raise TypeError(f"{owner} {name}: expected a number or None, got {value!r}")
    if low is not None and high is not None and low > high:
        raise ValueError(
            f"{owner}: expected {low_name} <= {high_name}, got {low_name}={low}, {high_name}={high}"
        )


class BinarizeReward(Transform):
    """Maps the reward to 1 where it is positive and to 0 elsewhere (int64).

    Args:
        in_keys: the entries to map (default ``["reward"]``).
        out_keys: where to write them (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import BinarizeReward
        >>> BinarizeReward()(TensorDict({"reward": torch.tensor([0.0, 2.0, -1.0])}))["reward"]
        tensor([0, 1, 0])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__(in_keys=_keys_or(in_keys, ["reward"]), out_keys=out_keys)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        return (reward > 0).to(torch.int64)

    @staticmethod
    def _spec(spec: Any) -> Any:
        if not spec.shape:
            return Categorical(2, shape=(), device=spec.device, dtype=torch.int64)
        return Binary(spec.shape[-1], shape=spec.shape, device=spec.device, dtype=torch.int64)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Give the mapped entries binary int64 specs."""
        output_spec = super().transform_output_spec(output_spec)
        return map_output_specs(self, output_spec, self.in_keys, self.out_keys, self._spec)


class SignTransform(Transform):
    """Replaces values by their sign (-1, 0 or 1), on outputs and, with ``in_keys_inv``, inputs.

    Args:
        in_keys: output entries (observations, rewards) to map.
        out_keys: where to write them (default: in place).
        in_keys_inv: input entries (actions, states) to map before they reach the base env.
        out_keys_inv: their outside names (default: ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs import GymEnv, SignTransform, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), SignTransform(in_keys=["observation"]))
        >>> check_env_specs(env)
        >>> set(env.reset()["observation"].abs().tolist()) <= {0.0, 1.0}
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.sign()

    _inv_apply_transform = _apply_transform

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return _call_tolerant(self, tensordict_reset)

    @staticmethod
    def _spec(spec: Any) -> Any:
        return Bounded(-1, 1, shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Give the mapped output entries ``[-1, 1]`` bounded specs."""
        output_spec = super().transform_output_spec(output_spec)
        return map_output_specs(self, output_spec, self.in_keys, self.out_keys, self._spec)

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Rename the inverse entries to their outside names (their specs are kept)."""
        input_spec = super().transform_input_spec(input_spec)
        return map_input_specs(
            self, input_spec, self.in_keys_inv, self.out_keys_inv, lambda spec: spec
        )


def _call_tolerant(transform: Transform, tensordict: TensorDictBase) -> TensorDictBase:
    """``transform._call`` skipping missing keys (rewards are absent after a reset)."""
    tolerance = transform.missing_tolerance
    transform.set_missing_tolerance(True)
    try:
        return transform._call(tensordict)
    finally:
        transform.set_missing_tolerance(tolerance)


class ClipTransform(Transform):
    """Clamps outputs (observations, rewards) and inputs (actions, states) to ``[low, high]``.

    Output specs become bounded by ``[low, high]`` (intersected with their own
    bounds); the outside specs of inverse entries too, so random actions stay in range.

    Args:
        in_keys: output entries to clamp.
        out_keys: where to write them (default: in place).
        in_keys_inv: input entries to clamp before they reach the base env.
        out_keys_inv: their outside names (default: ``in_keys_inv``).
        low: the lower bound (None: no lower bound).
        high: the upper bound (None: no upper bound). At least one bound is required.

    Examples:
        >>> from tdrl.envs import ClipTransform, GymEnv, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(
        ...     GymEnv("Pendulum-v1"),
        ...     ClipTransform(in_keys=["observation"], in_keys_inv=["action"], low=-0.5, high=0.5),
        ... )
        >>> check_env_specs(env)
        >>> env.action_spec.high
        tensor([0.5000])
        >>> bool((env.rollout(5)["next", "observation"].abs() <= 0.5).all())
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        low: float | None = None,
        high: float | None = None,
    ) -> None:
        _check_range(type(self).__name__, low, high, "low", "high")
        if low is None and high is None:
            raise TypeError("ClipTransform: expected at least one of low / high, got neither")
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.low = low
        self.high = high

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.clamp(self.low, self.high)

    _inv_apply_transform = _apply_transform

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return _call_tolerant(self, tensordict_reset)

    def _spec(self, spec: Any) -> Any:
        return _clipped_spec(spec, self.low, self.high)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Bound the clamped output entries."""
        output_spec = super().transform_output_spec(output_spec)
        return map_output_specs(self, output_spec, self.in_keys, self.out_keys, self._spec)

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Bound the outside specs of the clamped input entries."""
        input_spec = super().transform_input_spec(input_spec)
        return map_input_specs(self, input_spec, self.in_keys_inv, self.out_keys_inv, self._spec)

    def __repr__(self) -> str:
        return (
            f"ClipTransform(low={self.low}, high={self.high}, in_keys={self.in_keys}, "
            f"in_keys_inv={self.in_keys_inv})"
        )


class LineariseReward(Transform):
    """Turns a multi-objective reward into one value: the weighted sum over its last dim.

    The output keeps the reward's last dimension with size 1 (a reward of shape
    ``(..., n)`` becomes ``(..., 1)``); a bounded reward gives a bounded output. Rewards
    with discrete values (integer specs) are refused.

    Args:
        in_keys: the multi-objective reward entries.
        out_keys: where to write the sums (default: in place).

    Keyword Args:
        weights: one weight per objective (default: all ones); negative weights are allowed.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import LineariseReward
        >>> t = LineariseReward(in_keys=["reward"], weights=[1.0, -2.0])
        >>> t(TensorDict({"reward": torch.tensor([[1.0, 1.0], [3.0, 0.5]])}, [2]))["reward"]
        tensor([[-1.],
                [ 2.]])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        *,
        weights: Sequence[float] | torch.Tensor | None = None,
    ) -> None:
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if not self.in_keys:
            raise ValueError("LineariseReward in_keys: expected at least one reward key, got none")
        if weights is not None:
            weights = torch.as_tensor(weights, dtype=torch.get_default_dtype())
            if weights.ndim != 1:
                raise ValueError(
                    "LineariseReward: Expected weights to be a unidimensional tensor (one weight "
                    f"per objective), got shape {tuple(weights.shape)}"
                )
        self.register_buffer("weights", weights)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        weights = self.weights
        if weights is None:
            return reward.sum(-1, keepdim=True)
        return (reward * weights).sum(-1, keepdim=True)

    def _spec(self, spec: Any) -> Any:
        if getattr(spec, "domain", "continuous") == "discrete" or not spec.dtype.is_floating_point:
            raise NotImplementedError(
                "LineariseReward: Aggregation of rewards that take discrete values is not "
                f"supported; got a {type(spec).__name__} spec of dtype {spec.dtype}"
            )
        objectives = spec.shape[-1] if spec.shape else 1
        weights = self.weights
        if weights is None:
            weights = torch.ones(objectives, device=spec.device, dtype=spec.dtype)
        if weights.numel() != objectives:
            raise ValueError(
                f"LineariseReward: reward of shape {tuple(spec.shape)} has {objectives} "
                f"objectives, expected {weights.numel()} (one per weight)"
            )
        shape = (*spec.shape[:-1], 1)
        if isinstance(spec, Bounded):
            weights = weights.to(device=spec.low.device, dtype=spec.dtype)
            positive, negative = weights.clamp_min(0), weights.clamp_max(0)
            low = (positive * spec.low + negative * spec.high).sum(-1, keepdim=True)
            high = (positive * spec.high + negative * spec.low).sum(-1, keepdim=True)
            if bool(torch.isfinite(low).all()) and bool(torch.isfinite(high).all()):
                return Bounded(low, high, shape=shape, device=spec.device, dtype=spec.dtype)
        return Unbounded(shape=shape, device=spec.device, dtype=spec.dtype)

    @_apply_to_composite
    def transform_reward_spec(self, reward_spec: Any) -> Any:
        """Replace each reward spec by the spec of its weighted sum (a leaf spec maps directly)."""
        return self._spec(reward_spec)


class SuccessReward(Transform):
    """Replaces the reward with a sparse one: ``scale`` where a success flag is set, else 0.

    The flag is read at each step (after the env and the transforms before this one,
    e.g. a :class:`RenameTransform` that copies ``done`` to ``"success"``); no reward
    is written at reset. The reward spec becomes ``Bounded(0, scale)``, shaped like the
    success entry. On data that does not come from an env (buffer samples), the
    reward is computed the same way.

    Args:
        success_key: the boolean success entry.
        reward_key: the reward entry to write.
        scale: the reward of a success.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import SuccessReward
        >>> t = SuccessReward(scale=2.0)
        >>> t(TensorDict({"success": torch.tensor([[True], [False]])}, [2]))["reward"]
        tensor([[2.],
                [0.]])
    """

    def __init__(
        self,
        success_key: NestedKey = "success",
        reward_key: NestedKey = "reward",
        scale: float = 1.0,
    ) -> None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"SuccessReward scale: expected a number, got {type(scale).__name__}")
        super().__init__(in_keys=[success_key], out_keys=[reward_key])
        self.success_key = self.in_keys[0]
        self.reward_key = self.out_keys[0]
        self.scale = float(scale)
        self._dtype = torch.get_default_dtype()

    def _apply_transform(self, success: torch.Tensor) -> torch.Tensor:
        return success.to(self._dtype) * self.scale

    def _reward_leaf(self, shape: torch.Size, device: Any) -> Any:
        low, high = min(0.0, self.scale), max(0.0, self.scale)
        return Bounded(low, high, shape=shape, device=device, dtype=self._dtype)

    def _reward_spec(self, reward_spec: Any, success_spec: Any) -> Any:
        if success_spec is None:
            success_spec = reward_spec.get(self.reward_key, None)
        if success_spec is None:
            raise RuntimeError(
                f"SuccessReward could not infer the shape of the reward {self.reward_key!r}: "
                f"expected the success entry {self.success_key!r} in the env specs or an "
                f"existing reward entry, got reward keys {list(reward_spec.keys(True, True))}"
            )
        reward_spec[self.reward_key] = self._reward_leaf(success_spec.shape, success_spec.device)
        return reward_spec

    def transform_reward_spec(self, reward_spec: Any) -> Any:
        """Make the reward a ``Bounded(0, scale)`` entry shaped like the existing reward."""
        return self._reward_spec(reward_spec, None)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Make the reward a ``Bounded(0, scale)`` entry shaped like the success entry."""
        output_spec = _unlocked_clone(output_spec)
        sub = locate_spec(output_spec, OUTPUT_ENTRIES, self.success_key)
        success_spec = None if sub is None else sub[self.success_key]
        output_spec["full_reward_spec"] = self._reward_spec(
            output_spec["full_reward_spec"], success_spec
        )
        return output_spec

    def __repr__(self) -> str:
        return (
            f"SuccessReward(success_key={self.success_key!r}, reward_key={self.reward_key!r}, "
            f"scale={self.scale})"
        )


#: The name this transform has in the API reference code (plural).
LineariseRewards = LineariseReward
