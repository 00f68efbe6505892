"""JAX <-> torch helpers of the JAX simulator wrappers (Jumanji, Brax).

Arrays cross between the two libraries through DLPack, so no data is copied when both sit on
the same device (a tensor that is not contiguous is made contiguous first: JAX only reads
compact layouts). Pytrees (a simulator's state, its observations) become tensordicts keyed by
their attribute paths and back. JAX is imported only by the functions that need it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["PyTreeCodec", "jax_to_torch", "torch_to_jax"]

_WIDENED = {torch.uint16: torch.int64, torch.uint32: torch.int64}


def jax_to_torch(array: Any, device: torch.device | None = None) -> torch.Tensor:
    """A torch tensor sharing the memory of the JAX array ``array`` (moved to ``device``).

    Examples:
        >>> import jax.numpy as jnp  # doctest: +SKIP
        >>> jax_to_torch(jnp.arange(3))  # doctest: +SKIP
        tensor([0, 1, 2], dtype=torch.int32)
    """
    tensor = torch.from_dlpack(array)
    if device is not None and tensor.device != device:
        tensor = tensor.to(device)
    return tensor


def torch_to_jax(tensor: torch.Tensor) -> Any:
    """A JAX array sharing the memory of ``tensor`` (detached, made contiguous if needed)."""
    import jax.dlpack

    return jax.dlpack.from_dlpack(tensor.detach().contiguous())


def _path_key(path: Sequence[Any]) -> tuple[str, ...]:
    """A tensordict key for a pytree path: attribute names, dict keys and indices as strings."""
    names = []
    for entry in path:
        for attribute in ("name", "key", "idx"):
            if hasattr(entry, attribute):
                names.append(str(getattr(entry, attribute)))
                break
        else:
            names.append(str(entry))
    return tuple(names) or ("value",)


class PyTreeCodec:
    """Converts pytrees of one structure to tensordicts and back (through DLPack).

    The leaves of ``example`` fix the structure and the keys: a leaf at ``state.pos.x`` is the
    entry ``("pos", "x")``. Leaves may carry leading batch dims; :meth:`to_tensordict` reshapes
    a flat batch of ``prod(batch_size)`` rows to ``batch_size`` and :meth:`to_tree` flattens it
    again.

    Args:
        example: a pytree with the structure to convert (its leaves have no batch dim).

    Examples:
        >>> import jax.numpy as jnp  # doctest: +SKIP
        >>> codec = PyTreeCodec({"pos": jnp.zeros(2), "step": jnp.zeros((), jnp.int32)})  # doctest: +SKIP
        >>> data = codec.to_tensordict({"pos": jnp.ones((6, 2)), "step": jnp.ones(6, jnp.int32)}, (2, 3))  # doctest: +SKIP
        >>> data["pos"].shape  # doctest: +SKIP
        torch.Size([2, 3, 2])
    """

    def __init__(self, example: Any) -> None:
        import jax

        paths_and_leaves, self.treedef = jax.tree_util.tree_flatten_with_path(example)
        self.keys = [_path_key(path) for path, _ in paths_and_leaves]
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"PyTreeCodec: two leaves share a key in {self.keys}")
        self.shapes = [tuple(leaf.shape) for _, leaf in paths_and_leaves]
        native = [
            torch.from_dlpack(jax.numpy.zeros((), leaf.dtype)).dtype for _, leaf in paths_and_leaves
        ]
        #: the dtype of each leaf in the data: unsigned dtypes torch barely supports (PRNG keys
        #: are uint32) are held as int64 and cast back for JAX
        self.dtypes = [_WIDENED.get(dtype, dtype) for dtype in native]
        self._narrow = [dtype if dtype in _WIDENED else None for dtype in native]

    def leaves_to_tensors(
        self, leaves: Sequence[Any], batch_size: Sequence[int], device: torch.device | None = None
    ) -> list[torch.Tensor]:
        """Torch views of the leaves, with the flat batch dim reshaped to ``batch_size``."""
        batch = tuple(batch_size)
        tensors = []
        for leaf, shape, dtype in zip(leaves, self.shapes, self.dtypes):
            tensor = jax_to_torch(leaf, device).reshape((*batch, *shape))
            tensors.append(tensor if tensor.dtype == dtype else tensor.to(dtype))
        return tensors

    def to_tensordict(
        self, tree: Any, batch_size: Sequence[int], device: torch.device | None = None
    ) -> TensorDictBase:
        """The leaves of ``tree`` (a flat batch of ``prod(batch_size)`` rows) as a tensordict."""
        import jax

        tensors = self.leaves_to_tensors(jax.tree_util.tree_leaves(tree), batch_size, device)
        return self.tensors_to_tensordict(tensors, batch_size, device)

    def tensors_to_tensordict(
        self, tensors: Sequence[torch.Tensor], batch_size: Sequence[int], device: Any = None
    ) -> TensorDictBase:
        """Place ``tensors`` (in leaf order) at their keys in a nested tensordict."""
        data = TensorDict({}, batch_size=batch_size, device=device)
        for key, tensor in zip(self.keys, tensors):
            data.set(key, tensor)
        return data

    def tensors_of(self, data: TensorDictBase) -> list[torch.Tensor]:
        """The leaf tensors of ``data`` in leaf order."""
        try:
            return [data.get(key) for key in self.keys]
        except KeyError as err:
            raise KeyError(
                f"PyTreeCodec: expected the entries {self.keys} of the simulator state, got "
                f"{list(data.keys(True, True))}"
            ) from err

    def to_tree(self, data: TensorDictBase, batch_ndim: int) -> Any:
        """The pytree whose leaves are the entries of ``data`` with a flat leading batch dim."""
        return self.tensors_to_tree(self.tensors_of(data), batch_ndim)

    def tensors_to_tree(self, tensors: Sequence[torch.Tensor], batch_ndim: int) -> Any:
        """The pytree of ``tensors`` (in leaf order) with their ``batch_ndim`` dims flattened."""
        leaves = []
        for tensor, narrow in zip(tensors, self._narrow):
            leaf = flatten_batch(tensor, batch_ndim)
            leaves.append(torch_to_jax(leaf if narrow is None else leaf.to(narrow)))
        return self.treedef.unflatten(leaves)


def flatten_batch(tensor: torch.Tensor, batch_ndim: int) -> torch.Tensor:
    """``tensor`` with its first ``batch_ndim`` dims merged into one (added when there are none)."""
    batch = math.prod(tensor.shape[:batch_ndim])
    return tensor.reshape(batch, *tensor.shape[batch_ndim:])


def split_keys(key: Any, count: int) -> tuple[Any, Any]:
    """``(next key, a stack of count fresh keys)`` split from the JAX PRNG key ``key``."""
    import jax

    keys = jax.random.split(key, count + 1)
    return keys[0], keys[1:]


def maybe_jit(fn: Callable, jit: bool) -> Callable:
    """``jax.jit(fn)`` when ``jit``, else ``fn``."""
    if not jit:
        return fn
    import jax

    return jax.jit(fn)
