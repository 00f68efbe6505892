"""Frame stacks and pools over time: :class:`CatFrames` and :class:`TimeMaxPool`.

In an env, CatFrames keeps the last ``N`` frames of each env of the batch in buffers
(see :mod:`tdrl.envs.transforms._frame_buffers`) and refills them at reset.

On data that does not come from an env (replay buffer samples, ``transform(td)``),
:meth:`CatFrames.unfolding` builds the same stacks from the sequence itself, without
crossing trajectory boundaries (read from the ``("next", done_key)`` entry); the
windows can also look forward (``future=True``) and come with a padding mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key

from tdrl.data import Bounded
from tdrl.data.replay_buffers import SliceSampler
from tdrl.envs.transforms._frame_buffers import (
    NOT_RESET_ERROR,
    FrameBuffers,
    as_tuple,
    done_along_time,
    episode_ends,
    episode_starts,
    time_dim,
)
from tdrl.envs.transforms.functional import (
    PADDINGS,
    gather_windows,
    merge_windows,
    stack_windows,
    window_offsets,
)
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["CatFrames", "TimeMaxPool"]

INVERSE_IN_ENV_ERROR = (
    "CatFrames as inverse is not supported as a transform for environments, only for replay "
    "buffers: as_inverse=True stacks the frames of the data written to a buffer"
)
OFFLINE_ONLY_ERROR = (
    "CatFrames with {what} builds windows from whole trajectories and works offline only "
    "(replay buffer data, transform(td)); it cannot run in an environment"
)
NO_DONE_ERROR = (
    "CatFrames: history windows need the {key!r} entry to delimit trajectories in sequence "
    "data, got keys {keys}; pass done_key= to read another entry"
)
FUTURE_NEXT_ERROR = (
    "CatFrames: future=True cannot stack both {root!r} and {next!r}: the stacking of a "
    "('next', key) entry after its root entry is implemented for history windows only"
)


class CatFrames(FrameBuffers):
    """Stacks the last ``N`` observations along ``dim``.

    At reset, the stack is filled with copies of the first observation
    (``padding="same"``) or with ``padding_value`` (``padding="constant"``), the
    observation itself being last. Each step drops the oldest frame and appends the
    new one. Only the envs flagged in ``"_reset"`` are refilled on a partial reset.
    Clones share the frame buffers (``_cat_buffers_<key>``). Called before any reset,
    the stack starts from frames of zeros (``padding_value`` with constant padding).

    On data that does not come from an env (``transform(td)``, replay buffer
    samples), :meth:`unfolding` gives each step the stack of its ``N`` last frames
    within its trajectory. A ``("next", key)`` entry is stacked after the matching
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
        done_key: the done entry marking trajectory ends in sequence data (default
            ``"done"``, read under ``"next"``).

    Keyword Args:
        future: offline only: stack the next ``N`` frames (the step first) instead of
            the last ``N``; the done entry is optional then.
        mask_key: offline only: where to write a boolean ``[*batch, N]`` mask, True for
            the window slots filled by padding.

    Examples:
        >>> from tdrl.envs import CatFrames, GymEnv, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), CatFrames(4, dim=-1, in_keys=["observation"]))
        >>> check_env_specs(env)
        >>> td = env.reset()
        >>> obs = td["observation"]
        >>> obs.shape, bool((obs == obs[:3].repeat(4)).all())
        (torch.Size([12]), True)
    """

    _buffer_prefix = "_cat_buffers_"

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
        *,
        future: bool = False,
        mask_key: NestedKey | None = None,
    ) -> None:
        if isinstance(N, bool) or not isinstance(N, int) or N < 1:
            raise ValueError(f"CatFrames N: expected a positive int, got {N!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim >= 0:
            raise ValueError(
                "CatFrames dim: expected a negative int, counted from the end (dim must be "
                f"< 0 to accommodate for tensordict batch dims of any size), got {dim!r}"
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
        self.done_key = "done" if done_key is None else unravel_key(done_key)
        self.future = bool(future)
        self.mask_key = None if mask_key is None else unravel_key(mask_key)
        self._init_buffers()

    # ---------------------------------------------------------------- env path
    def _check_online(self) -> None:
        if self.as_inverse:
            raise RuntimeError(INVERSE_IN_ENV_ERROR)
        if self.future or self.mask_key is not None:
            what = "future=True" if self.future else f"mask_key={self.mask_key!r}"
            raise RuntimeError(OFFLINE_ONLY_ERROR.format(what=what))

    def _fresh(self, obs: torch.Tensor) -> torch.Tensor:
        if self.padding == "same":
            return torch.cat([obs] * self.N, self.dim)
        return self._padded(obs)

    def _padded(self, obs: torch.Tensor) -> torch.Tensor:
        """``N - 1`` frames of padding followed by ``obs``."""
        shape = list(obs.shape)
        shape[self.dim] *= self.N - 1
        pad = torch.full(shape, self.padding_value, dtype=obs.dtype, device=obs.device)
        return torch.cat([pad, obs], self.dim)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        self._check_online()
        dim = self.dim
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            obs = next_tensordict.get(in_key, None)
            if obs is None:
                self._missing(in_key, next_tensordict)
                continue
            buffer = self._buffer(i)
            if buffer.ndim != obs.ndim or not buffer.numel():
                # never reset: the history before this frame is padding
                out = self._padded(obs)
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
        self._check_online()
        return super()._reset(tensordict, tensordict_reset)

    # ------------------------------------------------------------ buffer path
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Stack the frames of sequence data (see :meth:`unfolding`)."""
        if self.as_inverse:
            return tensordict
        return self.unfolding(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.as_inverse:
            return self.unfolding(tensordict)
        return tensordict

    def _needs_inverse(self) -> bool:
        return self.as_inverse

    def unfolding(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Stack the frames of each step of sequence data, within its trajectory.

        The time dim is the batch dim named ``"time"`` (else the last batch dim, with
        a warning). Trajectories end where ``("next", done_key)`` is True; history
        windows need that entry, future windows treat a sequence without it as one
        trajectory. The input is modified in place and returned.
        """
        tdim = time_dim(tensordict, "CatFrames")
        originals = {key: tensordict.get(key, None) for key in self.in_keys}
        for key, value in originals.items():
            if value is None:
                self._missing(key, tensordict)
        if all(value is None for value in originals.values()):
            return tensordict
        done = done_along_time(tensordict, self.done_key, tdim)
        if done is None and not self.future:
            raise KeyError(
                NO_DONE_ERROR.format(
                    key=("next", *as_tuple(self.done_key)),
                    keys=sorted(map(str, tensordict.keys(True, True))),
                )
            )
        last = tensordict.batch_dims - 1
        shape = tensordict.batch_size
        shape = torch.Size([*shape[:tdim], *shape[tdim + 1 :], shape[tdim]])
        device = next(value for value in originals.values() if value is not None).device
        offsets = window_offsets(self.N, self.future, device)
        wanted = torch.arange(shape[-1], device=device).unsqueeze(-1) + offsets
        if self.future:
            padded = wanted > episode_ends(done, shape, device).unsqueeze(-1)
            start = None
        else:
            start = episode_starts(done, shape, device).unsqueeze(-1)
            padded = wanted < start
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            data = originals[in_key]
            if data is None:
                continue
            data = data.movedim(tdim, last)
            root = self._root_of(in_key, originals, tensordict)
            if root is None:
                stacked = stack_windows(
                    data,
                    padded,
                    dim=self.dim,
                    padding=self.padding,
                    padding_value=self.padding_value,
                    future=self.future,
                )
            else:
                stacked = self._next_windows(data, root.movedim(tdim, last), wanted, start)
            tensordict.set(out_key, stacked.movedim(last, tdim))
        if self.mask_key is not None:
            tensordict.set(self.mask_key, padded.movedim(last, tdim))
        return tensordict

    def _root_of(
        self, in_key: NestedKey, originals: dict, tensordict: TensorDictBase
    ) -> torch.Tensor | None:
        """The root entry a ``("next", key)`` entry is stacked after, if the data holds it."""
        key = as_tuple(in_key)
        if key[0] != "next" or len(key) == 1:
            return None
        root_key = unravel_key(key[1:])
        root = originals.get(root_key)
        if root is None:
            root = tensordict.get(root_key, None)
        if root is not None and self.future:
            raise NotImplementedError(FUTURE_NEXT_ERROR.format(root=root_key, next=in_key))
        return root

    def _next_windows(
        self, data: torch.Tensor, root: torch.Tensor, wanted: torch.Tensor, start: torch.Tensor
    ) -> torch.Tensor:
        """History windows of ``("next", key)`` data: the step before a trajectory is its root.

        In an env, the next frame of step ``t`` is stacked after the frames seen since
        the reset, the first of which is the root frame of the trajectory's first step.
        """
        lead = start.ndim - 2
        frames = gather_windows(data, torch.maximum(wanted, start), lead)
        first = gather_windows(root, start, lead)
        features = (1,) * (data.ndim - lead - 1)
        real = wanted >= start
        real = real.reshape(*real.shape, *features)
        if self.padding == "same":
            frames = torch.where(real, frames, first)
        else:
            before = wanted == start - 1
            before = before.reshape(*before.shape, *features)
            fill = torch.as_tensor(self.padding_value, dtype=frames.dtype, device=frames.device)
            frames = torch.where(real, frames, torch.where(before, first, fill))
        return merge_windows(frames, lead, self.dim)

    def make_rb_transform_and_sampler(
        self, batch_size: int, **sampler_kwargs: Any
    ) -> tuple[Transform, SliceSampler]:
        """A transform and a sampler that stack frames at sampling time.

        The storage keeps single frames; the sampler draws, for each item the buffer
        asks for, a slice of ``N`` consecutive steps of one trajectory, and the
        transform turns each slice into its last step with the stacks of the ``in_keys``
        entries (and of their ``("next", key)`` entries) under the ``out_keys``. Only
        windows that lie within one trajectory are drawn. On writes, the transform drops
        the ``out_keys`` stacks that an env's CatFrames may have put in the data (with
        in-place stacking, ``out_keys == in_keys``, the data written must hold single
        frames).

        Args:
            batch_size: the number of stacked steps per sample the buffer will ask for;
                accepted for API compatibility: any batch size works.
            **sampler_kwargs: passed to :class:`~tdrl.data.replay_buffers.SliceSampler`
                (``end_key``, ``traj_key``, ...; ``slice_len`` is ``N``).

        Returns:
            ``(transform, sampler)``, for ``ReplayBuffer(sampler=..., transform=...)``.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"CatFrames batch_size: expected a positive int, got {batch_size!r}")
        if self.future or self.as_inverse:
            raise ValueError(
                "CatFrames.make_rb_transform_and_sampler: expected a history-window CatFrames "
                f"(future=False, as_inverse=False), got future={self.future}, "
                f"as_inverse={self.as_inverse}"
            )
        in_keys = [*self.in_keys, *(unravel_key(("next", key)) for key in self.in_keys)]
        out_keys = [*self.out_keys, *(unravel_key(("next", key)) for key in self.out_keys)]
        stacker = CatFrames(
            self.N,
            self.dim,
            in_keys=in_keys,
            out_keys=out_keys,
            padding=self.padding,
            padding_value=self.padding_value,
            done_key=self.done_key,
        )
        sampler_kwargs.setdefault("truncated_key", None)
        return _LastOfWindow(stacker), _WindowSampler(self.N, **sampler_kwargs)

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
        """Stack the ``in_keys`` specs ``N`` times along ``dim`` (unchanged when offline-only)."""
        if self.as_inverse or self.future or self.mask_key is not None:
            return output_spec
        return super().transform_output_spec(output_spec)

    def __repr__(self) -> str:
        return (
            f"CatFrames(N={self.N}, dim={self.dim}, in_keys={self.in_keys}, "
            f"out_keys={self.out_keys}, padding={self.padding!r})"
        )


class _WindowSampler(SliceSampler):
    """A slice sampler drawing ``N`` consecutive steps per item the buffer asks for."""

    def __init__(self, N: int, **kwargs: Any) -> None:
        if "slice_len" in kwargs or "num_slices" in kwargs:
            raise ValueError(
                "CatFrames.make_rb_transform_and_sampler: the slice length is N; got "
                f"{sorted(set(kwargs) & {'slice_len', 'num_slices'})} in the sampler arguments"
            )
        super().__init__(slice_len=N, **kwargs)
        self.window = N

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Draw ``batch_size`` windows (``batch_size * N`` steps)."""
        return super().sample(storage, batch_size * self.window)


class _LastOfWindow(Transform):
    """Turns ``[B * N]`` window samples into their ``[B]`` last steps, with frame stacks."""

    def __init__(self, stacker: CatFrames) -> None:
        super().__init__(in_keys=stacker.in_keys, out_keys=stacker.out_keys)
        self.stacker = stacker

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Stack the frames of each window and keep its last step."""
        windows = tensordict.reshape(-1, self.stacker.N)
        windows.names = [None, "time"]
        return self.stacker.unfolding(windows)[:, -1]

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        # the storage keeps single frames: stacks written by an env's CatFrames are dropped
        stacks = [key for key in self.out_keys if key not in self.in_keys]
        return tensordict.exclude(*stacks) if stacks else tensordict

    def _needs_inverse(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.stacker!r})"


class TimeMaxPool(FrameBuffers):
    """Element-wise maximum over the last ``T`` observations (since the last reset).

    A reset fills the window with the reset observation (only for the envs flagged
    in ``"_reset"``), so the output never mixes trajectories. The window lives in
    buffers named ``_maxpool_buffer_<key>``, shared by clones. On data that does not
    come from an env (the time dim is the one named ``"time"``, else the last batch
    dim), the same maximum is taken over each step's window within its trajectory.

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

    _buffer_prefix = "_maxpool_buffer_"

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
        self.done_key = "done" if done_key is None else unravel_key(done_key)
        self._init_buffers()

    def _fresh(self, obs: torch.Tensor) -> torch.Tensor:
        # the window is the last dim: [*obs.shape, T]
        return obs.unsqueeze(-1).expand(*obs.shape, self.T)

    def _output(self, frames: torch.Tensor) -> torch.Tensor:
        return frames.amax(-1)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            obs = next_tensordict.get(in_key, None)
            if obs is None:
                self._missing(in_key, next_tensordict)
                continue
            buffer = self._buffer(i)
            if buffer.ndim != obs.ndim + 1 or not buffer.numel():
                frames = self._fresh(obs)
                self._store(buffer, frames)
            else:
                try:
                    frames = torch.cat([buffer[..., 1:], obs.unsqueeze(-1)], -1)
                    buffer.copy_(frames)
                except RuntimeError as err:
                    raise ValueError(
                        NOT_RESET_ERROR.format(
                            owner="TimeMaxPool",
                            key=in_key,
                            buffer=tuple(buffer.shape[:-1]),
                            obs=tuple(obs.shape),
                        )
                    ) from err
            next_tensordict.set(out_key, frames.amax(-1))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Pool sequence data within each trajectory (a missing done entry: one trajectory)."""
        tdim = time_dim(tensordict, "TimeMaxPool")
        last = tensordict.batch_dims - 1
        done = done_along_time(tensordict, self.done_key, tdim)
        shape = tensordict.batch_size
        shape = torch.Size([*shape[:tdim], *shape[tdim + 1 :], shape[tdim]])
        values = [tensordict.get(key, None) for key in self.in_keys]
        device = next((value.device for value in values if value is not None), tensordict.device)
        start = episode_starts(done, shape, device).unsqueeze(-1)
        wanted = torch.arange(shape[-1], device=start.device).unsqueeze(-1) + window_offsets(
            self.T, False, start.device
        )
        positions = torch.maximum(wanted, start)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            data = tensordict.get(in_key, None)
            if data is None:
                self._missing(in_key, tensordict)
                continue
            pooled = gather_windows(data.movedim(tdim, last), positions, last).amax(last + 1)
            tensordict.set(out_key, pooled.movedim(last, tdim))
        return tensordict

    def __repr__(self) -> str:
        return f"TimeMaxPool(in_keys={self.in_keys}, out_keys={self.out_keys}, T={self.T})"
