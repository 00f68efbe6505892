"""Fixed affine normalisation: :class:`ObservationNorm`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.envs.transforms.transform import (
    OUTPUT_ENTRIES,
    NestedKey,
    ObservationTransform,
    Transform,
    locate_spec,
    map_input_specs,
    map_output_specs,
)

__all__ = ["ObservationNorm"]

UNINITIALIZED_ERROR = (
    "ObservationNorm: loc and scale are not initialized; pass them to the constructor "
    "or call init_stats() first"
)


def _is_lazy(value: Any) -> bool:
    return isinstance(value, nn.parameter.UninitializedBuffer)


def _as_buffer(value: Any, name: str) -> torch.Tensor:
    if _is_lazy(value):
        return value
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (int, float)):
        return torch.tensor(float(value), dtype=torch.get_default_dtype())
    raise TypeError(f"ObservationNorm {name}: expected a number or a tensor, got {value!r}")


def _unbounded(spec: Any) -> Any:
    return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)


class ObservationNorm(ObservationTransform):
    """Affine map of observations: ``obs * scale + loc``, or ``(obs - loc) / scale``.

    ``loc`` and ``scale`` can be given or estimated from rollouts of the parent env
    with :meth:`init_stats`. Bounded specs keep finite bounds (mapped); other specs
    become unbounded. With ``in_keys_inv``, inputs get the inverse map before they
    reach the base env. Clones share ``loc`` and ``scale`` (also once initialised).

    Args:
        loc: the offset (number or tensor); None with ``scale=None`` defers to ``init_stats``.
        scale: the factor (number or tensor); clamped to at least ``eps``.
        in_keys: the entries to map (default ``["observation"]``).
        out_keys: where to write them (default: in place).
        in_keys_inv: inner input entries that get the inverse map.
        out_keys_inv: their outside names (default: ``in_keys_inv``).
        standard_normal: use ``(obs - loc) / scale`` instead of ``obs * scale + loc``.
        eps: the smallest scale allowed (default ``1e-6``).

    Examples:
        >>> import torch
        >>> from tdrl.envs import GymEnv, ObservationNorm, TransformedEnv, check_env_specs
        >>> _ = torch.manual_seed(0)
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), ObservationNorm(standard_normal=True))
        >>> _ = env.set_seed(0)
        >>> env.transform.init_stats(num_iter=200)
        >>> env.transform.loc.shape, env.transform.scale.shape
        (torch.Size([3]), torch.Size([3]))
        >>> check_env_specs(env)
        >>> env.rollout(5)["observation"].shape
        torch.Size([5, 3])
    """

    invertible = True

    def __init__(
        self,
        loc: float | torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        standard_normal: bool = False,
        eps: float | None = None,
    ) -> None:
        super().__init__(
            ["observation"] if in_keys is None else in_keys, out_keys, in_keys_inv, out_keys_inv
        )
        self.eps = 1e-6 if eps is None else float(eps)
        self.standard_normal = bool(standard_normal)
        if loc is None and scale is None:
            loc, scale = nn.UninitializedBuffer(), nn.UninitializedBuffer()
        else:
            loc = 0.0 if loc is None else loc
            scale = 1.0 if scale is None else scale
        loc, scale = _as_buffer(loc, "loc"), _as_buffer(scale, "scale")
        if not _is_lazy(scale):
            scale = scale.clamp_min(self.eps)
        self.register_buffer("loc", loc)
        self.register_buffer("scale", scale)

    @property
    def initialized(self) -> bool:
        """Whether ``loc`` and ``scale`` hold values."""
        return not (_is_lazy(self.loc) or _is_lazy(self.scale))

    def _stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        loc, scale = self.loc, self.scale
        if _is_lazy(loc) or _is_lazy(scale):
            raise RuntimeError(UNINITIALIZED_ERROR)
        return loc, scale

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._stats()
        if self.standard_normal:
            return (value - loc) / scale
        return value * scale + loc

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._stats()
        if self.standard_normal:
            return value * scale + loc
        return (value - loc) / scale

    # ------------------------------------------------------------ statistics
    def init_stats(
        self,
        num_iter: int,
        reduce_dim: int | Sequence[int] = 0,
        cat_dim: int | None = None,
        key: NestedKey | None = None,
        keep_dims: Sequence[int] | None = None,
    ) -> None:
        """Estimate ``loc`` and ``scale`` from at least ``num_iter`` steps of the parent env.

        Rollouts of the parent env (the base env and the transforms before this one)
        are concatenated along ``cat_dim``; mean and standard deviation are taken over
        ``reduce_dim`` (dims listed in ``keep_dims`` stay, with size 1).

        Args:
            num_iter: the number of steps to collect (rollouts of at most that length).
            reduce_dim: the dim(s) to reduce; 0 is time for an unbatched env.
            cat_dim: the dim along which rollouts are concatenated (default: ``reduce_dim``,
                which must then be an int).
            key: the entry to estimate from (default: the only ``in_keys`` entry).
            keep_dims: reduced dims kept with size 1.

        Raises:
            RuntimeError: when the stats are already set, there is no parent env, or a
                preceding ObservationNorm is not initialised.
        """
        reduce_dims = [reduce_dim] if isinstance(reduce_dim, int) else list(reduce_dim)
        if cat_dim is None:
            if not isinstance(reduce_dim, int):
                raise ValueError(
                    "ObservationNorm.init_stats: cat_dim must be specified if reduce_dim is not "
                    f"an integer, got cat_dim=None with reduce_dim={reduce_dim!r}"
                )
            cat_dim = reduce_dim
        elif cat_dim not in reduce_dims:
            raise ValueError(
                "ObservationNorm.init_stats: cat_dim must be part of or equal to reduce_dim "
                f"(rollouts are joined along a reduced dim), got cat_dim={cat_dim!r} with "
                f"reduce_dim={reduce_dim!r}"
            )
        if self.initialized:
            raise RuntimeError(
                "ObservationNorm.init_stats: Loc/Scale are already initialized (given to the "
                "constructor or estimated before)"
            )
        if key is None:
            if len(self.in_keys) != 1:
                raise RuntimeError(
                    "ObservationNorm.init_stats: Transform has multiple in_keys but no specific "
                    f"key was passed as an argument; pass key= (one of {self.in_keys})"
                )
            key = self.in_keys[0]
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "ObservationNorm.init_stats: Cannot initialize the transform if parent env is not "
                "defined; add the transform to a TransformedEnv first"
            )
        for module in parent.modules():
            if isinstance(module, ObservationNorm) and not module.initialized:
                raise RuntimeError(
                    "ObservationNorm.init_stats: a preceding ObservationNorm is not initialized; "
                    "initialize the transforms in order"
                )
        data, collected = [], 0
        while collected < num_iter:
            rollout = parent.rollout(max_steps=num_iter)
            collected += rollout.numel()
            data.append(rollout.get(key))
        data = torch.cat(data, cat_dim)
        reduce = sorted(dim if dim < 0 else dim - data.ndim for dim in reduce_dims)
        keep = [dim if dim < 0 else dim - data.ndim for dim in (keep_dims or [])]
        if any(dim not in reduce for dim in keep):
            raise ValueError(
                f"ObservationNorm.init_stats keep_dims: expected dims among reduce_dim "
                f"{reduce_dim!r}, got {keep_dims!r}"
            )
        loc = data.mean(reduce, keepdim=True)
        scale = data.std(reduce, keepdim=True)
        for dim in reduce:
            if dim not in keep:
                loc, scale = loc.squeeze(dim), scale.squeeze(dim)
        if not self.standard_normal:
            scale = 1 / scale.clamp_min(self.eps)
            loc = -loc * scale
        if not (bool(torch.isfinite(loc).all()) and bool(torch.isfinite(scale).all())):
            raise RuntimeError(
                f"ObservationNorm.init_stats: non-finite statistics estimated from {key!r}"
            )
        self._set_stats(loc, scale.clamp_min(self.eps))

    def _set_stats(self, loc: torch.Tensor, scale: torch.Tensor) -> None:
        # materialise in place: clones (e.g. inside parent envs) hold the same buffer objects
        for name, value in (("loc", loc), ("scale", scale)):
            buffer = getattr(self, name)
            if _is_lazy(buffer):
                buffer.materialize(value.shape, device=value.device, dtype=value.dtype)
            buffer.copy_(value)
        self._chain_changed()

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        if self.initialized:
            super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        for name in ("loc", "scale"):
            value = state_dict.get(prefix + name)
            buffer = getattr(self, name)
            if value is not None and _is_lazy(buffer):
                buffer.materialize(value.shape, device=buffer.device, dtype=value.dtype)
        super()._load_from_state_dict(state_dict, prefix, *args)

    # ------------------------------------------------------------------ specs
    def _transform_spec(self, spec: Any) -> Any:
        if not (self.initialized and isinstance(spec, Bounded)):
            return _unbounded(spec) if not isinstance(spec, Unbounded) else spec
        low, high = self._apply_transform(spec.low), self._apply_transform(spec.high)
        low, high = torch.minimum(low, high), torch.maximum(low, high)
        if low.shape != spec.shape or not bool(
            torch.isfinite(low).all() & torch.isfinite(high).all()
        ):
            return _unbounded(spec)
        return Bounded(low, high, shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Map the specs of the ``in_keys`` entries (bounds mapped when known and finite).

        Entries may be observations, rewards or done entries. Keys the env does not
        declare are left out of the specs (the data must then hold them, or the
        transform raises a ``KeyError`` naming them when it meets data without them).
        """
        observations = output_spec["full_observation_spec"].keys(True)
        others = [
            (in_key, out_key)
            for in_key, out_key in zip(self.in_keys, self.out_keys)
            if in_key not in observations
            and locate_spec(output_spec, OUTPUT_ENTRIES, in_key) is not None
        ]
        output_spec = Transform.transform_output_spec(self, output_spec)
        return map_output_specs(
            self,
            output_spec,
            [in_key for in_key, _ in others],
            [out_key for _, out_key in others],
            self._transform_spec,
        )

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Map the ``in_keys`` entries of a Composite, or a leaf spec (that of the entry)."""
        if not isinstance(observation_spec, Composite):
            return self._transform_spec(observation_spec)
        return super().transform_observation_spec(observation_spec)

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Give the inverse entries the spec of their outside (normalised) values."""
        input_spec = super().transform_input_spec(input_spec)
        return map_input_specs(
            self, input_spec, self.in_keys_inv, self.out_keys_inv, self._transform_spec
        )

    def __repr__(self) -> str:
        if self.initialized:
            stats = f"loc={self.loc.tolist()}, scale={self.scale.tolist()}"
        else:
            stats = "loc=<uninitialized>, scale=<uninitialized>"
        return (
            f"ObservationNorm({stats}, standard_normal={self.standard_normal}, "
            f"in_keys={self.in_keys})"
        )
