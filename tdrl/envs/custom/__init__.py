"""Environments implemented natively in tdrl (pure torch, no simulator dependency)."""

from __future__ import annotations

from tdrl.envs.custom import chess as _chess
from tdrl.envs.custom import llm_hashing as _llm_hashing
from tdrl.envs.custom import pendulum as _pendulum
from tdrl.envs.custom import tictactoe as _tictactoe
from tdrl.envs.custom import toy_vla as _toy_vla
from tdrl.envs.custom.chess import *  # noqa: F403
from tdrl.envs.custom.llm_hashing import *  # noqa: F403
from tdrl.envs.custom.pendulum import *  # noqa: F403
from tdrl.envs.custom.tictactoe import *  # noqa: F403
from tdrl.envs.custom.toy_vla import *  # noqa: F403

__all__ = [
    *_chess.__all__,
    *_llm_hashing.__all__,
    *_pendulum.__all__,
    *_tictactoe.__all__,
    *_toy_vla.__all__,
]
