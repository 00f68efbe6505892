"""Recorder transforms: cache what an env emits (frames, tensordicts) and write it out on dump()."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, NestedKey, TensorDictBase

from tdrl.data import NonTensor, Unbounded
from tdrl.envs.transforms import ObservationTransform, Transform
from tdrl.record.loggers._video import to_uint8
from tdrl.record.loggers.common import Logger

__all__ = ["PixelRenderTransform", "TensorDictRecorder", "VideoRecorder"]

_CHANNELS = (1, 3, 4)


def _to_chw(frame: torch.Tensor) -> torch.Tensor:
    """Frames ``[*B, H, W]``, ``[*B, H, W, C]`` or ``[*B, C, H, W]`` as ``[*B, C, H, W]``."""
    if frame.ndim == 2:
        return frame.unsqueeze(0)
    last, third = frame.shape[-1], frame.shape[-3]
    if last in _CHANNELS and (third not in _CHANNELS or frame.shape[-2] in _CHANNELS):
        return frame.movedim(-1, -3)
    if third in _CHANNELS:
        return frame
    if last not in _CHANNELS and frame.ndim >= 3:
        raise ValueError(
            "VideoRecorder: expected images with 1, 3 or 4 channels first or last (HWC or CHW), "
            f"got shape {tuple(frame.shape)}"
        )
    return frame.movedim(-1, -3)


def _center_crop(frames: torch.Tensor, size: int) -> torch.Tensor:
    height, width = frames.shape[-2:]
    top = max((height - size) // 2, 0)
    left = max((width - size) // 2, 0)
    return frames[..., top : top + size, left : left + size]


def _grid(frames: torch.Tensor, padding: int = 2) -> torch.Tensor:
    """Tile ``[N, C, H, W]`` images into one ``[C, H', W']`` image (row-major, zero padding)."""
    count, channels, height, width = frames.shape
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    cell_h, cell_w = height + padding, width + padding
    grid = frames.new_zeros((channels, rows * cell_h + padding, columns * cell_w + padding))
    for index in range(count):
        row, column = divmod(index, columns)
        top, left = row * cell_h + padding, column * cell_w + padding
        grid[:, top : top + height, left : left + width] = frames[index]
    return grid


class VideoRecorder(ObservationTransform):
    """Cache the images an env emits and write them as a video through a logger on :meth:`dump`.

    Images may be numpy arrays or tensors, channels last (HWC) or first (CHW), grayscale
    (HW) or batched (``[*B, ...]``, e.g. from a batched env). Batched images are tiled into
    one grid per step (``make_grid``, the default) or kept as one video per batch element.
    The data passes through unchanged. The cache grows until :meth:`dump` writes it
    (``logger.log_video(tag, video, step=<dump count>)``) and clears it.

    Args:
        logger: a logger able to write videos (e.g. ``CSVLogger(..., video_format="mp4")``).
        tag: the name of the video.
        in_keys: the image entries to record (``["pixels"]``).
        skip: record one image every ``skip`` calls (1: every image).
        center_crop: crop the images to a centred ``center_crop x center_crop`` square.
        make_grid: tile batched images into one frame; ``None`` tiles them.
        out_keys: kept for API compatibility; the data is not changed.
        fps: frames per second of the video (the logger's default when None).
        **kwargs: passed to ``logger.log_video``.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from tdrl.record import CSVLogger, VideoRecorder
        >>> logger = CSVLogger("exp", log_dir=tempfile.mkdtemp(), video_format="mp4")
        >>> recorder = VideoRecorder(logger, tag="run")
        >>> for _ in range(5):
        ...     _ = recorder(TensorDict(pixels=torch.zeros(32, 32, 3, dtype=torch.uint8)))
        >>> len(recorder.obs)
        5
        >>> recorder.dump()
        >>> [path.name for path in (logger.experiment.log_dir / "videos").iterdir()]
        ['run_0.mp4']
    """

    def __init__(
        self,
        logger: Logger,
        tag: str,
        in_keys: Sequence[NestedKey] | None = None,
        skip: int | None = None,
        center_crop: int | None = None,
        make_grid: bool | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        fps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if in_keys is None:
            in_keys = ["pixels"]
        super().__init__(in_keys=in_keys, out_keys=out_keys if out_keys is not None else in_keys)
        if not hasattr(logger, "log_video"):
            raise TypeError(
                f"logger: expected a logger with a log_video method, got {type(logger).__name__}"
            )
        skip = 1 if skip is None else skip
        if not isinstance(skip, int) or skip < 1:
            raise ValueError(f"skip: expected a positive int, got {skip!r}")
        if center_crop is not None and center_crop < 1:
            raise ValueError(f"center_crop: expected a positive int, got {center_crop!r}")
        self.logger = logger
        self.tag = tag
        self.skip = skip
        self.center_crop = center_crop
        self.make_grid = make_grid
        self.video_kwargs = dict(kwargs)
        if fps is not None:
            self.video_kwargs["fps"] = fps
        self.obs: list[torch.Tensor] = []
        self.count = 0
        self.iter = 0

    def _apply_transform(self, observation: Any) -> Any:
        self.count += 1
        if self.count % self.skip == 0:
            self.obs.append(self._frame(observation))
        return observation

    def _frame(self, observation: Any) -> torch.Tensor:
        frame = (
            observation
            if isinstance(observation, torch.Tensor)
            else torch.as_tensor(np.asarray(observation))
        )
        frame = to_uint8(_to_chw(frame.detach()).cpu())
        if self.center_crop:
            frame = _center_crop(frame, self.center_crop)
        if frame.ndim > 3:
            frame = frame.reshape(-1, *frame.shape[-3:])
            if self.make_grid is None or self.make_grid:
                return _grid(frame)
        return frame.clone()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Record the images of ``tensordict`` (e.g. a rollout frame) and return it unchanged."""
        return self._call(tensordict)

    def dump(self, suffix: str | None = None) -> None:
        """Write the cached images as one video (``tag`` or ``tag_suffix``) and clear the cache.

        Args:
            suffix: appended to the tag, e.g. an evaluation index.
        """
        tag = self.tag if suffix is None else f"{self.tag}_{suffix}"
        frames, self.obs = self.obs, []
        if frames:
            video = torch.stack(frames, 0)
            # [T, C, H, W] -> [1, T, C, H, W]; [T, N, C, H, W] -> [N, T, C, H, W]
            video = video.unsqueeze(0) if video.ndim == 4 else video.transpose(0, 1)
            self.logger.log_video(name=tag, video=video, step=self.iter, **self.video_kwargs)
        self.iter += 1
        self.count = 0

    def __repr__(self) -> str:
        return (
            f"VideoRecorder(tag={self.tag!r}, in_keys={self.in_keys}, skip={self.skip}, "
            f"cached_frames={len(self.obs)})"
        )


class TensorDictRecorder(Transform):
    """Cache the env outputs and save them with ``torch.save`` on :meth:`dump`.

    Every ``skip``-th output of a step (and of a reset, unless ``skip_reset``) is kept (the
    ``in_keys`` entries only, or everything when ``in_keys`` is empty); :meth:`dump` stacks
    them along a new first dim and saves the result to ``<out_file_base>_tensordict.t``
    (``<out_file_base>_<suffix>_tensordict.t`` with a suffix). Load it with
    ``torch.load(path, weights_only=False)``.

    Args:
        out_file_base: the path prefix of the saved files.
        skip_reset: do not record the outputs of resets.
        skip: record one output every ``skip`` calls.
        in_keys: the entries to keep (all when empty).

    Examples:
        >>> import tempfile, torch
        >>> from tdrl.envs import PendulumEnv, TransformedEnv
        >>> from tdrl.record import TensorDictRecorder
        >>> base = tempfile.mkdtemp() + "/run"
        >>> env = TransformedEnv(PendulumEnv(), TensorDictRecorder(base, skip=1, in_keys=["th"]))
        >>> _ = env.rollout(4)
        >>> env.transform.dump()
        >>> torch.load(base + "_tensordict.t", weights_only=False)["th"].shape
        torch.Size([4])
    """

    def __init__(
        self,
        out_file_base: str | Path,
        skip_reset: bool = True,
        skip: int = 4,
        in_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys=in_keys or [])
        if not isinstance(skip, int) or skip < 1:
            raise ValueError(f"skip: expected a positive int, got {skip!r}")
        self.out_file_base = str(out_file_base)
        self.skip_reset = skip_reset
        self.skip = skip
        self.td: list[TensorDictBase] = []
        self.count = 0
        self.iter = 0

    def _record(self, data: TensorDictBase) -> None:
        self.count += 1
        if self.count % self.skip == 0:
            kept = data.select(*self.in_keys) if self.in_keys else data
            self.td.append(kept.exclude("next").clone())

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        self._record(next_tensordict)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if not self.skip_reset:
            self._record(tensordict_reset)
        return tensordict_reset

    def dump(self, suffix: str | None = None) -> None:
        """Save the cached outputs (stacked along a new first dim) and clear the cache."""
        records, self.td = self.td, []
        self.count = 0
        self.iter += 1
        if not records:
            return
        base = self.out_file_base if suffix is None else f"{self.out_file_base}_{suffix}"
        stacked = LazyStackedTensorDict.maybe_dense_stack(records, 0)
        Path(base).parent.mkdir(parents=True, exist_ok=True)
        torch.save(stacked, f"{base}_tensordict.t")


class PixelRenderTransform(Transform):
    """Call the parent env's ``render()`` after each reset and step and store the image.

    The image is written under ``out_keys[0]`` (``"pixels"``). On a batched parent (a
    ``ParallelEnv`` or ``SerialEnv``) the per-worker images are stacked, so the transform
    can sit on the batched env itself. The observation spec gets an entry of the rendered
    shape, found by rendering once when the spec is computed (the parent is reset first if it
    cannot render before a reset).

    Args:
        out_keys: where the image is written (``["pixels"]``).
        preproc: a callable applied to the rendered array before it is stored.
        as_non_tensor: store the rendered value as non-tensor data; by default, arrays
            become tensors and anything else is stored as non-tensor data.
        render_method: the name of the parent's method to call (``"render"``).
        pass_tensordict: pass the output tensordict to the render method.
        **kwargs: passed to the render method.

    Examples:
        >>> from tdrl.envs import GymEnv
        >>> from tdrl.record import PixelRenderTransform
        >>> env = GymEnv("CartPole-v1", render_mode="rgb_array")
        >>> env = env.append_transform(PixelRenderTransform())
        >>> env.rollout(2)["pixels"].shape
        torch.Size([2, 400, 600, 3])
        >>> env.close()
    """

    def __init__(
        self,
        out_keys: Sequence[NestedKey] | None = None,
        preproc: Callable[[Any], Any] | None = None,
        as_non_tensor: bool | None = None,
        render_method: str = "render",
        pass_tensordict: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(in_keys=[], out_keys=out_keys if out_keys is not None else ["pixels"])
        if len(self.out_keys) != 1:
            raise ValueError(
                f"PixelRenderTransform out_keys: expected one key, got {self.out_keys}"
            )
        self.preproc = preproc
        self.as_non_tensor = as_non_tensor
        self.render_method = render_method
        self.pass_tensordict = pass_tensordict
        self.kwargs = kwargs
        self._enabled = True

    @property
    def enabled(self) -> bool:
        """Whether the transform renders (see :meth:`switch`)."""
        return self._enabled

    def switch(self, mode: str | bool | None = None) -> None:
        """Turn rendering on (``True`` / ``"on"``), off (``False`` / ``"off"``) or toggle it."""
        if mode is None:
            self._enabled = not self._enabled
        elif isinstance(mode, str):
            if mode not in ("on", "off"):
                raise ValueError(f"switch mode: expected 'on' or 'off', got {mode!r}")
            self._enabled = mode == "on"
        else:
            self._enabled = bool(mode)

    def _render(self, tensordict: TensorDictBase) -> Any:
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "PixelRenderTransform: expected to be attached to an env (it renders its parent), "
                "got a transform without env"
            )
        method = getattr(parent, self.render_method)
        if self.pass_tensordict:
            array = method(tensordict, **self.kwargs)
        else:
            array = method(**self.kwargs)
        if array is None or (isinstance(array, list) and any(a is None for a in array)):
            raise ValueError(
                f"PixelRenderTransform: expected {self.render_method}() to return an image, got "
                "None; build the env with render_mode='rgb_array'"
            )
        if self.preproc is not None:
            array = self.preproc(array)
        return array

    def _store(self, tensordict: TensorDictBase, array: Any) -> None:
        key = self.out_keys[0]
        if isinstance(array, list) and array and isinstance(array[0], (np.ndarray, torch.Tensor)):
            array = np.stack([np.asarray(a) for a in array])
        tensor_like = isinstance(array, (np.ndarray, torch.Tensor))
        if self.as_non_tensor or (self.as_non_tensor is None and not tensor_like):
            tensordict.set_non_tensor(key, array)
        else:
            tensordict.set(key, torch.as_tensor(array, device=tensordict.device))

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self._enabled:
            self._store(next_tensordict, self._render(next_tensordict))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Render the parent and store the image in ``tensordict``."""
        return self._call(tensordict)

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Add the spec of the rendered image (rendered once to learn its shape and dtype)."""
        parent = self.parent
        if not self._enabled or parent is None:
            return observation_spec
        try:
            array = self._render(None)
        except Exception:
            # some simulators refuse to render before their first reset
            parent.reset()
            array = self._render(None)
        key = self.out_keys[0]
        if isinstance(array, list) and array and isinstance(array[0], (np.ndarray, torch.Tensor)):
            array = np.stack([np.asarray(a) for a in array])
        tensor_like = isinstance(array, (np.ndarray, torch.Tensor))
        if self.as_non_tensor or (self.as_non_tensor is None and not tensor_like):
            spec = NonTensor(shape=observation_spec.shape, device=observation_spec.device)
        else:
            tensor = torch.as_tensor(array)
            spec = Unbounded(shape=tensor.shape, dtype=tensor.dtype, device=observation_spec.device)
        observation_spec[key] = spec
        return observation_spec

    def __repr__(self) -> str:
        return (
            f"PixelRenderTransform(out_keys={self.out_keys}, render_method={self.render_method!r}, "
            f"enabled={self._enabled})"
        )
