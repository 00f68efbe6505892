"""Transforms that rename, select, combine or compute entries."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from tdrl.data import Composite, NonTensor, Unbounded
from tdrl.envs.transforms.transform import (
    INPUT_ENTRIES,
    MISSING_KEY_ERROR,
    OUTPUT_ENTRIES,
    NestedKey,
    ObservationTransform,
    Transform,
    _key_list,
    _normalize_keys,
    locate_spec,
    map_input_specs,
    map_output_specs,
)

__all__ = [
    "CatTensors",
    "ExcludeTransform",
    "Hash",
    "RemoveEmptySpecs",
    "RenameTransform",
    "SelectTransform",
    "UnaryTransform",
]


def _check_pairs(owner: str, name: str, first: list, second: list) -> None:
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
        _check_pairs(owner, "in_keys and out_keys", self.in_keys, self.out_keys)
        _check_pairs(owner, "in_keys_inv and out_keys_inv", self.in_keys_inv, self.out_keys_inv)
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
                if in_key != out_key:
                    del locate_spec(output_spec, OUTPUT_ENTRIES, in_key)[in_key]
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


def _spec_for(value: Any, batch_shape: torch.Size, device: Any) -> Any:
    """A spec describing ``value`` (the image of a zero sample through a function)."""
    if isinstance(value, torch.Tensor):
        return Unbounded(shape=value.shape, dtype=value.dtype, device=value.device)
    return NonTensor(shape=batch_shape, device=device, example_data=value)


def _raw(value: Any) -> Any:
    if isinstance(value, NonTensorStack):
        return value.tolist()
    if isinstance(value, NonTensorData):
        return value.data
    return value


class UnaryTransform(Transform):
    """Applies a function to entries: ``fn`` on the outputs, ``inv_fn`` on the inputs.

    The specs of the results are inferred by applying the function to a zero sample
    of the input specs: tensors give an ``Unbounded`` spec of their shape and dtype,
    anything else a ``NonTensor`` spec.

    Args:
        in_keys: output entries to read.
        out_keys: where to write ``fn``'s results.
        in_keys_inv: input entries the base env reads (written by ``inv_fn``).
        out_keys_inv: the outside input entries ``inv_fn`` reads.

    Keyword Args:
        fn: the function applied on the output path.
        inv_fn: the function applied on the input path (the identity when omitted).
        use_raw_nontensor: give the functions plain python data instead of
            ``NonTensorData`` / ``NonTensorStack`` wrappers.

    Examples:
        >>> from tdrl.envs import GymEnv, TransformedEnv, UnaryTransform, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), UnaryTransform(
        ...     in_keys=["observation"], out_keys=["norm"], fn=lambda obs: obs.norm(dim=-1)))
        >>> check_env_specs(env)
        >>> env.observation_spec["norm"].shape
        torch.Size([])
        >>> text = UnaryTransform(["observation"], ["text"], fn=lambda obs: str(obs.tolist()))
        >>> env.append_transform(text).reset()["text"].startswith("[")
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey,
        out_keys: Sequence[NestedKey] | NestedKey,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        *,
        fn: Callable[[Any], Any],
        inv_fn: Callable[[Any], Any] | None = None,
        use_raw_nontensor: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        owner = type(self).__name__
        _check_pairs(owner, "in_keys and out_keys", self.in_keys, self.out_keys)
        _check_pairs(owner, "in_keys_inv and out_keys_inv", self.in_keys_inv, self.out_keys_inv)
        if not callable(fn):
            raise TypeError(f"{owner} fn: expected a callable, got {type(fn).__name__}")
        self._fn = fn
        self._inv_fn = inv_fn
        self.use_raw_nontensor = use_raw_nontensor

    def _apply_transform(self, value: Any) -> Any:
        if self.use_raw_nontensor:
            value = _raw(value)
        return self._fn(value)

    def _inv_apply_transform(self, value: Any) -> Any:
        if self._inv_fn is None:
            return value
        if self.use_raw_nontensor:
            value = _raw(value)
        return self._inv_fn(value)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        tolerance = self.missing_tolerance
        self.set_missing_tolerance(True)
        try:
            return self._call(tensordict_reset)
        finally:
            self.set_missing_tolerance(tolerance)

    def _spec_map(self, batch_shape: torch.Size) -> Callable[[Any], Any]:
        def mapping(spec: Any) -> Any:
            return _spec_for(self._apply_transform(spec.zero()), batch_shape, spec.device)

        return mapping

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Describe each ``out_keys`` entry from ``fn`` applied to a zero input."""
        output_spec = super().transform_output_spec(output_spec)
        return map_output_specs(
            self, output_spec, self.in_keys, self.out_keys, self._spec_map(output_spec.shape)
        )

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Describe each outside ``out_keys_inv`` entry from ``fn`` applied to a zero input."""
        input_spec = super().transform_input_spec(input_spec)
        if self._inv_fn is None:
            return input_spec
        return map_input_specs(
            self,
            input_spec,
            self.in_keys_inv,
            self.out_keys_inv,
            self._spec_map(input_spec.shape),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(in_keys={self.in_keys}, out_keys={self.out_keys}, fn={self._fn!r})"


def _hash_key(value: torch.Tensor) -> tuple:
    return tuple(value.reshape(-1).tolist())


class Hash(UnaryTransform):
    """Replaces entries (strings, bytes or tensors) by a 256-bit hash (32 ``uint8``).

    Args:
        in_keys: the entries to hash.
        out_keys: where to write the hashes.
        in_keys_inv: with ``out_keys_inv``, map hashes back to the values that produced
            them on the input path (a repertoire of seen values is kept).
        out_keys_inv: the outside (hashed) input entries.

    Keyword Args:
        hash_fn: the hash function, given the plain data of a whole entry (a string,
            a tensor, the list of a batch of strings); defaults to
            :meth:`reproducible_hash` (SHA-256), which hashes each batch element of
            non-tensor data (``NonTensorStack``) on its own and a tensor as a whole.
        seed: a seed mixed into the default hash.
        use_raw_nontensor: accepted for API compatibility: ``hash_fn`` always gets plain
            python data.
        repertoire: a dict filled with ``hash -> value`` pairs, used by
            :meth:`get_input_from_hash`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import Hash
        >>> t = Hash(in_keys=["text"], out_keys=["hash"], repertoire={})
        >>> td = t(TensorDict({"text": "hello"}, []))
        >>> td["hash"].shape, td["hash"].dtype
        (torch.Size([32]), torch.uint8)
        >>> t.get_input_from_hash(td["hash"])
        'hello'
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey,
        out_keys: Sequence[NestedKey] | NestedKey,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        *,
        hash_fn: Callable[[Any], torch.Tensor] | None = None,
        seed: Any = None,
        use_raw_nontensor: bool = False,
        repertoire: dict | None = None,
    ) -> None:
        if (in_keys_inv is None) != (out_keys_inv is None):
            raise ValueError(
                "Hash: in_keys_inv and out_keys_inv must be given together, got only "
                f"{'in_keys_inv' if in_keys_inv is not None else 'out_keys_inv'}"
            )
        if repertoire is None and in_keys_inv is not None:
            repertoire = {}
        self._seed = seed
        self._hash_fn = hash_fn
        self._repertoire = repertoire
        super().__init__(
            in_keys,
            out_keys,
            in_keys_inv,
            out_keys_inv,
            fn=self._hash,
            inv_fn=self.get_input_from_hash if in_keys_inv is not None else None,
            use_raw_nontensor=use_raw_nontensor,
        )

    @staticmethod
    def reproducible_hash(string: str | bytes, seed: Any = None) -> torch.Tensor:
        """A reproducible 256-bit hash of ``string`` (and ``seed``), as 32 ``uint8``."""
        data = string.encode() if isinstance(string, str) else bytes(string)
        prefix = b"" if seed is None else str(seed).encode() + b"\x00"
        digest = hashlib.sha256(prefix + data).digest()
        return torch.frombuffer(bytearray(digest), dtype=torch.uint8)

    @staticmethod
    def hash_to_repertoire_key(hash_tensor: torch.Tensor) -> tuple:
        """The key under which the repertoire stores the input of ``hash_tensor``."""
        return _hash_key(torch.as_tensor(hash_tensor))

    def _remember(self, hashed: torch.Tensor, item: Any) -> torch.Tensor:
        if self._repertoire is not None:
            self._repertoire[_hash_key(hashed)] = item
        return hashed

    def _hash_item(self, item: Any) -> torch.Tensor:
        """Hash one item (a string, bytes, a tensor, any object) with ``hash_fn`` or SHA-256."""
        if self._hash_fn is not None:
            return self._remember(torch.as_tensor(self._hash_fn(item)), item)
        data = item
        if isinstance(data, torch.Tensor):
            data = data.detach().cpu().contiguous().numpy().tobytes()
        elif not isinstance(data, (str, bytes, bytearray)):
            data = repr(data)
        return self._remember(self.reproducible_hash(data, self._seed), item)

    def _hash_nested(self, items: Any, ndim: int) -> torch.Tensor:
        if ndim == 0:
            return self._hash_item(items)
        return torch.stack([self._hash_nested(item, ndim - 1) for item in items])

    def _hash(self, value: Any, batch_dims: int | None = None) -> torch.Tensor:
        """Hash ``value``; the default hash treats each batch element of a stack as one item.

        A custom ``hash_fn`` receives the plain data of the whole entry (a list for a
        batch of strings). ``batch_dims`` is the batch size of the tensordict holding
        ``value``: dims of a stack beyond it belong to the items.
        """
        if isinstance(value, NonTensorStack) or (
            isinstance(value, NonTensorData) and value.batch_dims
        ):
            items = value.tolist()
            if self._hash_fn is not None:
                return self._hash_item(items)
            ndim = value.batch_dims if batch_dims is None else min(batch_dims, value.batch_dims)
            return self._hash_nested(items, ndim)
        if isinstance(value, NonTensorData):
            return self._hash_item(value.data)
        return self._hash_item(value)

    def _apply_transform(self, value: Any) -> torch.Tensor:
        return self._hash(value)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        batch_dims = next_tensordict.batch_dims
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = next_tensordict.get(in_key, None)
            if value is None:
                if not self.missing_tolerance:
                    raise KeyError(
                        MISSING_KEY_ERROR.format(
                            owner="Hash", key=in_key, keys=_key_list(next_tensordict)
                        )
                    )
                continue
            next_tensordict.set(out_key, self._hash(value, batch_dims))
        return next_tensordict

    def get_input_from_hash(self, hash_tensor: torch.Tensor) -> Any:
        """The value that produced ``hash_tensor`` (requires a repertoire).

        A batch of hashes (one per row) gives the list of their inputs.
        """
        if self._repertoire is None:
            raise RuntimeError(
                "Hash.get_input_from_hash needs a repertoire: pass repertoire={} or "
                "in_keys_inv / out_keys_inv when building the transform"
            )
        key = self.hash_to_repertoire_key(hash_tensor)
        if key in self._repertoire:
            return self._repertoire[key]
        if isinstance(hash_tensor, torch.Tensor) and hash_tensor.ndim > 1:
            return [self.get_input_from_hash(row) for row in hash_tensor]
        raise KeyError(
            f"Hash: no input seen for the hash {list(key)[:4]}... (not in the repertoire)"
        )

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Describe the outside (hashed) input entries."""
        input_spec = Transform.transform_input_spec(self, input_spec)
        if not self.in_keys_inv:
            return input_spec
        return map_input_specs(
            self,
            input_spec,
            self.in_keys_inv,
            self.out_keys_inv,
            self._spec_map(input_spec.shape),
        )

    def __repr__(self) -> str:
        return (
            f"Hash(in_keys={self.in_keys}, out_keys={self.out_keys}, "
            f"hash_fn={self._hash_fn!r}, repertoire={self._repertoire is not None})"
        )
