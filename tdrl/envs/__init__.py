"""Environments: the EnvBase protocol, wrappers, transforms and batched envs."""

from __future__ import annotations

__all__: list[str] = []
