"""Logger helpers: experiment names and a logger factory."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from tdrl.record.loggers.common import Logger

__all__ = ["generate_exp_name", "get_logger"]


def generate_exp_name(model_name: str, experiment_name: str) -> str:
    """A unique experiment name: ``<model>_<experiment>_<8 hex chars>_<yy_mm_dd-HH_MM_SS>``.

    Examples:
        >>> name = generate_exp_name("PPO", "cartpole")
        >>> name.startswith("PPO_cartpole_")
        True
    """
    stamp = datetime.now().strftime("%y_%m_%d-%H_%M_%S")
    return "_".join((model_name, experiment_name, uuid.uuid4().hex[:8], stamp))


def get_logger(logger_type: str, logger_name: str, experiment_name: str, **kwargs: Any) -> Logger:
    """Build a logger by type name: ``"csv"``, ``"tensorboard"`` or ``"wandb"``.

    Args:
        logger_type: the kind of logger.
        logger_name: the folder the logs go to.
        experiment_name: the experiment (run) name.
        **kwargs: passed to the logger (``video_format`` / ``video_fps`` for csv,
            ``project`` / ``offline``... for wandb).

    Examples:
        >>> import tempfile
        >>> logger = get_logger("csv", tempfile.mkdtemp(), "exp")
        >>> type(logger).__name__
        'CSVLogger'
    """
    if logger_type == "csv":
        from tdrl.record.loggers.csv import CSVLogger

        return CSVLogger(
            exp_name=experiment_name,
            log_dir=logger_name,
            video_format=kwargs.get("video_format", "pt"),
            video_fps=kwargs.get("video_fps", 30),
        )
    if logger_type == "tensorboard":
        from tdrl.record.loggers.tensorboard import TensorboardLogger

        return TensorboardLogger(exp_name=experiment_name, log_dir=logger_name)
    if logger_type == "wandb":
        from tdrl.record.loggers.wandb import WandbLogger

        return WandbLogger(exp_name=experiment_name, log_dir=logger_name, **kwargs)
    raise ValueError(
        f"logger_type: expected one of 'csv', 'tensorboard', 'wandb', got {logger_type!r}"
    )
