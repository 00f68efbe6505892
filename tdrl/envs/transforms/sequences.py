"""Transforms for sequences sampled from replay buffers: BurnInTransform, RandomCropTensorDict.

Both read tensordicts whose time dim is a batch dim (the last one by default)
and have no meaning inside an env: adding them to one raises an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key
from torch import nn

from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["BurnInTransform", "RandomCropTensorDict"]

BUFFER_ONLY_ERROR = (
    "{owner} works on sequences sampled from a replay buffer (or passed to a module); "
    "it cannot be part of an env"
)


class _BufferOnly(Transform):
    """Refuses the env paths with a clear error."""

    def _env_error(self) -> RuntimeError:
        return RuntimeError(BUFFER_ONLY_ERROR.format(owner=type(self).__name__))

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Not available: the transform cannot be part of an env."""
        raise self._env_error()

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Not available: the transform cannot be part of an env."""
        raise self._env_error()

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_error()

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        raise self._env_error()


class _TooShortError(ValueError, RuntimeError):
    """Sequences shorter than the crop.

    A bad value (ValueError) that code written for the reference API catches as a RuntimeError.
    """


class RandomCropTensorDict(_BufferOnly):
    """Crops a random window of ``sub_seq_len`` steps along ``sample_dim``.

    Each sequence (each index of the other batch dims) gets its own random start.
    With ``mask_key``, only the valid steps of each sequence are considered: the
    mask (shaped like the tensordict) must be True on a prefix of the sequence and
    False after it, and each sequence must have at least ``sub_seq_len`` valid steps.

    Args:
        sub_seq_len: the length of the windows.
        sample_dim: the batch dim to crop (negative dims are robust to extra leading
            dims). Defaults to the last one.
        mask_key: the validity mask entry, if any.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyMemmapStorage, TensorDictReplayBuffer
        >>> from tdrl.envs import RandomCropTensorDict
        >>> obs = torch.randn(100, 50, 1)
        >>> data = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:]}}, [99])
        >>> rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(1000))
        >>> _ = rb.extend(data)
        >>> _ = rb.append_transform(RandomCropTensorDict(sub_seq_len=10))
        >>> sample = rb.sample(128)
        >>> sample.batch_size, sample["obs"].shape
        (torch.Size([10]), torch.Size([10, 50, 1]))
    """

    def __init__(
        self,
        sub_seq_len: int,
        sample_dim: int = -1,
        mask_key: NestedKey | None = None,
    ) -> None:
        if isinstance(sub_seq_len, bool) or not isinstance(sub_seq_len, int) or sub_seq_len < 1:
            raise ValueError(
                f"RandomCropTensorDict sub_seq_len: expected a positive int, got {sub_seq_len!r}"
            )
        super().__init__()
        self.sub_seq_len = sub_seq_len
        self.sample_dim = sample_dim
        self.mask_key = None if mask_key is None else unravel_key(mask_key)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Return the cropped tensordict."""
        shape = tensordict.batch_size
        if not shape:
            raise ValueError(
                "RandomCropTensorDict: expected a tensordict with at least one batch dim, "
                "got batch size ()"
            )
        dim = self.sample_dim if self.sample_dim >= 0 else self.sample_dim + len(shape)
        if not 0 <= dim < len(shape):
            raise ValueError(
                f"RandomCropTensorDict sample_dim: expected a dim of a batch size of "
                f"{len(shape)} dims, got {self.sample_dim}"
            )
        length = shape[dim]
        if length < self.sub_seq_len:
            raise _TooShortError(
                f"RandomCropTensorDict: Cannot sample trajectories of length {self.sub_seq_len}: "
                f"expected at least {self.sub_seq_len} steps along dim {self.sample_dim}, got "
                f"batch size {tuple(shape)}"
            )
        device = tensordict.device or torch.device("cpu")
        start_shape = list(shape)
        start_shape[dim] = 1
        mask = None if self.mask_key is None else tensordict.get(self.mask_key, None)
        if mask is None:
            start = torch.randint(length - self.sub_seq_len + 1, start_shape, device=device)
        else:
            if mask.shape != shape:
                raise ValueError(
                    f"RandomCropTensorDict: expected the mask {self.mask_key!r} to have the "
                    f"tensordict's shape {tuple(shape)}, got {tuple(mask.shape)}"
                )
            valid = mask.sum(dim, keepdim=True)
            if bool((valid < self.sub_seq_len).any()):
                raise _TooShortError(
                    f"RandomCropTensorDict: Cannot sample trajectories of length "
                    f"{self.sub_seq_len}: expected at least {self.sub_seq_len} valid steps in "
                    f"each sequence of {self.mask_key!r}, got as few as {int(valid.min())}"
                )
            span = (valid - self.sub_seq_len + 1).to(device)
            start = (torch.rand(start_shape, device=device) * span).long()
            start = torch.minimum(start, span - 1)
        view = [1] * len(shape)
        view[dim] = self.sub_seq_len
        index = start + torch.arange(self.sub_seq_len, device=device).view(view)
        return tensordict.gather(dim=dim, index=index)

    def __repr__(self) -> str:
        return (
            f"RandomCropTensorDict(sub_seq_len={self.sub_seq_len}, "
            f"sample_dim={self.sample_dim}, mask_key={self.mask_key!r})"
        )


def _next_out_keys(modules: Sequence[nn.Module]) -> list:
    keys = []
    for module in modules:
        for key in getattr(module, "out_keys", []):
            key = unravel_key(key)
            if isinstance(key, tuple) and key[0] == "next" and len(key) > 1:
                inner = unravel_key(key[1:])
                if inner not in keys:
                    keys.append(inner)
    return keys


class BurnInTransform(_BufferOnly):
    """Runs the first ``burn_in`` steps of sequences through modules to refresh their states.

    The sequence (time is the last batch dim) is split in two: the first
    ``burn_in`` steps run through ``modules`` (without gradients), and the rest is
    returned with the states computed on the last burnt-in step (the modules'
    ``("next", key)`` outputs) written on its first step under ``key``. Typical use:
    recurrent states stored in a buffer are stale after the policy changed.

    Args:
        modules: the modules (e.g. ``TensorDictModule``) processing the sequences.
        burn_in: the number of steps to burn in.
        out_keys: the state entries to refresh (default: each ``("next", key)`` output
            of the modules, as ``key``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.envs import BurnInTransform
        >>> def accumulate(obs, hidden):  # a toy recurrent cell: the running sum
        ...     return hidden[..., :1, :] + obs.cumsum(-2)
        >>> module = TensorDictModule(accumulate, ["obs", "hidden"], [("next", "hidden")])
        >>> td = TensorDict({"obs": torch.ones(2, 6, 1), "hidden": torch.zeros(2, 6, 1)}, [2, 6])
        >>> out = BurnInTransform([module], burn_in=4)(td)
        >>> out.batch_size, out["hidden"][:, 0].squeeze(-1)
        (torch.Size([2, 2]), tensor([4., 4.]))
    """

    def __init__(
        self,
        modules: Sequence[nn.Module],
        burn_in: int,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        if isinstance(modules, nn.Module):
            modules = [modules]
        modules = list(modules)
        if not modules:
            raise ValueError("BurnInTransform modules: expected at least one module, got none")
        if isinstance(burn_in, bool) or not isinstance(burn_in, int) or burn_in < 1:
            raise ValueError(f"BurnInTransform burn_in: expected a positive int, got {burn_in!r}")
        if out_keys is None:
            out_keys = _next_out_keys(modules)
            if not out_keys:
                raise ValueError(
                    "BurnInTransform: the modules write no ('next', key) entry; pass out_keys"
                )
        super().__init__(out_keys=out_keys)
        self.burn_in_modules = nn.ModuleList(modules)
        self.burn_in = burn_in

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Burn in the first steps and return the remaining ones."""
        if tensordict.batch_dims == 0 or tensordict.shape[-1] <= self.burn_in:
            raise ValueError(
                f"BurnInTransform: expected sequences longer than burn_in={self.burn_in} along "
                f"the last batch dim, got batch size {tuple(tensordict.batch_size)}"
            )
        burnt = tensordict[..., : self.burn_in].clone(False)
        rest = tensordict[..., self.burn_in :].clone(False)
        with torch.no_grad():
            for module in self.burn_in_modules:
                burnt = module(burnt)
        for key in self.out_keys:
            state = burnt.get(("next", *(key if isinstance(key, tuple) else (key,))), None)
            if state is None:
                raise KeyError(
                    f"BurnInTransform: expected the modules to write ('next', {key!r}), got keys "
                    f"{list(burnt.keys(True, True))}"
                )
            last = state[(..., -1, *([slice(None)] * (state.ndim - burnt.batch_dims)))]
            current = rest.get(key, None)
            if current is None:
                current = torch.zeros(
                    (*rest.batch_size, *last.shape[rest.batch_dims - 1 :]),
                    dtype=last.dtype,
                    device=last.device,
                )
            else:
                current = current.clone()
            current[(..., 0, *([slice(None)] * (current.ndim - rest.batch_dims)))] = last
            rest.set(key, current)
        return rest

    def __repr__(self) -> str:
        return f"BurnInTransform(burn_in={self.burn_in}, out_keys={self.out_keys})"
