"""Data collectors: run a policy in an env and deliver batches of steps."""

from __future__ import annotations

from tdrl.collectors.base import DataCollectorBase
from tdrl.collectors.collector import Collector
from tdrl.collectors.evaluator import Evaluator
from tdrl.collectors.multi import (
    AsyncCollector,
    MultiAsyncCollector,
    MultiaSyncDataCollector,
    MultiSyncCollector,
    MultiSyncDataCollector,
    aSyncDataCollector,
)
from tdrl.collectors.ray_collector import RayCollector
from tdrl.collectors.sync import SyncDataCollector
from tdrl.collectors.utils import split_trajectories
from tdrl.envs.utils import RandomPolicy

__all__ = [
    "AsyncCollector",
    "Collector",
    "DataCollectorBase",
    "Evaluator",
    "MultiAsyncCollector",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "RandomPolicy",
    "RayCollector",
    "SyncDataCollector",
    "aSyncDataCollector",
    "split_trajectories",
]
