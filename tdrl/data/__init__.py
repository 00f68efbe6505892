"""Data side of tdrl: tensor specs, replay buffers and episode-data utilities."""

from __future__ import annotations

from tdrl.data import specs as _specs
from tdrl.data.specs import *  # noqa: F403

__all__ = [*_specs.__all__]
