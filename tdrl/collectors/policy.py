"""Policy wrappers used by the collectors: device casting, the random phase, env transforms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs.common import EnvBase
from tdrl.envs.utils import RandomPolicy

__all__ = ["DeviceCastPolicy", "RandomPhasePolicy", "register_policy_transforms", "unwrap_policy"]

Policy = Callable[[TensorDictBase], TensorDictBase]


class DeviceCastPolicy:
    """Run a policy on its own device: move the data there and the result back.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> policy = DeviceCastPolicy(lambda td: td.set("action", torch.ones(1)), "cpu", "cpu")
        >>> policy(TensorDict())["action"]
        tensor([1.])
    """

    def __init__(self, policy: Policy, policy_device: Any, env_device: Any) -> None:
        self.policy = policy
        self.policy_device = torch.device(policy_device)
        self.env_device = env_device

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Run the policy on a copy of ``tensordict`` on the policy device; return it on the env's."""
        out = self.policy(tensordict.to(self.policy_device))
        return out.to(self.env_device)


def unwrap_policy(policy: Any) -> Any:
    """The user's policy inside a :class:`DeviceCastPolicy` (the policy itself otherwise)."""
    return policy.policy if isinstance(policy, DeviceCastPolicy) else policy


class RandomPhasePolicy:
    """Random actions whose steps carry the same entries as the policy's steps.

    The policy is called once on ``example`` (a copy of a real step input) to learn the
    entries it writes besides the actions; each random step then gets those entries filled
    with zeros, so random and policy batches share one layout (and one replay buffer).

    Args:
        env: the env whose action spec is sampled.
        policy: the collection policy.
        example: a tensordict the policy can read (the first input of the random phase).

    Examples:
        >>> import torch
        >>> from tdrl.envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> def policy(td):
        ...     return td.set("action", torch.zeros(1)).set("logits", torch.ones(3))
        >>> random_phase = RandomPhasePolicy(env, policy, env.reset())
        >>> td = random_phase(env.reset())
        >>> td["logits"]
        tensor([0., 0., 0.])
    """

    def __init__(self, env: EnvBase, policy: Policy, example: TensorDictBase) -> None:
        self.env = env
        self.template = _policy_outputs(env, policy, example)

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write a random action and the zero-filled policy entries into ``tensordict``."""
        tensordict = self.env.rand_action(tensordict)
        if self.template is not None:
            tensordict.update(self.template)
        return tensordict


def _policy_outputs(env: EnvBase, policy: Policy, example: TensorDictBase) -> Any:
    if isinstance(unwrap_policy(policy), RandomPolicy):
        return None
    probe = example.clone()
    known = set(probe.keys(include_nested=True, leaves_only=True))
    out = policy(probe)
    actions = set(env.full_action_spec.keys(include_nested=True, leaves_only=True))
    written = [
        key
        for key in out.keys(include_nested=True, leaves_only=True)
        if key not in known and key not in actions
    ]
    if not written:
        return None
    return out.select(*written).apply(torch.zeros_like)


def register_policy_transforms(env: EnvBase, policy: Any) -> EnvBase:
    """Append the env transforms a recurrent policy needs (see ``auto_register_policy_transforms``).

    A module of the policy with a ``make_tensordict_primer()`` method declares the recurrent
    state it reads; the env gets an :class:`~tdrl.envs.InitTracker` (unless it already
    writes an ``"is_init"`` entry) and each primer whose entries it does not produce yet.

    Examples:
        >>> from tdrl.envs import PendulumEnv
        >>> register_policy_transforms(PendulumEnv(), None).__class__.__name__
        'PendulumEnv'
    """
    if not isinstance(policy, torch.nn.Module):
        return env
    primers = [
        module.make_tensordict_primer()
        for module in policy.modules()
        if callable(getattr(module, "make_tensordict_primer", None))
    ]
    if not primers:
        return env
    from tdrl.envs.transforms import InitTracker

    observed = set(env.full_observation_spec.keys(include_nested=True, leaves_only=True))
    if not any((key if isinstance(key, str) else key[-1]) == "is_init" for key in observed):
        env = env.append_transform(InitTracker())
    for primer in primers:
        if not all(key in observed for key in primer.out_keys):
            env = env.append_transform(primer)
    return env
