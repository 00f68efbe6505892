"""Random-action rollouts of PettingZoo parallel envs, kept in columns.

``PettingZooWrapper.rollout(n)`` without a policy does not build one tensordict per step: each
step writes the agents' observations into one numpy array per group and entry, keeps the
actions, rewards and flags as they come, and every column of the result is stacked once at
the end. The data is the generic loop's, bit for bit: the random actions are drawn from the
same action leaves in the same order (after the same action-mask updates), the conversions
are the wrapper's own, the resets are the env's ``reset()``, and a step that the fast reading
does not cover (an agent missing from PettingZoo's dicts) goes through the wrapper's generic
step output. :func:`rollout_blocker` says when the generic loop runs instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Composite
from tdrl.envs._overrides import override_reason
from tdrl.envs.libs._pettingzoo_groups import nest

if TYPE_CHECKING:
    from tdrl.envs.libs.pettingzoo import PettingZooWrapper

__all__ = ["columnar_rollout", "rollout_blocker"]

_FLAGS = ("done", "terminated", "truncated")
#: wrapper methods whose work the columnar rollout does without calling them: one replaced
#: on the class or on the instance sends the rollout through the generic loop
_STEP_METHODS = (
    "step",
    "_checked_step",
    "_step",
    "_step_parallel",
    "_check_present",
    "_agent_actions",
    "_agent_flags",
    "_output",
    "_finish_step",
    "reset",
    "_reset",
    "_post_process",
    "rand_action",
    "_post_step_hooks",
)


def rollout_blocker(env: PettingZooWrapper, stock: type) -> str | None:
    """Why ``env``'s random rollouts must take the generic loop; None when they need not.

    ``stock`` is the class whose step the columnar rollout stands for.
    """
    if not env.parallel:
        return "AEC env"
    if env.het_specs:
        return "heterogeneous group"
    if not env.done_on_any:
        return "done_on_any=False"
    if env.run_type_checks:
        return "run_type_checks"
    if env._auto_reset_handler is not None:
        return "auto_reset"
    device = env.device
    if device is not None and device.type != "cpu":
        return f"device {device}"
    action_spec = env.full_action_spec
    if list(action_spec.keys()) != [group.name for group in env._groups]:
        return "action spec changed"
    for group in env._groups:
        entry = action_spec[group.name]
        if not isinstance(entry, Composite) or list(entry.keys()) != ["action"]:
            return "action spec changed"
        if group.layout is None:
            return f"group {group.name!r} has observations that are not numeric tensors"
    return override_reason(env, stock, _STEP_METHODS)


class _GroupColumns:
    """One group's per-step values, kept until the end of the rollout."""

    def __init__(self, group: Any, use_mask: bool) -> None:
        self.group = group
        self.agents = group.agents
        self.keys = group.observation_keys
        self.observations: dict[tuple, list] = {key: [] for key in self.keys}
        self.flags: list = []
        self.rewards: list = []
        self.masks: list | None = [] if use_mask else None
        self.actions: list = []

    def read(self, observations: Mapping) -> None:
        """Append the agents' observed entries (the group's own dense reading)."""
        for key, array in zip(self.keys, self.group.read_arrays(observations, None)):
            self.observations[key].append(array)

    def append_step_data(self, data: TensorDictBase) -> None:
        """Append a step output built by the wrapper's generic step output."""
        group = data.get(self.group.name)
        for key in self.keys:
            self.observations[key].append(group.get(key).numpy())
        self.flags.append(torch.cat([group.get("terminated"), group.get("truncated")], -1).tolist())
        self.rewards.append(group.get("reward").reshape(-1).tolist())
        if self.masks is not None:
            self.masks.append(group.get("mask").tolist())


def columnar_rollout(
    env: PettingZooWrapper, max_steps: int, break_when_any_done: bool, set_truncated: bool
) -> TensorDictBase:
    """``env.rollout(max_steps)`` with random actions, each column stacked once at the end.

    The caller checks :func:`rollout_blocker` first.
    """
    simulator = env._env
    possible = env.possible_agents
    everyone = set(possible)
    n_all = len(possible)
    use_mask = env.use_mask
    columns = [_GroupColumns(group, use_mask) for group in env._groups]
    action_spec = env.full_action_spec
    draws = []
    for group, group_columns in zip(env._groups, columns):
        leaf = action_spec[group.action_key]
        mask_leaf = leaf if group.masks_actions else None
        draws.append((group_columns, leaf.rand, group.writers, mask_leaf))
    return_state = env.return_state
    state_reader = env.__dict__.get("_state_reader")
    states: list = []
    root_flags: list = []  # (done, terminated, truncated) at the root, per step
    resets = {0: env.reset()}  # the steps whose root is a reset's output, and that output
    # the last step whose agent flags the wrapper has not recorded (see _sync)
    unsynced: int | None = None
    step = 0
    for step in range(max_steps):
        # actions: the same draws as the action spec's rand(), written as the wrapper does
        acting = simulator.agents
        wanted = None if len(acting) == n_all else set(acting)
        actions = {}
        for group_columns, rand, writers, _ in draws:
            action = rand()
            group_columns.actions.append(action)
            rows = action.numpy()
            for j, agent in enumerate(group_columns.agents):
                if wanted is None or agent in wanted:
                    actions[agent] = writers[j](rows[j])
        observations, rewards, terminated, truncated, _ = simulator.step(actions)
        if (
            everyone <= observations.keys()
            and everyone <= terminated.keys()
            and everyone <= truncated.keys()
        ):
            any_term = any_trunc = False
            live = set(simulator.agents) if use_mask else None
            for group_columns, _, _, mask_leaf in draws:
                agents = group_columns.agents
                group_columns.read(observations)
                flags = [(bool(terminated[agent]), bool(truncated[agent])) for agent in agents]
                group_columns.flags.append(flags)
                for term, trunc in flags:
                    any_term = any_term or term
                    any_trunc = any_trunc or trunc
                group_columns.rewards.append([rewards.get(agent, 0.0) for agent in agents])
                if live is not None:
                    group_columns.masks.append([agent in live for agent in agents])
                if mask_leaf is not None:
                    mask = group_columns.observations[("action_mask",)][-1]
                    mask_leaf.update_mask(torch.from_numpy(mask.copy()))
            any_done = any_term or any_trunc
            root_flags.append((any_done, any_term, any_trunc))
            if return_state:
                states.append(state_reader(simulator.state()))
            unsynced = step
        else:
            # an agent is missing from PettingZoo's dicts: the wrapper's generic step output
            if unsynced is not None:
                _sync(env, columns, unsynced)
            env._check_present(observations, terminated, truncated)
            data = env._output(
                observations, None, set(simulator.agents), rewards, terminated, truncated
            )
            for group_columns in columns:
                group_columns.append_step_data(data)
            flags = tuple(bool(data.get(key)) for key in _FLAGS)
            any_done = flags[0]
            root_flags.append(flags)
            if return_state:
                states.append(data.get("state"))
            unsynced = None
        if step == max_steps - 1 or (any_done and break_when_any_done):
            break
        if any_done:
            resets[step + 1] = env.reset()
            unsynced = None
    if unsynced is not None:
        _sync(env, columns, unsynced)
    # as the step loop: only a rollout that runs its max_steps marks its last step truncated
    set_truncated = set_truncated and step == max_steps - 1
    return _assemble(env, columns, resets, root_flags, states, step + 1, set_truncated)


def _sync(env: PettingZooWrapper, columns: list[_GroupColumns], step: int) -> None:
    """Give the wrapper the agents' last flags, as the generic step ``step`` leaves them."""
    flags = env._last_flags
    for group_columns in columns:
        for agent, pair in zip(group_columns.agents, group_columns.flags[step]):
            flags[agent] = (bool(pair[0]), bool(pair[1]))


def _roots(column: torch.Tensor, resets: dict, key: tuple) -> torch.Tensor:
    """Each step's root value: the previous step's next value, or the reset's after a reset."""
    root = torch.empty_like(column)
    root[1:] = column[:-1]
    for step, data in resets.items():
        if step < len(root):
            root[step] = data.get(key)
    return root


def _assemble(
    env: PettingZooWrapper,
    columns: list[_GroupColumns],
    resets: dict,
    root_flags: list,
    states: list,
    steps: int,
    set_truncated: bool,
) -> TensorDictBase:
    """The rollout's tensordict, with the keys in the order of the generic loop's result."""
    batch = torch.Size([steps])
    device = env.device
    next_source: dict = {}
    root_source: dict = {}
    for group_columns in columns:
        name = group_columns.group.name
        n = group_columns.group.n
        group_batch = torch.Size([steps, n])
        flags = torch.from_numpy(np.array(group_columns.flags, dtype=bool).reshape(steps, n, 2))
        entries = {
            key: torch.from_numpy(np.stack(values))
            for key, values in group_columns.observations.items()
        }
        entries[("terminated",)] = flags[..., 0:1].clone()
        entries[("truncated",)] = flags[..., 1:2].clone()
        if set_truncated:
            entries[("truncated",)][-1] = True
        entries[("done",)] = entries[("terminated",)] | entries[("truncated",)]
        roots = {key: _roots(value, resets, (name, *key)) for key, value in entries.items()}
        entries[("reward",)] = torch.from_numpy(
            np.array(group_columns.rewards, dtype=np.float32).reshape(steps, n, 1)
        )
        if group_columns.masks is not None:
            mask = torch.tensor(group_columns.masks, dtype=torch.bool).reshape(steps, n)
            entries[("mask",)] = mask
            roots[("mask",)] = _roots(mask, resets, (name, "mask"))
        roots[("action",)] = torch.stack(group_columns.actions)
        next_source[name] = TensorDict._new_unsafe(
            nest(entries), batch_size=group_batch, device=device
        )
        root_source[name] = TensorDict._new_unsafe(
            nest(roots), batch_size=group_batch, device=device
        )
    flags = torch.tensor(root_flags, dtype=torch.bool).reshape(steps, 3, 1)
    done, terminated, truncated = flags[:, 0].clone(), flags[:, 1].clone(), flags[:, 2].clone()
    if set_truncated:
        truncated[-1] = True
        done[-1] = True
    next_source.update(done=done, terminated=terminated, truncated=truncated)
    root_source.update(
        done=_roots(done, resets, ("done",)),
        terminated=_roots(terminated, resets, ("terminated",)),
        truncated=_roots(truncated, resets, ("truncated",)),
    )
    if states:
        next_source["state"] = torch.stack(states)
        root_source["state"] = _roots(next_source["state"], resets, ("state",))
    source = {"next": TensorDict._new_unsafe(next_source, batch_size=batch, device=device)}
    source.update(root_source)
    result = TensorDict._new_unsafe(source, batch_size=batch, device=device)
    result.refine_names("time")
    return result
