"""ExpandAs: broadcast one entry to the shape of another (e.g. an env-level flag to each agent)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Unbounded
from tdrl.envs.transforms.transform import (
    OUTPUT_ENTRIES,
    SPEC_KEY_ERROR,
    NestedKey,
    Transform,
    _spec_keys,
    locate_spec,
)

__all__ = ["ExpandAs"]


def _expand(value: torch.Tensor, shape: torch.Size, owner: str, key: NestedKey) -> torch.Tensor:
    """``value`` with trailing singleton dims added, expanded to ``shape``."""
    if value.ndim > len(shape):
        raise ValueError(
            f"{owner}: cannot expand {key!r} of shape {tuple(value.shape)} to the reference "
            f"shape {tuple(shape)}: it has more dims"
        )
    value = value.reshape(*value.shape, *([1] * (len(shape) - value.ndim)))
    try:
        return value.expand(shape)
    except RuntimeError as err:
        raise ValueError(
            f"{owner}: cannot expand {key!r} of shape {tuple(value.shape)} to the reference "
            f"shape {tuple(shape)}"
        ) from err


class ExpandAs(Transform):
    """Expands an entry to the shape of a reference entry.

    The entry gets trailing singleton dims until it has as many dims as the
    reference, then is expanded to the reference's shape: an env-level flag of shape
    ``(*batch, 1)`` becomes one flag per agent and feature, ``(*batch, n_agents, f)``.
    The result is a view (no copy). It runs on env outputs (reset and step) and on
    data that does not come from an env.

    Args:
        in_key: the entry to expand.
        ref_key: the entry whose shape is copied.
        out_key: where the result goes (default: ``in_key``, in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import ExpandAs
        >>> t = ExpandAs(in_key="flag", ref_key=("agents", "obs"), out_key="agent_flag")
        >>> td = TensorDict({"flag": torch.tensor([[True]]), ("agents", "obs"): torch.zeros(1, 3, 2)}, [1])
        >>> t(td)["agent_flag"].shape
        torch.Size([1, 3, 2])
    """

    def __init__(
        self, in_key: NestedKey, ref_key: NestedKey, out_key: NestedKey | None = None
    ) -> None:
        super().__init__(in_keys=[in_key], out_keys=[in_key if out_key is None else out_key])
        self.in_key = self.in_keys[0]
        self.out_key = self.out_keys[0]
        self.ref_key = ref_key

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        value = next_tensordict.get(self.in_key, None)
        ref = next_tensordict.get(self.ref_key, None)
        if value is None or ref is None:
            if self.missing_tolerance:
                return next_tensordict
            missing = self.in_key if value is None else self.ref_key
            raise KeyError(
                f"ExpandAs: expected the entry {missing!r} in the data, got keys "
                f"{list(next_tensordict.keys(True, True))}"
            )
        next_tensordict.set(self.out_key, _expand(value, ref.shape, "ExpandAs", self.in_key))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def _expanded_spec(self, spec: Any, shape: torch.Size) -> Any:
        try:
            while spec.ndim < len(shape):
                spec = spec.unsqueeze(-1)
            return spec.expand(shape)
        except (ValueError, RuntimeError):
            return Unbounded(shape=shape, dtype=spec.dtype, device=spec.device)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the expanded entry (next to ``in_key`` when in place, else as an observation)."""
        output_spec = super().transform_output_spec(output_spec)
        found = {}
        for key in (self.in_key, self.ref_key):
            sub = locate_spec(output_spec, OUTPUT_ENTRIES, key)
            if sub is None:
                raise KeyError(
                    SPEC_KEY_ERROR.format(
                        owner="ExpandAs",
                        key=key,
                        kind="output",
                        keys=_spec_keys(output_spec, OUTPUT_ENTRIES),
                    )
                )
            found[key] = sub
        source = found[self.in_key]
        spec = self._expanded_spec(
            source[self.in_key].clone(), found[self.ref_key][self.ref_key].shape
        )
        if self.out_key == self.in_key:
            source[self.out_key] = spec
        else:
            output_spec["full_observation_spec"][self.out_key] = spec
        return output_spec

    def __repr__(self) -> str:
        return (
            f"ExpandAs(in_key={self.in_key!r}, ref_key={self.ref_key!r}, out_key={self.out_key!r})"
        )
