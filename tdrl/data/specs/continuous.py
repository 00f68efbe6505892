"""Box-like specs: :class:`Unbounded` (any value of a dtype) and :class:`Bounded` (``[low, high]``)."""

from __future__ import annotations

from typing import Any

import torch

from tdrl.data.specs.base import TensorSpec
from tdrl.data.specs.shapes import DEVICE_TYPING, ShapeLike, _as_dtype, _as_shape, _safe_shape
from tdrl.data.specs.spaces import ContinuousBox

__all__ = [
    "Bounded",
    "BoundedContinuous",
    "BoundedDiscrete",
    "Unbounded",
    "UnboundedContinuous",
    "UnboundedDiscrete",
]

_DEFAULT_SHAPE = torch.Size((1,))
#: Integer samples of an Unbounded spec are drawn from this range (clipped to the dtype's range).
_UNBOUNDED_INT_RANGE = (-(2**31), 2**31 - 1)
_DOMAINS = ("continuous", "discrete")


def _domain_of(dtype: torch.dtype) -> str:
    return "continuous" if dtype.is_floating_point or dtype.is_complex else "discrete"


def _check_domain(domain: str | None, dtype: torch.dtype, owner: str) -> str:
    if domain is None:
        return _domain_of(dtype)
    if domain not in _DOMAINS:
        raise ValueError(f"{owner}: domain must be one of {_DOMAINS}, got {domain!r}")
    return domain


def _dtype_limits(dtype: torch.dtype) -> tuple[float, float]:
    if dtype == torch.bool:
        return 0, 1
    if dtype.is_floating_point:
        return -float("inf"), float("inf")
    info = torch.iinfo(dtype)
    return info.min, info.max


def _finite_limits(dtype: torch.dtype) -> tuple[float, float]:
    """The smallest and largest finite values of ``dtype``."""
    if dtype.is_floating_point or dtype.is_complex:
        info = torch.finfo(dtype)
        return info.min, info.max
    return _dtype_limits(dtype)


def _spans_dtype(low: torch.Tensor, high: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether ``[low, high]`` is the whole range of ``dtype`` everywhere.

    For floats, ``-inf .. inf`` and the finite extremes both count as the whole range.
    """
    low_inf, high_inf = _dtype_limits(dtype)
    low_fin, high_fin = _finite_limits(dtype)
    return bool(((low == low_inf) | (low == low_fin)).all()) and bool(
        ((high == high_inf) | (high == high_fin)).all()
    )


def _randint_like_range(
    low: torch.Tensor | float,
    high: torch.Tensor | float,
    shape: torch.Size,
    dtype: torch.dtype,
    device,
) -> torch.Tensor:
    """Uniform integers in ``[low, high]`` (inclusive), tensors broadcast against ``shape``."""
    low64 = torch.as_tensor(low, dtype=torch.float64, device=device)
    high64 = torch.as_tensor(high, dtype=torch.float64, device=device)
    sample = (torch.rand(shape, dtype=torch.float64, device=device) * (high64 - low64 + 1)).floor_()
    sample = torch.minimum(torch.maximum(sample + low64, low64), high64)
    return sample.to(dtype)


class Unbounded(TensorSpec):
    """Any value of a dtype: floats for a continuous spec, integers for a discrete one.

    Args:
        shape: shape of the entry, leading batch dims included (default ``(1,)``).
        device: device of the values (default: torch's default device).
        dtype: dtype of the values (default: torch's default float dtype). An integer or
            bool dtype makes the spec discrete.
        **kwargs: ``domain`` may be given explicitly ("continuous" or "discrete").

    ``rand()`` samples a standard normal for float dtypes and uniform integers (within the
    int32 range at most) for integer dtypes.

    Examples:
        >>> import torch
        >>> spec = Unbounded((3,))
        >>> spec.rand().shape, spec.dtype, spec.domain
        (torch.Size([3]), torch.float32, 'continuous')
        >>> Unbounded(2, dtype=torch.int64).domain
        'discrete'
        >>> spec.is_in(torch.full((3,), 1e9))
        True
    """

    _kind = "unbounded"
    _default_dtype: torch.dtype | None = None

    def __init__(
        self,
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = None,
        **kwargs: Any,
    ) -> None:
        domain = kwargs.pop("domain", None)
        if kwargs:
            raise TypeError(f"Unbounded got unexpected keyword arguments {sorted(kwargs)}")
        dtype = _as_dtype(dtype, self._default_dtype or torch.get_default_dtype())
        shape = _DEFAULT_SHAPE if shape is None else shape
        super().__init__(shape, device, dtype, _check_domain(domain, dtype, "Unbounded"))

    @property
    def space(self) -> ContinuousBox:
        """The value range of the dtype: its smallest and largest finite values.

        It can be set to that same range only (or, for floats, to ``-inf .. inf``): a spec
        with other bounds is a :class:`Bounded`.
        """
        low, high = _finite_limits(self.dtype)
        shape = _safe_shape(self.shape)
        return ContinuousBox(
            torch.full(shape, low, dtype=self.dtype, device=self.device),
            torch.full(shape, high, dtype=self.dtype, device=self.device),
        )

    @space.setter
    def space(self, box: ContinuousBox) -> None:
        if not isinstance(box, ContinuousBox):
            raise TypeError(f"Unbounded.space: expected a ContinuousBox, got {type(box).__name__}")
        if not _spans_dtype(torch.as_tensor(box.low), torch.as_tensor(box.high), self.dtype):
            raise ValueError(
                f"Unbounded.space: an Unbounded spec spans the whole range of {self.dtype}; "
                "use Bounded(low, high, ...) for other bounds"
            )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Bounded):
            return other == self
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """Every value of a bool dtype; other dtypes have too many values (RuntimeError)."""
        if self.dtype == torch.bool:
            values = torch.tensor([False, True], device=self.device)
            view = values.reshape(2, *([1] * self.ndim))
            return view.expand(2, *_safe_shape(self.shape)).clone()
        return super().enumerate(use_mask)

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        dtype = self.dtype
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(shape, dtype=dtype, device=self.device)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, device=self.device).bool()
        info = torch.iinfo(dtype)
        low = max(info.min, _UNBOUNDED_INT_RANGE[0])
        high = min(info.max, _UNBOUNDED_INT_RANGE[1])
        return torch.randint(low, high, shape, dtype=dtype, device=self.device)

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        if val.dtype == self.dtype:
            return val
        if (
            not (self.dtype.is_floating_point or self.dtype.is_complex)
            and val.dtype.is_floating_point
        ):
            low, high = _dtype_limits(self.dtype)
            val = torch.nan_to_num(val).round().clamp(low, high)
        return val.to(self.dtype)

    def _cast_dtype(self, dtype: torch.dtype) -> TensorSpec:
        out = self._copy()
        out.dtype = dtype
        out.domain = _domain_of(dtype)
        return out

    def cardinality(self) -> int | float:
        """Number of values of the (integer) dtype; ``inf`` for continuous specs."""
        if self.domain == "continuous":
            return super().cardinality()
        low, high = _dtype_limits(self.dtype)
        return int(high - low + 1)


class UnboundedContinuous(Unbounded):
    """An :class:`Unbounded` spec whose dtype defaults to torch's default float dtype.

    Examples:
        >>> UnboundedContinuous((2,)).dtype
        torch.float32
    """


class UnboundedDiscrete(Unbounded):
    """An :class:`Unbounded` spec whose dtype defaults to ``torch.int64``.

    Examples:
        >>> UnboundedDiscrete((2,)).dtype
        torch.int64
    """

    _default_dtype = torch.int64


def _bound_tensor(value: Any, name: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype)
    try:
        return torch.as_tensor(value, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"Bounded: {name} must be a number or a tensor, got {value!r}") from err


class Bounded(TensorSpec):
    """Values in the interval ``[low, high]`` (per element).

    Args:
        low: lower bound, a number or a tensor broadcastable to ``shape``.
        high: upper bound, a number or a tensor broadcastable to ``shape``.
        shape: shape of the entry. When omitted it is the broadcast shape of ``low`` and
            ``high`` (``()`` for two numbers).
        device: device of the values.
        dtype: dtype of the values (default: torch's default float dtype). Integer dtypes
            give a discrete spec whose values are the integers in ``[low, high]``.
        domain: "continuous" or "discrete"; inferred from ``dtype`` when omitted.

    ``low`` and ``high`` are stored as tensors of the spec's shape.

    Examples:
        >>> import torch
        >>> spec = Bounded(low=-1.0, high=1.0, shape=(2,))
        >>> spec.low
        tensor([-1., -1.])
        >>> bool(((spec.rand() >= -1) & (spec.rand() <= 1)).all())
        True
        >>> spec.project(torch.tensor([3.0, -0.5]))
        tensor([ 1.0000, -0.5000])
        >>> Bounded(0, 4, shape=(), dtype=torch.int64).cardinality()
        5
    """

    _kind = "bounded"
    _shaped_tensors = ("low", "high")
    _default_dtype: torch.dtype | None = None

    def __init__(
        self,
        low: float | torch.Tensor | Any,
        high: float | torch.Tensor | Any,
        shape: ShapeLike | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = None,
        domain: str | None = None,
    ) -> None:
        default = self._default_dtype or torch.get_default_dtype()
        if dtype is None and domain == "discrete":
            default = torch.int64
        dtype = _as_dtype(dtype, default)
        domain = _check_domain(domain, dtype, "Bounded")
        shape = _as_shape(shape)
        device_ = torch.device(device) if device is not None else None
        if device_ is None:
            device_ = low.device if isinstance(low, torch.Tensor) else torch.get_default_device()
        low_t = _bound_tensor(low, "low", dtype, device_)
        high_t = _bound_tensor(high, "high", dtype, device_)
        if shape is None:
            try:
                shape = torch.broadcast_shapes(low_t.shape, high_t.shape)
            except RuntimeError as err:
                raise ValueError(
                    f"Bounded: low of shape {tuple(low_t.shape)} and high of shape "
                    f"{tuple(high_t.shape)} cannot be broadcast together"
                ) from err
        super().__init__(shape, device_, dtype, domain)
        self.low, self.high = self._bounds(low_t, high_t)

    def _bounds(self, low: torch.Tensor, high: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``low`` / ``high`` broadcast to the spec's shape (own memory, so they can be edited)."""
        safe = _safe_shape(self.shape)
        try:
            low = low.expand(safe).clone()
            high = high.expand(safe).clone()
        except RuntimeError as err:
            raise ValueError(
                f"Bounded: low/high of shapes {tuple(low.shape)} / {tuple(high.shape)} "
                f"cannot be broadcast to the spec shape {tuple(self.shape)}"
            ) from err
        if (low > high).any():
            raise ValueError(
                f"Bounded: expected low <= high everywhere, got low={low.tolist()} "
                f"and high={high.tolist()}"
            )
        return low, high

    @property
    def space(self) -> ContinuousBox:
        """The ``[low, high]`` box; setting a :class:`ContinuousBox` replaces the bounds."""
        return ContinuousBox(self.low, self.high)

    @space.setter
    def space(self, box: ContinuousBox) -> None:
        if not isinstance(box, ContinuousBox):
            raise TypeError(f"Bounded.space: expected a ContinuousBox, got {type(box).__name__}")
        low = _bound_tensor(box.low, "low", self.dtype, self.device)
        high = _bound_tensor(box.high, "high", self.dtype, self.device)
        self.low, self.high = self._bounds(low, high)

    @property
    def minimum(self) -> torch.Tensor:
        """Legacy name of :attr:`low`."""
        return self.low

    @property
    def maximum(self) -> torch.Tensor:
        """Legacy name of :attr:`high`."""
        return self.high

    def _scale(self) -> tuple[torch.Tensor, bool]:
        """``high - low`` and whether it is finite everywhere, cached per bound tensors."""
        cache = self.__dict__.get("_scale_cache")
        if cache is not None and cache[0] is self.low and cache[1] is self.high:
            return cache[2], cache[3]
        scale = self.high - self.low
        finite = bool(torch.isfinite(scale).all())
        self._scale_cache = (self.low, self.high, scale, finite)
        return scale, finite

    def _uniform_int_bounds(self) -> tuple[int, int] | None:
        """``(low, high)`` as ints when they are the same for every element (cached)."""
        cache = self.__dict__.get("_int_cache")
        if cache is not None and cache[0] is self.low and cache[1] is self.high:
            return cache[2]
        low, high = self.low.flatten(), self.high.flatten()
        bounds = None
        if (
            low.numel()
            and bool((low == low[0]).all())
            and bool((high == high[0]).all())
            and bool(torch.isfinite(low[0].double()))
            and bool(torch.isfinite(high[0].double()))
            and abs(float(high[0]) - float(low[0])) < 2**62
        ):
            bounds = (int(low[0]), int(high[0]))
        self._int_cache = (self.low, self.high, bounds)
        return bounds

    def _uniform_float_bounds(self) -> tuple[float, float] | None:
        """``(low, high)`` as floats when real, finite and equal everywhere (cached)."""
        cache = self.__dict__.get("_float_cache")
        if cache is not None and cache[0] is self.low and cache[1] is self.high:
            return cache[2]
        low, high = self.low.flatten(), self.high.flatten()
        bounds = None
        if (
            self.dtype.is_floating_point
            and low.numel()
            and bool((low == low[0]).all())
            and bool((high == high[0]).all())
            and bool(torch.isfinite(low[0]))
            and bool(torch.isfinite(high[0]))
        ):
            bounds = (float(low[0]), float(high[0]))
        self._float_cache = (self.low, self.high, bounds)
        return bounds

    def _rand(self, shape: torch.Size) -> torch.Tensor:
        low, high = self.low, self.high
        if self.domain == "discrete" or not (self.dtype.is_floating_point or self.dtype.is_complex):
            bounds = self._uniform_int_bounds()
            if bounds is not None:
                return torch.randint(bounds[0], bounds[1] + 1, shape, device=self.device).to(
                    self.dtype
                )
            return _randint_like_range(low, high, shape, self.dtype, self.device)
        bounds = self._uniform_float_bounds()
        if bounds is not None:
            # one kernel for the common case of the same finite bounds everywhere; below
            # float64 the sample is computed in a wider type and rounds into [low, high]
            low_f, high_f = bounds
            sample = torch.empty(shape, dtype=self.dtype, device=self.device)
            sample.uniform_(low_f, high_f)
            return sample.clamp_(low_f, high_f) if self.dtype == torch.float64 else sample
        scale, finite = self._scale()
        if finite:
            sample = torch.rand(shape, dtype=self.dtype, device=self.device).mul_(scale).add_(low)
            return sample.clamp_(low, high)
        finite_mask = torch.isfinite(scale)
        uniform = torch.rand(shape, dtype=self.dtype, device=self.device) * torch.where(
            finite_mask, scale, 0
        ) + torch.where(finite_mask, low, 0)
        normal = torch.randn(shape, dtype=self.dtype, device=self.device) + torch.where(
            torch.isfinite(low), low, torch.where(torch.isfinite(high), high, 0)
        )
        return torch.where(finite_mask, uniform, normal).clamp_(low, high)

    def _in_domain(self, val: torch.Tensor) -> bool:
        low, high = self.low, self.high
        if low.device != val.device:
            low, high = low.to(val.device), high.to(val.device)
        return bool((val >= low).all()) and bool((val <= high).all())

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        if val.dtype.is_floating_point:
            val = torch.nan_to_num(val)
            if not (self.dtype.is_floating_point or self.dtype.is_complex):
                val = val.round()
        if val.dtype != self.dtype:
            val = val.to(self.dtype)
        return torch.minimum(torch.maximum(val, self.low), self.high)

    def _cast_dtype(self, dtype: torch.dtype) -> TensorSpec:
        out = self._copy()
        out.dtype = dtype
        out.domain = _domain_of(dtype)
        out.low = self.low.to(dtype)
        out.high = self.high.to(dtype)
        return out

    def _same_attributes(self, other: TensorSpec) -> bool:
        return torch.equal(self.low, other.low.to(self.device)) and torch.equal(
            self.high, other.high.to(self.device)
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Unbounded):
            # an Unbounded spec is the Bounded spec spanning its dtype's whole range
            return (
                self.shape == other.shape
                and self.dtype == other.dtype
                and self.device == other.device
                and self.domain == other.domain
                and _spans_dtype(self.low, self.high, self.dtype)
            )
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def enumerate(self, use_mask: bool = False) -> torch.Tensor:
        """The integers in ``[low, high]`` (same bounds everywhere), shape ``(k, *shape)``."""
        bounds = self._uniform_int_bounds() if self.domain == "discrete" else None
        if bounds is None:
            return super().enumerate(use_mask)
        values = torch.arange(bounds[0], bounds[1] + 1, device=self.device).to(self.dtype)
        view = values.reshape(-1, *([1] * self.ndim))
        return view.expand(values.shape[0], *_safe_shape(self.shape)).clone()

    def cardinality(self) -> int | float:
        """Number of integers in ``[low, high]`` (same bounds everywhere); ``inf`` if continuous."""
        if self.domain == "continuous":
            return super().cardinality()
        counts = (self.high.to(torch.float64) - self.low.to(torch.float64) + 1).flatten()
        if counts.numel() == 0:
            return 0
        if not bool((counts == counts[0]).all()):
            raise ValueError("Bounded.cardinality: bounds differ between elements")
        return int(counts[0])

    def _repr_extra(self) -> str:
        low, high = self.low, self.high
        if (
            low.numel()
            and bool((low == low.flatten()[0]).all())
            and bool((high == high.flatten()[0]).all())
        ):
            return f"low={low.flatten()[0].item()}, high={high.flatten()[0].item()}"
        return f"low={low.tolist()}, high={high.tolist()}"


class BoundedContinuous(Bounded):
    """A :class:`Bounded` spec whose dtype defaults to torch's default float dtype.

    Examples:
        >>> BoundedContinuous(0.0, 1.0, shape=(2,)).domain
        'continuous'
    """


class BoundedDiscrete(Bounded):
    """A :class:`Bounded` spec whose dtype defaults to ``torch.int64`` (integers in ``[low, high]``).

    Examples:
        >>> BoundedDiscrete(0, 3, shape=(2,)).dtype
        torch.int64
    """

    _default_dtype = torch.int64
