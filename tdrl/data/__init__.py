"""Data side of tdrl: tensor specs, replay buffers and episode-data utilities."""

from __future__ import annotations

from tdrl.data import llm as _llm
from tdrl.data import postprocs as _postprocs
from tdrl.data import replay_buffers as _replay_buffers
from tdrl.data import specs as _specs
from tdrl.data import ted as _ted
from tdrl.data.llm import *  # noqa: F403
from tdrl.data.postprocs import *  # noqa: F403
from tdrl.data.replay_buffers import *  # noqa: F403
from tdrl.data.specs import *  # noqa: F403
from tdrl.data.ted import *  # noqa: F403

#: The reference API's module path for specs (``tdrl.data.tensor_specs``) is the specs package.
tensor_specs = _specs

__all__ = [
    *_specs.__all__,
    *_replay_buffers.__all__,
    *_ted.__all__,
    *_postprocs.__all__,
    *_llm.__all__,
]
