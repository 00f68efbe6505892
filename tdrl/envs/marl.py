"""Multi-agent grouping: how agents are gathered into nested groups of an env's data."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import Enum

__all__ = ["MarlGroupMapType", "check_marl_grouping"]


class MarlGroupMapType(Enum):
    """How the agents of a multi-agent env are grouped in its tensordicts.

    ``ALL_IN_ONE_GROUP`` puts every agent under one ``"agents"`` group (one
    stacked entry per key); ``ONE_GROUP_PER_AGENT`` gives each agent its own
    group named after it.

    Examples:
        >>> MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(["walker_0", "walker_1"])
        {'agents': ['walker_0', 'walker_1']}
        >>> MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(["walker_0", "walker_1"])
        {'walker_0': ['walker_0'], 'walker_1': ['walker_1']}
    """

    ALL_IN_ONE_GROUP = 1
    ONE_GROUP_PER_AGENT = 2

    def get_group_map(self, agent_names: Sequence[str]) -> dict[str, list[str]]:
        """Build the group map (group name -> agent names) for ``agent_names``."""
        if self is MarlGroupMapType.ALL_IN_ONE_GROUP:
            return {"agents": list(agent_names)}
        return {name: [name] for name in agent_names}


def check_marl_grouping(group_map: dict[str, list[str]], agent_names: Sequence[str]) -> None:
    """Check that ``group_map`` assigns every agent to exactly one non-empty group.

    ``agent_names`` must be non-empty and hold each name once.

    Raises:
        ValueError: naming the empty group, the duplicated agent or the agents
            that are missing or unknown.

    Examples:
        >>> check_marl_grouping({"agents": ["a", "b"]}, ["a", "b"])
        >>> check_marl_grouping({"agents": ["a"]}, ["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: group map does not cover every agent: missing ['b'], unknown []
    """
    if not agent_names:
        raise ValueError("agent_names: expected at least one agent, got none")
    duplicated = sorted(name for name, count in Counter(agent_names).items() if count > 1)
    if duplicated:
        raise ValueError(f"agent_names: expected unique names, got {duplicated} more than once")
    seen: set[str] = set()
    for group, agents in group_map.items():
        if not agents:
            raise ValueError(f"group {group!r} of the group map is empty")
        for agent in agents:
            if agent in seen:
                raise ValueError(
                    f"agent {agent!r} appears in more than one group (last: {group!r})"
                )
            seen.add(agent)
    names = set(agent_names)
    if seen != names:
        raise ValueError(
            "group map does not cover every agent: "
            f"missing {sorted(names - seen)}, unknown {sorted(seen - names)}"
        )
