"""Single-choice discrete specs: :class:`Categorical` (an index), :class:`OneHot`, :class:`Binary`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tdrl.data.specs.base import TensorSpec, _checks_on
from tdrl.data.specs.errors import SpecValueError
from tdrl.data.specs.shapes import (
    DEVICE_TYPING,
    ShapeLike,
    _as_dtype,
    _as_shape,
    _safe_shape,
    _shape_matches,
)
from tdrl.data.specs.spaces import BinaryBox, CategoricalBox

__all__ = ["Binary", "Categorical", "OneHot"]

#: Binary specs enumerate their ``2 ** n`` values only up to this many bits.
_MAX_ENUMERATED_BITS = 20


def _mask_or_none(
    mask: Any, expected: torch.Size, device: torch.device, owner: str
) -> torch.Tensor | None:
    """Validate a boolean action mask of shape ``expected``."""
    if mask is None:
        return None
    mask = torch.as_tensor(mask, device=device)
    if mask.dtype != torch.bool:
        raise TypeError(f"{owner} mask: expected dtype torch.bool, got {mask.dtype}")
    if not _shape_matches(mask.shape, expected) and mask.shape != _safe_shape(expected):
        try:
            mask = mask.expand(_safe_shape(expected))
        except RuntimeError:
            raise ValueError(
                f"{owner} mask: expected shape {tuple(expected)}, got {tuple(mask.shape)}"
            ) from None
    return mask


def _check_n(n: Any, owner: str) -> int:
    """Validate a number of categories (0 gives a spec with no values, e.g. for indexing)."""
    if isinstance(n, torch.Tensor):
        n = n.item()
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"{owner}: n must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{owner}: n must be >= 0, got {n}")
    return int(n)


def _check_box(box: Any, kind: type, owner: str) -> None:
    if not isinstance(box, kind):
        raise TypeError(f"{owner}.space: expected a {kind.__name__}, got {type(box).__name__}")


def _broadcast_rows(rows: torch.Tensor, shape: torch.Size, event_ndim: int) -> torch.Tensor:
    """``rows`` (``(k, *event)``) repeated over the batch dims of ``shape``: ``(k, *shape)``."""
    batch = shape[: len(shape) - event_ndim]
    view = rows.reshape(rows.shape[0], *([1] * len(batch)), *rows.shape[1:])
    return view.expand(rows.shape[0], *_safe_shape(batch), *rows.shape[1:]).clone()


def _masked_choice(mask: torch.Tensor, shape: torch.Size, owner: str) -> torch.Tensor:
    """Sample an allowed index per row of ``mask`` (last dim = categories), batch ``shape``."""
    n = mask.shape[-1]
    probs = mask.expand(*shape, n).reshape(-1, n).to(torch.float32)
    if probs.shape[0] == 0:
        return torch.zeros(shape, dtype=torch.int64, device=mask.device)
    if not bool(probs.any(-1).all()):
        raise ValueError(f"{owner}.rand: every mask row needs at least one allowed category")
    return torch.multinomial(probs, 1).reshape(shape)


def _masked_argmax(val: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Index of the largest entry along the last dim, disallowed entries excluded."""
    scores = val.to(torch.float64)
    lowest = torch.finfo(torch.float64).min
    scores = torch.nan_to_num(
        scores, nan=lowest, posinf=torch.finfo(torch.float64).max, neginf=lowest
    )
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    return scores.argmax(-1)


def _same_mask(spec: TensorSpec, other: TensorSpec) -> bool:
    """Whether two masked specs carry the same mask (both unmasked counts as the same)."""
    if (spec.mask is None) != (other.mask is None):
        return False
    return spec.mask is None or torch.equal(spec.mask, other.mask.to(spec.device))


class _NCategories:
    """Cardinality, equality and repr shared by the specs over ``n`` masked categories."""

    n: int

    def cardinality(self) -> int:
        """Number of categories ``n``."""
        return self.n

    def _same_attributes(self, other: TensorSpec) -> bool:
        return self.n == other.n and _same_mask(self, other)

    def _allowed(self, use_mask: bool) -> torch.Tensor:
        """The categories to enumerate: all, or those the mask allows for every element."""
        index = torch.arange(self.n, device=self.device)
        if use_mask and self.mask is not None:
            allowed = self.mask.reshape(-1, self.n).all(0)
            index = index[allowed]
        return index

    def _repr_extra(self) -> str:
        return f"n={self.n}" + (", masked=True" if self.mask is not None else "")


class Categorical(_NCategories, TensorSpec):
    """An integer index in ``[0, n)``, optionally restricted by a boolean mask.

    Args:
        n: number of categories (> 0).
        shape: shape of the entry (default ``()``: one index).
        device: device of the values.
        dtype: integer dtype of the values (default ``torch.int64``); ``torch.bool`` is
            allowed for ``n <= 2``.
        mask: optional boolean tensor of shape ``shape + (n,)``; ``rand()`` only draws
            allowed categories and ``is_in`` rejects the others.

    Examples:
        >>> import torch
        >>> spec = Categorical(4, shape=(2,))
        >>> spec.rand().shape
        torch.Size([2])
        >>> spec.is_in(torch.tensor([0, 3]))
        True
        >>> spec.update_mask(torch.tensor([[True, False, False, False]] * 2))
        >>> spec.rand()
        tensor([0, 0])
    """

    _kind = "categorical"
    _shaped_tensors = ("mask",)

    def __init__(
        self,
        n: int,
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str = torch.int64,
        mask: torch.Tensor | None = None,
    ) -> None:
        name = type(self).__name__
        n = _check_n(n, name)
        dtype = _as_dtype(dtype, torch.int64)
        if dtype.is_complex:
            raise TypeError(f"{name}: expected a real dtype, got {dtype}")
        if dtype == torch.bool and n > 2:
            raise ValueError(f"{name}: a bool dtype holds 2 categories at most, got n={n}")
        shape = torch.Size(()) if shape is None else _as_shape(shape)
        super().__init__(shape, device, dtype, "discrete")
        self.n = n
        self.mask = _mask_or_none(mask, torch.Size((*shape, n)), self.device, name)

    @property
    def space(self) -> CategoricalBox:
        """The categories ``0 .. n - 1``; setting a :class:`CategoricalBox` changes ``n``."""
        return CategoricalBox(self.n)

    @space.setter
    def space(self, box: CategoricalBox) -> None:
        _check_box(box, CategoricalBox, type(self).__name__)
        if box.n != self.n and self.mask is not None:
            raise ValueError(
                f"{type(self).__name__}.space: cannot change n from {self.n} to {box.n} "
                "while a mask is set (clear it with update_mask(None) first)"
            )
        self.n = _check_n(box.n, type(self).__name__)

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """The ``n`` categories (the allowed ones with ``use_mask``), shape ``(k, *shape)``."""
        rows = self._allowed(use_mask).to(self.dtype)
        return _broadcast_rows(rows, self.shape, 0)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Set (or, with ``None``, clear) the mask of allowed categories, shape ``shape + (n,)``."""
        self.mask = _mask_or_none(
            mask, torch.Size((*self.shape, self.n)), self.device, type(self).__name__
        )

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        if self.mask is None:
            if self.dtype == torch.bool:
                return torch.randint(0, self.n, shape, device=self.device).to(torch.bool)
            return torch.randint(0, self.n, shape, device=self.device, dtype=self.dtype)
        return _masked_choice(self.mask, shape, type(self).__name__).to(self.dtype)

    def _in_domain(self, val: torch.Tensor) -> bool:
        if self.dtype != torch.bool and not (bool((val >= 0).all()) and bool((val < self.n).all())):
            return False
        if val.dtype.is_floating_point and not bool((val == val.round()).all()):
            return False
        if self.mask is None:
            return True
        mask = self.mask.expand(*val.shape, self.n)
        return bool(mask.gather(-1, val.long().unsqueeze(-1)).all())

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        if val.dtype.is_floating_point:
            val = torch.nan_to_num(val).round()
        val = val.long().clamp(0, self.n - 1)
        if self.mask is not None:
            mask = self.mask.expand(*val.shape, self.n)
            allowed = mask.gather(-1, val.unsqueeze(-1)).squeeze(-1)
            val = torch.where(allowed, val, mask.to(torch.int8).argmax(-1))
        return val.to(self.dtype)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Convert indices to one-hot vectors (a new trailing dim of size ``n``)."""
        if safe:
            self.assert_is_in(val)
        return torch.nn.functional.one_hot(val.long(), self.n).to(torch.bool)

    def to_one_hot_spec(self) -> OneHot:
        """The equivalent :class:`OneHot` spec (shape ``shape + (n,)``)."""
        return OneHot(
            self.n,
            shape=(*self.shape, self.n),
            device=self.device,
            dtype=torch.bool,
            mask=self.mask,
        )


class OneHot(_NCategories, TensorSpec):
    """A one-hot vector over ``n`` categories (the last dim has size ``n``).

    Args:
        n: number of categories (> 0).
        shape: shape of the entry, ending with ``n`` (default ``(n,)``).
        device: device of the values.
        dtype: dtype of the vectors (default ``torch.bool``).
        use_register: kept for API compatibility; it does not change the values, but
            specs that differ in it do not compare equal.
        mask: optional boolean tensor of the spec's shape marking allowed categories.

    ``encode`` takes category indices and ``to_numpy`` returns category indices: that is
    what simulators such as gymnasium's ``Discrete`` space speak.

    Examples:
        >>> import torch
        >>> spec = OneHot(3)
        >>> int(spec.rand().sum())
        1
        >>> spec.encode(2)
        tensor([False, False,  True])
        >>> spec.to_numpy(torch.tensor([False, True, False]))
        array(1)
    """

    _kind = "one_hot"
    _event_ndim = 1
    _shaped_tensors = ("mask",)

    def __init__(
        self,
        n: int,
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str = torch.bool,
        use_register: bool = False,
        mask: torch.Tensor | None = None,
    ) -> None:
        name = type(self).__name__
        n = _check_n(n, name)
        shape = torch.Size((n,)) if shape is None else _as_shape(shape)
        if not shape or shape[-1] != n:
            raise ValueError(
                f"{name}: expected the last dim of shape to be n={n}, got shape {tuple(shape)}"
            )
        super().__init__(shape, device, _as_dtype(dtype, torch.bool), "discrete")
        self.n = n
        self.use_register = use_register
        self.mask = _mask_or_none(mask, shape, self.device, name)

    @property
    def space(self) -> CategoricalBox:
        """The categories ``0 .. n - 1`` (``n`` is the last dim of the shape and stays)."""
        return CategoricalBox(self.n)

    @space.setter
    def space(self, box: CategoricalBox) -> None:
        _check_box(box, CategoricalBox, "OneHot")
        if box.n != self.n:
            raise ValueError(
                f"OneHot.space: n is the last dim of the shape {tuple(self.shape)}, "
                f"so it stays {self.n}; got a box with n={box.n}"
            )

    def _same_attributes(self, other: TensorSpec) -> bool:
        return super()._same_attributes(other) and self.use_register == other.use_register

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """The one-hot vector of each category (allowed ones with ``use_mask``): ``(k, *shape)``."""
        rows = self._eye()[self._allowed(use_mask)]
        return _broadcast_rows(rows, self.shape, 1)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Set (or, with ``None``, clear) the mask of allowed categories (the spec's shape)."""
        self.mask = _mask_or_none(mask, self.shape, self.device, type(self).__name__)

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        batch = shape[:-1]
        if self.mask is None:
            index = torch.randint(0, self.n, batch, device=self.device)
        else:
            index = _masked_choice(self.mask, batch, type(self).__name__)
        rows = self._eye()[index]
        # a 0-dim index selects a view of the cached identity: hand out a copy
        return rows if batch else rows.clone()

    def _eye(self) -> torch.Tensor:
        """The ``n x n`` identity in the spec's dtype and device (cached): row ``i`` encodes ``i``."""
        cache = self.__dict__.get("_eye_cache")
        if (
            cache is not None
            and cache[0] == self.n
            and cache[1] is self.dtype
            and cache[2] == self.device
        ):
            return cache[3]
        eye = torch.eye(self.n, device=self.device).to(self.dtype)
        self.__dict__["_eye_cache"] = (self.n, self.dtype, self.device, eye)
        return eye

    def _in_domain(self, val: torch.Tensor) -> bool:
        as_int = val.to(torch.int64) if val.dtype != torch.int64 else val
        if not bool(((as_int == 0) | (as_int == 1)).all()):
            return False
        if not bool((as_int.sum(-1) == 1).all()):
            return False
        if self.mask is None:
            return True
        return not bool((val.bool() & ~self.mask).any())

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        index = _masked_argmax(val, self.mask)
        return torch.nn.functional.one_hot(index, self.n).to(self.dtype)

    def _to_tensor(self, val: Any, device: torch.device | None) -> torch.Tensor:
        """Category indices (numpy / python / tensor) as one-hot vectors: what ``encode`` takes."""
        if isinstance(val, (int, np.integer)) and not isinstance(val, bool):
            if not 0 <= val < self.n:
                raise SpecValueError(
                    f"OneHot.encode: expected a category index in [0, {self.n}), got {val}"
                )
            row = self._eye()[int(val)].clone()
            return row if device is None or device == row.device else row.to(device)
        if not isinstance(val, torch.Tensor):
            if isinstance(val, np.ndarray) and not val.flags.writeable:
                val = val.copy()
            val = torch.as_tensor(val, device=device)
        elif device is not None:
            val = val.to(device)
        if val.dtype.is_floating_point or not bool(((val >= 0) & (val < self.n)).all()):
            raise SpecValueError(
                f"OneHot.encode: expected category indices in [0, {self.n}), got {val}"
            )
        return torch.nn.functional.one_hot(val.long(), self.n).to(self.dtype)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Convert category indices (numpy / python / tensor) to one-hot vectors.

        The indices must have the spec's shape without its last dim (up to singleton
        dims); an index outside ``[0, n)`` raises a ValueError.
        """
        return super().encode(val, ignore_device=ignore_device)

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None) -> np.ndarray:
        """Category indices of one-hot vectors, as a numpy array."""
        if safe or (safe is None and _checks_on()):
            self.assert_is_in(val)
        return val.detach().to(torch.int64).argmax(-1).cpu().numpy()

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Category indices of one-hot vectors (drops the last dim)."""
        if safe:
            self.assert_is_in(val)
        return val.to(torch.int64).argmax(-1)

    def to_categorical_spec(self) -> Categorical:
        """The equivalent :class:`Categorical` spec (shape without the last dim)."""
        return Categorical(
            self.n, shape=self.shape[:-1], device=self.device, dtype=torch.int64, mask=self.mask
        )

    def index(self, index: torch.Tensor, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """Select entries of ``tensor_to_index`` along its last dims with one-hot ``index``."""
        position = index.long().argmax(-1, keepdim=True)
        return tensor_to_index.gather(-1, position).squeeze(-1)


class Binary(Categorical):
    """A vector of ``n`` independent 0/1 values (the last dim has size ``n``).

    Args:
        n: number of binary values; defaults to the last dim of ``shape``.
        shape: shape of the entry, ending with ``n`` (default ``(n,)``). ``shape=()``
            describes a single 0/1 value with no value dim (``n`` is then 1).
        device: device of the values.
        dtype: dtype of the values (default ``torch.int8``); done flags use ``torch.bool``.

    Examples:
        >>> import torch
        >>> done = Binary(1, shape=(1,), dtype=torch.bool)
        >>> done.zero()
        tensor([False])
        >>> Binary(3).is_in(torch.tensor([0, 1, 1], dtype=torch.int8))
        True
    """

    _kind = "binary"
    _event_ndim = 1
    _shaped_tensors = ()

    def __init__(
        self,
        n: int | None = None,
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str = torch.int8,
    ) -> None:
        shape = _as_shape(shape)
        if n is None and shape is None:
            raise TypeError("Binary: give n or a shape whose last dim is n")
        if shape is not None and not shape and n in (None, 1):
            # a single 0/1 value: no value dim to hold n
            self._event_ndim = 0
            n = 1
        else:
            n = _check_n(shape[-1] if n is None else n, "Binary")
            shape = torch.Size((n,)) if shape is None else shape
            if not shape or shape[-1] != n:
                raise ValueError(
                    f"Binary: expected the last dim of shape to be n={n}, got shape {tuple(shape)}"
                )
        TensorSpec.__init__(self, shape, device, _as_dtype(dtype, torch.int8), "discrete")
        self.n = n
        self.mask = None

    @property
    def space(self) -> BinaryBox:
        """``n`` independent 0/1 values (``n`` is the last dim of the shape and stays)."""
        return BinaryBox(self.n)

    @space.setter
    def space(self, box: BinaryBox) -> None:
        _check_box(box, BinaryBox, "Binary")
        if box.n != self.n:
            raise ValueError(
                f"Binary.space: n is the last dim of the shape {tuple(self.shape)}, "
                f"so it stays {self.n}; got a box with n={box.n}"
            )

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """Every 0/1 vector of length ``n`` (``2 ** n`` of them), shape ``(2 ** n, *shape)``."""
        if self._event_ndim == 0:
            return _broadcast_rows(torch.tensor([0, 1], device=self.device), self.shape, 0).to(
                self.dtype
            )
        if self.n > _MAX_ENUMERATED_BITS:
            raise RuntimeError(
                f"Cannot enumerate a Binary spec of n={self.n}: 2 ** {self.n} vectors is too many "
                f"(at most {_MAX_ENUMERATED_BITS} bits)"
            )
        codes = torch.arange(2**self.n, device=self.device).unsqueeze(-1)
        bits = (codes >> torch.arange(self.n - 1, -1, -1, device=self.device)) & 1
        return _broadcast_rows(bits.to(self.dtype), self.shape, 1)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Binary specs take no mask; passing anything but ``None`` raises."""
        if mask is not None:
            raise TypeError("Binary: masks are not supported")

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        return torch.randint(0, 2, shape, device=self.device).to(self.dtype)

    def _in_domain(self, val: torch.Tensor) -> bool:
        if val.dtype == torch.bool:
            return True
        return bool(((val == 0) | (val == 1)).all())

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        if val.dtype == torch.bool:
            return val.to(self.dtype)
        return (torch.nan_to_num(val.to(torch.float64)) > 0.5).to(self.dtype)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Binary values are already a multi-hot encoding; returned as bool."""
        if safe:
            self.assert_is_in(val)
        return val.to(torch.bool)

    def to_one_hot_spec(self) -> Binary:
        """A bool copy of this spec."""
        return Binary(self.n, shape=self.shape, device=self.device, dtype=torch.bool)

    def cardinality(self) -> int:
        """Number of distinct vectors, ``2 ** n``."""
        return 2**self.n

    def _same_attributes(self, other: TensorSpec) -> bool:
        return self.n == other.n

    def _repr_extra(self) -> str:
        return f"n={self.n}"
