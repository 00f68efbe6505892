"""Offline RL datasets as read-only, memory-mapped replay buffers in the TED layout.

Each loader finds (or downloads) a dataset's raw files, converts them once into a
memory-mapped folder under its ``root`` and samples from it like any replay buffer. The
backends they need (``h5py``, ``minari``, ``huggingface_hub``, ``datasets``, ...) are
imported only when a dataset is built.
"""

from __future__ import annotations

from tdrl.data.datasets.atari_dqn import AtariDQNExperienceReplay
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.datasets.d4rl import D4RLExperienceReplay
from tdrl.data.datasets.gen_dgrl import GenDGRLExperienceReplay
from tdrl.data.datasets.minari_data import MinariExperienceReplay
from tdrl.data.datasets.openml import OpenMLExperienceReplay
from tdrl.data.datasets.openx import OpenXExperienceReplay
from tdrl.data.datasets.roboset import RobosetExperienceReplay
from tdrl.data.datasets.vd4rl import VD4RLExperienceReplay

__all__ = [
    "AtariDQNExperienceReplay",
    "BaseDatasetExperienceReplay",
    "D4RLExperienceReplay",
    "GenDGRLExperienceReplay",
    "MinariExperienceReplay",
    "OpenMLExperienceReplay",
    "OpenXExperienceReplay",
    "RobosetExperienceReplay",
    "VD4RLExperienceReplay",
]
