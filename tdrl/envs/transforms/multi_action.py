"""MultiAction: execute a chunk of actions (one per base step) within one outer step."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs._keys import as_tuple
from tdrl.envs._td_fast import any_true
from tdrl.envs.transforms._substeps import done_mask, next_root, step_masked
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["MultiAction"]

PARENT_ERROR = (
    "MultiAction needs to be part of a TransformedEnv: it runs the extra steps of a chunk "
    "in the env before it"
)


def _dynamic(spec: Any, dim: int) -> Any:
    """``spec`` with a new dynamic (``-1``) dim inserted at ``dim``."""
    spec = spec.unsqueeze(dim)
    shape = list(spec.shape)
    shape[dim] = -1
    spec.shape = torch.Size(shape)
    return spec


class MultiAction(Transform):
    """Runs a chunk of actions in one step: the policy gives ``H`` actions, the env takes ``H`` steps.

    The action entry gets a chunk dim right after the batch dims (dynamic in the
    spec: any ``H`` works, even one that changes between steps). On each outer step the
    env before this transform is stepped once per action of the chunk; an element
    whose episode ends stops there while the others go on (its remaining steps are
    skipped), and the whole chunk stops once every element is done. The outer step
    returns the data of the last base step. Transforms before ``MultiAction`` in a
    :class:`Compose` see every base step; transforms after it see the outer steps.

    Rewards: with ``stack_rewards`` (default), each reward entry gets the chunk dim
    too, one slot per action of the chunk, zero for the skipped steps; otherwise the
    rewards of the executed base steps are summed.

    Args:
        action_key: the chunked action entry.
        stack_rewards: stack the rewards of the base steps (True) or sum them (False).

    Examples:
        >>> import torch
        >>> from tdrl.envs import MultiAction, PendulumEnv, StepCounter, TransformedEnv
        >>> from tdrl.envs.transforms import Compose
        >>> env = TransformedEnv(
        ...     PendulumEnv(),
        ...     Compose(StepCounter(step_count_key="base_steps"), MultiAction()),
        ... )
        >>> rollout = env.rollout(3, lambda td: td.set("action", torch.zeros(4, 1)))
        >>> rollout["next", "base_steps"].squeeze(-1), rollout["next", "reward"].shape
        (tensor([ 4,  8, 12]), torch.Size([3, 4, 1]))
    """

    def __init__(self, action_key: NestedKey = "action", stack_rewards: bool = True) -> None:
        super().__init__(in_keys_inv=[action_key])
        self.action_key = self.in_keys_inv[0]
        self.stack_rewards = bool(stack_rewards)
        # reward key -> dims of its parent composite after the env batch dims
        self._reward_dims: dict = {}
        self._batch_dims = 0

    # ------------------------------------------------------------ inverse path
    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        chunk = tensordict.get(self.action_key, None)
        if chunk is None:
            if self.missing_tolerance:
                return tensordict
            raise KeyError(
                f"MultiAction: expected the action chunk {self.action_key!r} (shape: batch, "
                f"chunk, action), got keys {list(tensordict.keys(True, True))}"
            )
        dim = tensordict.batch_dims
        if chunk.ndim <= dim:
            raise ValueError(
                f"MultiAction: the action {self.action_key!r} of shape {tuple(chunk.shape)} has "
                f"no chunk dim after the batch dims {tuple(tensordict.batch_size)}"
            )
        # transforms after this one may have built the chunk on the way in: keep what we saw
        self.__dict__["_chunk"] = chunk
        return tensordict.set(self.action_key, chunk.select(dim, 0))

    # ------------------------------------------------------------ step path
    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent = self.parent
        if parent is None:
            raise RuntimeError(PARENT_ERROR)
        chunk = self.__dict__.pop("_chunk", None)
        if chunk is None:
            chunk = tensordict.get(self.action_key)
        dim = tensordict.batch_dims
        steps = chunk.shape[dim]
        reward_keys = list(self._reward_dims) or list(parent.reward_keys)
        rewards = {key: [next_tensordict.get(key)] for key in reward_keys}
        alive = ~done_mask(parent, next_tensordict)
        root, current = tensordict, next_tensordict
        for index in range(1, steps):
            if not any_true(alive):
                break
            root = next_root(parent, root, current)
            root.set(self.action_key, chunk.select(dim, index))
            current = step_masked(parent, root, alive)
            for key in reward_keys:
                rewards[key].append(current.get(key))
            alive = alive & ~done_mask(parent, current)
        for key, values in rewards.items():
            if self.stack_rewards:
                values = values + [torch.zeros_like(values[0])] * (steps - len(values))
                stacked = torch.stack(values, dim + self._reward_dims.get(key, 0))
            else:
                stacked = torch.stack(values, 0).sum(0)
            current.set(key, stacked)
        return current

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    # ------------------------------------------------------------ specs
    def transform_input_spec(self, input_spec: Any) -> Any:
        """Give the action a dynamic chunk dim after the batch dims."""
        input_spec = super().transform_input_spec(input_spec)
        self._batch_dims = len(input_spec.shape)
        action_spec = input_spec["full_action_spec"]
        if self.action_key not in action_spec.keys(True, True):
            raise KeyError(
                f"MultiAction: action key {self.action_key!r} is not in the action spec; "
                f"available keys: {list(action_spec.keys(True, True))}"
            )
        action_spec[self.action_key] = _dynamic(
            action_spec[self.action_key].clone(), self._batch_dims
        )
        return input_spec

    def transform_output_spec(self, output_spec: Any) -> Any:
        """With ``stack_rewards``, give each reward a dynamic chunk dim."""
        output_spec = super().transform_output_spec(output_spec)
        reward_spec = output_spec["full_reward_spec"]
        batch_dims = len(output_spec.shape)
        dims = {}
        for key in reward_spec.keys(True, True):
            prefix = as_tuple(key)[:-1]
            parent_dims = len(reward_spec[prefix].shape) if prefix else batch_dims
            dims[key] = parent_dims - batch_dims
            if self.stack_rewards:
                reward_spec[key] = _dynamic(reward_spec[key].clone(), parent_dims)
        self._reward_dims = dims
        return output_spec

    def __repr__(self) -> str:
        return f"MultiAction(action_key={self.action_key!r}, stack_rewards={self.stack_rewards})"
