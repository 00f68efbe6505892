"""Image transforms: layout and scale (ToTensorImage), size (Resize, Crop, CenterCrop), colour.

All of them work on tensors with any number of leading (batch, time) dims and use
plain torch operations (``torch.nn.functional.interpolate`` for resizing), so they
run on any device without torchvision. Their spec hooks map the bounds of a
``Bounded`` pixel spec through the same operation, so ``check_env_specs`` holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tdrl.data import Bounded, Composite
from tdrl.envs.transforms.transform import (
    NestedKey,
    ObservationTransform,
    _unlocked_clone,
    map_output_specs,
)

__all__ = ["CenterCrop", "Crop", "GrayScale", "Resize", "ToTensorImage"]

IMAGE_KEYS = ["pixels"]
INTERPOLATION_MODES = ("nearest", "nearest-exact", "bilinear", "bicubic", "area")
# ITU-R 601-2 luma weights (the ones torchvision uses)
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
IMAGE_NDIM_ERROR = (
    "{owner}: expected an image with at least {ndim} dims ({layout}), got shape {shape}"
)


def _check_size(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner} {name}: expected an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{owner} {name}: expected a positive size, got {value}")
    return value


def _check_image(owner: str, value: torch.Tensor, ndim: int, layout: str) -> None:
    if value.ndim < ndim:
        raise ValueError(
            IMAGE_NDIM_ERROR.format(owner=owner, ndim=ndim, layout=layout, shape=tuple(value.shape))
        )


def _image_spec(
    spec: Any,
    fn: Callable[[torch.Tensor], torch.Tensor],
    shape: torch.Size,
    dtype: torch.dtype | None = None,
) -> Any:
    """``spec`` seen through the image map ``fn``: new shape, dtype, and mapped bounds."""
    dtype = spec.dtype if dtype is None else dtype
    if isinstance(spec, Bounded):
        return Bounded(
            low=fn(spec.low).to(dtype),
            high=fn(spec.high).to(dtype),
            shape=shape,
            device=spec.device,
            dtype=dtype,
        )
    out = spec._with_shape(shape, fn)
    return out if out.dtype == dtype else out._cast_dtype(dtype)


class _ImageTransform(ObservationTransform):
    """Spec plumbing shared by the image transforms: every ``in_keys`` entry must exist."""

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None,
        out_keys: Sequence[NestedKey] | NestedKey | None,
    ) -> None:
        super().__init__(in_keys=IMAGE_KEYS if in_keys is None else in_keys, out_keys=out_keys)

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Map the spec of each ``in_keys`` entry, written under its ``out_keys`` name."""
        output_spec = _unlocked_clone(output_spec)
        return map_output_specs(
            self, output_spec, self.in_keys, self.out_keys, self._transform_spec
        )

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Map the ``in_keys`` entries of a Composite, or a leaf spec (that of the entry)."""
        if not isinstance(observation_spec, Composite):
            return self._transform_spec(observation_spec)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec.keys(True):
                observation_spec[out_key] = self._transform_spec(observation_spec[in_key].clone())
        return observation_spec


class ToTensorImage(_ImageTransform):
    """Turns ``(*, H, W, C)`` integer images into ``(*, C, H, W)`` float images in ``[0, 1]``.

    The channel dim moves before the height and width dims (leading dims are kept),
    integer values are divided by 255 and the result is cast to ``dtype``.

    Args:
        from_int: divide by 255. None (default) divides integer inputs only.
        unsqueeze: add a leading dim to unbatched (3-dim) images.
        dtype: the output dtype (default: torch's default float dtype).

    Keyword Args:
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where to write the results (default: in place).
        shape_tolerant: leave entries whose last dim is not a channel dim (1 or 3)
            in their layout (only scaled and cast).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import ToTensorImage
        >>> td = TensorDict({"pixels": torch.full((8, 6, 3), 255, dtype=torch.uint8)}, [])
        >>> out = ToTensorImage()(td)["pixels"]
        >>> out.shape, out.dtype, out.max().item()
        (torch.Size([3, 8, 6]), torch.float32, 1.0)
    """

    def __init__(
        self,
        from_int: bool | None = None,
        unsqueeze: bool = False,
        dtype: torch.dtype | None = None,
        *,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        shape_tolerant: bool = False,
    ) -> None:
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"ToTensorImage dtype: expected a floating torch.dtype, got {dtype!r}")
        super().__init__(in_keys, out_keys)
        self.from_int = from_int
        self.unsqueeze = unsqueeze
        self.dtype = dtype
        self.shape_tolerant = shape_tolerant

    def _permutes(self, shape: torch.Size) -> bool:
        return not self.shape_tolerant or (len(shape) >= 3 and shape[-1] in (1, 3))

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self._permutes(value.shape):
            _check_image("ToTensorImage", value, 3, "H, W, C")
            value = value.movedim(-1, -3)
        scale = self.from_int
        if scale is None:
            scale = not value.dtype.is_floating_point
        if scale:
            if value.dtype == self.dtype:
                value = value.div(255)
            else:
                value = value.to(self.dtype).div_(255)
        elif value.dtype != self.dtype:
            value = value.to(self.dtype)
        if self.unsqueeze and value.ndim == 3:
            value = value.unsqueeze(0)
        return value

    def _transform_spec(self, spec: Any) -> Any:
        shape = spec.shape
        if self._permutes(shape):
            if len(shape) < 3:
                raise ValueError(
                    f"ToTensorImage: expected an image spec of at least 3 dims (H, W, C), "
                    f"got shape {tuple(shape)}"
                )
            shape = torch.Size((*shape[:-3], shape[-1], shape[-3], shape[-2]))
        if self.unsqueeze and len(shape) == 3:
            shape = torch.Size((1, *shape))
        return _image_spec(spec, self._apply_transform, shape, self.dtype)

    def __repr__(self) -> str:
        return (
            f"ToTensorImage(from_int={self.from_int}, unsqueeze={self.unsqueeze}, "
            f"dtype={self.dtype}, in_keys={self.in_keys}, out_keys={self.out_keys})"
        )


def _as_batch4d(value: torch.Tensor) -> tuple[torch.Tensor, torch.Size]:
    """A 4-dim ``(N, C, H, W)`` view of a ``(*, C, H, W)`` or ``(H, W)`` image, and its lead."""
    if value.ndim == 4:
        return value, value.shape[:1]
    if value.ndim == 3:
        return value.unsqueeze(0), torch.Size()
    if value.ndim == 2:
        return value.reshape(1, 1, *value.shape), torch.Size()
    lead = value.shape[:-3]
    return value.reshape(-1, *value.shape[-3:]), lead


class Resize(_ImageTransform):
    """Resizes ``(*, C, H, W)`` images with ``torch.nn.functional.interpolate``.

    As in the reference API, the last two dims of the output are ``(w, h)``.
    Bilinear and bicubic resizing are antialiased. Integer images are resized in
    float and rounded back to their dtype. Bilinear and bicubic outputs are clamped
    to the value range of their input image (bicubic overshoots, and antialiasing
    weights sum to 1 only up to rounding): every image stays within its own range,
    hence within any ``Bounded`` spec, and the result only depends on the data, so
    an env and a replay buffer give the same values.

    Args:
        w: the size of the second-to-last output dim.
        h: the size of the last output dim (default: ``w``).
        interpolation: one of ``"bilinear"`` (default), ``"bicubic"``, ``"nearest"``,
            ``"nearest-exact"`` or ``"area"``.
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where to write the results (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import Resize
        >>> td = TensorDict({"pixels": torch.rand(2, 3, 40, 60)}, [2])
        >>> Resize(16, 16)(td)["pixels"].shape
        torch.Size([2, 3, 16, 16])
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        interpolation: str = "bilinear",
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        w = _check_size("Resize", "w", w)
        h = w if h is None else _check_size("Resize", "h", h)
        mode = getattr(interpolation, "value", interpolation)
        if mode not in INTERPOLATION_MODES:
            raise ValueError(
                f"Resize interpolation: expected one of {list(INTERPOLATION_MODES)}, "
                f"got {interpolation!r}"
            )
        super().__init__(in_keys, out_keys)
        self.w = w
        self.h = h
        self.interpolation = mode
        self._kwargs: dict = {"size": (w, h), "mode": mode}
        if mode in ("bilinear", "bicubic"):
            self._kwargs.update(align_corners=False, antialias=True)
        # bicubic weights can be negative and antialiased weights sum to 1 only up to
        # rounding; the other modes copy or average input pixels exactly
        self._overshoots = mode in ("bilinear", "bicubic")

    def _interpolate(self, batch: torch.Tensor) -> torch.Tensor:
        out = F.interpolate(batch, **self._kwargs)
        if self._overshoots:
            # two plain reductions: torch.aminmax along a dim is many times slower on CPU
            flat = batch.flatten(1)
            shape = (-1, 1, 1, 1)
            out = out.clamp_(flat.amin(1).view(shape), flat.amax(1).view(shape))
        return out

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image("Resize", value, 2, "*, C, H, W")
        batch, lead = _as_batch4d(value)
        if value.dtype.is_floating_point:
            out = self._interpolate(batch)
        else:
            info = torch.iinfo(value.dtype)
            out = self._interpolate(batch.float())
            out = out.round_().clamp_(info.min, info.max).to(value.dtype)
        if value.ndim == 2:
            return out.reshape(out.shape[-2:])
        return out.reshape(*lead, *out.shape[1:])

    def _transform_spec(self, spec: Any) -> Any:
        if len(spec.shape) < 2:
            raise ValueError(
                f"Resize: expected an image spec of at least 2 dims (H, W), "
                f"got shape {tuple(spec.shape)}"
            )
        shape = torch.Size((*spec.shape[:-2], self.w, self.h))
        if not isinstance(spec, Bounded):
            return _image_spec(spec, self._apply_transform, shape)
        low, high = spec.low, spec.high
        if bool((low == low.min()).all()) and bool((high == high.min()).all()):
            low, high = low.min().item(), high.min().item()
        else:
            low, high = self._apply_transform(low), self._apply_transform(high)
        return Bounded(low, high, shape=shape, device=spec.device, dtype=spec.dtype)

    def __repr__(self) -> str:
        return (
            f"Resize(w={self.w}, h={self.h}, interpolation={self.interpolation!r}, "
            f"in_keys={self.in_keys}, out_keys={self.out_keys})"
        )


class Crop(_ImageTransform):
    """Crops ``(*, C, H, W)`` images to a ``(w, h)`` window whose corner is ``(top, left)``.

    The crop is a view of the input (no copy). As in the reference API, ``w`` is
    the size along the height dim and ``h`` the size along the width dim.

    Args:
        w: the size of the window along the second-to-last dim.
        h: the size along the last dim (default: ``w``).
        top: the first row of the window.
        left: the first column of the window.
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where to write the results (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import Crop
        >>> td = TensorDict({"pixels": torch.arange(16.0).reshape(1, 4, 4)}, [])
        >>> Crop(2, 2, top=1, left=2)(td)["pixels"]
        tensor([[[ 6.,  7.],
                 [10., 11.]]])
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        top: int = 0,
        left: int = 0,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        owner = type(self).__name__
        w = _check_size(owner, "w", w)
        h = w if h is None else _check_size(owner, "h", h)
        for name, value in (("top", top), ("left", left)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{owner} {name}: expected a non-negative int, got {value!r}")
        super().__init__(in_keys, out_keys)
        self.w = w
        self.h = h
        self.top = top
        self.left = left

    def _corner(self, height: int, width: int) -> tuple[int, int]:
        return self.top, self.left

    def _window(self, shape: torch.Size) -> tuple[int, int]:
        if len(shape) < 2:
            raise ValueError(
                f"{type(self).__name__}: expected an image of at least 2 dims (H, W), "
                f"got shape {tuple(shape)}"
            )
        height, width = shape[-2], shape[-1]
        top, left = self._corner(height, width)
        if top + self.w > height or left + self.h > width:
            raise ValueError(
                f"{type(self).__name__}: the window of size ({self.w}, {self.h}) at "
                f"(top={top}, left={left}) does not fit in an image of size ({height}, {width})"
            )
        return top, left

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        top, left = self._window(value.shape)
        return value[..., top : top + self.w, left : left + self.h]

    def _transform_spec(self, spec: Any) -> Any:
        self._window(spec.shape)
        shape = torch.Size((*spec.shape[:-2], self.w, self.h))
        return _image_spec(spec, self._apply_transform, shape)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(w={self.w}, h={self.h}, top={self.top}, left={self.left}, "
            f"in_keys={self.in_keys}, out_keys={self.out_keys})"
        )


class CenterCrop(Crop):
    """Crops the central ``(w, h)`` window of ``(*, C, H, W)`` images.

    Args:
        w: the size of the window along the second-to-last dim.
        h: the size along the last dim (default: ``w``).
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where to write the results (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import CenterCrop
        >>> td = TensorDict({"pixels": torch.arange(16.0).reshape(1, 4, 4)}, [])
        >>> CenterCrop(2)(td)["pixels"]
        tensor([[[ 5.,  6.],
                 [ 9., 10.]]])
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__(w, h, in_keys=in_keys, out_keys=out_keys)

    def _corner(self, height: int, width: int) -> tuple[int, int]:
        return int(round((height - self.w) / 2.0)), int(round((width - self.h) / 2.0))

    def __repr__(self) -> str:
        return (
            f"CenterCrop(w={self.w}, h={self.h}, in_keys={self.in_keys}, out_keys={self.out_keys})"
        )


class GrayScale(_ImageTransform):
    """Turns ``(*, 3, H, W)`` RGB images into ``(*, 1, H, W)`` luminance images.

    Uses the ITU-R 601-2 weights (0.2989, 0.587, 0.114). Integer images are
    converted in float and cast back (truncating), like torchvision does.

    Args:
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where to write the results (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import GrayScale
        >>> td = TensorDict({"pixels": torch.ones(2, 3, 4, 4)}, [2])
        >>> out = GrayScale()(td)["pixels"]
        >>> out.shape, round(out.max().item(), 4)
        (torch.Size([2, 1, 4, 4]), 0.9999)
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.ndim < 3 or value.shape[-3] != 3:
            raise ValueError(
                f"GrayScale: expected an RGB image of shape (*, 3, H, W), got shape "
                f"{tuple(value.shape)}"
            )
        dtype = value.dtype
        if not dtype.is_floating_point:
            value = value.float()
        red, green, blue = value.unbind(-3)
        gray = red.mul(GRAY_WEIGHTS[0]).add_(green, alpha=GRAY_WEIGHTS[1])
        gray = gray.add_(blue, alpha=GRAY_WEIGHTS[2]).unsqueeze(-3)
        return gray if gray.dtype == dtype else gray.to(dtype)

    def _transform_spec(self, spec: Any) -> Any:
        if len(spec.shape) < 3 or spec.shape[-3] != 3:
            raise ValueError(
                f"GrayScale: expected an RGB image spec of shape (*, 3, H, W), got shape "
                f"{tuple(spec.shape)}"
            )
        shape = torch.Size((*spec.shape[:-3], 1, *spec.shape[-2:]))
        return _image_spec(spec, self._apply_transform, shape)

    def __repr__(self) -> str:
        return f"GrayScale(in_keys={self.in_keys}, out_keys={self.out_keys})"
