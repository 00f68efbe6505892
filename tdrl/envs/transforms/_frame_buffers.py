"""Per-key frame buffers shared by :class:`CatFrames` and :class:`TimeMaxPool`.

Both transforms keep the last frames of each env of the batch in tensors registered
as buffers, one per ``in_keys`` entry, named ``<prefix><key>`` (nested keys joined
with ``"_"``) so that they show up by key in ``state_dict``. The buffers are updated
in place, so clones of a transform (which share their buffers) see the same frames.
A reset refills only the envs whose ``"_reset"`` entry is True.

The module also holds the helpers that find the time dim and the trajectory bounds
of sequence data (replay buffer samples), on which both transforms also work.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key

from tdrl.data import Composite
from tdrl.envs._td_fast import all_true
from tdrl.envs.transforms.transform import (
    MISSING_KEY_ERROR,
    NestedKey,
    ObservationTransform,
    _key_list,
    _unlocked_clone,
    map_output_specs,
)

NOT_RESET_ERROR = (
    "{owner}: the frame buffer of {key!r} has shape {buffer}, which does not fit an "
    "observation of shape {obs}; reset the env before stepping it"
)


def as_tuple(key: NestedKey) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def buffer_names(prefix: str, keys: list) -> list:
    """One buffer name per key: ``prefix`` + the key (``"_"``-joined), made unique."""
    names: list = []
    for key in keys:
        name = prefix + "_".join(as_tuple(key)).replace(".", "_")
        base, suffix = name, 1
        while name in names:
            name = f"{base}_{suffix}"
            suffix += 1
        names.append(name)
    return names


def reset_key_for(done_spec: Any) -> NestedKey:
    """The ``"_reset"`` key next to the done entries (the root one when there are several)."""
    prefixes = {
        as_tuple(key)[:-1]
        for key in done_spec.keys(True, True)
        if as_tuple(key)[-1] in ("done", "terminated", "truncated")
    }
    if len(prefixes) == 1:
        (prefix,) = prefixes
        return unravel_key((*prefix, "_reset"))
    return "_reset"


def batch_mask(reset: torch.Tensor | None, batch_shape: torch.Size) -> torch.Tensor | None:
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


def broadcast(mask: torch.Tensor, ndim: int) -> torch.Tensor:
    return mask.reshape(*mask.shape, *(1,) * (ndim - mask.ndim))


def time_dim(tensordict: TensorDictBase, owner: str) -> int:
    """The batch dim named ``"time"``; the last batch dim (with a warning) when none is."""
    if tensordict.batch_dims == 0:
        raise ValueError(
            f"{owner} cannot process unbatched tensordict: sequence data needs a time dim "
            "(a batch dim named 'time', or the last batch dim), got batch size ()"
        )
    names = tensordict.names
    if "time" in names:
        return names.index("time")
    warnings.warn(
        f"{owner}: no batch dim of the tensordict is named 'time'; the last batch dim "
        f"(of size {tensordict.batch_size[-1]}) is taken as time. Name it with "
        "td.refine_names(..., 'time') to silence this warning.",
        UserWarning,
        stacklevel=3,
    )
    return tensordict.batch_dims - 1


def done_along_time(
    tensordict: TensorDictBase, done_key: NestedKey, tdim: int
) -> torch.Tensor | None:
    """The ``("next", done_key)`` entry reduced to ``[*B, T]``, time moved last; or None."""
    done = tensordict.get(("next", *as_tuple(done_key)), None)
    if done is None:
        return None
    batch = tensordict.batch_size
    done = done.reshape(*batch, -1).any(-1)
    return done.movedim(tdim, -1)


def episode_starts(done: torch.Tensor | None, shape: torch.Size, device: Any) -> torch.Tensor:
    """Index of the first step of the trajectory each step belongs to (time last)."""
    steps = torch.arange(shape[-1], device=device)
    if done is None:
        return torch.zeros(shape, dtype=torch.long, device=device)
    first = torch.zeros_like(done)
    first[..., 0] = True
    first[..., 1:] = done[..., :-1]
    marks = torch.where(first, steps.to(done.device), 0)
    return marks.cummax(-1).values


def episode_ends(done: torch.Tensor | None, shape: torch.Size, device: Any) -> torch.Tensor:
    """Index of the last step of the trajectory each step belongs to (time last)."""
    length = shape[-1]
    if done is None:
        return torch.full(shape, length - 1, dtype=torch.long, device=device)
    steps = torch.arange(length, device=done.device)
    marks = torch.where(done, steps, length - 1)
    return marks.flip(-1).cummin(-1).values.flip(-1)


class FrameBuffers(ObservationTransform):
    """Buffers (one per ``in_keys`` entry) shared by clones and materialized at reset."""

    _buffer_prefix = "_frames_"

    def _init_buffers(self) -> None:
        names = buffer_names(self._buffer_prefix, self.in_keys)
        self.__dict__["_buffer_names"] = names
        for name in names:
            self.register_buffer(name, torch.empty(0))

    def _buffer(self, index: int) -> torch.Tensor:
        return self._buffers[self.__dict__["_buffer_names"][index]]

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
            self._reset_key = reset_key_for(output_spec["full_done_spec"])

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Map the specs of the ``in_keys`` entries (which must exist)."""
        output_spec = _unlocked_clone(output_spec)
        self._resolve_reset_key(output_spec)
        return map_output_specs(
            self, output_spec, self.in_keys, self.out_keys, self._transform_spec
        )

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Map the ``in_keys`` entries of a Composite, or a leaf spec (that of the entry)."""
        if not isinstance(observation_spec, Composite):
            return self._transform_spec(observation_spec)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec.keys(True):
                observation_spec[out_key] = self._transform_spec(observation_spec[in_key].clone())
        return observation_spec

    def _fresh(self, obs: torch.Tensor) -> torch.Tensor:
        """The buffer content right after a reset to ``obs``."""
        raise NotImplementedError

    def _output(self, frames: torch.Tensor) -> torch.Tensor:
        """What the transform writes, given the buffer content."""
        return frames

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
        mask = batch_mask(reset, batch_shape)
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            obs = tensordict_reset.get(in_key, None)
            if obs is None:
                continue
            buffer = self._buffer(i)
            fresh = self._fresh(obs)
            if mask is not None and buffer.shape == fresh.shape:
                fresh = torch.where(broadcast(mask, fresh.ndim), fresh, buffer)
            self._store(buffer, fresh)
            tensordict_reset.set(out_key, self._output(fresh))
        return tensordict_reset
