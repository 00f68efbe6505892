"""ConditionalPolicySwitch: another policy acts whenever a condition holds (e.g. the opponent's turn)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs._td_fast import any_true
from tdrl.envs.transforms._substeps import (
    batch_mask,
    done_mask,
    keep_where,
    next_root,
    step_masked,
)
from tdrl.envs.transforms.transform import Transform

__all__ = ["ConditionalPolicySwitch"]

STANDALONE_ERROR = (
    "ConditionalPolicySwitch cannot be called independently, only its step and reset methods "
    "are functional. Add it to a TransformedEnv"
)


class ConditionalPolicySwitch(Transform):
    """Hands the env to another policy for as long as a condition holds.

    After each step and each reset, ``condition`` is evaluated on the env's output
    (a bool, or a boolean tensor with one value per element of the batch). Where it
    holds, ``policy`` picks the action and the env before this transform steps, again
    and again until the condition fails or the episode ends; the outside policy
    only ever sees the states where the condition is False. Typical use: a
    two-player game where a fixed opponent plays every other move. In a batched env,
    only the elements where the condition holds are stepped; the others keep their
    data (and their reward).

    Args:
        policy: maps the env data to the same data with the action written in it.
        condition: maps the env output to where the switch policy must act.

    Examples:
        >>> import torch
        >>> from tdrl.envs import ConditionalPolicySwitch, PendulumEnv, StepCounter, TransformedEnv
        >>> from tdrl.envs.transforms import Compose
        >>> env = TransformedEnv(
        ...     PendulumEnv(),
        ...     Compose(
        ...         StepCounter(),
        ...         ConditionalPolicySwitch(
        ...             policy=lambda td: td.set("action", torch.zeros(1)),
        ...             condition=lambda td: bool(td["step_count"] % 2 == 0),
        ...         ),
        ...     ),
        ... )
        >>> env.rollout(3)["step_count"].squeeze(-1)
        tensor([1, 3, 5])
    """

    def __init__(
        self,
        policy: Callable[[TensorDictBase], TensorDictBase],
        condition: Callable[[TensorDictBase], bool | torch.Tensor],
    ) -> None:
        for name, value in (("policy", policy), ("condition", condition)):
            if not callable(value):
                raise TypeError(
                    f"ConditionalPolicySwitch {name}: expected a callable, got "
                    f"{type(value).__name__}"
                )
        super().__init__()
        self.policy = policy
        self.condition = condition

    def _switch(self, parent: Any, data: TensorDictBase) -> torch.Tensor:
        mask = batch_mask(
            self.condition(data), data.batch_size, data.device, "ConditionalPolicySwitch"
        )
        return mask & ~done_mask(parent, data)

    def _act(self, root: TensorDictBase) -> TensorDictBase:
        out = self.policy(root)
        return root if out is None else out

    def _require_env(self) -> Any:
        parent = self.parent
        if parent is None:
            raise RuntimeError(STANDALONE_ERROR)
        return parent

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent = self._require_env()
        switch = self._switch(parent, next_tensordict)
        root, current = tensordict, next_tensordict
        while any_true(switch):
            root = self._act(next_root(parent, root, current))
            current = keep_where(switch, step_masked(parent, root, switch), current)
            switch = self._switch(parent, current)
        return current

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        parent = self._require_env()
        switch = self._switch(parent, tensordict_reset)
        if not any_true(switch):
            return tensordict_reset
        keys = list(tensordict_reset.keys(True, True))
        root = tensordict_reset
        while any_true(switch):
            step_input = self._act(root.clone(False))
            next_data = step_masked(parent, step_input, switch)
            root = next_root(parent, step_input, next_data)
            switch = self._switch(parent, root)
        return root.select(*keys, strict=False)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: the switch policy steps the env."""
        raise RuntimeError(STANDALONE_ERROR)

    def __repr__(self) -> str:
        return f"ConditionalPolicySwitch(policy={self.policy!r}, condition={self.condition!r})"
