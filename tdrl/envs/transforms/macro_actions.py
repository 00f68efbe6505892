"""Macro actions: a target (or a wait) expanded into a sequence of low-level actions.

A macro action is a TensorDict with a ``mode`` (a :class:`MacroPrimitive`), a
``target`` low-level action and optional ``steps`` / ``settle_steps`` counts;
:class:`TargetMacroAction` builds them. :class:`MacroPrimitiveTransform` turns them
into action sequences that :class:`~tdrl.envs.MultiAction` executes one base step
at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import Bounded, Categorical, Composite, Unbounded
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["HumanoidMacroAction", "MacroPrimitive", "MacroPrimitiveTransform", "TargetMacroAction"]


class MacroPrimitive(IntEnum):
    """What a macro action does: hold the current action, or move to a target."""

    WAIT = 0
    MOVE = 1


def _count(value: int, batch: torch.Size, device: Any) -> torch.Tensor:
    return torch.full((*batch, 1), int(value), dtype=torch.int64, device=device)


class TargetMacroAction:
    """Builds macro actions (TensorDicts with ``mode``, ``target``, ``steps``, ``settle_steps``).

    Examples:
        >>> import torch
        >>> from tdrl.envs import TargetMacroAction
        >>> action = TargetMacroAction.move(torch.ones(2, 3), steps=4)
        >>> action["mode"].squeeze(-1).tolist(), action["steps"].squeeze(-1).tolist()
        ([1, 1], [4, 4])
    """

    @staticmethod
    def move(target: torch.Tensor, steps: int = 1, settle_steps: int = 0) -> TensorDict:
        """Reach ``target`` (shape ``(*batch, action_dim)``) in ``steps`` steps, then hold it."""
        batch = target.shape[:-1]
        return TensorDict(
            {
                "mode": _count(MacroPrimitive.MOVE, batch, target.device),
                "target": target,
                "steps": _count(steps, batch, target.device),
                "settle_steps": _count(settle_steps, batch, target.device),
            },
            batch_size=batch,
        )

    @staticmethod
    def wait(
        action_dim: int,
        steps: int = 1,
        batch_size: Sequence[int] | torch.Size = (),
        settle_steps: int = 0,
        device: Any = None,
    ) -> TensorDict:
        """Hold the current action for ``steps + settle_steps`` steps."""
        batch = torch.Size(batch_size)
        return TensorDict(
            {
                "mode": _count(MacroPrimitive.WAIT, batch, device),
                "target": torch.zeros(*batch, action_dim, device=device),
                "steps": _count(steps, batch, device),
                "settle_steps": _count(settle_steps, batch, device),
            },
            batch_size=batch,
        )


class HumanoidMacroAction(TargetMacroAction):
    """Macro actions for joint-position-controlled bodies (a humanoid's joint targets).

    Examples:
        >>> import torch
        >>> from tdrl.envs import HumanoidMacroAction
        >>> HumanoidMacroAction.reach_control(torch.zeros(1, 17), steps=5)["steps"].item()
        5
    """

    @classmethod
    def reach_control(
        cls, target: torch.Tensor, steps: int = 1, settle_steps: int = 0
    ) -> TensorDict:
        """Reach the control targets ``target`` in ``steps`` steps, then hold them."""
        return cls.move(target, steps=steps, settle_steps=settle_steps)


def _uniform(value: torch.Tensor | None, default: int, name: str) -> int:
    if value is None:
        return default
    values = value.reshape(-1).unique()
    if values.numel() != 1:
        raise ValueError(
            f"MacroPrimitiveTransform: expected the same {name} for every element of the batch "
            f"(the expanded sequences must have one length), got {values.tolist()}"
        )
    count = int(values.item())
    if count < 0:
        raise ValueError(f"MacroPrimitiveTransform: expected {name} >= 0, got {count}")
    return count


class MacroPrimitiveTransform(Transform):
    """Expands macro actions into sequences of low-level actions (to run with MultiAction).

    The policy-facing action is a macro action (see :class:`TargetMacroAction`): a
    TensorDict with ``mode`` and ``target`` (and optionally ``steps`` /
    ``settle_steps``), or a plain ``target`` tensor (a move with the transform's
    counts). On the way to the env, a move becomes ``steps`` actions going linearly
    from the current action to the target, followed by ``settle_steps`` copies of the
    target; a wait repeats the current action. The current action is read at
    ``current_action_key`` when given and present, else it is zero. The result, of
    shape ``(*batch, steps + settle_steps, action_dim)``, replaces the action; put a
    :class:`~tdrl.envs.MultiAction` before this transform in the Compose so that the
    env executes it.

    Args:
        action_dim: the size of a low-level action.
        macro_steps: the default number of steps of a move.
        settle_steps: the default number of steps the target is held after a move.
        action_key: the action entry.
        current_action_key: an entry holding the current low-level action, if any.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import MacroPrimitiveTransform, TargetMacroAction
        >>> t = MacroPrimitiveTransform(action_dim=2, macro_steps=4)
        >>> td = TensorDict({"action": TargetMacroAction.move(torch.ones(1, 2), steps=4)}, [1])
        >>> t.inv(td)["action"][0, :, 0]
        tensor([0.2500, 0.5000, 0.7500, 1.0000])
    """

    def __init__(
        self,
        action_dim: int,
        macro_steps: int = 1,
        settle_steps: int = 0,
        action_key: NestedKey = "action",
        current_action_key: NestedKey | None = None,
    ) -> None:
        for name, value, low in (
            ("action_dim", action_dim, 1),
            ("macro_steps", macro_steps, 1),
            ("settle_steps", settle_steps, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(
                    f"MacroPrimitiveTransform {name}: expected an int >= {low}, got {value!r}"
                )
        super().__init__(in_keys_inv=[action_key])
        self.action_dim = action_dim
        self.macro_steps = macro_steps
        self.settle_steps = settle_steps
        self.action_key = self.in_keys_inv[0]
        self.current_action_key = current_action_key

    def _expand(self, macro: Any, current: torch.Tensor | None) -> torch.Tensor:
        if isinstance(macro, TensorDictBase):
            target = macro.get("target", None)
            if target is None:
                raise KeyError(
                    f"MacroPrimitiveTransform: the macro action at {self.action_key!r} has no "
                    f"'target'; got keys {list(macro.keys(True, True))}"
                )
            mode = macro.get("mode", None)
            steps = _uniform(macro.get("steps", None), self.macro_steps, "steps")
            settle = _uniform(macro.get("settle_steps", None), self.settle_steps, "settle_steps")
        else:
            target, mode = macro, None
            steps, settle = self.macro_steps, self.settle_steps
        target = target.to(torch.get_default_dtype()) if not target.is_floating_point() else target
        start = torch.zeros_like(target) if current is None else current.to(target)
        fraction = torch.arange(1, steps + 1, device=target.device, dtype=target.dtype) / max(
            steps, 1
        )
        fraction = fraction.unsqueeze(-1)
        moving = start.unsqueeze(-2) + (target - start).unsqueeze(-2) * fraction
        moving = torch.cat(
            [moving, target.unsqueeze(-2).expand(*target.shape[:-1], settle, -1)], -2
        )
        if mode is None:
            return moving
        holding = start.unsqueeze(-2).expand_as(moving)
        is_move = (mode.reshape(*target.shape[:-1], 1, 1) == int(MacroPrimitive.MOVE)).to(
            target.device
        )
        return torch.where(is_move, moving, holding)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        macro = tensordict.get(self.action_key, None)
        if macro is None:
            raise RuntimeError(
                f"MacroPrimitiveTransform: the data holds no action at {self.action_key!r} to "
                f"expand; got keys {list(tensordict.keys(True, True))}"
            )
        current = (
            None
            if self.current_action_key is None
            else tensordict.get(self.current_action_key, None)
        )
        tensordict.del_(self.action_key)
        return tensordict.set(self.action_key, self._expand(macro, current))

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    def _target_spec(self, inner: Any, batch: torch.Size, device: Any) -> Any:
        shape = (*batch, self.action_dim)
        if isinstance(inner, Bounded):
            low, high = inner.low, inner.high
            # a chunked action (see MultiAction) has a chunk dim after the batch dims
            while low.ndim > len(shape):
                low, high = low.select(len(batch), 0), high.select(len(batch), 0)
            try:
                return Bounded(
                    low.expand(shape),
                    high.expand(shape),
                    shape=shape,
                    device=device,
                    dtype=inner.dtype,
                )
            except (RuntimeError, ValueError):
                pass
        dtype = inner.dtype if inner is not None else torch.get_default_dtype()
        return Unbounded(shape=shape, device=device, dtype=dtype)

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Expose the macro action: a ``mode`` (a MacroPrimitive) and a ``target``."""
        input_spec = input_spec.clone()
        if input_spec.is_locked:
            input_spec.unlock_()
        batch, device = input_spec.shape, input_spec.device
        if "full_action_spec" not in input_spec.keys():
            input_spec["full_action_spec"] = Composite(shape=batch, device=device)
        action_spec = input_spec["full_action_spec"]
        inner = action_spec.get(self.action_key, None)
        action_spec[self.action_key] = Composite(
            mode=Categorical(len(MacroPrimitive), shape=(*batch, 1), device=device),
            target=self._target_spec(inner, batch, device),
            shape=batch,
            device=device,
        )
        return input_spec

    def __repr__(self) -> str:
        return (
            f"MacroPrimitiveTransform(action_dim={self.action_dim}, macro_steps={self.macro_steps}, "
            f"settle_steps={self.settle_steps}, action_key={self.action_key!r})"
        )
