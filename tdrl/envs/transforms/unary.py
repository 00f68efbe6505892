"""Transforms that compute entries with a function: :class:`UnaryTransform` and :class:`Hash`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from tdrl.data import NonTensor, Unbounded
from tdrl.envs.transforms.keys import check_pairs
from tdrl.envs.transforms.transform import (
    MISSING_KEY_ERROR,
    NestedKey,
    Transform,
    _key_list,
    map_input_specs,
    map_output_specs,
)

__all__ = ["Hash", "UnaryTransform"]


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
        check_pairs(owner, "in_keys and out_keys", self.in_keys, self.out_keys)
        check_pairs(owner, "in_keys_inv and out_keys_inv", self.in_keys_inv, self.out_keys_inv)
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
