"""Data collectors: run a policy in an env and deliver batches of steps."""

from __future__ import annotations

from tdrl.collectors.sync import DataCollectorBase, SyncDataCollector
from tdrl.collectors.utils import split_trajectories
from tdrl.envs.utils import RandomPolicy

__all__ = ["DataCollectorBase", "RandomPolicy", "SyncDataCollector", "split_trajectories"]
