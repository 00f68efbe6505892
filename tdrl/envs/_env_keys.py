"""The cached key accessors of :class:`~tdrl.envs.EnvBase` (``action_keys``, ``done_keys``...).

The keys are derived from the specs when they are assigned (see ``EnvBase._refresh``) and
kept in the env's ``_cache``; these properties only read that cache.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EnvKeys"]

SINGLE_KEY_ERROR = (
    "{name} was requested but the env has {count} {kind} keys: {keys}; use {name}s instead"
)


class EnvKeys:
    """Mixin of :class:`~tdrl.envs.EnvBase` exposing the keys cached from its specs.

    Examples:
        >>> from tdrl.envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> env.action_key, env.reward_key, env.done_keys
        ('action', 'reward', ['done', 'terminated'])
    """

    _cache: Any

    @property
    def action_keys(self) -> list:
        """The leaf keys of ``full_action_spec``."""
        return self._cache.action_keys

    @property
    def action_key(self) -> Any:
        """The action key; raises KeyError when the env has several."""
        return self._one(self._cache.action_keys, "action_key", "action")

    @property
    def reward_keys(self) -> list:
        """The leaf keys of ``full_reward_spec``."""
        return self._cache.reward_keys

    @property
    def reward_key(self) -> Any:
        """The reward key; raises KeyError when the env has several."""
        return self._one(self._cache.reward_keys, "reward_key", "reward")

    @property
    def done_keys(self) -> list:
        """The leaf keys of ``full_done_spec``."""
        return self._cache.done_keys

    @property
    def done_key(self) -> Any:
        """The ``"done"`` key of the env; raises KeyError when there are several levels."""
        return self._one(self._cache.done_flag_keys, "done_key", "done")

    @property
    def done_keys_groups(self) -> list:
        """Done keys grouped by nesting level (one list per level)."""
        return self._cache.done_keys_groups

    @property
    def reset_keys(self) -> list:
        """The ``"_reset"`` key paired with each done level."""
        return self._cache.reset_keys

    @property
    def observation_keys(self) -> list:
        """The leaf keys of ``full_observation_spec``."""
        return self._cache.observation_keys

    @property
    def state_keys(self) -> list:
        """The leaf keys of ``full_state_spec``."""
        return self._cache.state_keys

    @staticmethod
    def _one(keys: list, name: str, kind: str) -> Any:
        if len(keys) != 1:
            raise KeyError(
                SINGLE_KEY_ERROR.format(name=name, count=len(keys), kind=kind, keys=keys)
            )
        return keys[0]
