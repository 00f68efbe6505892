""":class:`KLRewardTransform`: a KL penalty towards a frozen reference policy, added to the reward."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key
from torch import nn

from tdrl.data import Unbounded
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["KLRewardTransform"]


def _as_tuple(key: NestedKey) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class KLRewardTransform(Transform):
    """Adds ``coef * KL[pi_current || pi_0]`` to the reward, with ``pi_0`` a frozen copy of ``actor``.

    At construction the transform keeps a frozen copy of ``actor`` (the reference
    policy ``pi_0``); ``actor`` itself keeps training. For each step, the KL term is
    the single-sample estimate ``log pi_current(a|s) - log pi_0(a|s)`` at the action
    taken. ``log pi_current(a|s)`` is read from the data (the actor's log-prob entry,
    written when it samples with ``return_log_prob=True``); when the data has none
    (e.g. random actions), it is computed with ``actor``. Log-probabilities are summed
    over the action's dims to the reward's shape.

    Args:
        actor: a probabilistic policy with a ``get_dist(tensordict)`` method, such as
            a ``tensordict.nn.ProbabilisticTensorDictSequential``.
        coef: the weight of the KL term.
        in_keys: the reward entry (default ``"reward"``).
        out_keys: where to write the penalized reward (default: in place). A new
            entry is declared in the observation spec and is zero at reset.
        requires_grad: keep the reference parameters trainable and the KL term
            differentiable; by default they are frozen and the KL is computed
            without gradients.

    Keyword Args:
        action_key: the action entry.
        log_prob_key: the entry holding ``log pi_current(a|s)`` (default: the actor's
            ``log_prob_key``, else ``"sample_log_prob"``).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from torch.distributions import Normal
        >>> from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from tdrl.envs import GymEnv, KLRewardTransform, TransformedEnv
        >>> net = TensorDictModule(nn.Sequential(nn.Linear(3, 2), NormalParamExtractor()),
        ...     in_keys=["observation"], out_keys=["loc", "scale"])
        >>> actor = ProbabilisticTensorDictSequential(net, ProbabilisticTensorDictModule(
        ...     in_keys=["loc", "scale"], out_keys=["action"], distribution_class=Normal,
        ...     return_log_prob=True))
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), KLRewardTransform(actor, out_keys="reward_kl"))
        >>> with torch.no_grad():
        ...     _ = [p.add_(1.0) for p in actor.parameters()]  # the policy moves away from pi_0
        ...     rollout = env.rollout(3, actor)
        >>> bool((rollout["next", "reward"] != rollout["next", "reward_kl"]).all())
        True
    """

    def __init__(
        self,
        actor: nn.Module,
        coef: float = 1.0,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        requires_grad: bool = False,
        *,
        action_key: NestedKey = "action",
        log_prob_key: NestedKey | None = None,
    ) -> None:
        if not callable(getattr(actor, "get_dist", None)):
            raise TypeError(
                "KLRewardTransform actor: expected a probabilistic module with a get_dist "
                f"method, got {type(actor).__name__}"
            )
        super().__init__(in_keys=["reward"] if in_keys is None else in_keys, out_keys=out_keys)
        if len(self.in_keys) != 1 or len(self.out_keys) != 1:
            raise ValueError(
                "KLRewardTransform: expected one reward in_key and one out_key, got "
                f"in_keys={self.in_keys} and out_keys={self.out_keys}"
            )
        if log_prob_key is None:
            log_prob_key = getattr(actor, "log_prob_key", None) or "sample_log_prob"
        self.__dict__["_actor"] = actor
        reference = copy.deepcopy(actor)
        for parameter in reference.parameters():
            parameter.requires_grad_(requires_grad)
        self.reference_actor = reference
        self.coef = coef
        self.requires_grad = requires_grad
        self.action_key = unravel_key(action_key)
        self.log_prob_key = unravel_key(log_prob_key)
        self._reset_spec: Any = None

    @property
    def actor(self) -> nn.Module:
        """The policy being trained (``pi_current``)."""
        return self.__dict__["_actor"]

    # ------------------------------------------------------------- data paths
    def _kl(self, tensordict: TensorDictBase, reward: torch.Tensor) -> torch.Tensor:
        action = tensordict.get(self.action_key, None)
        if action is None:
            raise KeyError(
                f"KLRewardTransform: expected the action {self.action_key!r} in the data, got "
                f"keys {list(tensordict.keys(True, True))}"
            )
        context = nullcontext() if self.requires_grad else torch.no_grad()
        with context:
            reference = self.reference_actor.get_dist(tensordict.clone(False)).log_prob(action)
            current = tensordict.get(self.log_prob_key, None)
            if current is None:
                current = self.actor.get_dist(tensordict.clone(False)).log_prob(action)
        batch = tensordict.batch_size
        if reward.numel() != batch.numel():
            raise ValueError(
                f"KLRewardTransform: expected one reward per element of the batch "
                f"{tuple(batch)} at {self.in_keys[0]!r}, got shape {tuple(reward.shape)}"
            )
        kl = (current - reference).reshape(*batch, -1).sum(-1)
        return kl.reshape(reward.shape).to(reward.dtype)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        reward = next_tensordict.get(self.in_keys[0])
        next_tensordict.set(self.out_keys[0], reward + self.coef * self._kl(tensordict, reward))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        spec = self._reset_spec
        if spec is not None and tensordict_reset.get(self.out_keys[0], None) is None:
            tensordict_reset.set(self.out_keys[0], spec.zero())
        return tensordict_reset

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Penalize the ``("next", reward)`` entries of transition data (buffer samples)."""
        in_key = ("next", *_as_tuple(self.in_keys[0]))
        reward = tensordict.get(in_key, None)
        if reward is None:
            raise KeyError(
                f"KLRewardTransform: expected the reward {in_key!r} in the data, got keys "
                f"{list(tensordict.keys(True, True))}"
            )
        out_key = ("next", *_as_tuple(self.out_keys[0]))
        tensordict.set(out_key, reward + self.coef * self._kl(tensordict, reward))
        return tensordict

    # ------------------------------------------------------------------ specs
    def transform_output_spec(self, output_spec: Any) -> Any:
        """Declare the penalized reward (unbounded) under the out key."""
        output_spec = super().transform_output_spec(output_spec)
        in_key, out_key = self.in_keys[0], self.out_keys[0]
        reward_spec = output_spec["full_reward_spec"]
        if in_key not in reward_spec.keys(True, True):
            raise KeyError(
                f"KLRewardTransform: reward key {in_key!r} is not in the reward spec; available "
                f"keys: {list(reward_spec.keys(True, True))}"
            )
        leaf = reward_spec[in_key]
        spec = Unbounded(shape=leaf.shape, device=leaf.device, dtype=leaf.dtype)
        if out_key == in_key:
            reward_spec[out_key] = spec
            self._reset_spec = None
        else:
            output_spec["full_observation_spec"][out_key] = spec
            self._reset_spec = spec
        return output_spec

    def __repr__(self) -> str:
        return (
            f"KLRewardTransform(coef={self.coef}, in_keys={self.in_keys}, "
            f"out_keys={self.out_keys}, log_prob_key={self.log_prob_key!r})"
        )
