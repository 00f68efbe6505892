"""Exploration type: the sampling mode policies use (random, mode, mean...).

tdrl shares tensordict's interaction-type state: :data:`ExplorationType` is
:class:`tensordict.nn.InteractionType` and :data:`set_exploration_type` is
:class:`tensordict.nn.set_interaction_type` (a context manager and a decorator),
so ``TensorDictModule``-based policies see the mode set here.
"""

from __future__ import annotations

# tensordict.nn re-exports interaction_type only from 0.15 on; the module has it since 0.14
from tensordict.nn.probabilistic import InteractionType, interaction_type, set_interaction_type

__all__ = ["ExplorationType", "exploration_type", "set_exploration_type"]

#: The sampling modes: ``RANDOM``, ``MODE``, ``MEAN``, ``MEDIAN``, ``DETERMINISTIC``.
ExplorationType = InteractionType

#: Set the exploration type inside a ``with`` block or a decorated function.
set_exploration_type = set_interaction_type


def exploration_type() -> InteractionType | None:
    """Return the exploration type currently set (None when none is set).

    Examples:
        >>> with set_exploration_type(ExplorationType.MODE):
        ...     exploration_type()
        <InteractionType.MODE: 'mode'>
        >>> @set_exploration_type("random")
        ... def sample():
        ...     return exploration_type()
        >>> sample()
        <InteractionType.RANDOM: 'random'>
    """
    return interaction_type()
