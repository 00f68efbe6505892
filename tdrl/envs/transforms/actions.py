"""Transforms acting on the action side of an env."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase

from tdrl.data import Categorical, MultiCategorical, MultiOneHot, OneHot
from tdrl.envs.transforms.transform import FORWARD_NOT_IMPLEMENTED, NestedKey, Transform

__all__ = ["ActionMask"]

ACCEPTED_SPECS = (OneHot, Categorical, MultiOneHot, MultiCategorical)


class ActionMask(Transform):
    """Keeps the mask of the action spec in sync with the env's ``action_mask`` entry.

    After every reset and step, the mask read from the data is written into the
    transformed env's action spec, so ``env.action_spec.rand()``, ``rand_action`` and
    random policies built on the spec only pick allowed actions. In a batched env,
    add it to the batched env, not to its sub-envs. The action spec must be a
    OneHot, Categorical, MultiOneHot or MultiCategorical one; another kind raises a
    ``ValueError`` when the first mask arrives.

    Args:
        action_key: the action entry (a OneHot, Categorical, MultiOneHot or
            MultiCategorical spec).
        mask_key: the boolean mask entry written by the env.

    Examples:
        >>> import torch
        >>> from tdrl.envs import ActionMask, TicTacToeEnv, TransformedEnv
        >>> env = TransformedEnv(TicTacToeEnv(), ActionMask())
        >>> td = env.reset()
        >>> td = env.rand_step(td)
        >>> mask = env.action_spec.mask.reshape(-1)
        >>> bool(mask[td["action"]]), int(mask.sum())
        (False, 8)
    """

    def __init__(
        self, action_key: NestedKey = "action", mask_key: NestedKey = "action_mask"
    ) -> None:
        for name, key in (("action_key", action_key), ("mask_key", mask_key)):
            if not isinstance(key, (str, tuple)):
                raise TypeError(
                    f"ActionMask {name}: expected a str or a tuple of str, got {type(key).__name__}"
                )
        super().__init__(in_keys=[action_key, mask_key], out_keys=[])
        self.action_key = self.in_keys[0]
        self.mask_key = self.in_keys[1]

    @property
    def action_spec(self) -> Any:
        """The action spec of the env holding this transform (the one whose mask is updated).

        Raises:
            RuntimeError: without an env.
            ValueError: when the spec is not of a maskable kind.
        """
        container = self.container
        if container is None:
            raise RuntimeError(
                "ActionMask: parent cannot be None: the transform updates the action spec of "
                "its env, add it to a TransformedEnv"
            )
        spec = container.full_action_spec[self.action_key]
        if not isinstance(spec, ACCEPTED_SPECS):
            raise ValueError(
                f"ActionMask: The action spec must be one of "
                f"{[cls.__name__ for cls in ACCEPTED_SPECS]} to be masked; got "
                f"{type(spec).__name__} at {self.action_key!r}"
            )
        return spec

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        spec = self.action_spec
        mask = next_tensordict.get(self.mask_key, None)
        if mask is None:
            raise KeyError(
                f"ActionMask: expected the mask entry {self.mask_key!r} in the env output, got keys "
                f"{list(next_tensordict.keys(True, True))}"
            )
        if mask.device != spec.device:
            mask = mask.to(spec.device)
        joint = self.__dict__.get("_joint_nvec")
        if joint is not None:
            mask = mask.reshape(*mask.shape[: mask.ndim - len(joint)], -1)
        spec.update_mask(mask)
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        joint = self.__dict__.get("_joint_nvec")
        if joint is None:
            return tensordict
        action = tensordict.get(self.action_key, None)
        if action is None:
            return tensordict
        one_hot = self.__dict__["_joint_one_hot"]
        index = action.long().argmax(-1) if one_hot else action.long()
        parts = []
        for size in reversed(joint):
            parts.append(index % size)
            index = index // size
        parts.reverse()
        if one_hot:
            inner = torch.cat([F.one_hot(part, size) for part, size in zip(parts, joint)], -1).to(
                action.dtype
            )
        else:
            inner = torch.stack(parts, -1).to(action.dtype)
        return tensordict.set(self.action_key, inner)

    def _needs_inverse(self) -> bool:
        return self.__dict__.get("_joint_nvec") is not None

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: the transform updates an env's spec."""
        raise RuntimeError(FORWARD_NOT_IMPLEMENTED.format(type(self)))

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Record the shape of the mask entry (the specs are unchanged)."""
        output_spec = super().transform_output_spec(output_spec)
        mask = output_spec["full_observation_spec"].get(self.mask_key, None)
        batch_dims = len(output_spec.shape)
        self.__dict__["_mask_shape"] = None if mask is None else tuple(mask.shape[batch_dims:])
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Check the action entry; give a multi-discrete action a joint spec when masks are joint.

        A MultiCategorical / MultiOneHot action whose mask has one dim per sub-action
        (e.g. a ``(5, 5)`` mask for ``nvec=[5, 5]``) masks combinations, not sub-actions:
        the action becomes a single Categorical / OneHot over every combination, mapped
        back to the sub-actions on the way to the env.
        """
        input_spec = super().transform_input_spec(input_spec)
        action_spec = input_spec["full_action_spec"]
        spec = action_spec.get(self.action_key, None)
        if spec is None:
            raise KeyError(
                f"ActionMask: action key {self.action_key!r} is not in the action spec; available "
                f"keys: {list(action_spec.keys(True, True))}"
            )
        self.__dict__["_joint_nvec"] = None
        if isinstance(spec, (MultiCategorical, MultiOneHot)):
            nvec = [int(n) for n in torch.as_tensor(spec.nvec).reshape(-1).tolist()]
            if len(nvec) > 1 and self.__dict__.get("_mask_shape") == tuple(nvec):
                total = math.prod(nvec)
                lead = spec.shape[:-1]
                one_hot = isinstance(spec, MultiOneHot)
                if one_hot:
                    joint = OneHot(
                        total, shape=(*lead, total), device=spec.device, dtype=spec.dtype
                    )
                else:
                    joint = Categorical(total, shape=lead, device=spec.device, dtype=spec.dtype)
                action_spec[self.action_key] = joint
                self.__dict__["_joint_nvec"] = nvec
                self.__dict__["_joint_one_hot"] = one_hot
        return input_spec

    def __repr__(self) -> str:
        return f"ActionMask(action_key={self.action_key!r}, mask_key={self.mask_key!r})"
