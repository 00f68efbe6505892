"""Shared pieces of the multi-agent wrappers: group maps, per-group specs and data, action errors.

A multi-agent wrapper gathers its agents into groups (``group_map``: group name -> agent
names). Each group is one nested entry of the env's data whose batch size ends with the
number of agents in the group. Agents of a group whose entries all have the same shapes
share one dense spec (bounds may differ per agent); otherwise the group's spec is a stack of
per-agent specs and its data a lazy stack of per-agent tensordicts (``het_specs``).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from tdrl.data.specs import Bounded, Composite, TensorSpec
from tdrl.envs.marl import MarlGroupMapType, check_marl_grouping

#: Message of a wrong action; the wrappers fill in the env, the key and what was expected.
ACTION_ERROR = "{env}: action at key {key!r}: expected {expected}, got {got}"

_NAME_WITH_INDEX = re.compile(r"^(.+)_(\d+)$")


def group_by_name_prefix(agent_names: Sequence[str]) -> dict[str, list[str]]:
    """Group ``"<prefix>_<int>"`` agents by prefix; any other name gets a group of its own.

    Examples:
        >>> group_by_name_prefix(["adversary_0", "adversary_1", "agent_0", "referee"])
        {'adversary': ['adversary_0', 'adversary_1'], 'agent': ['agent_0'], 'referee': ['referee']}
    """
    groups: dict[str, list[str]] = {}
    for name in agent_names:
        match = _NAME_WITH_INDEX.match(name)
        groups.setdefault(match.group(1) if match else name, []).append(name)
    return groups


def resolve_group_map(
    group_map: Any,
    agent_names: Sequence[str],
    default: Callable[[Sequence[str]], dict[str, list[str]]],
    owner: str,
) -> dict[str, list[str]]:
    """The group map to use: ``default(agent_names)`` for None, a :class:`MarlGroupMapType`'s
    map, or a copy of the given dict; checked to hold every agent exactly once."""
    if group_map is None:
        resolved = default(agent_names)
    elif isinstance(group_map, MarlGroupMapType):
        resolved = group_map.get_group_map(agent_names)
    elif isinstance(group_map, Mapping):
        resolved = {}
        for group, agents in group_map.items():
            if not isinstance(group, str):
                raise TypeError(
                    f"{owner} group_map: expected str group names, got {type(group).__name__} "
                    f"({group!r})"
                )
            if isinstance(agents, str) or not isinstance(agents, Sequence):
                raise TypeError(
                    f"{owner} group_map[{group!r}]: expected a list of agent names, "
                    f"got {type(agents).__name__}"
                )
            resolved[group] = list(agents)
    else:
        raise TypeError(
            f"{owner} group_map: expected None, a MarlGroupMapType or a dict of group name -> "
            f"agent names, got {type(group_map).__name__}"
        )
    check_marl_grouping(resolved, agent_names)
    return resolved


def _dense_leaf(specs: Sequence[TensorSpec], dim: int) -> TensorSpec | None:
    """One spec for the stack of ``specs`` along ``dim`` when they differ at most by bounds."""
    first = specs[0]
    if all(spec == first for spec in specs[1:]):
        shape = first.shape
        return first.unsqueeze(dim).expand(*shape[:dim], len(specs), *shape[dim:])
    if not all(
        type(spec) is Bounded and spec.shape == first.shape and spec.dtype == first.dtype
        for spec in specs
    ):
        return None
    low = torch.stack([spec.space.low for spec in specs], dim)
    high = torch.stack([spec.space.high for spec in specs], dim)
    return Bounded(low, high, low.shape, device=first.device, dtype=first.dtype)


def _dense_composite(specs: Sequence[Composite], dim: int) -> Composite | None:
    keys = list(specs[0].keys())
    if any(list(spec.keys()) != keys for spec in specs[1:]):
        return None
    shape = specs[0].shape
    entries = {}
    for key in keys:
        entry = stack_agent_specs([spec[key] for spec in specs], dim)
        if entry is None:
            return None
        entries[key] = entry
    return Composite(
        entries,
        shape=(*shape[:dim], len(specs), *shape[dim:]),
        device=specs[0].device,
    )


def stack_agent_specs(specs: Sequence[TensorSpec], dim: int) -> TensorSpec | None:
    """The dense spec of the agents' ``specs`` stacked along ``dim``, or None when ragged."""
    if all(isinstance(spec, Composite) for spec in specs):
        return _dense_composite(specs, dim)
    if any(isinstance(spec, Composite) for spec in specs):
        return None
    return _dense_leaf(specs, dim)


def group_spec(agent_specs: Sequence[Composite], dim: int) -> tuple[Composite, bool]:
    """The spec of a group from its agents' Composite specs, and whether it is heterogeneous.

    A dense Composite when every entry has the same shape for all agents, otherwise
    ``torch.stack`` of the per-agent specs (whose data is a lazy stack).
    """
    dense = _dense_composite(agent_specs, dim)
    if dense is not None:
        return dense, False
    return torch.stack(list(agent_specs), dim), True


def stack_values(values: Sequence[Any], dim: int) -> Any:
    """Stack the agents' tensors (or nested dicts of tensors) along ``dim``."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(values, dim)
    if isinstance(first, Mapping):
        return {key: stack_values([value[key] for value in values], dim) for key in first}
    raise TypeError(f"expected tensors or dicts of tensors, got {type(first).__name__}")


def group_data(
    per_agent: Sequence[dict],
    batch_size: torch.Size,
    heterogeneous: bool,
    device: Any,
    dense: dict | None = None,
) -> TensorDictBase:
    """A group's tensordict from each agent's entries (dicts of tensors / nested dicts).

    ``dense`` holds entries already stacked over the group's agents (rewards, flags).
    """
    dim = len(batch_size)
    if heterogeneous:
        tds = [TensorDict(entries, batch_size=batch_size, device=device) for entries in per_agent]
        data = LazyStackedTensorDict(*tds, stack_dim=dim)
        for key, value in (dense or {}).items():
            data.set(key, value)
        return data
    stacked = stack_values(per_agent, dim)
    if dense:
        stacked.update(dense)
    return TensorDict(stacked, batch_size=(*batch_size, len(per_agent)), device=device)


def check_wrapped_env(
    owner: Any, env: Any, needs: str, expected: str, methods: Sequence[str]
) -> None:
    """Raise a TypeError unless ``env`` (the ``env=`` argument of a wrapper) has ``methods``.

    Examples:
        >>> class W: ...
        >>> check_wrapped_env(W(), [], "a list", "a list", ["append"])
        >>> check_wrapped_env(W(), None, "a list", "a list", ["append"])
        Traceback (most recent call last):
        TypeError: W needs a list (env=...)
    """
    name = type(owner).__name__
    if env is None:
        raise TypeError(f"{name} needs {needs} (env=...)")
    missing = [method for method in methods if not hasattr(env, method)]
    if missing:
        raise TypeError(
            f"{name} env: expected {expected}, got {type(env).__name__} without {missing}"
        )


class BackendModule:
    """Class (and instance) attribute giving a backend module, imported when first read.

    Reading it raises an ImportError naming the pip package when the backend is missing.
    """

    def __init__(self, module: str, package: str) -> None:
        self.module = module
        self.package = package

    def __get__(self, instance: Any, owner: type) -> Any:
        try:
            return importlib.import_module(self.module)
        except ImportError as err:
            raise ImportError(
                f"{owner.__name__} needs the optional {self.package!r} package "
                f"(pip install {self.package})"
            ) from err


class GroupedRandAction:
    """Mixin: ``rand_action()`` with no input samples the full action spec, so the groups'
    nested tensordicts get their agent dim (``[num_envs, n_agents]``, not ``[num_envs]``).

    With an input holding every group's tensordict, each action leaf is drawn and set in its
    group directly: the same draws, in the same order, as sampling the whole action spec and
    merging the sample, without building the sample's tensordicts.
    """

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write a random action (sampled from the action spec) in ``tensordict`` and return it."""
        if tensordict is None:
            return self.full_action_spec.rand()
        if self._batch_locked:
            leaves = self._group_action_leaves()
            if leaves is not None:
                groups = []
                for name, batch_size, _ in leaves:
                    group = tensordict.get(name, None)
                    if type(group) is not TensorDict or group.batch_size != batch_size:
                        break
                    groups.append(group)
                else:
                    for group, (_, _, entries) in zip(groups, leaves):
                        for key, leaf in entries:
                            group.set(key, leaf.rand())
                    return tensordict
        return super().rand_action(tensordict)

    def _group_action_leaves(self) -> list | None:
        """``(group, batch size, ((key, leaf spec), ...))`` in the action spec's order, or None
        when the action spec is not one level of groups holding leaves (cached with the specs).
        """
        derived = self._cache.derived
        if "group_action_leaves" not in derived:
            leaves: list | None = []
            for name, group in self.full_action_spec.items():
                if group is None:
                    continue
                if not isinstance(group, Composite) or group.data_cls is not None:
                    leaves = None
                    break
                entries = tuple((key, leaf) for key, leaf in group.items() if leaf is not None)
                if any(isinstance(leaf, Composite) for _, leaf in entries):
                    leaves = None
                    break
                leaves.append((name, group.shape, entries))
            derived["group_action_leaves"] = leaves
        return derived["group_action_leaves"]


def check_action_shape(
    env_name: str, key: tuple, action: Any, expected: torch.Size
) -> torch.Tensor:
    """``action`` itself when it is a tensor of the ``expected`` shape; a ValueError otherwise."""
    if action is None:
        raise KeyError(f"{env_name}: the input has no action at key {key!r}")
    if not isinstance(action, torch.Tensor):
        raise TypeError(
            ACTION_ERROR.format(
                env=env_name, key=key, expected="a tensor", got=type(action).__name__
            )
        )
    if action.shape != expected:
        raise ValueError(
            ACTION_ERROR.format(
                env=env_name,
                key=key,
                expected=f"shape {tuple(expected)}",
                got=f"shape {tuple(action.shape)}",
            )
        )
    return action
