"""Recording: experiment loggers and recorder transforms (videos, tensordicts, rendering)."""

from __future__ import annotations

from tdrl.record.loggers import (
    CSVLogger,
    Logger,
    TensorBoardLogger,
    TensorboardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)
from tdrl.record.recorder import PixelRenderTransform, TensorDictRecorder, VideoRecorder

__all__ = [
    "CSVLogger",
    "Logger",
    "PixelRenderTransform",
    "TensorBoardLogger",
    "TensorDictRecorder",
    "TensorboardLogger",
    "VideoRecorder",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
