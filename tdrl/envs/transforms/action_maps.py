"""Transforms that change the form of actions: ActionScaling (affine) and FlattenAction (shape).

Both map the action the outside world gives (the policy's) to the one the inner env
takes on the inverse path, and back on the forward path (data from buffers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Bounded, Unbounded
from tdrl.envs.transforms.transform import INPUT_ENTRIES, NestedKey, Transform, locate_spec

__all__ = ["ActionScaling", "FlattenAction"]


def _action_spec_leaf(owner: str, input_spec: Any, key: NestedKey) -> tuple[Any, Any]:
    sub = locate_spec(input_spec, INPUT_ENTRIES, key)
    if sub is None:
        keys = list(input_spec["full_action_spec"].keys(True, True))
        raise KeyError(f"{owner}: action key {key!r} is not in the action spec; available: {keys}")
    return sub, sub[key]


def _as_float_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(torch.get_default_dtype()) if not value.is_floating_point() else value
    if isinstance(value, bool) or not isinstance(value, (int, float, Sequence)):
        raise TypeError(f"ActionScaling {name}: expected a number or a tensor, got {value!r}")
    return torch.as_tensor(value, dtype=torch.get_default_dtype())


def _finite_bounds(spec: Any) -> bool:
    """Whether a spec is Bounded with bounds that are finite and below the dtype's max."""
    if not isinstance(spec, Bounded):
        return False
    big = torch.finfo(spec.dtype).max if spec.dtype.is_floating_point else float("inf")
    low, high = spec.low, spec.high
    return bool(
        torch.isfinite(low).all()
        and torch.isfinite(high).all()
        and (low.abs() < big).all()
        and (high.abs() < big).all()
    )


class ActionScaling(Transform):
    """Lets a policy act in a normalized range: ``env_action = loc + scale * action``.

    Without ``loc`` / ``scale``, they come from the env's ``Bounded`` action spec so
    that the policy's range is ``[-1, 1]`` (``standard_normal=True``: ``loc`` is the
    middle of the bounds, ``scale`` half their width) or ``[0, 1]``
    (``standard_normal=False``: ``loc`` is the lower bound, ``scale`` the width); the
    env's bounds must then be finite. With explicit statistics (``loc`` / ``scale``,
    or :meth:`from_stats`), the policy-facing spec is the env's spec mapped through
    the inverse affine (an unbounded spec stays unbounded).

    The inverse path (env steps, ``ReplayBuffer.extend``) maps normalized actions to
    env actions; the forward path (``transform(td)``, buffer samples) maps env
    actions to normalized ones. With ``in_keys_inv=[]`` the transform is
    forward-only: it normalizes data read from a dataset and leaves an env's action
    interface untouched (explicit statistics are then required).

    Args:
        loc: the offset (number or tensor broadcastable to the action), with ``scale``.
        scale: the factor (non-zero), with ``loc``.
        in_keys_inv: the single action entry (default ``["action"]``); ``[]`` for a
            forward-only transform.
        standard_normal: with statistics from the spec, normalize to ``[-1, 1]``
            (True) or ``[0, 1]`` (False).
        in_keys: the entries normalized on the forward path (default: the action entry).

    Examples:
        >>> import torch
        >>> from tdrl.envs import ActionScaling, GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), ActionScaling())
        >>> env.action_spec.space.low, env.action_spec.space.high
        (tensor([-1.]), tensor([1.]))
        >>> env.transform.inv(env.reset().set("action", torch.tensor([0.5])))["action"]
        tensor([1.])
        >>> ActionScaling.from_stats(mean=torch.tensor([2.0]), std=torch.tensor([4.0])).normalize(
        ...     torch.tensor([6.0])
        ... )
        tensor([1.])
    """

    invertible = True

    def __init__(
        self,
        loc: float | torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        standard_normal: bool = True,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        if (loc is None) != (scale is None):
            raise ValueError(
                "ActionScaling: loc and scale must be given together (or neither, to derive "
                f"them from the action spec); got loc={loc!r}, scale={scale!r}"
            )
        explicit = loc is not None
        if in_keys_inv is None:
            in_keys_inv = ["action"]
        super().__init__(in_keys=in_keys, in_keys_inv=in_keys_inv)
        if len(self.in_keys_inv) > 1:
            raise ValueError(
                "ActionScaling scales a single action key; got in_keys_inv "
                f"{self.in_keys_inv} (use one transform per action entry)"
            )
        forward_only = not self.in_keys_inv
        if forward_only and not explicit:
            raise ValueError(
                "ActionScaling: a forward-only transform (in_keys_inv=[]) has no action spec "
                "to derive its statistics from; give loc and scale (or use from_stats)"
            )
        if not self.in_keys:
            self.in_keys = list(self.in_keys_inv) if not forward_only else ["action"]
        self.standard_normal = bool(standard_normal)
        self._explicit = explicit
        if explicit:
            loc = _as_float_tensor("loc", loc)
            scale = _as_float_tensor("scale", scale)
            if bool((scale == 0).any()):
                raise ValueError("ActionScaling scale: expected non-zero values, got zeros")
        self.register_buffer("loc", loc)
        self.register_buffer("scale", scale)

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_stats(
        cls,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
        low: torch.Tensor | None = None,
        high: torch.Tensor | None = None,
        eps: float = 1e-6,
        **kwargs: Any,
    ) -> ActionScaling:
        """Build the transform from dataset statistics: ``mean`` / ``std`` or ``low`` / ``high``.

        With ``mean`` and ``std``, normalized actions are z-scores; with ``low`` and
        ``high``, the range maps to ``[-1, 1]``. Scales are floored at ``eps``, so a
        constant action dim normalizes to 0. Other keyword arguments go to the
        constructor (e.g. ``in_keys_inv=[]`` for a forward-only transform).
        """
        pairs = {"mean/std": (mean, std), "low/high": (low, high)}
        given = [name for name, pair in pairs.items() if any(v is not None for v in pair)]
        if len(given) != 1:
            raise ValueError(
                "ActionScaling.from_stats: expected exactly one of the pairs mean/std or "
                f"low/high, got {given or 'neither'}"
            )
        first, second = pairs[given[0]]
        if first is None or second is None:
            raise ValueError(
                f"ActionScaling.from_stats: {given[0]} must be given together, got only one"
            )
        first = _as_float_tensor(given[0].split("/")[0], first)
        second = _as_float_tensor(given[0].split("/")[1], second)
        if first.shape != second.shape:
            raise ValueError(
                f"ActionScaling.from_stats: {given[0]} must have the same shape, got "
                f"{tuple(first.shape)} and {tuple(second.shape)}"
            )
        if given[0] == "mean/std":
            loc, scale = first, second
        else:
            loc, scale = (second + first) / 2, (second - first) / 2
        return cls(loc=loc, scale=scale.abs().clamp_min(eps), **kwargs)

    # ------------------------------------------------------------ maps
    def _check_dims(self, action: torch.Tensor) -> None:
        for name in ("loc", "scale"):
            stat = getattr(self, name)
            if stat is None:
                raise RuntimeError(
                    "ActionScaling: loc and scale are derived from the env's action spec; add "
                    "the transform to an env first (or give loc and scale)"
                )
            if stat.ndim and (action.ndim < stat.ndim or action.shape[-1] != stat.shape[-1]):
                raise ValueError(
                    f"ActionScaling: the action's last dim ({tuple(action.shape)}) does not match "
                    f"the {name} of shape {tuple(stat.shape)}"
                )

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """Map an env action to the policy's range: ``(action - loc) / scale``."""
        self._check_dims(action)
        return (action - self.loc) / self.scale

    def denormalize(self, action: torch.Tensor) -> torch.Tensor:
        """Map a policy action to the env's range: ``loc + scale * action``."""
        self._check_dims(action)
        return torch.addcmul(self.loc.to(action.dtype), action, self.scale.to(action.dtype))

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        return self.normalize(action)

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        return self.denormalize(action)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    # ------------------------------------------------------------ specs
    def transform_input_spec(self, input_spec: Any) -> Any:
        """Expose the action spec in the policy's range."""
        input_spec = super().transform_input_spec(input_spec)
        if not self.in_keys_inv:
            return input_spec
        key = self.in_keys_inv[0]
        sub, spec = _action_spec_leaf("ActionScaling", input_spec, key)
        if not self._explicit:
            if not _finite_bounds(spec):
                raise RuntimeError(
                    "ActionScaling derives loc and scale from the action spec, which must be "
                    f"Bounded with finite bounds; got {type(spec).__name__} at {key!r}. Give "
                    "loc and scale explicitly for unbounded actions"
                )
            low, high = spec.low, spec.high
            if self.standard_normal:
                self.loc, self.scale = (high + low) / 2, (high - low) / 2
            else:
                self.loc, self.scale = low.clone(), high - low
        loc = self.loc.to(device=spec.device, dtype=spec.dtype)
        scale = self.scale.to(device=spec.device, dtype=spec.dtype)
        if isinstance(spec, Bounded):
            low = (spec.low - loc) / scale
            high = (spec.high - loc) / scale
            low, high = torch.minimum(low, high), torch.maximum(low, high)
            sub[key] = Bounded(low, high, shape=spec.shape, device=spec.device, dtype=spec.dtype)
        else:
            sub[key] = Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)
        return input_spec

    def __repr__(self) -> str:
        return (
            f"ActionScaling(in_keys_inv={self.in_keys_inv}, standard_normal={self.standard_normal}, "
            f"explicit={self._explicit})"
        )


def _span(first_dim: int, last_dim: int, ndim: int | None) -> tuple[int, int]:
    """The dims as negative indices (positive ones count from the action's first feature dim)."""
    if ndim is not None:
        first_dim = first_dim - ndim if first_dim >= 0 else first_dim
        last_dim = last_dim - ndim if last_dim >= 0 else last_dim
    return first_dim, last_dim


class FlattenAction(Transform):
    """Lets a policy emit a flat action for an env whose action has several feature dims.

    The dims ``first_dim`` to ``last_dim`` of the action (counted from the end, so
    env batch dims are left alone) are flattened in the policy-facing spec, and the
    flat action is unflattened to the env's shape on the inverse path. The forward
    path (buffer samples) flattens again.

    Args:
        first_dim: the first dim to flatten (negative).
        last_dim: the last dim to flatten (negative, ``>= first_dim``).
        in_keys_inv: the action entries (default ``["action"]``).
        action_shape: the env's action feature shape, for use without an env (buffers).
        allow_positive_dim: accept non-negative dims, counted from the first feature
            dim of the action (with an env or ``action_shape``) or from the first dim
            of the tensor otherwise.

    Examples:
        >>> import torch
        >>> from tdrl.envs import FlattenAction
        >>> t = FlattenAction(first_dim=-2, last_dim=-1, action_shape=(3, 5))
        >>> t._inv_apply_transform(torch.arange(15.0)).shape
        torch.Size([3, 5])
        >>> t._apply_transform(torch.zeros(4, 3, 5)).shape
        torch.Size([4, 15])
    """

    invertible = True

    def __init__(
        self,
        first_dim: int = -2,
        last_dim: int = -1,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        action_shape: Sequence[int] | torch.Size | None = None,
        allow_positive_dim: bool = False,
    ) -> None:
        for name, dim in (("first_dim", first_dim), ("last_dim", last_dim)):
            if isinstance(dim, bool) or not isinstance(dim, int):
                raise TypeError(f"FlattenAction {name}: expected an int, got {dim!r}")
            if dim >= 0 and not allow_positive_dim:
                raise ValueError(
                    f"FlattenAction {name}: expected a negative dim (counted from the end, so "
                    f"batch dims are untouched), got {dim}; pass allow_positive_dim=True to "
                    "count from the first feature dim"
                )
        if (first_dim < 0) == (last_dim < 0) and first_dim > last_dim:
            raise ValueError(
                f"FlattenAction: first_dim ({first_dim}) must not come after last_dim ({last_dim})"
            )
        if in_keys_inv is None:
            in_keys_inv = ["action"]
        super().__init__(in_keys=in_keys_inv, in_keys_inv=in_keys_inv)
        self.first_dim = first_dim
        self.last_dim = last_dim
        self.allow_positive_dim = allow_positive_dim
        self._shapes: dict = {}
        if action_shape is not None:
            for key in self.in_keys_inv:
                self._shapes[key] = torch.Size(action_shape)

    def _dims(self, key: NestedKey | None) -> tuple[int, int]:
        shape = self._shapes.get(key) if key is not None else None
        if shape is None and len(self._shapes) == 1:
            shape = next(iter(self._shapes.values()))
        return _span(self.first_dim, self.last_dim, None if shape is None else len(shape))

    def _flatten(self, value: torch.Tensor, key: NestedKey | None) -> torch.Tensor:
        first, last = self._dims(key)
        return value.flatten(first, last)

    def _unflatten(self, value: torch.Tensor, key: NestedKey | None) -> torch.Tensor:
        shape = self._shapes.get(key) if key is not None else None
        if shape is None:
            raise RuntimeError(
                f"FlattenAction: the shape of {key!r} is unknown; add the transform to an env or "
                "give action_shape"
            )
        first, last = self._dims(key)
        inner = shape[len(shape) + first : len(shape) + last + 1]
        # after flattening, the merged dim sits where the last flattened dim was
        return value.unflatten(last, inner)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._flatten(value, None)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if len(self.in_keys_inv) != 1:
            raise RuntimeError(
                "FlattenAction: cannot disambiguate which action key a tensor belongs to with "
                f"in_keys_inv {self.in_keys_inv}; use inv() on a tensordict instead"
            )
        return self._unflatten(value, self.in_keys_inv[0])

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys:
            value = next_tensordict.get(key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise KeyError(
                    f"FlattenAction: expected the action {key!r}, got keys "
                    f"{list(next_tensordict.keys(True, True))}"
                )
            next_tensordict.set(key, self._flatten(value, key))
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys_inv:
            value = tensordict.get(key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise KeyError(
                    f"FlattenAction: expected the action {key!r}, got keys "
                    f"{list(tensordict.keys(True, True))}"
                )
            tensordict.set(key, self._unflatten(value, key))
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Flatten the dims of each action spec; remember the env's action shapes."""
        input_spec = super().transform_input_spec(input_spec)
        batch_dims = len(input_spec.shape)
        for key in self.in_keys_inv:
            sub, spec = _action_spec_leaf("FlattenAction", input_spec, key)
            feature_shape = spec.shape[batch_dims:]
            self._shapes[key] = feature_shape
            first, last = self._dims(key)
            if -first > len(feature_shape) or last < first:
                raise ValueError(
                    f"FlattenAction: dims {first}..{last} are out of the feature dims of the "
                    f"action {key!r} of shape {tuple(feature_shape)}"
                )
            shape = spec.shape
            ndim = len(shape)
            flat = (*shape[: ndim + first], -1, *shape[ndim + last + 1 :])
            size = 1
            for dim in shape[ndim + first : ndim + last + 1]:
                size *= dim
            sub[key] = spec.reshape(*(size if dim == -1 else dim for dim in flat))
        return input_spec

    def __repr__(self) -> str:
        return (
            f"FlattenAction(first_dim={self.first_dim}, last_dim={self.last_dim}, "
            f"in_keys_inv={self.in_keys_inv})"
        )
