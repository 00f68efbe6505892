"""Stacking entries into one: :class:`Stack` (and unbinding it back on the input path)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key

from tdrl.data import Composite
from tdrl.envs.transforms.transform import (
    INPUT_ENTRIES,
    MISSING_KEY_ERROR,
    OUTPUT_ENTRIES,
    NestedKey,
    Transform,
    _key_list,
    _normalize_keys,
    _unlocked_clone,
)

__all__ = ["Stack"]

SPLIT_ERROR = (
    "Stack: the {kind} entries to stack must all live in one spec category, got {found}; "
    "entries of different categories (e.g. an observation and a reward) cannot be stacked"
)
NOT_FOUND_ERROR = "Stack: keys {keys} are not in the env {kind} specs; available keys: {available}"


def _as_tuple(key: NestedKey) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _prune(container: Any, key: NestedKey) -> None:
    """Delete the now-empty parents of ``key`` (a removed entry) in a tensordict or Composite."""
    key = _as_tuple(key)
    for depth in range(len(key) - 1, 0, -1):
        parent = unravel_key(key[:depth])
        sub = container.get(parent, None)
        if sub is None or not isinstance(sub, (TensorDictBase, Composite)) or not sub.is_empty():
            return
        del container[parent]


def _remove(tensordict: TensorDictBase, keys: list) -> TensorDictBase:
    """Delete ``keys`` and the sub-tensordicts they leave empty, in place."""
    for key in keys:
        if key in tensordict.keys(True):
            del tensordict[key]
            _prune(tensordict, key)
    return tensordict


class Stack(Transform):
    """Stacks several entries (tensors or sub-tensordicts) into one along a new dim.

    The entries are stacked in the order of ``in_keys`` with ``torch.stack``, so they
    must share their shape (sub-tensordicts: their structure). Specs are stacked the
    same way, in each spec category (observation, reward, done, action, state) that
    holds the entries: stacking the sub-tensordicts of several agents stacks their
    observations, rewards, dones and actions at once.

    On the input path, ``in_key_inv`` is read and unbound along ``dim`` into the
    ``out_keys_inv`` entries the base env expects (note the order: the stacked key
    is the one read). Data without ``in_key_inv`` goes through unchanged.

    Args:
        in_keys: the entries to stack.
        out_key: where to write the stack.
        in_key_inv: the stacked input entry to unbind on the input path.
        out_keys_inv: the entries the unbound slices are written to.
        dim: the dim of the result along which the entries are stacked; negative
            (counted from the end) unless ``allow_positive_dim``.
        allow_positive_dim: accept a non-negative ``dim``, counted from the first dim
            of the result (batch dims included).

    Keyword Args:
        del_keys: remove the stacked entries (and the sub-tensordicts they leave empty).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import Stack
        >>> t = Stack(in_keys=["a", "b"], out_key="ab", in_key_inv="ab", out_keys_inv=["a", "b"])
        >>> td = t(TensorDict({"a": torch.zeros(3), "b": torch.ones(3)}, []))
        >>> td["ab"].shape, "a" in td.keys()
        (torch.Size([3, 2]), False)
        >>> sorted(t.inv(td).keys())
        ['a', 'b']
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_key: NestedKey,
        in_key_inv: NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        dim: int = -1,
        allow_positive_dim: bool = False,
        *,
        del_keys: bool = True,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"Stack dim: expected an int, got {dim!r}")
        if dim >= 0 and not allow_positive_dim:
            raise ValueError(
                f"Stack dim: expected a negative dim (counted from the end), got {dim}; pass "
                "allow_positive_dim=True to count from the first dim"
            )
        if (in_key_inv is None) != (out_keys_inv is None):
            raise ValueError(
                "Stack: in_key_inv and out_keys_inv must be given together, got only "
                f"{'in_key_inv' if in_key_inv is not None else 'out_keys_inv'}"
            )
        (out_key,) = _normalize_keys([out_key], "Stack out_key")
        super().__init__(
            in_keys=in_keys,
            out_keys=[out_key],
            in_keys_inv=None if in_key_inv is None else [in_key_inv],
            out_keys_inv=out_keys_inv,
        )
        if not self.in_keys:
            raise ValueError("Stack in_keys: expected at least one key, got none")
        self.out_key = out_key
        self.in_key_inv = None if in_key_inv is None else self.in_keys_inv[0]
        self.dim = dim
        self.allow_positive_dim = allow_positive_dim
        self.del_keys = del_keys

    # ------------------------------------------------------------ data paths
    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        values = [next_tensordict.get(key, None) for key in self.in_keys]
        missing = [key for key, value in zip(self.in_keys, values) if value is None]
        if missing:
            if self.missing_tolerance and len(missing) == len(values):
                return next_tensordict
            raise KeyError(
                MISSING_KEY_ERROR.format(
                    owner="Stack", key=missing[0], keys=_key_list(next_tensordict)
                )
            )
        next_tensordict.set(self.out_key, torch.stack(values, self.dim))
        if self.del_keys:
            next_tensordict = _remove(next_tensordict, self.in_keys)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.in_key_inv is None:
            return tensordict
        stacked = tensordict.get(self.in_key_inv, None)
        if stacked is None:
            return tensordict
        parts = stacked.unbind(self.dim)
        if len(parts) != len(self.out_keys_inv):
            raise ValueError(
                f"Stack: {self.in_key_inv!r} has {len(parts)} entries along dim {self.dim}, "
                f"expected {len(self.out_keys_inv)} (one per out_keys_inv entry)"
            )
        for key, part in zip(self.out_keys_inv, parts):
            tensordict.set(key, part)
        return _remove(tensordict, [self.in_key_inv])

    def _needs_inverse(self) -> bool:
        return self.in_key_inv is not None

    # ------------------------------------------------------------ spec hooks
    def _stack_specs(
        self, parent: Any, entries: tuple, keys: list, out_key: NestedKey, delete: bool, kind: str
    ) -> Any:
        """Stack the specs of ``keys`` in the one category (of ``entries``) that holds them."""
        holders = []
        for name in entries:
            sub = parent.get(name, None)
            if sub is None:
                continue
            present = [key for key in keys if key in sub.keys(True)]
            if present and len(present) != len(keys):
                raise ValueError(
                    SPLIT_ERROR.format(kind=kind, found={name: present})
                    + f"; missing from {name}: {[k for k in keys if k not in present]}"
                )
            if present:
                holders.append(name)
        if not holders:
            available = [k for n in entries if n in parent.keys() for k in parent[n].keys(True)]
            raise KeyError(NOT_FOUND_ERROR.format(keys=keys, kind=kind, available=available))
        for name in holders:
            sub = parent[name]
            sub[out_key] = torch.stack([sub[key].clone() for key in keys], self.dim)
            if delete:
                for key in keys:
                    if key != out_key:
                        del sub[key]
                        _prune(sub, key)
        return parent

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Stack the ``in_keys`` specs into ``out_key`` in each category that holds them."""
        output_spec = _unlocked_clone(output_spec)
        return self._stack_specs(
            output_spec, OUTPUT_ENTRIES, self.in_keys, self.out_key, self.del_keys, "output"
        )

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Replace the ``out_keys_inv`` specs by their stack under ``in_key_inv``."""
        input_spec = _unlocked_clone(input_spec)
        if self.in_key_inv is None:
            return input_spec
        return self._stack_specs(
            input_spec, INPUT_ENTRIES, self.out_keys_inv, self.in_key_inv, True, "input"
        )

    def __repr__(self) -> str:
        return (
            f"Stack(in_keys={self.in_keys}, out_key={self.out_key!r}, dim={self.dim}, "
            f"del_keys={self.del_keys})"
        )
