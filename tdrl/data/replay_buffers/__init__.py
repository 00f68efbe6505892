"""Replay buffers composed of a storage, a writer and a sampler."""

from __future__ import annotations

__all__: list[str] = []
