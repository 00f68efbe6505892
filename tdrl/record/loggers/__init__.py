"""Experiment loggers: CSV files, TensorBoard and Weights & Biases."""

from __future__ import annotations

from tdrl.record.loggers.common import Logger
from tdrl.record.loggers.csv import CSVLogger
from tdrl.record.loggers.tensorboard import TensorBoardLogger, TensorboardLogger
from tdrl.record.loggers.utils import generate_exp_name, get_logger
from tdrl.record.loggers.wandb import WandbLogger

__all__ = [
    "CSVLogger",
    "Logger",
    "TensorBoardLogger",
    "TensorboardLogger",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
