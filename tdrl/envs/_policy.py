"""What a rollout accepts as its source of actions, turned into one tensordict callable.

``rollout`` takes a policy (a callable on tensordicts, or a plain ``nn.Module`` on
tensors) or an iterable of actions. Each becomes a callable that writes the action
into the tensordict it is given and returns that tensordict.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

from tdrl.envs._td_fast import fast_set

if TYPE_CHECKING:
    from tdrl.envs.common import EnvBase

Policy = Callable[[TensorDictBase], TensorDictBase]

#: forward() parameter names that mean "this module reads a tensordict".
_TENSORDICT_ARGS = ("tensordict", "td", "data", "tensordict_in")


class ActionsExhausted(Exception):
    """Raised by an action feeder whose iterable has no action left (ends the rollout)."""


def _reads_tensordict(module: nn.Module) -> bool:
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1 and positional[0].name in _TENSORDICT_ARGS


def _tensor_module_keys(env: EnvBase, module: nn.Module) -> Any:
    """The ``in_keys`` of a module on tensors: its forward arguments named after observations."""
    observation_keys = env.observation_keys
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {key if isinstance(key, str) else key[-1]: key for key in observation_keys}
    if names and all(name in by_name for name in names):
        return {by_name[name]: name for name in names}
    if len(observation_keys) == 1:
        return list(observation_keys)
    raise TypeError(
        f"rollout policy: {type(module).__name__} is an nn.Module on tensors, but its forward "
        f"arguments {names} do not name the env observations {observation_keys}; wrap it in a "
        "tensordict.nn.TensorDictModule with explicit in_keys / out_keys"
    )


def as_policy(env: EnvBase, policy: Any) -> Policy:
    """``policy`` as a callable on tensordicts.

    A TensorDict module or any other callable is used as is. A plain ``nn.Module`` whose
    ``forward`` takes tensors is wrapped to read the env observations (by argument name,
    or the single observation) and write the env action keys.
    """
    if not isinstance(policy, nn.Module) or isinstance(policy, TensorDictModuleBase):
        return policy
    if _reads_tensordict(policy):
        return policy
    in_keys = _tensor_module_keys(env, policy)
    return TensorDictModule(policy, in_keys=in_keys, out_keys=list(env.action_keys))


def action_feeder(env: EnvBase, actions: Iterable) -> Policy:
    """A policy writing the next item of ``actions`` at each call.

    Items are tensors (written at the env's single action key) or tensordicts (merged
    into the input). :class:`ActionsExhausted` is raised when no item is left.
    """
    iterator: Iterator = iter(actions)
    action_keys = env.action_keys

    def feed(tensordict: TensorDictBase) -> TensorDictBase:
        try:
            action = next(iterator)
        except StopIteration:
            raise ActionsExhausted from None
        if isinstance(action, TensorDictBase):
            return tensordict.update(action)
        if len(action_keys) != 1:
            raise TypeError(
                f"rollout actions: the env has {len(action_keys)} action keys {action_keys}; "
                f"give each step's actions as a TensorDict, got {type(action).__name__}"
            )
        return fast_set(tensordict, action_keys[0], action)

    return feed
