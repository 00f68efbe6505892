"""The :class:`NonTensor` spec: entries holding arbitrary python objects (strings, dicts...)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack

from tdrl.data.specs.base import TensorSpec, _checks_on
from tdrl.data.specs.errors import SpecTypeError, SpecValueError, _at
from tdrl.data.specs.shapes import DEVICE_TYPING, ShapeLike, _ends_with

__all__ = ["NonTensor"]


def _is_non_tensor(value: Any) -> bool:
    return isinstance(value, (NonTensorData, NonTensorStack))


class NonTensor(TensorSpec):
    """An entry whose values are python objects, stored as tensordict ``NonTensorData``.

    Args:
        shape: batch shape of the entry (default ``()``).
        device: device of the carrying tensordict.
        dtype: kept for API compatibility (usually ``None``).
        example_data: the object ``rand()`` / ``zero()`` / ``one()`` return (wrapped).
        batched: whether one value holds a whole batch (kept for API compatibility).
        feature_dims: how many trailing dims of ``shape`` one object covers (default: all
            of them). The leading dims before them are batch dims: ``rand()`` / ``zero()``
            / ``one()`` then return a ``NonTensorStack`` with one object per batch element.

    ``is_in`` accepts ``NonTensorData`` / ``NonTensorStack`` whose batch shape ends with
    the spec's shape, and any plain python object that is not a tensor. Specs with
    different ``example_data`` are not equal.

    Examples:
        >>> spec = NonTensor(shape=(2,), example_data="hello")
        >>> data = spec.rand()
        >>> data.batch_size, data.data
        (torch.Size([2]), 'hello')
        >>> spec.is_in(data)
        True
    """

    _kind = "non_tensor"

    def __init__(
        self,
        shape: ShapeLike = (),
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | None = None,
        example_data: Any = None,
        batched: bool = False,
        feature_dims: int | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"NonTensor got unexpected keyword arguments {sorted(kwargs)}")
        super().__init__(shape, device, dtype, "non_tensor")
        if feature_dims is not None and not 0 <= feature_dims <= self.ndim:
            raise ValueError(
                f"NonTensor: feature_dims must be in [0, {self.ndim}] for shape "
                f"{tuple(self.shape)}, got {feature_dims}"
            )
        self.example_data = example_data
        self.batched = batched
        self._feature_dims = feature_dims

    @property
    def feature_dims(self) -> int:
        """Number of trailing dims of ``shape`` that one object covers."""
        return self.ndim if self._feature_dims is None else min(self._feature_dims, self.ndim)

    def _make(self, shape: ShapeLike | None) -> NonTensorData | NonTensorStack:
        full = self._full_shape(shape)
        batch_ndim = len(full) - self.feature_dims
        if batch_ndim == len(full) - self.ndim:
            return NonTensorData(data=self.example_data, batch_size=full, device=self.device)
        return self._stack(full[:batch_ndim], full[batch_ndim:])

    def _stack(self, batch: torch.Size, feature: torch.Size) -> NonTensorData | NonTensorStack:
        if not batch:
            return NonTensorData(data=self.example_data, batch_size=feature, device=self.device)
        items = [self._stack(batch[1:], feature) for _ in range(batch[0])]
        return NonTensorStack(*items, stack_dim=0)

    def rand(self, shape: ShapeLike | None = None) -> NonTensorData:
        """``example_data`` wrapped in ``NonTensorData`` with batch size ``shape + self.shape``."""
        return self._make(shape)

    def zero(self, shape: ShapeLike | None = None) -> NonTensorData:
        """Same as :meth:`rand`: non-tensor entries have no notion of zero."""
        return self._make(shape)

    def one(self, shape: ShapeLike | None = None) -> NonTensorData:
        """Same as :meth:`rand`: non-tensor entries have no notion of one."""
        return self._make(shape)

    def _same_attributes(self, other: TensorSpec) -> bool:
        mine, theirs = self.example_data, other.example_data
        if mine is theirs:
            return True
        try:
            return bool(mine == theirs)
        except (TypeError, ValueError, RuntimeError):
            # array-like examples compare element-wise: equal only when identical objects
            return False

    def cardinality(self) -> int:
        """Non-tensor values are arbitrary objects: always raises a RuntimeError."""
        raise RuntimeError("Cannot enumerate a NonTensor spec: its values are arbitrary objects")

    def enumerate(self, use_mask: bool = False) -> Any:
        """Non-tensor values are arbitrary objects: always raises a RuntimeError."""
        return self.cardinality()

    def is_in(self, val: Any) -> bool:
        """Whether ``val`` is non-tensor data with a compatible batch shape (or a plain object)."""
        if _is_non_tensor(val):
            return _ends_with(val.batch_size, self.shape)
        return not isinstance(val, torch.Tensor)

    def _mismatch(self, val: Any, key: Any = None) -> Exception | None:
        if self.is_in(val):
            return None
        where = _at("spec mismatch", key)
        if isinstance(val, torch.Tensor):
            return SpecTypeError(f"{where}: expected non-tensor data, got a torch.Tensor")
        return SpecValueError(
            f"{where}: expected a batch shape ending with "
            f"{tuple(self.shape)}, got {tuple(val.batch_size)}"
        )

    def type_check(self, value: Any, key: Any = None) -> None:
        """Raise a TypeError when ``value`` is a tensor."""
        if isinstance(value, torch.Tensor):
            raise SpecTypeError(
                f"{_at('type mismatch', key)}: expected non-tensor data, got a torch.Tensor"
            )

    def project(self, val: Any) -> Any:
        """Non-tensor values are returned unchanged."""
        return val

    def encode(self, val: Any, *, ignore_device: bool = False) -> NonTensorData | NonTensorStack:
        """Wrap a python object in ``NonTensorData`` of the spec's shape."""
        if _is_non_tensor(val):
            return val
        return NonTensorData(
            data=val,
            batch_size=self._full_shape(None),
            device=None if ignore_device else self.device,
        )

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """The python object(s) carried by ``val``."""
        if safe or (safe is None and _checks_on()):
            self.assert_is_in(val)
        if isinstance(val, NonTensorStack):
            return val.tolist()
        if isinstance(val, NonTensorData):
            return val.data
        return val

    def _cast_dtype(self, dtype: torch.dtype) -> TensorSpec:
        return self

    def _repr_extra(self) -> str:
        return f"example_data={self.example_data!r}"
