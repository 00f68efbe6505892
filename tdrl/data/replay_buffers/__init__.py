"""Replay buffers composed of a storage, a writer and a sampler."""

from __future__ import annotations

from tdrl.data.replay_buffers.checkpointers import (
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    ListStorageCheckpointer,
    NestedStorageCheckpointer,
    StorageCheckpointerBase,
    StorageEnsembleCheckpointer,
    TensorStorageCheckpointer,
)
from tdrl.data.replay_buffers.ensemble import (
    ReplayBufferEnsemble,
    SamplerEnsemble,
    StorageEnsemble,
    WriterEnsemble,
)
from tdrl.data.replay_buffers.group_sampler import PromptGroupSampler
from tdrl.data.replay_buffers.memmap_storage import LazyMemmapStorage
from tdrl.data.replay_buffers.prioritized_slice_sampler import PrioritizedSliceSampler
from tdrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from tdrl.data.replay_buffers.remote import RemoteTensorDictReplayBuffer
from tdrl.data.replay_buffers.replay_buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.samplers import (
    PrioritizedSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
)
from tdrl.data.replay_buffers.slice_samplers import SliceSampler, SliceSamplerWithoutReplacement
from tdrl.data.replay_buffers.staleness_sampler import StalenessAwareSampler
from tdrl.data.replay_buffers.storages import (
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from tdrl.data.replay_buffers.trajectories import find_start_stop_traj
from tdrl.data.replay_buffers.writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

__all__ = [
    "FlatStorageCheckpointer",
    "H5StorageCheckpointer",
    "ImmutableDatasetWriter",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "ListStorageCheckpointer",
    "NestedStorageCheckpointer",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomSampler",
    "RayReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "RoundRobinWriter",
    "Sampler",
    "SamplerEnsemble",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "Storage",
    "StorageCheckpointerBase",
    "StorageEnsemble",
    "StalenessAwareSampler",
    "StorageEnsembleCheckpointer",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "TensorStorageCheckpointer",
    "Writer",
    "WriterEnsemble",
    "find_start_stop_traj",
]
