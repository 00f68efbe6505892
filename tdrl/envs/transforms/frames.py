"""Frame stacks and pools over time: :class:`CatFrames` and :class:`TimeMaxPool`.

Both keep the last frames of each env of the batch in tensors registered as
buffers. The buffers are updated in place, so clones of a transform (which share
their buffers) see the same frames. A reset refills only the envs whose
``"_reset"`` entry is True, so partial resets of batched envs leave the other
envs' frames alone.

On data that does not come from an env (replay buffer samples, whose last batch
dim is time), the same windows are built from the sequence itself, without
crossing trajectory boundaries (read from the ``("next", done_key)`` entry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key

from tdrl.data import Bounded
from tdrl.envs._partial import all_true
from tdrl.envs.transforms.transform import (
    MISSING_KEY_ERROR,
    NestedKey,
    ObservationTransform,
    _key_list,
    _unlocked_clone,
    map_output_specs,
)

__all__ = ["CatFrames", "TimeMaxPool"]

PADDINGS = ("same", "constant")
NOT_RESET_ERROR = (
    "{owner}: the frame buffer of {key!r} has shape {buffer}, which does not fit an "
    "observation of shape {obs}; reset the env before stepping it"
)
ENV_ONLY_ERROR = "{owner}: {what}"


def _as_tuple(key: NestedKey) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _reset_key_for(done_spec: Any) -> NestedKey:
    """The ``"_reset"`` key next to the done entries (the root one when there are several)."""
    prefixes = {
        _as_tuple(key)[:-1]
        for key in done_spec.keys(True, True)
        if _as_tuple(key)[-1] in ("done", "terminated", "truncated")
    }
    if len(prefixes) == 1:
        (prefix,) = prefixes
        return unravel_key((*prefix, "_reset"))
    return "_reset"


def _batch_mask(reset: torch.Tensor | None, batch_shape: torch.Size) -> torch.Tensor | None:
    """The ``"_reset"`` entry reduced to the batch shape; None means "reset everything"."""
    if reset is None:
        return None
    ndim = len(batch_shape)
    if reset.ndim > ndim:
        reset = reset.reshape(*batch_shape, -1).any(-1)
    elif reset.shape != batch_shape:
        reset = reset.expand(batch_shape)
    if all_true(reset):
        return None
    return reset


def _broadcast(mask: torch.Tensor, ndim: int) -> torch.Tensor:
    return mask.reshape(*mask.shape, *(1,) * (ndim - mask.ndim))


def _episode_starts(tensordict: TensorDictBase, done_key: NestedKey) -> torch.Tensor:
    """Index of the first step of the trajectory each step belongs to, shape ``[*B, T]``."""
    shape = tensordict.batch_size
    steps = torch.arange(shape[-1], device=tensordict.device)
    done = tensordict.get(("next", *_as_tuple(done_key)), None)
    if done is None:
        return torch.zeros(shape, dtype=torch.long, device=steps.device)
    done = done.reshape(*shape, -1).any(-1)
    first = torch.zeros_like(done)
    first[..., 0] = True
    first[..., 1:] = done[..., :-1]
    marks = torch.where(first, steps.to(done.device), 0)
    return marks.cummax(-1).values


def _episode_windows(
    tensordict: TensorDictBase, done_key: NestedKey, size: int, owner: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The last ``size`` time indices of each step, and its episode start, for sequence data.

    Returns ``wanted`` (``[*B, T, size]``, may run before the episode start) and ``start``
    (``[*B, T]``, from :func:`_episode_starts`). Time is the last batch dim.
    """
    if tensordict.batch_dims == 0:
        raise ValueError(
            f"{owner}: expected data whose last batch dim is time, got a tensordict "
            "with batch size ()"
        )
    start = _episode_starts(tensordict, done_key)
    steps = torch.arange(tensordict.shape[-1], device=start.device)
    offsets = torch.arange(1 - size, 1, device=start.device)
    wanted = (steps.unsqueeze(-1) + offsets).expand(*start.shape, size)
    return wanted, start


def _windows(data: torch.Tensor, positions: torch.Tensor, batch_ndim: int) -> torch.Tensor:
    """``data[..., positions[..., t, k], ...]`` along the time dim (the last batch dim).

    ``data`` has shape ``[*B, T, *F]`` and ``positions`` ``[*B, T, K]``; the result
    has shape ``[*B, T, K, *F]``.
    """
    lead = data.shape[: batch_ndim - 1]
    steps = data.shape[batch_ndim - 1]
    features = data.shape[batch_ndim:]
    flat = data.reshape(-1, steps, *features)
    index = positions.reshape(flat.shape[0], steps, -1)
    rows = torch.arange(flat.shape[0], device=data.device).view(-1, 1, 1)
    out = flat[rows, index]
    return out.reshape(*lead, steps, index.shape[-1], *features)


class _FrameBuffers(ObservationTransform):
    """Buffers (one per ``in_keys`` entry) shared by clones and materialized at reset."""

    def _init_buffers(self) -> None:
        for i in range(len(self.in_keys)):
            self.register_buffer(f"_frames_{i}", torch.empty(0))

    def _buffer(self, index: int) -> torch.Tensor:
        return self._buffers[f"_frames_{index}"]

    @staticmethod
    def _store(buffer: torch.Tensor, value: torch.Tensor) -> None:
        """Write ``value`` into ``buffer`` in place (re-shaping it when needed)."""
        if (
            buffer.shape == value.shape
            and buffer.dtype == value.dtype
            and buffer.device == value.device
        ):
            buffer.copy_(value)
        else:
            buffer.data = value.clone()

    def _load_from_state_dict(
        self,
        state_dict: dict,
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list,
        unexpected_keys: list,
        error_msgs: list,
    ) -> None:
        for name, buffer in self._buffers.items():
            loaded = state_dict.get(prefix + name)
            if isinstance(loaded, torch.Tensor) and loaded.shape != buffer.shape:
                buffer.data = torch.empty_like(loaded, device=buffer.device)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def _resolve_reset_key(self, output_spec: Any) -> None:
        if self.reset_key is None and "full_done_spec" in output_spec.keys():
            self._reset_key = _reset_key_for(output_spec["full_done_spec"])

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Map the specs of the ``in_keys`` entries (which must exist)."""
        output_spec = _unlocked_clone(output_spec)
        self._resolve_reset_key(output_spec)
        return map_output_specs(
            self, output_spec, self.in_keys, self.out_keys, self._transform_spec
        )

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Map the specs of the ``in_keys`` entries that the observation spec holds."""
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec.keys(True):
                observation_spec[out_key] = self._transform_spec(observation_spec[in_key].clone())
        return observation_spec

    def _fresh(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _missing(self, key: NestedKey, tensordict: TensorDictBase) -> None:
        if not self.missing_tolerance:
            raise KeyError(
                MISSING_KEY_ERROR.format(
                    owner=type(self).__name__, key=key, keys=_key_list(tensordict)
                )
            )

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        reset = tensordict.get(self._reset_key, None)
        batch_shape = tensordict_reset.batch_size
        mask = _batch_mask(reset, batch_shape)
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            obs = tensordict_reset.get(in_key, None)
            if obs is None:
                continue
            buffer = self._buffer(i)
            fresh = self._fresh(obs)
            if mask is not None and buffer.shape == fresh.shape:
                fresh = torch.where(_broadcast(mask, fresh.ndim), fresh, buffer)
            self._store(buffer, fresh)
            tensordict_reset.set(out_key, self._output(fresh))
        return tensordict_reset

    def _output(self, frames: torch.Tensor) -> torch.Tensor:
        return frames


class CatFrames(_FrameBuffers):
    """Stacks the last ``N`` observations along ``dim``.

    At reset, the stack is filled with copies of the first observation
    (``padding="same"``) or with ``padding_value`` (``padding="constant"``), the
    observation itself being last. Each step drops the oldest frame and appends the
    new one. Only the envs flagged in ``"_reset"`` are refilled on a partial reset.
    Clones share the frame buffers.

    On data that does not come from an env (``transform(td)``, e.g. replay buffer
    samples), the last batch dim of ``td`` is time and each step gets the stack of
    its ``N`` last frames, padded at the start of each trajectory (read from
    ``("next", done_key)``). A ``("next", key)`` entry is stacked after the matching
    root entry, like the env does. With ``as_inverse=True`` this happens on the data
    written to a buffer (``inv``) instead of the data read from it.

    Args:
        N: the number of frames.
        dim: the (negative) dim along which frames are concatenated.
        in_keys: the entries to stack (default ``["pixels"]``).
        out_keys: where to write the stacks (default: in place).
        padding: ``"same"`` or ``"constant"``.
        padding_value: the fill value of ``padding="constant"``.
        as_inverse: stack on the inverse (buffer writing) path; buffers only.
        reset_key: the ``"_reset"`` entry to read (default: the one of the env's done
            entries).
        done_key: the done entry marking trajectory ends in buffer data (default
            ``"done"``).

    Examples:
        >>> from tdrl.envs import CatFrames, GymEnv, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), CatFrames(4, dim=-1, in_keys=["observation"]))
        >>> check_env_specs(env)
        >>> td = env.reset()
        >>> obs = td["observation"]
        >>> obs.shape, bool((obs == obs[:3].repeat(4)).all())
        (torch.Size([12]), True)
    """

    def __init__(
        self,
        N: int,
        dim: int,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        padding: str = "same",
        padding_value: float = 0,
        as_inverse: bool = False,
        reset_key: NestedKey | None = None,
        done_key: NestedKey | None = None,
    ) -> None:
        if isinstance(N, bool) or not isinstance(N, int) or N < 1:
            raise ValueError(f"CatFrames N: expected a positive int, got {N!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim >= 0:
            raise ValueError(
                f"CatFrames dim: expected a negative int (counted from the end), got {dim!r}"
            )
        if padding not in PADDINGS:
            raise ValueError(
                f"CatFrames padding: expected one of {list(PADDINGS)}, got {padding!r}"
            )
        super().__init__(in_keys=["pixels"] if in_keys is None else in_keys, out_keys=out_keys)
        self.N = N
        self.dim = dim
        self.padding = padding
        self.padding_value = padding_value
        self.as_inverse = as_inverse
        self.reset_key = reset_key
        self._reset_key = "_reset" if reset_key is None else reset_key
        self.done_key = "done" if done_key is None else done_key
        self._init_buffers()

    # ---------------------------------------------------------------- env path
    def _fresh(self, obs: torch.Tensor) -> torch.Tensor:
        if self.padding == "same":
            return torch.cat([obs] * self.N, self.dim)
        shape = list(obs.shape)
        shape[self.dim] *= self.N - 1
        pad = torch.full(shape, self.padding_value, dtype=obs.dtype, device=obs.device)
        return torch.cat([pad, obs], self.dim)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        dim = self.dim
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            obs = next_tensordict.get(in_key, None)
            if obs is None:
                self._missing(in_key, next_tensordict)
                continue
            buffer = self._buffer(i)
            if buffer.ndim != obs.ndim:
                out = self._fresh(obs)
                self._store(buffer, out)
            else:
                size = obs.shape[dim]
                try:
                    if buffer.shape[dim] != size * self.N:
                        raise RuntimeError("frame size changed")
                    out = torch.cat([buffer.narrow(dim, size, buffer.shape[dim] - size), obs], dim)
                    buffer.copy_(out)
                except RuntimeError as err:
                    raise ValueError(
                        NOT_RESET_ERROR.format(
                            owner="CatFrames",
                            key=in_key,
                            buffer=tuple(buffer.shape),
                            obs=tuple(obs.shape),
                        )
                    ) from err
            next_tensordict.set(out_key, out)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self.as_inverse:
            raise RuntimeError(self._env_error())
        return super()._reset(tensordict, tensordict_reset)

    def _env_error(self) -> str:
        return ENV_ONLY_ERROR.format(
            owner="CatFrames",
            what="as_inverse=True stacks the frames of data written to a replay buffer; "
            "it cannot be used in an env",
        )

    # ------------------------------------------------------------ buffer path
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Stack the frames of sequence data (time is the last batch dim)."""
        if self.as_inverse:
            return tensordict
        return self._unfold(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.as_inverse:
            return self._unfold(tensordict)
        return tensordict

    def _needs_inverse(self) -> bool:
        return self.as_inverse

    def _unfold(self, tensordict: TensorDictBase) -> TensorDictBase:
        wanted, start = _episode_windows(tensordict, self.done_key, self.N, "CatFrames")
        batch_ndim = tensordict.batch_dims
        start_k = start.unsqueeze(-1)
        positions = torch.maximum(wanted, start_k)
        valid = wanted >= start_k
        originals = {key: tensordict.get(key, None) for key in self.in_keys}
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            data = originals[in_key]
            if data is None:
                self._missing(in_key, tensordict)
                continue
            frames = _windows(data, positions, batch_ndim)
            mask_shape = (*valid.shape, *(1,) * (data.ndim - batch_ndim))
            keep = valid.reshape(mask_shape)
            key_t = _as_tuple(in_key)
            root = None
            if key_t[0] == "next" and len(key_t) > 1:
                root_key = unravel_key(key_t[1:])
                root = originals.get(root_key)
                if root is None:
                    root = tensordict.get(root_key, None)
            if root is not None:
                first = _windows(root, start_k, batch_ndim)
                if self.padding == "same":
                    frames = torch.where(keep, frames, first)
                else:
                    before = (wanted == start_k - 1).reshape(mask_shape)
                    padded = torch.where(before, first, self.padding_value)
                    frames = torch.where(keep, frames, padded)
            elif self.padding == "constant":
                frames = torch.where(keep, frames, self.padding_value)
            tensordict.set(out_key, self._merge(frames, batch_ndim))
        return tensordict

    def _merge(self, frames: torch.Tensor, batch_ndim: int) -> torch.Tensor:
        """``[*B, T, N, *F]`` -> ``[*B, T, *F]`` with the N frames concatenated along ``dim``."""
        feature_dim = frames.ndim + self.dim
        frames = frames.movedim(batch_ndim, feature_dim - 1)
        return frames.flatten(feature_dim - 1, feature_dim)

    # ------------------------------------------------------------------ specs
    def _transform_spec(self, spec: Any) -> Any:
        if len(spec.shape) < -self.dim:
            raise ValueError(
                f"CatFrames: cannot stack along dim {self.dim} an entry of shape "
                f"{tuple(spec.shape)}"
            )
        shape = list(spec.shape)
        shape[self.dim] *= self.N
        if isinstance(spec, Bounded):
            low = torch.cat([spec.low] * self.N, self.dim)
            high = torch.cat([spec.high] * self.N, self.dim)
            if self.padding == "constant":
                low = low.clamp(max=self.padding_value)
                high = high.clamp(min=self.padding_value)
            return Bounded(low, high, shape=shape, device=spec.device, dtype=spec.dtype)
        return spec._with_shape(torch.Size(shape), lambda t: torch.cat([t] * self.N, self.dim))

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Stack the ``in_keys`` specs ``N`` times along ``dim``."""
        if self.as_inverse:
            raise RuntimeError(self._env_error())
        return super().transform_output_spec(output_spec)

    def __repr__(self) -> str:
        return (
            f"CatFrames(N={self.N}, dim={self.dim}, in_keys={self.in_keys}, "
            f"out_keys={self.out_keys}, padding={self.padding!r})"
        )


class TimeMaxPool(_FrameBuffers):
    """Element-wise maximum over the last ``T`` observations (since the last reset).

    A reset fills the window with the reset observation (only for the envs flagged
    in ``"_reset"``), so the output never mixes trajectories. On data that does not
    come from an env (time is the last batch dim), the same maximum is taken over
    each step's window within its trajectory.

    Args:
        in_keys: the entries to pool (default ``["observation"]``).
        out_keys: where to write the results (default: in place).
        T: the window length.
        reset_key: the ``"_reset"`` entry to read (default: the one of the env's done
            entries).

    Keyword Args:
        done_key: the done entry marking trajectory ends in buffer data (default
            ``"done"``).

    Examples:
        >>> import torch
        >>> from tdrl.envs import GymEnv, TimeMaxPool, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), TimeMaxPool(out_keys=["obs_max"], T=3))
        >>> check_env_specs(env)
        >>> rollout = env.rollout(5)
        >>> expected = rollout["next", "observation"][2:5].max(0).values
        >>> bool(torch.equal(rollout["next", "obs_max"][4], expected))
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        T: int = 1,
        reset_key: NestedKey | None = None,
        *,
        done_key: NestedKey | None = None,
    ) -> None:
        if isinstance(T, bool) or not isinstance(T, int) or T < 1:
            raise ValueError(f"TimeMaxPool T: expected a positive int, got {T!r}")
        super().__init__(in_keys=["observation"] if in_keys is None else in_keys, out_keys=out_keys)
        self.T = T
        self.reset_key = reset_key
        self._reset_key = "_reset" if reset_key is None else reset_key
        self.done_key = "done" if done_key is None else done_key
        self._init_buffers()

    def _fresh(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.unsqueeze(0).expand(self.T, *obs.shape)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        reset = tensordict.get(self._reset_key, None)
        mask = _batch_mask(reset, tensordict_reset.batch_size)
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            obs = tensordict_reset.get(in_key, None)
            if obs is None:
                continue
            buffer = self._buffer(i)
            fresh = self._fresh(obs)
            if mask is not None and buffer.shape == fresh.shape:
                fresh = torch.where(_broadcast(mask, obs.ndim), fresh, buffer)
            self._store(buffer, fresh)
            tensordict_reset.set(out_key, fresh.amax(0))
        return tensordict_reset

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            obs = next_tensordict.get(in_key, None)
            if obs is None:
                self._missing(in_key, next_tensordict)
                continue
            buffer = self._buffer(i)
            if buffer.ndim != obs.ndim + 1:
                frames = self._fresh(obs)
                self._store(buffer, frames)
            else:
                try:
                    frames = torch.cat([buffer[1:], obs.unsqueeze(0)], 0)
                    buffer.copy_(frames)
                except RuntimeError as err:
                    raise ValueError(
                        NOT_RESET_ERROR.format(
                            owner="TimeMaxPool",
                            key=in_key,
                            buffer=tuple(buffer.shape[1:]),
                            obs=tuple(obs.shape),
                        )
                    ) from err
            next_tensordict.set(out_key, frames.amax(0))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Pool sequence data (time is the last batch dim) within each trajectory."""
        wanted, start = _episode_windows(tensordict, self.done_key, self.T, "TimeMaxPool")
        batch_ndim = tensordict.batch_dims
        positions = torch.maximum(wanted, start.unsqueeze(-1))
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            data = tensordict.get(in_key, None)
            if data is None:
                self._missing(in_key, tensordict)
                continue
            tensordict.set(out_key, _windows(data, positions, batch_ndim).amax(batch_ndim))
        return tensordict

    def _transform_spec(self, spec: Any) -> Any:
        return spec

    def __repr__(self) -> str:
        return f"TimeMaxPool(in_keys={self.in_keys}, out_keys={self.out_keys}, T={self.T})"
