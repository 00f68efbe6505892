"""Shared machinery of the pretrained image encoders (R3M, VIP, VC-1).

An encoder transform is a :class:`Compose` of the usual image transforms (to float CHW in
``[0, 1]``, resize, crop, ImageNet normalisation, optional stacking of several images) and
:class:`EncoderNet`, which runs the frozen network and writes the embeddings.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.data import Unbounded
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.images import CenterCrop, Resize, ToTensorImage
from tdrl.envs.transforms.keys import CatTensors, RenameTransform
from tdrl.envs.transforms.normalization import ObservationNorm
from tdrl.envs.transforms.shapes import UnsqueezeTransform
from tdrl.envs.transforms.transform import NestedKey, ObservationTransform, _normalize_keys

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class EncoderNet(ObservationTransform):
    """Runs a frozen image network on ``in_keys`` entries and writes the embeddings to ``out_keys``.

    Images are float ``[..., 3, H, W]``; with ``stacked``, the entry holds several images
    (``[..., n, 3, H, W]``) whose embeddings are concatenated (``[..., n * out_dim]``).

    Args:
        in_keys: the image entries.
        out_keys: where the embeddings go (one per ``in_keys`` entry).
        net: maps ``[N, 3, H, W]`` images to ``[N, out_dim]`` embeddings.
        out_dim: the embedding size.
        del_keys: remove the image entries.
        stacked: the entries hold stacks of images (see above).
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey],
        net: nn.Module,
        out_dim: int,
        del_keys: bool = True,
        stacked: bool = False,
    ) -> None:
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if len(self.in_keys) != len(self.out_keys):
            raise ValueError(
                f"{type(self).__name__}: expected one out_keys entry per in_keys entry, got "
                f"in_keys={self.in_keys} and out_keys={self.out_keys}"
            )
        self.net = net.eval().requires_grad_(False)
        self.out_dim = int(out_dim)
        self.del_keys = bool(del_keys)
        self.stacked = bool(stacked)

    @property
    def device(self) -> torch.device:
        """Where the network runs."""
        return next(self.net.parameters()).device

    def _embed(self, images: torch.Tensor) -> torch.Tensor:
        if images.ndim < 3 or images.shape[-3] != 3:
            raise ValueError(
                f"{type(self).__name__}: expected images of shape [..., 3, H, W], got {tuple(images.shape)}"
            )
        lead = images.shape[:-3]
        flat = images.reshape(-1, *images.shape[-3:]).to(self.device, torch.float32)
        with torch.no_grad():
            out = self.net(flat) if flat.shape[0] else flat.new_zeros(0, self.out_dim)
        out = out.reshape(*lead, self.out_dim).to(images.device)
        return out.flatten(-2) if self.stacked else out

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            images = next_tensordict.get(in_key, None)
            if images is None:
                if not self.missing_tolerance:
                    raise KeyError(
                        f"{type(self).__name__}: expected the image entry {in_key!r}, got keys "
                        f"{list(next_tensordict.keys(True, True))}"
                    )
                continue
            next_tensordict.set(out_key, self._embed(images))
            if self.del_keys:
                del next_tensordict[in_key]
        return next_tensordict

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Declare the embeddings (and drop the image entries when ``del_keys``)."""
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key not in observation_spec.keys(True):
                continue
            spec = observation_spec[in_key]
            lead = tuple(spec.shape[:-3])
            if self.stacked:
                lead, size = lead[:-1], lead[-1] * self.out_dim
            else:
                size = self.out_dim
            observation_spec[out_key] = Unbounded((*lead, size), device=spec.device)
            if self.del_keys:
                del observation_spec[in_key]
        return observation_spec


class ImageCheck(ObservationTransform):
    """Refuses entries that are not RGB images (``[..., H, W, 3]`` or ``[..., 3, H, W]``)."""

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.ndim < 3 or 3 not in (value.shape[-1], value.shape[-3]):
            raise ValueError(
                f"expected RGB images of shape [..., H, W, 3] or [..., 3, H, W], "
                f"got shape {tuple(value.shape)}"
            )
        return value

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys:
            value = next_tensordict.get(key, None)
            if value is None:
                continue
            try:
                self._apply_transform(value)
            except ValueError as err:
                raise ValueError(f"{key!r}: {err}") from None
        return next_tensordict


def image_pipeline(
    in_keys: list,
    out_keys: list,
    net: nn.Module,
    out_dim: int,
    *,
    size: int,
    crop: int | None = None,
    interpolation: str = "bilinear",
    stack_images: bool = True,
    tensor_pixels_keys: Sequence[NestedKey] | None = None,
    del_keys: bool = True,
    from_int: bool | None = None,
) -> list:
    """The transforms of an encoder: preprocessing of each image entry, then :class:`EncoderNet`."""
    transforms: list = [
        ImageCheck(in_keys=in_keys),
        ToTensorImage(from_int=from_int, in_keys=in_keys, shape_tolerant=True),
    ]
    if tensor_pixels_keys:
        copies = _normalize_keys(tensor_pixels_keys, "tensor_pixels_keys")
        if len(copies) != len(in_keys):
            raise ValueError(
                f"tensor_pixels_keys: expected one key per in_keys entry ({in_keys}), got {copies}"
            )
        transforms.append(RenameTransform(in_keys, copies, create_copy=True))
    transforms.append(Resize(size, size, interpolation=interpolation, in_keys=in_keys))
    if crop is not None:
        transforms.append(CenterCrop(crop, crop, in_keys=in_keys))
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    transforms.append(ObservationNorm(loc=mean, scale=std, in_keys=in_keys, standard_normal=True))
    stacked = stack_images and len(in_keys) > 1
    if stacked:
        stack_key = "_stacked_images"
        transforms.append(UnsqueezeTransform(-4, in_keys=in_keys))
        transforms.append(CatTensors(in_keys, stack_key, dim=-4, del_keys=True))
        in_keys = [stack_key]
    transforms.append(EncoderNet(in_keys, out_keys, net, out_dim, del_keys, stacked))
    return transforms


def resolve_keys(in_keys: Any, out_keys: Any, default_out: str, stack_images: bool) -> tuple:
    """Default keys: ``["pixels"]`` in, ``default_out`` out (numbered per image when not stacked)."""
    in_keys = _normalize_keys(in_keys if in_keys is not None else ["pixels"], "in_keys")
    if out_keys is None:
        if stack_images or len(in_keys) == 1:
            out_keys = [default_out]
        else:
            out_keys = [f"{default_out}_{i}" for i in range(len(in_keys))]
    out_keys = _normalize_keys(out_keys, "out_keys")
    expected = 1 if stack_images and len(in_keys) > 1 else len(in_keys)
    if len(out_keys) != expected:
        raise ValueError(
            f"out_keys: expected {expected} key(s) for in_keys={in_keys} with "
            f"stack_images={stack_images}, got {out_keys}"
        )
    return in_keys, out_keys


def fetch_weights(path: Path, url: str, purpose: str) -> Path:
    """Download a checkpoint to ``path`` unless it is there (Google Drive addresses use gdown)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        if "drive.google.com" in url:
            try:
                import gdown
            except ImportError as err:
                raise ImportError(
                    f"{purpose}: downloading the weights from Google Drive needs gdown: "
                    f"pip install gdown (or place the checkpoint at {path})"
                ) from err
            gdown.download(url, str(partial), quiet=False)
        else:
            urllib.request.urlretrieve(url, partial)
    except OSError as err:
        raise RuntimeError(
            f"{purpose}: download of {url} to {path} failed ({err}); place the checkpoint there "
            "by hand to load it without network access"
        ) from err
    os.replace(partial, path)
    return path


def load_checkpoint(
    net: nn.Module,
    path: Path,
    *,
    entry: str | None,
    strip: Sequence[str] = (),
    keep: Callable[[str], bool] = lambda name: True,
    adapt: Callable[[dict], dict] | None = None,
) -> None:
    """Load a checkpoint's state dict into ``net``, naming the file and the keys on mismatch."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unreadable or not a torch file
        raise RuntimeError(
            f"cannot read the checkpoint {path} ({type(err).__name__}: {err})"
        ) from err
    if entry is not None and isinstance(state, dict) and entry in state:
        state = state[entry]
    cleaned = {}
    for name, value in state.items():
        for prefix in strip:
            if name.startswith(prefix):
                name = name[len(prefix) :]
        if keep(name):
            cleaned[name] = value
    if adapt is not None:
        cleaned = adapt(cleaned)
    try:
        missing, unexpected = net.load_state_dict(cleaned, strict=False)
    except RuntimeError as err:  # shape mismatches
        raise RuntimeError(f"the checkpoint {path} does not match the network: {err}") from err
    if missing or unexpected:
        raise RuntimeError(
            f"the checkpoint {path} does not match the network: missing {sorted(missing)[:8]}, "
            f"unexpected {sorted(unexpected)[:8]}"
        )


class PretrainedEncoder(Compose):
    """Base of the encoder transforms: a :class:`Compose` ending with an :class:`EncoderNet`."""

    @property
    def net(self) -> EncoderNet:
        """The network transform of the chain."""
        return next(t for t in self.transforms if isinstance(t, EncoderNet))

    @property
    def device(self) -> torch.device:
        """Where the network runs."""
        return self.net.device

    @property
    def embedding_size(self) -> int:
        """The size of one image's embedding."""
        return self.net.out_dim

    def __repr__(self) -> str:
        images = self.transforms[0].in_keys
        return f"{type(self).__name__}(in_keys={images}, out_keys={self.net.out_keys})"
