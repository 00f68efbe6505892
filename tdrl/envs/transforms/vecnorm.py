"""Running normalisation with decayed sums: :class:`VecNorm` (``new_api=True``: ``VecNormV2``)."""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, unravel_key

from tdrl.data import Unbounded
from tdrl.envs.transforms._running_stats import (
    FROZEN_UNINITIALIZED_ERROR,
    SEP,
    UNINITIALIZED_LOAD_WARNING,
    VOID_STATE_ERROR,
    LockedStats,
    flatten_state,
    float_dtype,
    is_shared,
    unflatten_state,
    warn_uninitialized_state,
)
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.normalization import ObservationNorm
from tdrl.envs.transforms.transform import NestedKey, map_output_specs
from tdrl.envs.transforms.vecnorm_v2 import VecNormV2

__all__ = ["VecNorm"]

SUFFIXES = ("_sum", "_ssq", "_count")


def _stat_key(key: NestedKey, suffix: str) -> NestedKey:
    """Where the statistic ``suffix`` of ``key`` lives: ``("a", "b")`` -> ``("a", "b_sum")``."""
    key = key if isinstance(key, tuple) else (key,)
    return unravel_key((*key[:-1], key[-1] + suffix))


class VecNorm(LockedStats):
    """Normalises entries with running (exponentially decayed) mean and standard deviation.

    Each call updates, per entry, the decayed sum, sum of squares and count of
    the values seen (over all batch dims), then returns ``(value - mean) / std``.
    The statistics live in a TensorDict in shared memory (``shared_td``, or one built
    when the specs or the first data are known) under ``<key>_sum``, ``<key>_ssq`` and
    ``<key>_count`` (next to the key for nested keys); clones and the processes the
    transform is sent to share it, and a lock guards the updates. In :meth:`freeze`
    mode the statistics are used but not updated (the module's train / eval mode does not
    matter: a TransformedEnv keeps its transforms in eval mode).
    ``state_dict()`` / ``load_state_dict()`` save and restore them (loading into an
    initialized transform copies in place, keeping the memory shared).

    ``VecNorm(..., new_api=True)`` builds a :class:`VecNormV2` instead (running mean
    and variance, optionally stateless); the arguments that only ``VecNormV2`` takes
    (``stateful``, ``shared_data``, ``reduce_batch_dims``) need it.

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

    Keyword Args:
        new_api: build a :class:`VecNormV2`.

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

    SEP = SEP

    def __new__(cls, *args: Any, new_api: bool = False, **kwargs: Any) -> Any:
        """Build a legacy VecNorm, or a :class:`VecNormV2` with ``new_api=True``."""
        if not new_api:
            return super().__new__(cls)
        if len(args) > 2:
            raise TypeError(
                "VecNorm(new_api=True) takes in_keys and out_keys positionally and the other "
                f"arguments by keyword, got {len(args)} positional arguments"
            )
        for name in ("shapes", "shared_td"):
            if kwargs.get(name) is not None:
                raise TypeError(
                    f"VecNorm(new_api=True) got {name}=, which only the legacy VecNorm takes "
                    "(VecNormV2 shares its statistics through shared_data=)"
                )
        kwargs.pop("shapes", None)
        kwargs.pop("shared_td", None)
        return VecNormV2(*args, **kwargs)

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        shared_td: TensorDictBase | None = None,
        lock: Any = None,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shapes: Sequence[Sequence[int]] | None = None,
        *,
        new_api: bool = False,
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
                for suffix in SUFFIXES:
                    if _stat_key(key, suffix) not in shared_td.keys(True, True):
                        raise KeyError(
                            f"VecNorm shared_td: expected key {_stat_key(key, suffix)!r} for "
                            f"in_key {key!r}, got keys {list(shared_td.keys(True, True))}"
                        )
        self.__dict__["_td"] = TensorDict({}, []) if shared_td is None else shared_td
        self.__dict__["lock"] = multiprocessing.Lock() if lock is None else lock
        self.decay = float(decay)
        self.eps = float(eps)
        self.shapes = None if shapes is None else [torch.Size(shape) for shape in shapes]
        self.frozen = False

    # ------------------------------------------------------------ statistics
    @property
    def initialized(self) -> bool:
        """Whether the statistics exist (they are built from the specs or the first data)."""
        return not self.__dict__["_td"].is_empty()

    def _ensure_stats(self, key: NestedKey, shape: torch.Size, dtype: Any, device: Any) -> None:
        stats = self.__dict__["_td"]
        if _stat_key(key, "_sum") in stats.keys(True, True):
            return
        if self.shapes is not None:
            shape = self.shapes[self.in_keys.index(key)]
        dtype = float_dtype(dtype)
        new = TensorDict(
            {
                _stat_key(key, "_sum"): torch.zeros(shape, dtype=dtype, device=device),
                _stat_key(key, "_ssq"): torch.zeros(shape, dtype=dtype, device=device),
                _stat_key(key, "_count"): torch.zeros((), dtype=dtype, device=device),
            },
            [],
        )
        if device is None or torch.device(device).type == "cpu":
            new.share_memory_()
        stats.update(new)

    def _normalize(self, key: NestedKey, value: torch.Tensor) -> torch.Tensor:
        stats = self.__dict__["_td"]
        total = stats.get(_stat_key(key, "_sum"))
        squares = stats.get(_stat_key(key, "_ssq"))
        count = stats.get(_stat_key(key, "_count"))
        if not self.frozen:
            flat = value.reshape(-1, *total.shape).to(total.dtype)
            decay = self.decay
            total.mul_(decay).add_(flat.sum(0))
            squares.mul_(decay).add_(flat.pow(2).sum(0))
            count.mul_(decay).add_(flat.shape[0])
        mean, std = self._moments(total, squares, count)
        out = (value - mean) / std
        return out.to(value.dtype) if value.is_floating_point() else out

    def _moments(
        self, total: torch.Tensor, squares: torch.Tensor, count: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # a count of shape (1,) (older layouts) must not add a dim to scalar entries
        count = count.reshape(())
        mean = total / count
        std = (squares / count - mean.pow(2)).clamp_min(self.eps).sqrt()
        return mean, std

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        lock = self.__dict__["lock"]
        batch_dims = next_tensordict.batch_dims
        with lock:
            for key, out_key in zip(self.in_keys, self.out_keys):
                value = next_tensordict.get(key, None)
                if value is None:
                    continue
                self._ensure_stats(key, value.shape[batch_dims:], value.dtype, value.device)
                next_tensordict.set(out_key, self._normalize(key, value))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def denorm(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Map normalised ``out_keys`` entries back to ``in_keys`` (``value * std + mean``)."""
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = tensordict.get(out_key, None)
            if value is None:
                continue
            mean, std = self._mean_std(in_key)
            tensordict.set(in_key, value * std + mean)
        return tensordict

    def freeze(self) -> VecNorm:
        """Stop updating the statistics (they are still applied); returns self."""
        self.frozen = True
        return self

    def unfreeze(self) -> VecNorm:
        """Resume updating the statistics; returns self."""
        self.frozen = False
        return self

    def frozen_copy(self) -> VecNorm:
        """A frozen clone: it applies the (shared, still updated by others) statistics only."""
        if not self.initialized:
            raise RuntimeError(FROZEN_UNINITIALIZED_ERROR.format(owner="VecNorm"))
        return self.clone().freeze()

    def _mean_std(self, key: NestedKey) -> tuple[torch.Tensor, torch.Tensor]:
        stats = self.__dict__["_td"]
        if _stat_key(key, "_sum") not in stats.keys(True, True):
            raise RuntimeError(f"VecNorm: no statistics for key {key!r} yet (no data seen)")
        return self._moments(
            stats.get(_stat_key(key, "_sum")),
            stats.get(_stat_key(key, "_ssq")),
            stats.get(_stat_key(key, "_count")),
        )

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
            dtype = float_dtype(spec.dtype)
            shape = spec.shape[batch_dims:]
            entries[_stat_key(key, "_sum")] = torch.zeros(shape, dtype=dtype)
            entries[_stat_key(key, "_ssq")] = torch.zeros(shape, dtype=dtype)
            entries[_stat_key(key, "_count")] = torch.zeros((), dtype=dtype)
        td = TensorDict(entries, [])
        return td.memmap_() if memmap else td.share_memory_()

    def get_extra_state(self) -> dict:
        """The statistics as a flat dict of tensors (keys joined with :attr:`SEP`)."""
        if not self.initialized:
            return warn_uninitialized_state("VecNorm")
        return flatten_state(self.__dict__["_td"])

    def set_extra_state(self, state: dict) -> None:
        """Restore statistics saved by :meth:`get_extra_state` (in place when initialized).

        Tensors already in shared memory (the shared state of an ``EnvCreator``) are
        adopted instead of copied once the statistics exist, so that they stay shared
        with their owner.
        """
        if isinstance(state, dict) and "td" in state:
            state = state["td"] or {}
        if not state:
            if self.initialized:
                raise KeyError(VOID_STATE_ERROR.format(owner="VecNorm"))
            return
        loaded = unflatten_state(state)
        stats = self.__dict__["_td"]
        if not self.initialized:
            warnings.warn(
                UNINITIALIZED_LOAD_WARNING.format(
                    shared="" if is_shared(loaded) else " and the tensordict is not shared",
                    action="are copied to a new shared-memory tensordict",
                ),
                UserWarning,
                stacklevel=3,
            )
            stats.update(loaded.clone().share_memory_())
            return
        # statistics moved to shared memory are locked (sub-tensordicts of nested keys too)
        relock = stats.is_locked
        stats.unlock_()
        try:
            self._load_stats(stats, loaded)
        finally:
            if relock:
                stats.lock_()

    @staticmethod
    def _load_stats(stats: TensorDictBase, loaded: TensorDictBase) -> None:
        for key, value in loaded.items(True, True):
            current = stats.get(key, None)
            if value.is_shared() and (current is None or current.shape == value.shape):
                # shared statistics (an EnvCreator's shared state) are adopted, not copied
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
            return Unbounded(shape=spec.shape, device=spec.device, dtype=float_dtype(spec.dtype))

        for in_key, out_key in zip(self.in_keys, self.out_keys):
            map_output_specs(
                self, output_spec, [in_key], [out_key], lambda spec, k=in_key: allocate(spec, k)
            )
        return output_spec

    def __repr__(self) -> str:
        return (
            f"VecNorm(in_keys={self.in_keys}, out_keys={self.out_keys}, decay={self.decay}, "
            f"eps={self.eps}, frozen={self.frozen})"
        )
