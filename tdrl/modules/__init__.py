"""Policy-side helpers the environment API relies on (masked distributions)."""

from __future__ import annotations

from tdrl.modules.masked_categorical import MaskedCategorical

__all__ = ["MaskedCategorical"]
