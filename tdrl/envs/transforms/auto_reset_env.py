"""AutoResetEnv: a TransformedEnv whose first transform is an AutoResetTransform."""

from __future__ import annotations

from typing import Any

from tdrl.envs.common import EnvBase
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.resets import AutoResetTransform
from tdrl.envs.transforms.transform import Transform
from tdrl.envs.transforms.transformed_env import TransformedEnv

__all__ = ["AutoResetEnv"]


class AutoResetEnv(TransformedEnv):
    """Wraps an env whose ``_step`` resets done elements by itself.

    Resets triggered by done flags take the observations the env's step already
    returned instead of calling the env's ``_reset`` (see :class:`AutoResetTransform`,
    which does the work and must come first in the chain).

    Args:
        env: the auto-resetting env.
        transform: an :class:`AutoResetTransform`, or a :class:`Compose` starting with
            one (default: ``AutoResetTransform()``, which replaces the last observation of
            each episode with NaN).
        **kwargs: forwarded to :class:`TransformedEnv`.

    Examples:
        >>> from tdrl.envs import AutoResetEnv, AutoResetTransform, PendulumEnv
        >>> env = AutoResetEnv(PendulumEnv(), AutoResetTransform(replace=False))
        >>> env.auto_reset, env.transform
        (True, AutoResetTransform(replace=False))
    """

    def __init__(self, env: EnvBase, transform: Transform | None = None, **kwargs: Any) -> None:
        if transform is None:
            transform = AutoResetTransform()
        first = transform[0] if isinstance(transform, Compose) and len(transform) else transform
        if not isinstance(first, AutoResetTransform):
            raise TypeError(
                "AutoResetEnv transform: expected an AutoResetTransform (or a Compose starting "
                f"with one), got {type(first).__name__}"
            )
        super().__init__(env, transform, **kwargs)

    @property
    def auto_reset(self) -> bool:
        """Always True: done elements are reset by the env's own step."""
        return True
