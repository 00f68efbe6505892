"""Lossy delta storage of next observations: compress on the env, rebuild on the buffer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Composite, Unbounded
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["NextObservationDelta"]

_DELTA = "delta"


def _as_tuple(key: NestedKey) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


def _float_leaves(spec: Composite) -> list:
    """The floating-point observation keys of ``spec`` (stored deltas excluded)."""
    keys = []
    for key in spec.keys(True, True):
        if _as_tuple(key)[0] == _DELTA:
            continue
        if spec[key].dtype.is_floating_point:
            keys.append(key)
    return keys


class NextObservationDelta(Transform):
    """Store ``("next", k)`` as a low-precision difference to ``k``; rebuild it when sampled.

    On an env, each step writes ``("next", "delta", k) = (next k - k)`` cast to
    ``delta_dtype``. The step loops (``rollout``, ``step_and_maybe_reset``, the
    collectors) then drop the full ``("next", k)`` from the data they hand out,
    once ``step_mdp`` has moved it to the root of the next input, so the policy
    still reads full-precision observations. On a replay buffer (or any direct
    call) the same class rebuilds ``("next", k) = k + ("next", "delta", k)`` in
    ``k``'s dtype and drops the delta; keys without a stored delta are left alone.

    The transform must wrap a batched env from the outside: a SerialEnv/ParallelEnv
    refuses sub-envs that carry it.

    Args:
        in_keys: observation keys to compress. Defaults to the env's floating-point
            observation keys (integer images are left out); on a buffer, to every
            key with a stored delta.
        delta_dtype: dtype of the stored differences. Defaults to ``torch.float16``.
        drop_delta: whether rebuilding removes ``("next", "delta", k)``.
        restore_dtype: dtype of the rebuilt ``("next", k)``; defaults to ``k``'s.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import NextObservationDelta
        >>> obs = torch.tensor([[0.0], [1.0]])
        >>> delta = torch.tensor([[0.5], [-0.25]], dtype=torch.float16)
        >>> td = TensorDict({"observation": obs, ("next", "delta", "observation"): delta}, [2])
        >>> out = NextObservationDelta(in_keys=["observation"])(td)
        >>> out["next", "observation"]
        tensor([[0.5000],
                [0.7500]])
        >>> ("next", "delta") in out.keys(True)
        False
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        *,
        delta_dtype: torch.dtype = torch.float16,
        drop_delta: bool = True,
        restore_dtype: torch.dtype | None = None,
    ) -> None:
        if not isinstance(delta_dtype, torch.dtype) or not delta_dtype.is_floating_point:
            raise TypeError(
                f"NextObservationDelta delta_dtype: expected a floating-point torch.dtype, "
                f"got {delta_dtype!r}"
            )
        if restore_dtype is not None and not isinstance(restore_dtype, torch.dtype):
            raise TypeError(
                f"NextObservationDelta restore_dtype: expected a torch.dtype or None, "
                f"got {restore_dtype!r}"
            )
        super().__init__(in_keys=in_keys)
        self.__dict__["_auto_keys"] = in_keys is None
        self.delta_dtype = delta_dtype
        self.drop_delta = bool(drop_delta)
        self.restore_dtype = restore_dtype

    # ------------------------------------------------------------------ env side
    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Add a ``("delta", k)`` entry at ``delta_dtype`` per key (choosing the keys if unset)."""
        if self.__dict__["_auto_keys"]:
            self.in_keys = _float_leaves(observation_spec)
        for key in self.in_keys:
            if key not in observation_spec.keys(True, True):
                raise KeyError(
                    f"NextObservationDelta in_keys: {key!r} is not an observation of the env "
                    f"(observations: {sorted(map(str, observation_spec.keys(True, True)))})"
                )
            spec = observation_spec[key]
            observation_spec[(_DELTA, *_as_tuple(key))] = Unbounded(
                shape=spec.shape, dtype=self.delta_dtype, device=spec.device
            )
        return observation_spec

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        dtype = self.delta_dtype
        for key in self.in_keys:
            previous = tensordict.get(key, None)
            current = next_tensordict.get(key, None)
            if previous is None or current is None:
                continue
            next_tensordict.set((_DELTA, *_as_tuple(key)), (current - previous).to(dtype))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return tensordict_reset

    def _post_step_mdp(self, tensordict: TensorDictBase, next_input: TensorDictBase | None) -> None:
        nxt = tensordict.get("next")
        present = nxt.keys(True, True)
        for key in self.in_keys:
            if (_DELTA, *_as_tuple(key)) in present and key in present:
                del nxt[key]
        if next_input is None:
            return
        deltas = next_input.get(_DELTA, None)
        if deltas is None:
            return
        # next_input's containers are its own (step_mdp builds fresh ones): drop the deltas
        # the policy has no use for without touching the stepped data
        ours = [key for key in self.in_keys if key in deltas.keys(True, True)]
        rest = deltas.exclude(*ours)
        if rest.is_empty():
            del next_input[_DELTA]
        else:
            next_input.set(_DELTA, rest)

    # --------------------------------------------------------------- buffer side
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rebuild ``("next", k)`` from ``k`` and its stored delta (buffer samples)."""
        deltas = tensordict.get(("next", _DELTA), None)
        if deltas is None:
            return tensordict
        keys = self.in_keys if self.in_keys else list(deltas.keys(True, True))
        for key in keys:
            delta = deltas.get(key, None)
            root = tensordict.get(key, None)
            if delta is None or root is None:
                continue
            dtype = self.restore_dtype if self.restore_dtype is not None else root.dtype
            tensordict.set(("next", *_as_tuple(key)), (root + delta.to(root.dtype)).to(dtype))
            if self.drop_delta:
                del deltas[key]
        if self.drop_delta and deltas.is_empty():
            del tensordict["next", _DELTA]
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self.forward(next_tensordict)
