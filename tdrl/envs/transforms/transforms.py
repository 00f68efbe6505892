"""Every transform under one module name, for code that imports them from there.

Code written for the reference API imports transforms (and the spec-hook helper
:func:`_apply_to_composite`) from ``torchrl.envs.transforms.transforms``; in tdrl the
classes live in one module per family, and this module gathers them so that the same
import lines work after the package name is changed.

Examples:
    >>> from tdrl.envs.transforms.transforms import Compose, StepCounter, TransformedEnv
    >>> from tdrl.envs import StepCounter as same
    >>> StepCounter is same
    True
"""

from __future__ import annotations

import importlib.util

from tdrl.envs.transforms import *  # noqa: F403
from tdrl.envs.transforms import __all__ as _family_names
from tdrl.envs.transforms.transform import FORWARD_NOT_IMPLEMENTED, _apply_to_composite

#: whether torchvision (used by the pretrained image encoders) can be imported
_has_tv = importlib.util.find_spec("torchvision") is not None

__all__ = [*_family_names, "FORWARD_NOT_IMPLEMENTED", "_apply_to_composite"]
