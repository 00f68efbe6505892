"""Action sources of columnar rollouts, and the hand-over of a columnar rollout to the loop.

A columnar rollout (see :meth:`~tdrl.envs.libs._gym_plan.GymStepPlan.columnar_rollout`)
keeps each step's tensors in Python lists and builds every column once at the end. Its
actions come from an :class:`ActionSource`: the action spec's sampler (a rollout without a
policy) or :func:`policy_source`, the direct call of a plain ``TensorDictModule`` on the
step's root tensors (the same module call, with the same eligibility rule, as
:class:`~tdrl.envs._policy_call.ModuleCall`).

When the direct call stops reproducing ``policy(tensordict)`` in the middle of a rollout (a
hook registered by the policy itself, say, or outputs that are not tensors), the columnar
rollout stops there and returns a :class:`Handover`: the steps taken so far, one tensordict
each, and the input of the next step; the generic loop goes on from it, so the data is the
generic loop's from end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase

from tdrl.envs._policy_call import ModuleCall

__all__ = ["ActionSource", "Handover", "ModuleOutputs", "policy_source"]


class ModuleOutputs(NamedTuple):
    """Outputs of the wrapped module that are not one tensor per out key (written generically)."""

    value: Any


class ActionSource(NamedTuple):
    """Where a columnar rollout's actions come from.

    Attributes:
        out_keys: the root keys written at each step, in the order they are written; one of
            them is the action key.
        produce: ``produce(root)`` with ``root`` the dict of the step's observation entries:
            a tuple of tensors (one per out key), None when the step must be taken by the
            generic loop (before anything ran), or :class:`ModuleOutputs` when the module
            ran but its outputs need the generic writer.
        checked: whether the actions come with the spec's layout (no check needed).
    """

    out_keys: tuple
    produce: Callable[[dict], Any]
    checked: bool


class Handover(NamedTuple):
    """A columnar rollout stopped at a step the generic loop must take.

    Attributes:
        steps: the steps taken so far, one tensordict each (as the generic loop keeps them).
        tensordict: the input of the next step.
        outputs: :class:`ModuleOutputs` when the policy already ran on ``tensordict``
            (its outputs still to be written), else None.
        remaining: the number of steps left to take.
    """

    steps: list
    tensordict: TensorDictBase
    outputs: ModuleOutputs | None
    remaining: int


def random_source(sample: Callable[[], torch.Tensor], action_key: str) -> ActionSource:
    """Actions drawn from the action spec's sampler."""
    return ActionSource((action_key,), lambda root: (sample(),), True)


def _input_getter(key: Any, roots: Sequence[str]) -> Callable[[dict], Any] | None:
    """Reads in-key ``key`` from a step's dict of observation entries, or None if it is not one."""
    if type(key) is str:
        return (lambda root: root[key]) if key in roots else None
    if type(key) is tuple and len(key) > 1 and key[0] in roots:
        head, rest = key[0], key[1:]
        return lambda root: root[head].get(rest)
    return None


def policy_source(
    call: Any, action_key: str, observation_keys: Sequence[str], reserved: Sequence[str]
) -> ActionSource | None:
    """The direct call of ``call``'s module as an action source, or None when it cannot be one.

    Args:
        call: the step loops' policy call (only a :class:`ModuleCall` qualifies).
        action_key: the env's action key, which the policy must write.
        observation_keys: the root keys of the step's observations (what the policy may read).
        reserved: other root keys the policy must not write (flags, ``"next"``, rewards).
    """
    if type(call) is not ModuleCall:
        return None
    out_keys = call.out_keys
    if not all(type(key) is str for key in out_keys) or action_key not in out_keys:
        return None
    if len(set(out_keys)) != len(out_keys) or set(out_keys) & {*observation_keys, *reserved}:
        return None
    getters = [_input_getter(key, observation_keys) for key in call.in_keys]
    if not getters or any(getter is None for getter in getters):
        return None
    for param in call.policy.parameters():
        if param.device.type != "cpu":
            return None
    direct_module = call.direct_module
    call_module = call.call_module
    tensor_outputs = call.tensor_outputs
    single = getters[0] if len(getters) == 1 else None

    def produce(root: dict) -> Any:
        module = direct_module()
        if module is None:
            return None
        inputs = [single(root)] if single is not None else [get(root) for get in getters]
        for value in inputs:
            if type(value) is not torch.Tensor:
                return None
        outputs = call_module(module, inputs)
        values = tensor_outputs(outputs)
        return ModuleOutputs(outputs) if values is None else values

    return ActionSource(tuple(out_keys), produce, False)
