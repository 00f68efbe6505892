"""WandbLogger: logs to Weights & Biases (needs the ``wandb`` package; offline mode works)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from tdrl.record.loggers._video import as_video_batch
from tdrl.record.loggers.common import Logger

__all__ = ["WandbLogger"]


def _wandb() -> Any:
    if importlib.util.find_spec("wandb") is None:
        raise ImportError("WandbLogger needs the wandb package: pip install wandb")
    return importlib.import_module("wandb")


class WandbLogger(Logger):
    """A logger sending scalars, videos and hyper-parameters to a Weights & Biases run.

    ``wandb`` is imported when the logger is built; without it the constructor raises
    ImportError. With ``offline=True`` the run is written to ``save_dir`` only (sync it
    later with ``wandb sync``).

    Args:
        exp_name: the run name.
        offline: write the run locally without contacting the server.
        save_dir: the folder of the run files (``log_dir`` is an alias).
        id: the run id, to resume a run.
        project: the project name.
        video_fps: frames per second of logged videos.
        **kwargs: passed to ``wandb.init``.

    Examples:
        >>> from tdrl.record.loggers import WandbLogger
        >>> WandbLogger.__name__
        'WandbLogger'
    """

    def __init__(
        self,
        exp_name: str,
        offline: bool = False,
        save_dir: str | None = None,
        id: str | None = None,
        project: str | None = None,
        *,
        video_fps: int = 32,
        log_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        if save_dir is not None and log_dir is not None and save_dir != log_dir:
            raise ValueError(
                f"save_dir and log_dir are aliases: expected one of them, got {save_dir!r} "
                f"and {log_dir!r}"
            )
        self.offline = offline
        self.save_dir = save_dir or log_dir
        self.id = id
        self.project = project
        self.video_fps = video_fps
        self._wandb_kwargs = kwargs
        super().__init__(exp_name=exp_name, log_dir=str(self.save_dir or "."))

    def _create_experiment(self) -> Any:
        wandb = _wandb()
        settings = {
            "name": self.exp_name,
            "dir": self.save_dir,
            "id": self.id,
            "project": self.project,
            "resume": "allow",
            "mode": "offline" if self.offline else self._wandb_kwargs.pop("mode", "online"),
            **self._wandb_kwargs,
        }
        return wandb.init(**settings)

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Log ``{name: value}`` (with ``trainer/step`` when ``step`` is given)."""
        if step is None:
            self.experiment.log({name: value})
        else:
            self.experiment.log({name: value, "trainer/step": step})

    def log_video(self, name: str, video: Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Log a ``wandb.Video`` (``fps`` and ``format`` in kwargs)."""
        wandb = _wandb()
        frames = as_video_batch(video).permute(0, 1, 4, 2, 3).numpy()
        fps = kwargs.get("fps", self.video_fps)
        media = wandb.Video(frames, fps=fps, format=kwargs.get("format", "mp4"))
        payload = {name: media} if step is None else {name: media, "video_step": step}
        self.experiment.log(payload)

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """Update the run config."""
        self.experiment.config.update(dict(cfg), allow_val_change=True)

    def log_histogram(self, name: str, data: Sequence | Tensor, **kwargs: Any) -> None:
        """Log a ``wandb.Histogram`` (``step`` and ``num_bins`` in kwargs)."""
        wandb = _wandb()
        histogram = wandb.Histogram(
            torch.as_tensor(data).numpy(), num_bins=kwargs.get("num_bins", 64)
        )
        step = kwargs.get("step")
        if step is None:
            self.experiment.log({name: histogram})
        else:
            self.experiment.log({name: histogram}, step=step)

    def __repr__(self) -> str:
        return f"WandbLogger(exp_name={self.exp_name!r}, offline={self.offline})"
