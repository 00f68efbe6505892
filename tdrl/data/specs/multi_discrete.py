"""Multi-choice discrete specs: :class:`MultiCategorical` (indices) and :class:`MultiOneHot`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from tdrl.data.specs.base import TensorSpec, _checks_on
from tdrl.data.specs.categorical import (
    _broadcast_rows,
    _check_box,
    _mask_or_none,
    _masked_argmax,
    _masked_choice,
    _same_mask,
)
from tdrl.data.specs.errors import SpecValueError
from tdrl.data.specs.shapes import DEVICE_TYPING, ShapeLike, _as_dtype, _as_shape, _safe_shape
from tdrl.data.specs.spaces import BoxList

#: Multi-choice specs enumerate their joint values only up to this many.
_MAX_ENUMERATED = 1_000_000

__all__ = ["MultiCategorical", "MultiOneHot"]


def _check_nvec(nvec: Any, owner: str) -> torch.Tensor:
    try:
        nvec_t = torch.as_tensor(nvec)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{owner}: nvec must be a sequence of ints, got {nvec!r}") from err
    if nvec_t.dtype.is_floating_point or nvec_t.dtype == torch.bool:
        raise TypeError(f"{owner}: nvec must hold ints, got dtype {nvec_t.dtype}")
    if nvec_t.numel() == 0:
        raise ValueError(f"{owner}: nvec must not be empty")
    if bool((nvec_t < 0).any()):
        raise ValueError(f"{owner}: every entry of nvec must be >= 0, got {nvec_t.tolist()}")
    return nvec_t.to(torch.int64)


def _joint_values(row: list[int], owner: str) -> torch.Tensor:
    """Every combination of one index per sub-action: shape ``(prod(row), len(row))``."""
    total = math.prod(row)
    if total > _MAX_ENUMERATED:
        raise RuntimeError(
            f"Cannot enumerate a {owner} spec with nvec={row}: {total} joint values is too many "
            f"(at most {_MAX_ENUMERATED})"
        )
    grids = torch.meshgrid(*[torch.arange(n) for n in row], indexing="ij")
    return torch.stack([grid.reshape(-1) for grid in grids], -1)


class MultiCategorical(TensorSpec):
    """Several categorical indices side by side: entry ``i`` of the last dim is in ``[0, nvec[i])``.

    Args:
        nvec: number of categories of each sub-action (a sequence or a tensor that
            broadcasts to ``shape``). A single int gives one index per element and a
            spec without a sub-action dim (like :class:`Categorical`).
        shape: shape of the entry, ending with ``len(nvec)`` (default ``nvec.shape``).
        device: device of the values.
        dtype: dtype of the values (default ``torch.int64``); a float dtype holds the
            indices as whole floats.
        mask: optional boolean tensor of shape ``shape[:-1] + (sum(nvec),)``: the allowed
            categories of each sub-action, concatenated.
        remove_singleton: kept for API compatibility; values always have the spec's shape.

    Examples:
        >>> import torch
        >>> spec = MultiCategorical([2, 3])
        >>> spec.shape
        torch.Size([2])
        >>> spec.is_in(torch.tensor([1, 2]))
        True
        >>> spec.project(torch.tensor([5, -1]))
        tensor([1, 0])
        >>> spec.cardinality()
        6
    """

    _kind = "multi_categorical"
    _event_ndim = 1
    _shaped_tensors = ("nvec", "mask")

    def __init__(
        self,
        nvec: Any,
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str = torch.int64,
        mask: torch.Tensor | None = None,
        remove_singleton: bool = True,
    ) -> None:
        name = type(self).__name__
        nvec_t = _check_nvec(nvec, name)
        shape = nvec_t.shape if shape is None else _as_shape(shape)
        if nvec_t.ndim == 0:
            # one index per element: no sub-action dim
            self._event_ndim = 0
        elif not shape or shape[-1] != nvec_t.shape[-1]:
            raise ValueError(
                f"{name}: expected the last dim of shape to be len(nvec)={nvec_t.shape[-1]}, "
                f"got shape {tuple(shape)}"
            )
        dtype = _as_dtype(dtype, torch.int64)
        if dtype.is_complex or dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer or float dtype, got {dtype}")
        super().__init__(shape, device, dtype, "discrete")
        try:
            self.nvec = nvec_t.to(self.device).expand(_safe_shape(shape))
        except RuntimeError as err:
            raise ValueError(
                f"{name}: nvec of shape {tuple(nvec_t.shape)} does not broadcast to {tuple(shape)}"
            ) from err
        self.remove_singleton = remove_singleton
        self.mask = None
        self.update_mask(mask)

    def _row(self) -> list[int]:
        """``nvec`` of one element (masks and spaces need it to be the same everywhere)."""
        flat = self.nvec.reshape(-1, 1 if self._event_ndim == 0 else self.nvec.shape[-1])
        if flat.shape[0] > 1 and not bool((flat == flat[0]).all()):
            raise ValueError(f"{type(self).__name__}: nvec differs between batch elements")
        return flat[0].tolist()

    def _columns(self, val: torch.Tensor) -> list[torch.Tensor]:
        """The index of each sub-action (the value itself when there is no sub-action dim)."""
        return [val] if self._event_ndim == 0 else list(val.unbind(-1))

    def _join(self, columns: list[torch.Tensor]) -> torch.Tensor:
        return columns[0] if self._event_ndim == 0 else torch.stack(columns, -1)

    @property
    def space(self) -> BoxList:
        """One categorical box per sub-action (setting one must keep the number of sub-actions).

        When ``nvec`` differs between batch elements, the boxes nest along the batch dims
        (a :class:`BoxList` per element, down to the dims where ``nvec`` stops varying).
        """
        return BoxList.from_nvec(self._varying_nvec())

    def _varying_nvec(self) -> torch.Tensor:
        """``nvec`` without the leading dims along which it does not vary."""
        nvec = self.nvec if self._event_ndim else self.nvec.unsqueeze(-1)
        while nvec.ndim > 1 and bool((nvec == nvec[:1]).all()):
            nvec = nvec[0]
        return nvec

    @space.setter
    def space(self, box: BoxList) -> None:
        _check_box(box, BoxList, type(self).__name__)
        nested = torch.tensor(box.nvec, dtype=torch.int64, device=self.device)
        if nested.ndim > 1:
            try:
                self.nvec = nested.expand(self.nvec.shape).clone()
            except RuntimeError as err:
                raise ValueError(
                    f"{type(self).__name__}.space: nested boxes for nvec of shape "
                    f"{tuple(nested.shape)} do not broadcast to {tuple(self.nvec.shape)}"
                ) from err
            return
        if len(box) != len(self._row()):
            raise ValueError(
                f"{type(self).__name__}.space: expected {len(self._row())} boxes, got {len(box)}"
            )
        if self.mask is not None and list(box.nvec) != self._row():
            raise ValueError(
                f"{type(self).__name__}.space: cannot change nvec while a mask is set "
                "(clear it with update_mask(None) first)"
            )
        nvec = torch.tensor(box.nvec, dtype=torch.int64, device=self.device)
        self.nvec = nvec.reshape(self.nvec.shape[self._batch_ndim :]).expand(self.nvec.shape)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Set (or clear) the mask of allowed categories, shape ``batch shape + (sum(nvec),)``."""
        batch = self.shape[: self._batch_ndim]
        expected = torch.Size((*batch, sum(self._row()))) if mask is not None else None
        self.mask = _mask_or_none(mask, expected, self.device, type(self).__name__)

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """Every joint value (one index per sub-action): shape ``(prod(nvec), *shape)``."""
        values = _joint_values(self._row(), type(self).__name__).to(self.device)
        if use_mask and self.mask is not None:
            allowed = self.mask.reshape(-1, self.mask.shape[-1]).all(0)
            ok = torch.ones(values.shape[0], dtype=torch.bool, device=self.device)
            for i, sub in enumerate(allowed.split(self._row())):
                ok &= sub[values[:, i]]
            values = values[ok]
        if self._event_ndim == 0:
            values = values.squeeze(-1)
        return _broadcast_rows(values.to(self.dtype), self.shape, self._event_ndim)

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        if self.mask is None:
            sample = (
                torch.rand(shape, device=self.device, dtype=torch.float64) * self.nvec
            ).floor()
            return torch.minimum(sample.to(torch.int64), self.nvec - 1).to(self.dtype)
        batch = shape[: len(shape) - self._event_ndim]
        parts = [
            _masked_choice(sub, batch, type(self).__name__)
            for sub in self.mask.split(self._row(), dim=-1)
        ]
        return self._join(parts).to(self.dtype)

    def _in_domain(self, val: torch.Tensor) -> bool:
        if not (bool((val >= 0).all()) and bool((val < self.nvec).all())):
            return False
        if val.dtype.is_floating_point and not bool((val == val.round()).all()):
            return False
        if self.mask is None:
            return True
        columns = self._columns(val)
        for index, sub in zip(columns, self.mask.split(self._row(), dim=-1)):
            index = index.long()
            if not bool(
                sub.expand(*index.shape, sub.shape[-1]).gather(-1, index.unsqueeze(-1)).all()
            ):
                return False
        return True

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        if val.dtype.is_floating_point:
            val = torch.nan_to_num(val).round()
        val = torch.minimum(torch.maximum(val.long(), torch.zeros_like(self.nvec)), self.nvec - 1)
        if self.mask is not None:
            columns = []
            for index, sub in zip(self._columns(val), self.mask.split(self._row(), dim=-1)):
                sub = sub.expand(*index.shape, sub.shape[-1])
                allowed = sub.gather(-1, index.unsqueeze(-1)).squeeze(-1)
                columns.append(torch.where(allowed, index, sub.to(torch.int8).argmax(-1)))
            val = self._join(columns)
        return val.to(self.dtype)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Concatenated one-hot encodings of each sub-action (bool)."""
        if safe:
            self.assert_is_in(val)
        parts = [
            torch.nn.functional.one_hot(index.long(), n)
            for index, n in zip(self._columns(val), self._row())
        ]
        return torch.cat(parts, -1).to(torch.bool)

    def to_one_hot_spec(self) -> MultiOneHot:
        """The equivalent :class:`MultiOneHot` spec."""
        row = self._row()
        return MultiOneHot(
            row,
            shape=(*self.shape[: self._batch_ndim], sum(row)),
            device=self.device,
            mask=self.mask,
        )

    def cardinality(self) -> int:
        """Number of joint values, ``prod(nvec)``."""
        return math.prod(self._row())

    def _same_attributes(self, other: TensorSpec) -> bool:
        if not torch.equal(self.nvec, other.nvec.to(self.device)):
            return False
        return _same_mask(self, other)

    def _repr_extra(self) -> str:
        try:
            return f"nvec={self._row()}"
        except ValueError:
            return f"nvec={self.nvec.tolist()}"


class MultiOneHot(TensorSpec):
    """Several one-hot vectors concatenated along the last dim (sizes ``nvec``).

    Args:
        nvec: number of categories of each sub-action.
        shape: shape of the entry, ending with ``sum(nvec)`` (default ``(sum(nvec),)``).
        device: device of the values.
        dtype: dtype of the vectors (default ``torch.bool``).
        mask: optional boolean tensor of the spec's shape marking allowed categories.

    ``encode`` takes per-sub-action indices and ``to_numpy`` returns them (what
    gymnasium's ``MultiDiscrete`` space speaks).

    Examples:
        >>> import torch
        >>> spec = MultiOneHot([2, 3])
        >>> spec.rand().shape
        torch.Size([5])
        >>> spec.encode([1, 0])
        tensor([False,  True,  True, False, False])
        >>> spec.to_numpy(spec.encode([1, 0]))
        array([1, 0])
    """

    _kind = "multi_one_hot"
    _event_ndim = 1
    _shaped_tensors = ("mask",)

    def __init__(
        self,
        nvec: Any,
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str = torch.bool,
        mask: torch.Tensor | None = None,
    ) -> None:
        name = type(self).__name__
        nvec_t = _check_nvec(nvec, name)
        if nvec_t.ndim != 1:
            raise ValueError(
                f"{name}: nvec must be one-dimensional, got shape {tuple(nvec_t.shape)}"
            )
        self.nvec = [int(n) for n in nvec_t.tolist()]
        total = sum(self.nvec)
        shape = torch.Size((total,)) if shape is None else _as_shape(shape)
        if not shape or shape[-1] != total:
            raise ValueError(
                f"{name}: expected the last dim of shape to be sum(nvec)={total}, got shape {tuple(shape)}"
            )
        super().__init__(shape, device, _as_dtype(dtype, torch.bool), "discrete")
        self.mask = _mask_or_none(mask, shape, self.device, name)

    @property
    def space(self) -> BoxList:
        """One categorical box per sub-action (``nvec`` is fixed by the shape and stays)."""
        return BoxList.from_nvec(self.nvec)

    @space.setter
    def space(self, box: BoxList) -> None:
        _check_box(box, BoxList, "MultiOneHot")
        if list(box.nvec) != self.nvec:
            raise ValueError(
                f"MultiOneHot.space: nvec is fixed by the shape {tuple(self.shape)} and stays "
                f"{self.nvec}; got boxes for {list(box.nvec)}"
            )

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """Every joint value as concatenated one-hot vectors: ``(prod(nvec), *shape)``."""
        indices = _joint_values(self.nvec, "MultiOneHot").to(self.device)
        rows = self._to_tensor(indices, self.device)
        if use_mask and self.mask is not None:
            allowed = self.mask.reshape(-1, self.mask.shape[-1]).all(0)
            rows = rows[~(rows.bool() & ~allowed).any(-1)]
        return _broadcast_rows(rows, self.shape, 1)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Set (or clear) the mask of allowed categories (the spec's shape)."""
        self.mask = _mask_or_none(mask, self.shape, self.device, type(self).__name__)

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        batch = shape[:-1]
        parts = []
        subs = (
            self.mask.split(self.nvec, dim=-1) if self.mask is not None else [None] * len(self.nvec)
        )
        for n, sub in zip(self.nvec, subs):
            if sub is None:
                index = torch.randint(0, n, batch, device=self.device)
            else:
                index = _masked_choice(sub, batch, type(self).__name__)
            parts.append(torch.nn.functional.one_hot(index, n))
        return torch.cat(parts, -1).to(self.dtype)

    def _in_domain(self, val: torch.Tensor) -> bool:
        as_int = val.to(torch.int64)
        if not bool(((as_int == 0) | (as_int == 1)).all()):
            return False
        if not all(bool((part.sum(-1) == 1).all()) for part in as_int.split(self.nvec, dim=-1)):
            return False
        return self.mask is None or not bool((val.bool() & ~self.mask).any())

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        subs = (
            self.mask.split(self.nvec, dim=-1) if self.mask is not None else [None] * len(self.nvec)
        )
        parts = [
            torch.nn.functional.one_hot(_masked_argmax(part, sub), n)
            for part, sub, n in zip(val.split(self.nvec, dim=-1), subs, self.nvec)
        ]
        return torch.cat(parts, -1).to(self.dtype)

    def _indices(self, val: torch.Tensor) -> torch.Tensor:
        return torch.stack([part.long().argmax(-1) for part in val.split(self.nvec, dim=-1)], -1)

    def _to_tensor(self, val: Any, device: torch.device | None) -> torch.Tensor:
        """Per-sub-action indices (last dim ``len(nvec)``) as concatenated one-hot vectors."""
        if not isinstance(val, torch.Tensor):
            if isinstance(val, np.ndarray) and not val.flags.writeable:
                val = val.copy()
            val = torch.as_tensor(val, device=device)
        elif device is not None:
            val = val.to(device)
        if val.ndim == 0 or val.shape[-1] != len(self.nvec) or val.dtype.is_floating_point:
            raise SpecValueError(
                f"MultiOneHot.encode: expected integer indices with last dim {len(self.nvec)}, "
                f"got shape {tuple(val.shape)} and dtype {val.dtype}"
            )
        nvec = torch.tensor(self.nvec, device=val.device)
        if not bool(((val >= 0) & (val < nvec)).all()):
            raise SpecValueError(
                f"MultiOneHot.encode: expected indices below nvec={self.nvec}, got {val}"
            )
        parts = [
            torch.nn.functional.one_hot(val[..., i].long(), n) for i, n in enumerate(self.nvec)
        ]
        return torch.cat(parts, -1).to(self.dtype)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Convert per-sub-action indices (last dim ``len(nvec)``) to multi-one-hot vectors.

        The indices must have the spec's batch shape (up to singleton dims); an index
        outside its sub-action's range raises a ValueError.
        """
        return super().encode(val, ignore_device=ignore_device)

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None) -> np.ndarray:
        """Per-sub-action indices, as a numpy array."""
        if safe or (safe is None and _checks_on()):
            self.assert_is_in(val)
        return self._indices(val.detach()).cpu().numpy()

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Per-sub-action indices (last dim becomes ``len(nvec)``)."""
        if safe:
            self.assert_is_in(val)
        return self._indices(val)

    def to_categorical_spec(self) -> MultiCategorical:
        """The equivalent :class:`MultiCategorical` spec."""
        return MultiCategorical(
            self.nvec, shape=(*self.shape[:-1], len(self.nvec)), device=self.device, mask=self.mask
        )

    def cardinality(self) -> int:
        """Number of joint values, ``prod(nvec)``."""
        return math.prod(self.nvec)

    def _same_attributes(self, other: TensorSpec) -> bool:
        if self.nvec != other.nvec:
            return False
        return _same_mask(self, other)

    def _repr_extra(self) -> str:
        return f"nvec={self.nvec}"
