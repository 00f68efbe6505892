"""Video helpers: normalise frames to uint8 ``[N, T, H, W, 3]`` and encode mp4 / gif files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch

_CHANNELS = (1, 3, 4)
VIDEO_FORMATS = ("pt", "mp4", "gif")


def _channels_last(video: torch.Tensor) -> bool:
    """Whether the frames of ``video`` (..., a, b, c) store channels last."""
    last, third = video.shape[-1], video.shape[-3]
    if last in _CHANNELS and third not in _CHANNELS:
        return True
    if third in _CHANNELS and last not in _CHANNELS:
        return False
    return last in _CHANNELS


def to_uint8(frames: torch.Tensor) -> torch.Tensor:
    """Frames as uint8: floats in [0, 1] are scaled by 255, other values are clamped to [0, 255]."""
    if frames.dtype == torch.uint8:
        return frames
    if frames.is_floating_point():
        scale = 255.0 if frames.numel() and float(frames.max()) <= 1.0 else 1.0
        return (frames * scale).round().clamp(0, 255).to(torch.uint8)
    return frames.clamp(0, 255).to(torch.uint8)


def as_video_batch(video: Any) -> torch.Tensor:
    """A video (numpy or torch) as uint8 ``[N, T, H, W, 3]``.

    Accepts ``[T, C, H, W]``, ``[T, H, W, C]`` and their batched ``[N, T, ...]`` forms, with
    1 (grayscale), 3 (RGB) or 4 (RGBA, alpha dropped) channels.
    """
    video = torch.as_tensor(np.asarray(video) if not isinstance(video, torch.Tensor) else video)
    if video.ndim == 4:
        video = video.unsqueeze(0)
    if video.ndim != 5:
        raise ValueError(
            "video: expected a [T, C, H, W] or [N, T, C, H, W] tensor (channels first or last), "
            f"got shape {tuple(video.shape)}"
        )
    if not _channels_last(video):
        video = video.permute(0, 1, 3, 4, 2)
    channels = video.shape[-1]
    if channels not in _CHANNELS:
        raise ValueError(
            f"video: expected 1, 3 or 4 channels, got shape {tuple(video.shape)} "
            f"({channels} channels after layout detection)"
        )
    if channels == 1:
        video = video.expand(*video.shape[:-1], 3)
    elif channels == 4:
        video = video[..., :3]
    return to_uint8(video.detach().cpu()).contiguous()


def _write_mp4_av(path: Path, frames: np.ndarray, fps: float) -> None:
    import av

    height, width = frames.shape[1:3]
    # yuv420p needs even dimensions: pad by one pixel where needed
    pad_h, pad_w = height % 2, width % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4")
        stream.rate = round(fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _write_mp4_imageio(path: Path, frames: np.ndarray, fps: float) -> None:
    import imageio.v2 as imageio

    with imageio.get_writer(str(path), format="FFMPEG", fps=fps, macro_block_size=1) as writer:
        for frame in frames:
            writer.append_data(frame)


def _write_gif(path: Path, frames: np.ndarray, fps: float) -> None:
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(
        str(path),
        save_all=True,
        append_images=images[1:],
        duration=max(int(round(1000 / fps)), 1),
        loop=0,
    )


def write_video(path: Path, frames: torch.Tensor, fps: float, video_format: str) -> None:
    """Encode uint8 frames ``[T, H, W, 3]`` to ``path`` as ``"mp4"`` or ``"gif"``."""
    array = frames.numpy()
    if video_format == "gif":
        if importlib.util.find_spec("PIL") is None:
            raise ImportError("gif videos need Pillow: pip install 'tdrl[video]'")
        _write_gif(path, array, fps)
        return
    if importlib.util.find_spec("av") is not None:
        _write_mp4_av(path, array, fps)
    elif importlib.util.find_spec("imageio_ffmpeg") is not None:
        _write_mp4_imageio(path, array, fps)
    else:
        raise ImportError(
            "mp4 videos need PyAV or imageio-ffmpeg, found neither: pip install 'tdrl[video]'"
        )
