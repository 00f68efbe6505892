"""Running normalisation with a decayed mean and variance: :class:`VecNormV2`."""

from __future__ import annotations

import math
import multiprocessing
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, unravel_key

from tdrl.data import Composite, Unbounded
from tdrl.envs.transforms._running_stats import (
    FROZEN_UNINITIALIZED_ERROR,
    SEP,
    UNINITIALIZED_LOAD_WARNING,
    VOID_STATE_ERROR,
    LockedStats,
    flatten_state,
    float_dtype,
    is_shared,
    merged_moments,
    unflatten_state,
    warn_uninitialized_state,
)
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.normalization import ObservationNorm
from tdrl.envs.transforms.transform import (
    MISSING_KEY_ERROR,
    OUTPUT_ENTRIES,
    NestedKey,
    _key_list,
    locate_spec,
    map_output_specs,
)

__all__ = ["VecNormV2"]

STATS = ("loc", "var", "count")
SHAPE_ERROR = (
    "VecNormV2: entry {key!r} of shape {shape} does not end with the shape {stats} of its "
    "statistics"
)


def _as_tuple(key: NestedKey) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class VecNormV2(LockedStats):
    """Normalises entries with a running (exponentially decayed) mean and variance.

    Each step merges the new values into the statistics (old samples weigh
    ``decay`` times less at each update; ``decay=1`` gives the exact mean and
    variance of everything seen), then writes ``(value - loc) / scale`` with
    ``scale = sqrt(var)`` clamped to at least ``eps``.

    Statistics are kept per element of the env batch (one set per env), or
    shared by the whole batch with ``reduce_batch_dims=True``. A *stateful*
    transform keeps them in TensorDicts (``loc``, ``var``, ``count``, keyed like
    ``in_keys``) built from the env specs (or the first data); clones copy them.
    A *stateless* one (``stateful=False``) carries them in the data instead, under
    ``"_vecnorm_loc"``, ``"_vecnorm_var"`` and ``"_vecnorm_count"`` (declared as
    observation and state entries), so that each trajectory holds its own.

    Args:
        in_keys: the entries to normalise (default ``["observation", "reward"]``).
        out_keys: where to write them (default: in place).

    Keyword Args:
        decay: the weight of the old statistics at each update, in (0, 1].
        eps: the smallest scale (default ``1e-6``).
        stateful: keep the statistics in the transform (True) or in the data.
        shared_data: statistics to use (and update) in place: a TensorDict with
            ``"loc"``, ``"var"`` and ``"count"`` sub-tensordicts, e.g. in shared memory.
        reduce_batch_dims: pool the batch dims into one set of statistics (stateful
            only).
        lock: a multiprocessing lock guarding the updates (default: a new one).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import VecNormV2
        >>> t = VecNormV2(in_keys=["x"], decay=1.0, reduce_batch_dims=True)
        >>> out = t._step(TensorDict(), TensorDict({"x": torch.tensor([[1.0], [3.0]])}, [2]))
        >>> out["x"].flatten().tolist(), t.loc["x"].tolist(), t.scale["x"].tolist()
        ([-1.0, 1.0], [2.0], [1.0])
        >>> t.denorm(out)["x"].flatten().tolist()
        [1.0, 3.0]
    """

    SEP = SEP
    #: where a stateless transform keeps its statistics in the data
    PREFIX = "_vecnorm"

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        *,
        decay: float = 0.9999,
        eps: float | None = None,
        stateful: bool = True,
        shared_data: TensorDictBase | None = None,
        reduce_batch_dims: bool = False,
        lock: Any = None,
    ) -> None:
        super().__init__(["observation", "reward"] if in_keys is None else in_keys, out_keys)
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"VecNormV2 decay: expected a value in (0, 1], got {decay}")
        if reduce_batch_dims and not stateful:
            raise ValueError(
                "VecNormV2: reduce_batch_dims=True needs stateful=True (stateless statistics "
                "travel in the data, one set per batch element)"
            )
        if shared_data is not None and not stateful:
            raise ValueError("VecNormV2: shared_data needs stateful=True")
        self.decay = float(decay)
        self.eps = 1e-6 if eps is None else float(eps)
        self.stateful = bool(stateful)
        self.reduce_batch_dims = bool(reduce_batch_dims)
        self.frozen = False
        self.__dict__["lock"] = multiprocessing.Lock() if lock is None else lock
        for name in STATS:
            self.__dict__["_" + name] = None
        if shared_data is not None:
            self._adopt(shared_data)

    # ------------------------------------------------------------ statistics
    @property
    def initialized(self) -> bool:
        """Whether the (stateful) statistics exist."""
        return self.__dict__["_loc"] is not None

    def _adopt(self, stats: TensorDictBase) -> None:
        missing = [name for name in STATS if name not in stats.keys()]
        if missing:
            raise KeyError(
                f"VecNormV2 statistics: expected sub-tensordicts {list(STATS)}, missing {missing}"
            )
        for name in STATS:
            self.__dict__["_" + name] = stats.get(name)

    def _stats_shapes(self, shape: torch.Size, batch_ndim: int) -> tuple[torch.Size, torch.Size]:
        """The shapes of ``loc`` / ``var`` and of ``count`` for an entry of ``shape``."""
        if self.reduce_batch_dims:
            return shape[batch_ndim:], torch.Size([])
        return shape, shape[:batch_ndim]

    def _initialize(self, entries: dict, batch_ndim: int) -> None:
        """Allocate zero statistics for ``{key: (shape, dtype, device)}`` (added to existing ones)."""
        loc, var, count = {}, {}, {}
        for key, (shape, dtype, device) in entries.items():
            stat_shape, count_shape = self._stats_shapes(shape, batch_ndim)
            dtype = float_dtype(dtype)
            loc[key] = torch.zeros(stat_shape, dtype=dtype, device=device)
            var[key] = torch.zeros(stat_shape, dtype=dtype, device=device)
            count[key] = torch.zeros(count_shape, dtype=torch.int64, device=device)
        new = TensorDict({"loc": loc, "var": var, "count": count}, [])
        if self.initialized:
            for name in STATS:
                self.__dict__["_" + name].update(new.get(name))
            return
        self._adopt(new)

    def _scale(self, var: torch.Tensor) -> torch.Tensor:
        return var.clamp_min(0).sqrt().clamp_min(self.eps)

    @property
    def loc(self) -> TensorDictBase:
        """The running means, keyed like ``in_keys``."""
        self._require_stats("loc")
        return self.__dict__["_loc"].clone()

    @property
    def scale(self) -> TensorDictBase:
        """The running standard deviations (at least ``eps``), keyed like ``in_keys``."""
        self._require_stats("scale")
        return self.__dict__["_var"].apply(self._scale)

    @property
    def standard_normal(self) -> bool:
        """Always True: values are mapped with ``(value - loc) / scale``."""
        return True

    def _require_stats(self, what: str) -> None:
        if not self.stateful:
            raise NotImplementedError(
                f"VecNormV2.{what}: a stateless VecNormV2 keeps its statistics in the data "
                f"(under {self.PREFIX!r} entries), not in the transform"
            )
        if not self.initialized:
            raise RuntimeError(
                f"VecNormV2.{what}: no statistics yet; attach the transform to an env or "
                "call it on data first"
            )

    # ------------------------------------------------------------ updates
    def _update(
        self, stats: tuple, value: torch.Tensor, key: NestedKey, mask: torch.Tensor | None
    ) -> tuple:
        """Merge ``value`` into ``(loc, var, count)``; returns the new statistics."""
        loc, var, count = stats
        lead = value.ndim - loc.ndim
        if lead < 0 or value.shape[lead:] != loc.shape:
            raise ValueError(
                SHAPE_ERROR.format(key=key, shape=tuple(value.shape), stats=tuple(loc.shape))
            )
        value = value.to(loc.dtype)
        if mask is not None and lead > 0:
            value = value[mask.reshape(value.shape[:lead])]
        dims = tuple(range(lead))
        if lead:
            n = math.prod(value.shape[:lead])
            batch_mean = value.mean(dims)
            batch_var = value.var(dims, unbiased=False)
        else:
            n = 1
            batch_mean, batch_var = value, torch.zeros_like(value)
        if n == 0:
            return stats
        new_loc, new_var, new_count = merged_moments(
            loc, var, count, batch_mean, batch_var, n, self.decay
        )
        if mask is not None and lead == 0:
            keep = mask.reshape(*mask.shape, *(1,) * (loc.ndim - mask.ndim))
            new_loc = torch.where(keep, new_loc, loc)
            new_var = torch.where(keep, new_var, var)
            new_count = torch.where(mask.reshape(count.shape), new_count, count)
        return new_loc, new_var, new_count

    def _updating(self) -> bool:
        return not self.frozen

    def _normalize_stateful(
        self, tensordict: TensorDictBase, out: TensorDictBase, mask: Any, tolerant: bool
    ) -> TensorDictBase:
        known = () if not self.initialized else self.__dict__["_loc"].keys(True, True)
        entries = {}
        for key in self.in_keys:
            value = out.get(key, None)
            if value is not None and key not in known:
                entries[key] = (value.shape, value.dtype, value.device)
        if entries:
            # statistics of entries seen for the first time (all of them without an env)
            self._initialize(entries, out.batch_dims)
        stats = [self.__dict__["_" + name] for name in STATS]
        with self.__dict__["lock"]:
            for in_key, out_key in zip(self.in_keys, self.out_keys):
                value = out.get(in_key, None)
                if value is None:
                    self._missing(in_key, out, tolerant)
                    continue
                current = tuple(stat.get(in_key) for stat in stats)
                if self._updating():
                    for stat, new in zip(current, self._update(current, value, in_key, mask)):
                        stat.copy_(new)
                out.set(out_key, self._normalized(value, current[0], current[1]))
        return out

    def _normalized(self, value: torch.Tensor, loc: torch.Tensor, var: torch.Tensor) -> Any:
        return (value.to(loc.dtype) - loc) / self._scale(var)

    def _missing(self, key: NestedKey, tensordict: TensorDictBase, tolerant: bool) -> None:
        if not (tolerant or self.missing_tolerance):
            raise KeyError(
                MISSING_KEY_ERROR.format(owner="VecNormV2", key=key, keys=_key_list(tensordict))
            )

    def _stat_key(self, name: str, key: NestedKey) -> NestedKey:
        return unravel_key((f"{self.PREFIX}_{name}", *_as_tuple(key)))

    def _normalize_stateless(
        self, source: TensorDictBase, out: TensorDictBase, mask: Any, tolerant: bool
    ) -> TensorDictBase:
        batch_ndim = out.batch_dims
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = out.get(in_key, None)
            previous = [source.get(self._stat_key(name, in_key), None) for name in STATS]
            if value is None:
                self._missing(in_key, out, tolerant)
                if previous[0] is None and in_key in self.__dict__.get("_spec_entries", {}):
                    shape, dtype, device = self.__dict__["_spec_entries"][in_key]
                    previous = self._zero_stats(shape, dtype, device, batch_ndim)
                if previous[0] is not None:
                    for name, stat in zip(STATS, previous):
                        out.set(self._stat_key(name, in_key), stat)
                continue
            if previous[0] is None:
                previous = self._zero_stats(value.shape, value.dtype, value.device, batch_ndim)
            current = tuple(previous)
            if self._updating():
                current = self._update(current, value, in_key, mask)
            for name, stat in zip(STATS, current):
                out.set(self._stat_key(name, in_key), stat)
            out.set(out_key, self._normalized(value, current[0], current[1]))
        return out

    @staticmethod
    def _zero_stats(shape: torch.Size, dtype: Any, device: Any, batch_ndim: int) -> list:
        dtype = float_dtype(dtype)
        zeros = torch.zeros(shape, dtype=dtype, device=device)
        counts = torch.zeros(shape[:batch_ndim], dtype=torch.int64, device=device)
        return [zeros, zeros, counts]

    def _normalize(
        self, source: TensorDictBase, out: TensorDictBase, mask: Any = None, tolerant: bool = False
    ) -> TensorDictBase:
        if self.stateful:
            return self._normalize_stateful(source, out, mask, tolerant)
        return self._normalize_stateless(source, out, mask, tolerant)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._normalize(tensordict, next_tensordict)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._normalize(next_tensordict, next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        reset = tensordict.get("_reset", None) if tensordict is not None else None
        mask = None
        if reset is not None and reset.shape[: tensordict_reset.batch_dims] == (
            tensordict_reset.batch_size
        ):
            mask = reset.reshape(*tensordict_reset.batch_size, -1).any(-1)
            if bool(mask.all()):
                mask = None
        source = tensordict if tensordict is not None else tensordict_reset
        return self._normalize(source, tensordict_reset, mask, tolerant=True)

    def denorm(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Map normalised ``out_keys`` entries back to ``in_keys`` (``value * scale + loc``)."""
        if not self.stateful:
            raise NotImplementedError(
                "VecNormV2.denorm: a stateless VecNormV2 keeps no statistics to invert with"
            )
        self._require_stats("denorm")
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = tensordict.get(out_key, None)
            if value is None:
                continue
            loc = self.__dict__["_loc"].get(in_key)
            scale = self._scale(self.__dict__["_var"].get(in_key))
            tensordict.set(in_key, value * scale + loc)
        return tensordict

    # ------------------------------------------------------------ copies, state
    def freeze(self) -> VecNormV2:
        """Stop updating the statistics (they are still applied); returns self."""
        self.frozen = True
        return self

    def unfreeze(self) -> VecNormV2:
        """Resume updating the statistics; returns self."""
        self.frozen = False
        return self

    def _stats_td(self) -> TensorDictBase:
        return TensorDict({name: self.__dict__["_" + name] for name in STATS}, [])

    def clone(self) -> VecNormV2:
        """A copy without a parent, with its own copy of the statistics (kept shared if they are)."""
        new = super().clone()
        if self.initialized:
            stats = self._stats_td()
            copied = stats.clone()
            if is_shared(stats):
                copied.share_memory_()
            new._adopt(copied)
        new.__dict__["lock"] = multiprocessing.Lock()
        return new

    def frozen_copy(self) -> VecNormV2:
        """A frozen clone with its own copy of the current statistics."""
        if self.stateful and not self.initialized:
            raise RuntimeError(FROZEN_UNINITIALIZED_ERROR.format(owner="VecNormV2"))
        return self.clone().freeze()

    def to_observation_norm(self) -> ObservationNorm | Compose:
        """A static ObservationNorm (a Compose of them for several keys) with the current stats."""
        loc, scale = self.loc, self.scale
        norms = [
            ObservationNorm(
                loc=loc.get(in_key),
                scale=scale.get(in_key),
                in_keys=[in_key],
                out_keys=[out_key],
                standard_normal=True,
                eps=self.eps,
            )
            for in_key, out_key in zip(self.in_keys, self.out_keys)
        ]
        return norms[0] if len(norms) == 1 else Compose(*norms)

    def get_extra_state(self) -> dict:
        """The statistics (the tensors themselves) as a flat dict, keys joined with :attr:`SEP`."""
        if not self.initialized:
            return warn_uninitialized_state("VecNorm")
        return flatten_state(self._stats_td())

    def set_extra_state(self, state: dict) -> None:
        """Use the statistics of a state saved by :meth:`get_extra_state` (the tensors given)."""
        if not state:
            if self.initialized:
                raise RuntimeError(VOID_STATE_ERROR.format(owner="VecNormV2"))
            return
        loaded = unflatten_state(state)
        if not self.initialized and not is_shared(loaded):
            warnings.warn(
                UNINITIALIZED_LOAD_WARNING.format(
                    shared=" and the tensordict is not shared", action="are used as they are"
                ),
                UserWarning,
                stacklevel=3,
            )
        self._adopt(loaded)

    # ------------------------------------------------------------------ specs
    def transform_output_spec(self, output_spec: Any) -> Any:
        """Make the normalised entries unbounded; build (or declare) the statistics."""
        output_spec = super().transform_output_spec(output_spec)
        batch_shape = output_spec.shape
        batch_ndim = len(batch_shape)
        entries = {}
        for in_key in self.in_keys:
            sub = locate_spec(output_spec, OUTPUT_ENTRIES, in_key)
            if sub is not None:
                spec = sub[in_key]
                entries[in_key] = (spec.shape, spec.dtype, spec.device)
        if self.stateful and not self.initialized and entries:
            self._initialize(entries, batch_ndim)
        map_output_specs(
            self,
            output_spec,
            self.in_keys,
            self.out_keys,
            lambda spec: Unbounded(spec.shape, device=spec.device, dtype=float_dtype(spec.dtype)),
        )
        self.__dict__["_spec_entries"] = entries
        if not self.stateful:
            observation = output_spec["full_observation_spec"]
            for name, spec in self._stateless_specs(entries, batch_shape).items(True, True):
                observation[name] = spec
        return output_spec

    def _stateless_specs(self, entries: dict, batch_shape: torch.Size) -> Composite:
        specs = Composite(shape=batch_shape)
        for key, (shape, dtype, device) in entries.items():
            dtype = float_dtype(dtype)
            specs[self._stat_key("loc", key)] = Unbounded(shape, device=device, dtype=dtype)
            specs[self._stat_key("var", key)] = Unbounded(shape, device=device, dtype=dtype)
            specs[self._stat_key("count", key)] = Unbounded(
                batch_shape, device=device, dtype=torch.int64
            )
        return specs

    def transform_input_spec(self, input_spec: Any) -> Any:
        """A stateless transform reads its statistics back: they are state entries too."""
        input_spec = super().transform_input_spec(input_spec)
        if self.stateful:
            return input_spec
        # the entries seen by transform_output_spec, which envs call first
        entries = self.__dict__.get("_spec_entries") or {}
        state = input_spec["full_state_spec"]
        for name, spec in self._stateless_specs(entries, input_spec.shape).items(True, True):
            state[name] = spec
        return input_spec

    def __repr__(self) -> str:
        return (
            f"VecNormV2(in_keys={self.in_keys}, out_keys={self.out_keys}, decay={self.decay}, "
            f"eps={self.eps}, stateful={self.stateful}, frozen={self.frozen})"
        )
