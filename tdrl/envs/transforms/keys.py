"""Transforms that rename, select, combine or drop entries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from tdrl.data import Composite, Unbounded
from tdrl.envs.transforms.transform import (
    INPUT_ENTRIES,
    OUTPUT_ENTRIES,
    NestedKey,
    ObservationTransform,
    Transform,
    _normalize_keys,
    locate_spec,
    map_input_specs,
    map_output_specs,
)

__all__ = [
    "CatTensors",
    "ExcludeTransform",
    "RemoveEmptySpecs",
    "RenameTransform",
    "SelectTransform",
]


def check_pairs(owner: str, name: str, first: list, second: list) -> None:
    """Raise ``ValueError`` unless the two key lists have the same length."""
    if len(first) != len(second):
        raise ValueError(
            f"{owner}: {name} must pair one to one: expected {len(first)} keys, got {len(second)}"
        )


class RenameTransform(Transform):
    """Renames entries of the env outputs (``in_keys`` -> ``out_keys``) and inputs.

    On the input side, the outside world writes ``out_keys_inv`` and the base env
    receives them under ``in_keys_inv``. Specs are renamed accordingly.

    Args:
        in_keys: output entries to rename.
        out_keys: their new names.
        in_keys_inv: the input names the base env expects.
        out_keys_inv: the input names used outside (the policy writes these).
        create_copy: keep the original entries next to the renamed ones.

    Examples:
        >>> from tdrl.envs import GymEnv, RenameTransform, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), RenameTransform(
        ...     in_keys=["observation"], out_keys=["obs"],
        ...     in_keys_inv=["action"], out_keys_inv=["torque"]))
        >>> check_env_specs(env)
        >>> td = env.rand_step(env.reset())
        >>> sorted(td["next"].keys())
        ['done', 'obs', 'reward', 'terminated', 'truncated']
        >>> env.action_keys
        ['torque']
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey,
        out_keys: Sequence[NestedKey] | NestedKey,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        create_copy: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        owner = type(self).__name__
        check_pairs(owner, "in_keys and out_keys", self.in_keys, self.out_keys)
        check_pairs(owner, "in_keys_inv and out_keys_inv", self.in_keys_inv, self.out_keys_inv)
        self.create_copy = create_copy

    def _rename(self, tensordict: TensorDictBase, sources: list, targets: list) -> TensorDictBase:
        for source, target in zip(sources, targets):
            value = tensordict.get(source, None)
            if value is None:
                if not self.missing_tolerance:
                    raise KeyError(
                        f"RenameTransform: expected key {source!r} in the tensordict, got keys "
                        f"{list(tensordict.keys(True, True))}"
                    )
                continue
            if self.create_copy:
                tensordict.set(target, value)
            else:
                tensordict.rename_key_(source, target)
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._rename(next_tensordict, self.in_keys, self.out_keys)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        tolerance = self.missing_tolerance
        self.set_missing_tolerance(True)
        try:
            return self._call(tensordict_reset)
        finally:
            self.set_missing_tolerance(tolerance)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._rename(tensordict, self.out_keys_inv, self.in_keys_inv)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Rename the output entries (observation, reward or done)."""
        output_spec = super().transform_output_spec(output_spec)
        output_spec = map_output_specs(self, output_spec, self.in_keys, self.out_keys, lambda s: s)
        if not self.create_copy:
            for in_key, out_key in zip(self.in_keys, self.out_keys):
                sub = locate_spec(output_spec, OUTPUT_ENTRIES, in_key)
                if in_key != out_key and sub is not None:  # an absent key was left out
                    del sub[in_key]
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Rename the input entries (action or state) to their outside names."""
        input_spec = super().transform_input_spec(input_spec)
        if self.create_copy:
            for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
                sub = locate_spec(input_spec, INPUT_ENTRIES, in_key)
                if sub is not None:
                    sub[out_key] = sub[in_key].clone()
            return input_spec
        return map_input_specs(self, input_spec, self.in_keys_inv, self.out_keys_inv, lambda s: s)


class SelectTransform(Transform):
    """Keeps only the selected entries of the env outputs (plus rewards and dones).

    Entries of the env's state spec (which the next step reads) are kept too.

    Args:
        *selected_keys: the entries to keep.
        keep_rewards: also keep the reward entries.
        keep_dones: also keep the done / terminated / truncated entries.

    Examples:
        >>> from tdrl.envs import GymEnv, SelectTransform, TransformedEnv, check_env_specs
        >>> from tdrl.envs.transforms import Compose, StepCounter
        >>> env = TransformedEnv(
        ...     GymEnv("Pendulum-v1"), Compose(StepCounter(), SelectTransform("observation")))
        >>> check_env_specs(env)
        >>> sorted(env.observation_spec.keys())
        ['observation', 'step_count']
    """

    def __init__(
        self, *selected_keys: NestedKey, keep_rewards: bool = True, keep_dones: bool = True
    ) -> None:
        if len(selected_keys) == 1 and isinstance(selected_keys[0], list):
            selected_keys = tuple(selected_keys[0])
        super().__init__()
        self.selected_keys = _normalize_keys(list(selected_keys), "SelectTransform selected_keys")
        self.keep_rewards = keep_rewards
        self.keep_dones = keep_dones
        self._kept = list(self.selected_keys)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict.select(*self._kept, strict=False)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Keep only the selected entries."""
        return tensordict.select(*self.selected_keys, strict=False)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return tensordict_reset.select(*self._kept, strict=False)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Drop the observation entries that are not selected (and rewards / dones if asked)."""
        output_spec = super().transform_output_spec(output_spec)
        parent = self.parent
        state_keys = [] if parent is None else list(parent.state_keys)
        kept = [*self.selected_keys, *state_keys]
        for name, keep in (
            ("full_observation_spec", False),
            ("full_reward_spec", self.keep_rewards),
            ("full_done_spec", self.keep_dones),
        ):
            sub = output_spec[name]
            if keep:
                kept.extend(sub.keys(True, True))
                continue
            output_spec[name] = sub.select(*self.selected_keys, *state_keys, strict=False)
        self._kept = kept
        return output_spec


class ExcludeTransform(Transform):
    """Removes entries from the env outputs (or, with ``inverse=True``, from its inputs).

    Args:
        *excluded_keys: the entries to remove.
        inverse: remove them from the data going into the env instead.

    Examples:
        >>> from tdrl.envs import ExcludeTransform, GymEnv, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), ExcludeTransform("truncated"))
        >>> check_env_specs(env)
        >>> sorted(env.reset().keys())
        ['done', 'observation', 'terminated']
    """

    def __init__(self, *excluded_keys: NestedKey, inverse: bool = False) -> None:
        if len(excluded_keys) == 1 and isinstance(excluded_keys[0], list):
            excluded_keys = tuple(excluded_keys[0])
        super().__init__()
        self.excluded_keys = _normalize_keys(list(excluded_keys), "ExcludeTransform excluded_keys")
        self.inverse = inverse

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.inverse:
            return next_tensordict
        return next_tensordict.exclude(*self.excluded_keys)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Remove the excluded entries."""
        if self.inverse:
            return tensordict
        return tensordict.exclude(*self.excluded_keys)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self.inverse:
            return tensordict
        return tensordict.exclude(*self.excluded_keys)

    def _needs_inverse(self) -> bool:
        return self.inverse

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Drop the excluded entries from the output specs."""
        output_spec = super().transform_output_spec(output_spec)
        if not self.inverse:
            for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
                output_spec[name] = output_spec[name].exclude(*self.excluded_keys)
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """With ``inverse=True``, drop the excluded entries from the state spec."""
        input_spec = super().transform_input_spec(input_spec)
        if self.inverse:
            input_spec["full_state_spec"] = input_spec["full_state_spec"].exclude(
                *self.excluded_keys
            )
        return input_spec


class CatTensors(ObservationTransform):
    """Concatenates several entries into one along a (negative) dim.

    Args:
        in_keys: the entries to concatenate. None takes every observation entry
            with at least one non-batch dim, when the transform joins an env.
        out_key: the name of the result.
        dim: the (negative) dim along which to concatenate.

    Keyword Args:
        del_keys: remove the concatenated entries.
        unsqueeze_if_oor: add a trailing dim to entries that have fewer dims than ``-dim``.
        sort: sort ``in_keys`` so that the order does not depend on how they were listed.

    Examples:
        >>> from tdrl.envs import CatTensors, GymEnv, TransformedEnv, UnaryTransform
        >>> from tdrl.envs import check_env_specs
        >>> from tdrl.envs.transforms import Compose
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), Compose(
        ...     UnaryTransform(["observation"], ["double"], fn=lambda obs: obs * 2),
        ...     CatTensors(["observation", "double"], "observation_vector")))
        >>> check_env_specs(env)
        >>> env.reset()["observation_vector"].shape
        torch.Size([6])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey = "observation_vector",
        dim: int = -1,
        *,
        del_keys: bool = True,
        unsqueeze_if_oor: bool = False,
        sort: bool = True,
    ) -> None:
        if dim >= 0:
            raise ValueError(f"CatTensors dim: expected a negative dim, got {dim}")
        self._sort = sort
        self._lazy_keys = in_keys is None
        keys = _normalize_keys(in_keys, "CatTensors in_keys")
        if sort:
            keys = sorted(keys, key=lambda k: (k,) if isinstance(k, str) else k)
        super().__init__(in_keys=keys, out_keys=[out_key])
        self.dim = dim
        self._del_keys = del_keys
        self.unsqueeze_if_oor = unsqueeze_if_oor

    def _prepare(self, value: torch.Tensor) -> torch.Tensor:
        if self.unsqueeze_if_oor and value.ndim < -self.dim:
            return value.unsqueeze(-1)
        return value

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        values = [next_tensordict.get(key, None) for key in self.in_keys]
        if any(value is None for value in values):
            if self.missing_tolerance and all(value is None for value in values):
                return next_tensordict
            missing = [key for key, value in zip(self.in_keys, values) if value is None]
            raise KeyError(
                f"CatTensors: expected keys {missing} in the tensordict, got keys "
                f"{list(next_tensordict.keys(True, True))}"
            )
        out = torch.cat([self._prepare(value) for value in values], self.dim)
        next_tensordict.set(self.out_keys[0], out)
        if self._del_keys:
            next_tensordict = next_tensordict.exclude(*self.in_keys)
        return next_tensordict

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Replace the concatenated entries by one Unbounded spec of the summed size.

        A leaf spec (not a Composite) is taken as the spec of the only ``in_keys`` entry.
        """
        if not isinstance(observation_spec, Composite):
            if len(self.in_keys) != 1:
                raise ValueError(
                    f"CatTensors: a leaf spec describes one entry, expected a Composite holding "
                    f"the {len(self.in_keys)} in_keys {self.in_keys}, got {observation_spec}"
                )
            out = self._prepare(observation_spec.zero())
            return Unbounded(shape=out.shape, dtype=out.dtype, device=observation_spec.device)
        batch_ndim = len(observation_spec.shape)
        if self._lazy_keys and not self.in_keys:
            keys = [
                key
                for key in observation_spec.keys(True, True)
                if len(observation_spec[key].shape) > batch_ndim
            ]
            if self._sort:
                keys = sorted(keys, key=lambda k: (k,) if isinstance(k, str) else k)
            self.in_keys = keys
        missing = [key for key in self.in_keys if key not in observation_spec.keys(True)]
        if missing:
            raise KeyError(
                f"CatTensors: keys {missing} are not in the observation spec; available keys: "
                f"{list(observation_spec.keys(True, True))}"
            )
        specs = [observation_spec[key] for key in self.in_keys]
        zeros = [self._prepare(spec.zero()) for spec in specs]
        out = torch.cat(zeros, self.dim)
        observation_spec[self.out_keys[0]] = Unbounded(
            shape=out.shape, dtype=out.dtype, device=specs[0].device
        )
        if self._del_keys:
            for key in self.in_keys:
                if key != self.out_keys[0]:
                    del observation_spec[key]
        return observation_spec

    def __repr__(self) -> str:
        return f"CatTensors(in_keys={self.in_keys}, out_key={self.out_keys[0]!r}, dim={self.dim})"


def _drop_empty(spec: Any) -> Any:
    for key in list(spec.keys()):
        value = spec[key]
        if isinstance(value, Composite):
            value = _drop_empty(value)
            if value.is_empty(recurse=True):
                del spec[key]
            else:
                spec[key] = value
    return spec


def _empty_leaves(spec: Any, prefix: tuple = ()) -> list:
    """Nested keys of the empty Composites of ``spec`` that hold no Composite either."""
    keys = []
    for key in spec.keys():
        value = spec[key]
        if isinstance(value, Composite) and value.is_empty(recurse=True):
            deeper = _empty_leaves(value, (*prefix, key))
            keys.extend(deeper or [(*prefix, key)])
    return keys


def _drop_empty_data(tensordict: TensorDictBase) -> TensorDictBase:
    for key in list(tensordict.keys()):
        value = tensordict.get(key)
        if isinstance(value, TensorDictBase) and not isinstance(
            value, (NonTensorData, NonTensorStack)
        ):
            _drop_empty_data(value)
            if value.is_empty():
                del tensordict[key]
    return tensordict


class RemoveEmptySpecs(Transform):
    """Removes empty sub-Composites from the specs and empty sub-tensordicts from the data.

    On the input side, the empty sub-tensordicts the base env expects (from its state
    spec) are put back before the env reads them.

    Args:
        in_keys, out_keys, in_keys_inv, out_keys_inv: the usual transform keys, accepted
            as every transform does; the transform always applies to every entry.

    Examples:
        >>> from tdrl.data import Composite
        >>> from tdrl.envs import RemoveEmptySpecs
        >>> t = RemoveEmptySpecs()
        >>> spec = t.transform_observation_spec(Composite(a=Composite(), b=Composite()))
        >>> spec.is_empty()
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self._empty_state_keys: list = []

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return _drop_empty_data(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return _drop_empty_data(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key in self._empty_state_keys:
            if tensordict.get(key, None) is None:
                tensordict.set(key, TensorDict({}, batch_size=tensordict.batch_size))
        return tensordict

    def _needs_inverse(self) -> bool:
        return bool(self._empty_state_keys)

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Drop empty sub-Composites."""
        return _drop_empty(observation_spec)

    def transform_reward_spec(self, reward_spec: Any) -> Any:
        """Drop empty sub-Composites."""
        return _drop_empty(reward_spec)

    def transform_done_spec(self, done_spec: Any) -> Any:
        """Drop empty sub-Composites."""
        return _drop_empty(done_spec)

    def transform_state_spec(self, state_spec: Any) -> Any:
        """Drop empty sub-Composites, remembering them for the inverse path."""
        self._empty_state_keys = _empty_leaves(state_spec)
        return _drop_empty(state_spec)

    def transform_action_spec(self, action_spec: Any) -> Any:
        """Drop empty sub-Composites."""
        return _drop_empty(action_spec)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Drop empty sub-tensordicts."""
        return _drop_empty_data(tensordict)

    def __repr__(self) -> str:
        return "RemoveEmptySpecs()"
