"""The Logger interface shared by the CSV, TensorBoard and Weights & Biases loggers."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

__all__ = ["Logger"]


class Logger(abc.ABC):
    """Base class of the experiment loggers.

    A logger writes scalars, videos, hyper-parameters and histograms of one experiment
    (``exp_name``) under ``log_dir``. Subclasses build their backend in
    :meth:`_create_experiment` (stored as :attr:`experiment`) and implement the ``log_*``
    methods.

    Args:
        exp_name: the name of the experiment.
        log_dir: the folder (or backend location) the experiment is written to.

    Examples:
        >>> from tdrl.record.loggers import CSVLogger, Logger
        >>> issubclass(CSVLogger, Logger)
        True
    """

    def __init__(self, exp_name: str, log_dir: str) -> None:
        if not isinstance(exp_name, str) or not exp_name:
            raise ValueError(f"exp_name: expected a non-empty str, got {exp_name!r}")
        self.exp_name = exp_name
        self.log_dir = log_dir
        self.experiment = self._create_experiment()

    @abc.abstractmethod
    def _create_experiment(self) -> Any:
        """Build the backend object the logger writes to."""

    @abc.abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Record one scalar value under ``name`` at ``step``."""

    @abc.abstractmethod
    def log_video(self, name: str, video: Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Record a video: ``[T, C, H, W]`` or ``[N, T, C, H, W]`` (uint8, or floats in [0, 1])."""

    @abc.abstractmethod
    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """Record the hyper-parameters of the experiment."""

    @abc.abstractmethod
    def log_histogram(self, name: str, data: Sequence | Tensor, **kwargs: Any) -> None:
        """Record the distribution of ``data`` under ``name``."""

    def log_metrics(
        self, metrics: Mapping[str, Any], step: int | None = None, keys_sep: str = "/"
    ) -> None:
        """Record several scalars at once; nested mappings get joined names (``"a/b"``)."""
        for name, value in _flatten(metrics, keys_sep):
            self.log_scalar(name, value, step=step)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exp_name={self.exp_name!r}, log_dir={self.log_dir!r})"


def _flatten(metrics: Mapping[str, Any], sep: str, prefix: str = "") -> list[tuple[str, Any]]:
    items = []
    for key, value in metrics.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            items.extend(_flatten(value, sep, name))
        else:
            items.append((name, value))
    return items
