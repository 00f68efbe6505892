"""TensorboardLogger: writes TensorBoard event files (needs the ``tensorboard`` extra)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tdrl.record.loggers._video import as_video_batch
from tdrl.record.loggers.common import Logger

__all__ = ["TensorBoardLogger", "TensorboardLogger"]


class TensorboardLogger(Logger):
    """A logger writing TensorBoard event files to ``<log_dir>/<exp_name>``.

    Requires the ``tensorboard`` package (``pip install 'tdrl[tensorboard]'``); building the
    logger without it raises ImportError. ``TensorBoardLogger`` is the same class.

    Args:
        exp_name: the experiment name (the sub-folder of ``log_dir``).
        log_dir: the parent folder; ``"tb_logs"`` by default.

    Examples:
        >>> from tdrl.record.loggers import TensorBoardLogger, TensorboardLogger
        >>> TensorBoardLogger is TensorboardLogger
        True
    """

    def __init__(self, exp_name: str, log_dir: str | Path = "tb_logs") -> None:
        self._has_imported_moviepy = False
        super().__init__(exp_name=exp_name, log_dir=str(log_dir))

    def _create_experiment(self) -> Any:
        if importlib.util.find_spec("tensorboard") is None:
            raise ImportError(
                "TensorboardLogger needs the tensorboard package: pip install 'tdrl[tensorboard]'"
            )
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(Path(self.log_dir) / self.exp_name))

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Add a scalar event."""
        self.experiment.add_scalar(name, value, global_step=step)

    def log_video(self, name: str, video: Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Add a video event (``[N, T, C, H, W]``; ``fps`` in kwargs, 30 by default)."""
        frames = as_video_batch(video).permute(0, 1, 4, 2, 3)
        self.experiment.add_video(
            tag=name, vid_tensor=frames, global_step=step, fps=kwargs.get("fps", 30)
        )

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """Record the hyper-parameters (as a text event and in the hparams plugin)."""
        cfg = dict(cfg)
        text = "\n".join(f"{key}: {value}" for key, value in cfg.items())
        self.experiment.add_text("hparams", text)
        simple = {k: v for k, v in cfg.items() if isinstance(v, (int, float, str, bool))}
        self.experiment.add_hparams(simple, metric_dict={}, run_name=".")

    def log_histogram(self, name: str, data: Sequence | Tensor, **kwargs: Any) -> None:
        """Add a histogram event (``step`` and ``bins`` in kwargs)."""
        self.experiment.add_histogram(
            name,
            torch.as_tensor(data),
            global_step=kwargs.get("step"),
            bins=kwargs.get("bins", "tensorflow"),
        )

    def __repr__(self) -> str:
        return f"TensorboardLogger(exp_name={self.exp_name!r}, log_dir={self.log_dir!r})"


TensorBoardLogger = TensorboardLogger
