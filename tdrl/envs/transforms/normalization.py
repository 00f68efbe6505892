"""Normalisation transforms: fixed affine maps and running statistics."""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from multiprocessing.context import get_spawning_popen
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from tdrl.data import Bounded, Unbounded
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.transform import (
    NestedKey,
    ObservationTransform,
    Transform,
    map_input_specs,
    map_output_specs,
)

__all__ = ["ObservationNorm", "VecNorm"]

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
        if cat_dim is None:
            if not isinstance(reduce_dim, int):
                raise ValueError(
                    f"ObservationNorm.init_stats cat_dim: expected an int when reduce_dim is "
                    f"not an int, got cat_dim=None with reduce_dim={reduce_dim!r}"
                )
            cat_dim = reduce_dim
        if self.initialized:
            raise RuntimeError("ObservationNorm.init_stats: loc and scale are already set")
        if key is None:
            if len(self.in_keys) != 1:
                raise RuntimeError(
                    f"ObservationNorm.init_stats key: expected a key with several in_keys "
                    f"{self.in_keys}, got None"
                )
            key = self.in_keys[0]
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "ObservationNorm.init_stats needs the transform to be part of a TransformedEnv"
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
        reduce = [reduce_dim] if isinstance(reduce_dim, int) else list(reduce_dim)
        reduce = sorted(dim if dim < 0 else dim - data.ndim for dim in reduce)
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
        """Map the specs of the ``in_keys`` entries (bounds mapped when known and finite)."""
        output_spec = Transform.transform_output_spec(self, output_spec)
        return map_output_specs(
            self, output_spec, self.in_keys, self.out_keys, self._transform_spec
        )

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Identity: the output specs are mapped in :meth:`transform_output_spec`."""
        return observation_spec

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


def _key_name(key: NestedKey) -> str:
    return "_".join(key) if isinstance(key, tuple) else key


class VecNorm(Transform):
    """Normalises entries with running (exponentially decayed) mean and standard deviation.

    Each call updates, per entry, the decayed sum, sum of squares and count of
    the values seen, then returns ``(value - mean) / std``. The statistics live in
    a TensorDict in shared memory (``shared_td``, or one built when the specs are
    known), shared by clones and by processes the transform is sent to; a lock
    guards the updates. In :meth:`freeze` mode or ``eval()`` mode the statistics
    are used but not updated. ``state_dict()`` / ``load_state_dict()`` save and
    restore them (loading copies in place, keeping the memory shared).

    Args:
        in_keys: the entries to normalise (default ``["observation", "reward"]``).
        out_keys: where to write them (default: in place).
        shared_td: a shared-memory (or memory-mapped) TensorDict holding the statistics,
            e.g. from :meth:`build_td_for_shared_vecnorm`.
        lock: a multiprocessing lock guarding updates (default: a new one).
        decay: the decay of the running statistics.
        eps: the smallest standard deviation used.
        shapes: the feature shape of each in_key (default: from the env specs, or
            from the first data).

    Examples:
        >>> import torch
        >>> from tdrl.envs import GymEnv, TransformedEnv, VecNorm, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), VecNorm(in_keys=["observation"], decay=0.99))
        >>> _ = env.set_seed(0)
        >>> check_env_specs(env)
        >>> rollout = env.rollout(200)
        >>> bool(rollout["next", "observation"][100:].mean(0).abs().max() < 1.0)
        True
        >>> env.transform.freeze().frozen
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        shared_td: TensorDictBase | None = None,
        lock: Any = None,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shapes: Sequence[Sequence[int]] | None = None,
    ) -> None:
        super().__init__(["observation", "reward"] if in_keys is None else in_keys, out_keys)
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"VecNorm decay: expected a value in (0, 1], got {decay}")
        if shapes is not None and len(shapes) != len(self.in_keys):
            raise ValueError(
                f"VecNorm shapes: expected one shape per in_key ({len(self.in_keys)}), "
                f"got {len(shapes)}"
            )
        if shared_td is not None:
            if not (shared_td.is_shared() or shared_td.is_memmap()):
                raise ValueError(
                    "VecNorm shared_td: expected a TensorDict in shared memory or memory-mapped "
                    "(call share_memory_()), got one in private memory"
                )
            for key in self.in_keys:
                for suffix in ("_sum", "_ssq", "_count"):
                    if _key_name(key) + suffix not in shared_td.keys():
                        raise KeyError(
                            f"VecNorm shared_td: expected key {_key_name(key) + suffix!r} for "
                            f"in_key {key!r}, got keys {list(shared_td.keys())}"
                        )
        self.__dict__["_td"] = TensorDict({}, []) if shared_td is None else shared_td
        self.__dict__["lock"] = multiprocessing.Lock() if lock is None else lock
        self.decay = float(decay)
        self.eps = float(eps)
        self.shapes = None if shapes is None else [torch.Size(shape) for shape in shapes]
        self.frozen = False

    # ------------------------------------------------------------ statistics
    def _ensure_stats(self, key: NestedKey, shape: torch.Size, dtype: Any, device: Any) -> None:
        name = _key_name(key)
        stats = self.__dict__["_td"]
        if name + "_sum" in stats.keys():
            return
        if self.shapes is not None:
            shape = self.shapes[self.in_keys.index(key)]
        dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
        new = TensorDict(
            {
                name + "_sum": torch.zeros(shape, dtype=dtype, device=device),
                name + "_ssq": torch.zeros(shape, dtype=dtype, device=device),
                name + "_count": torch.zeros((), dtype=dtype, device=device),
            },
            [],
        )
        if device is None or torch.device(device).type == "cpu":
            new.share_memory_()
        stats.update(new)

    def _normalize(self, key: NestedKey, value: torch.Tensor, batch_dims: int) -> torch.Tensor:
        name = _key_name(key)
        stats = self.__dict__["_td"]
        total = stats.get(name + "_sum")
        squares = stats.get(name + "_ssq")
        count = stats.get(name + "_count")
        if not self.frozen and self.training:
            flat = value.reshape(-1, *total.shape).to(total.dtype)
            decay = self.decay
            total.mul_(decay).add_(flat.sum(0))
            squares.mul_(decay).add_(flat.pow(2).sum(0))
            count.mul_(decay).add_(flat.shape[0])
        # a count of shape (1,) (older layouts) must not add a dim to scalar entries
        count = count.reshape(())
        mean = total / count
        std = (squares / count - mean.pow(2)).clamp_min(self.eps).sqrt()
        out = (value - mean) / std
        return out.to(value.dtype) if value.is_floating_point() else out

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        lock = self.__dict__["lock"]
        batch_dims = next_tensordict.batch_dims
        with lock:
            for key, out_key in zip(self.in_keys, self.out_keys):
                value = next_tensordict.get(key, None)
                if value is None:
                    continue
                self._ensure_stats(key, value.shape[batch_dims:], value.dtype, value.device)
                next_tensordict.set(out_key, self._normalize(key, value, batch_dims))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def freeze(self) -> VecNorm:
        """Stop updating the statistics (they are still applied); returns self."""
        self.frozen = True
        return self

    def unfreeze(self) -> VecNorm:
        """Resume updating the statistics; returns self."""
        self.frozen = False
        return self

    def frozen_copy(self) -> VecNorm:
        """A frozen clone with its own copy of the current statistics."""
        copy = self.clone()
        copy.__dict__["_td"] = self.__dict__["_td"].clone()
        if copy.__dict__["_td"].device is None or copy.__dict__["_td"].device.type == "cpu":
            copy.__dict__["_td"].share_memory_()
        copy.__dict__["lock"] = multiprocessing.Lock()
        return copy.freeze()

    def _mean_std(self, key: NestedKey) -> tuple[torch.Tensor, torch.Tensor]:
        name = _key_name(key)
        stats = self.__dict__["_td"]
        if name + "_sum" not in stats.keys():
            raise RuntimeError(f"VecNorm: no statistics for key {key!r} yet (no data seen)")
        count = stats.get(name + "_count").reshape(())
        mean = stats.get(name + "_sum") / count
        std = (stats.get(name + "_ssq") / count - mean.pow(2)).clamp_min(self.eps).sqrt()
        return mean, std

    @property
    def loc(self) -> TensorDict:
        """The running means, one entry per in_key."""
        return TensorDict({key: self._mean_std(key)[0] for key in self.in_keys}, [])

    @property
    def scale(self) -> TensorDict:
        """The running standard deviations, one entry per in_key."""
        return TensorDict({key: self._mean_std(key)[1] for key in self.in_keys}, [])

    @property
    def standard_normal(self) -> bool:
        """Always True: values are mapped with ``(value - loc) / scale``."""
        return True

    def to_observation_norm(self) -> ObservationNorm | Compose:
        """A static ObservationNorm (a Compose of them for several keys) with the current stats."""
        norms = []
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            mean, std = self._mean_std(in_key)
            norms.append(
                ObservationNorm(
                    loc=mean.clone(),
                    scale=std.clone(),
                    in_keys=[in_key],
                    out_keys=[out_key],
                    standard_normal=True,
                    eps=self.eps,
                )
            )
        return norms[0] if len(norms) == 1 else Compose(*norms)

    @staticmethod
    def build_td_for_shared_vecnorm(
        env: Any, keys: Sequence[NestedKey] | None = None, memmap: bool = False
    ) -> TensorDictBase:
        """A shared-memory (or memory-mapped) statistics TensorDict for ``keys`` of ``env``.

        Pass it as ``shared_td`` to the VecNorm of every env (process) that should
        share statistics.
        """
        keys = ["observation", "reward"] if keys is None else list(keys)
        batch_dims = len(env.batch_size)
        entries = {}
        for key in keys:
            spec = None
            for sub in (env.full_observation_spec, env.full_reward_spec):
                if key in sub.keys(True, True):
                    spec = sub[key]
            if spec is None:
                raise KeyError(
                    f"VecNorm.build_td_for_shared_vecnorm: key {key!r} is not an observation or "
                    f"reward key of the env; available keys: "
                    f"{[*env.observation_keys, *env.reward_keys]}"
                )
            dtype = spec.dtype if spec.dtype.is_floating_point else torch.get_default_dtype()
            shape = spec.shape[batch_dims:]
            name = _key_name(key)
            entries[name + "_sum"] = torch.zeros(shape, dtype=dtype)
            entries[name + "_ssq"] = torch.zeros(shape, dtype=dtype)
            entries[name + "_count"] = torch.zeros((), dtype=dtype)
        td = TensorDict(entries, [])
        return td.memmap_() if memmap else td.share_memory_()

    def get_extra_state(self) -> dict:
        """The statistics as a flat dict of tensors (part of ``state_dict()``)."""
        return {key: value.clone() for key, value in self.__dict__["_td"].items()}

    def set_extra_state(self, state: dict) -> None:
        """Restore statistics saved by :meth:`get_extra_state`, in place where they exist.

        Tensors already in shared memory (the shared state of an ``EnvCreator``) are
        adopted instead of copied, so that the statistics stay shared with their owner.
        """
        if isinstance(state, dict) and "td" in state:
            state = state["td"] or {}
        stats = self.__dict__["_td"]
        for key, value in state.items():
            current = stats.get(key, None)
            if value.is_shared() and (current is None or current.shape == value.shape):
                stats.set(key, value)
            elif current is not None and current.shape == value.shape:
                current.copy_(value)
            else:
                stats.set(key, value.clone().share_memory_())

    # ------------------------------------------------------------------ specs
    def transform_output_spec(self, output_spec: Any) -> Any:
        """Make the normalised entries unbounded and allocate their statistics."""
        output_spec = super().transform_output_spec(output_spec)
        batch_dims = len(output_spec.shape)

        def allocate(spec: Any, key: NestedKey) -> Any:
            self._ensure_stats(key, spec.shape[batch_dims:], spec.dtype, spec.device)
            dtype = spec.dtype if spec.dtype.is_floating_point else torch.get_default_dtype()
            return Unbounded(shape=spec.shape, device=spec.device, dtype=dtype)

        for in_key, out_key in zip(self.in_keys, self.out_keys):
            map_output_specs(
                self, output_spec, [in_key], [out_key], lambda spec, k=in_key: allocate(spec, k)
            )
        return output_spec

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if get_spawning_popen() is None:
            # locks only travel to processes being spawned; a fresh one is made on load
            state["lock"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if self.__dict__.get("lock") is None:
            self.__dict__["lock"] = multiprocessing.Lock()

    def __repr__(self) -> str:
        return (
            f"VecNorm(in_keys={self.in_keys}, out_keys={self.out_keys}, decay={self.decay}, "
            f"eps={self.eps}, frozen={self.frozen})"
        )
