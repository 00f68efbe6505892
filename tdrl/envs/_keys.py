"""Env keys: the bookkeeping derived from the specs once per assignment, and its accessors.

The keys are derived from the specs when they are assigned (see ``EnvBase._refresh``) and
kept in the env's ``_cache``; :class:`EnvKeys` (a mixin of ``EnvBase``) exposes them as
``action_keys``, ``done_keys``... and only reads that cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensordict import unravel_key

#: The three names that carry end-of-trajectory signals at one nesting level.
DONE_NAMES = ("done", "terminated", "truncated")


def as_tuple(key: Any) -> tuple[str, ...]:
    """Return ``key`` as a tuple of strings."""
    key = unravel_key(key)
    return key if isinstance(key, tuple) else (key,)


def from_tuple(key: tuple[str, ...]) -> str | tuple[str, ...]:
    """Return a one-element tuple as a plain string, other tuples unchanged."""
    return key[0] if len(key) == 1 else key


def leaf_keys(spec: Any) -> list:
    """Leaf keys of a Composite spec (nested keys as tuples), in insertion order."""
    return [unravel_key(k) for k in spec.keys(include_nested=True, leaves_only=True)]


def empty_levels(spec: Any) -> list:
    """Keys of the nested Composites of ``spec`` that hold no entry."""
    found = []
    for key, value in spec.items(include_nested=True):
        if hasattr(value, "keys") and not list(value.keys()):
            found.append(unravel_key(key))
    return found


def key_repr(key: Any) -> str:
    """A readable form of a key for error messages."""
    return repr(key)


@dataclass
class DoneCompletion:
    """The done, terminated and (optional) truncated keys of one done level.

    ``fill_truncated``: the env does not write ``truncated`` itself (the entry was
    added by ``add_truncated_keys``); a missing one is written as False.
    """

    done: Any
    terminated: Any
    truncated: Any = None
    fill_truncated: bool = False


@dataclass
class SpecCache:
    """Keys and leaf specs derived from the specs of an env."""

    action_keys: list = field(default_factory=list)
    reward_keys: list = field(default_factory=list)
    done_keys: list = field(default_factory=list)
    done_keys_groups: list = field(default_factory=list)
    reset_keys: list = field(default_factory=list)
    observation_keys: list = field(default_factory=list)
    state_keys: list = field(default_factory=list)
    #: the "done" key of each done level (used for any-done checks)
    done_flag_keys: list = field(default_factory=list)
    #: data-side completion of missing done/terminated entries
    done_completions: list = field(default_factory=list)
    #: (key, shape) of the done entries whose spec holds one element: a step may give
    #: them as a python bool (a 0-d tensor), reshaped to the spec's shape
    scalar_done_shapes: list = field(default_factory=list)
    #: keys dropped by the step_mdp of rollouts (the rewards)
    mdp_excluded: dict = field(default_factory=dict)
    action_leaf: Any = None
    reward_leaf: Any = None
    done_leaf: Any = None
    #: other values derived from the keys, filled lazily by their users (gone with the cache)
    derived: dict = field(default_factory=dict)


def group_done_keys(done_keys: list) -> list[tuple[tuple[str, ...], list]]:
    """Group done keys by nesting level: ``[(prefix, [keys...]), ...]``, shallowest first."""
    groups: dict[tuple[str, ...], list] = {}
    for key in done_keys:
        groups.setdefault(as_tuple(key)[:-1], []).append(key)
    return sorted(groups.items(), key=lambda item: len(item[0]))


def reset_key_for(prefix: tuple[str, ...]) -> str | tuple[str, ...]:
    """The ``"_reset"`` key that pairs with the done entries at ``prefix``."""
    return from_tuple((*prefix, "_reset"))


def done_flag_key(prefix: tuple[str, ...], keys: list) -> Any:
    """The key that signals the end of a trajectory at one level (``done`` if present)."""
    names = {as_tuple(k)[-1]: k for k in keys}
    for name in ("done", "terminated", "truncated"):
        if name in names:
            return names[name]
    return keys[0]


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
