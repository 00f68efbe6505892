""":class:`R3MTransform`: R3M visual embeddings (Nair et al., 2022) of image observations.

Follows the R3M release (facebookresearch/r3m, 2022): a torchvision ResNet-18/34/50 whose
``fc`` is removed, fed with ImageNet-normalised images; checkpoints (``model.pt``) hold the
network under ``"r3m"`` with keys ``module.convnet.<resnet keys>``.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from tdrl.envs.transforms._encoder import (
    PretrainedEncoder,
    fetch_weights,
    image_pipeline,
    load_checkpoint,
    resolve_keys,
)
from tdrl.envs.transforms._vision_nets import resnet, resnet_width
from tdrl.envs.transforms.transform import NestedKey

__all__ = ["R3MTransform"]

_MODELS = {"resnet18": 18, "resnet34": 34, "resnet50": 50}
# the R3M authors' published checkpoints (Google Drive files of the r3m repository)
_URLS = {
    "resnet18": "https://drive.google.com/uc?id=1A1ic-p4KtYlKXdXHcV2QV0cUzI4kn0u-",
    "resnet34": "https://drive.google.com/uc?id=15bXD3QRhspIRacOKyWPw5y2HpoWUCEnE",
    "resnet50": "https://drive.google.com/uc?id=1Xu0ssuG0N1zjZS54wmWzJ7-nb0-7XzbA",
}


def _default_path(model_name: str) -> Path:
    return Path(os.path.expanduser("~")) / ".r3m" / f"r3m_{_MODELS[model_name]}" / "model.pt"


class R3MTransform(PretrainedEncoder):
    """Replaces image observations by their R3M embeddings.

    Images (``[..., H, W, 3]`` uint8 or ``[..., 3, H, W]`` float in ``[0, 1]``) are resized
    to ``size`` x ``size``, normalised with the ImageNet statistics and encoded by a ResNet
    (512 features for ResNet-18/34, 2048 for ResNet-50). The network is randomly
    initialised unless ``download`` is True: the R3M checkpoint is then read from
    ``download_path`` (default ``~/.r3m/r3m_<depth>/model.pt``, where the r3m package keeps
    it), downloaded there first when missing.

    Args:
        model_name: ``"resnet18"``, ``"resnet34"`` or ``"resnet50"``.
        in_keys: the image entries (default ``["pixels"]``); they are removed.
        out_keys: where the embeddings go (default ``["r3m_vec"]``).
        size: the side images are resized to.
        stack_images: with several ``in_keys``, encode the images together and concatenate
            their embeddings into one entry; otherwise one entry per image.
        download: load the published weights.
        download_path: the checkpoint file.
        tensor_pixels_keys: keep a copy of the float ``[3, H, W]`` images (before resizing)
            under these keys, one per ``in_keys`` entry.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> r3m = R3MTransform("resnet18", in_keys=["pixels"], out_keys=["vec"], size=32)
        >>> td = r3m(TensorDict({"pixels": torch.randint(255, (2, 40, 40, 3), dtype=torch.uint8)}, [2]))
        >>> td["vec"].shape, "pixels" in td.keys()
        (torch.Size([2, 512]), False)
    """

    def __init__(
        self,
        model_name: str,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
        size: int = 244,
        stack_images: bool = True,
        download: bool = False,
        download_path: str | os.PathLike | None = None,
        tensor_pixels_keys: list[NestedKey] | None = None,
    ) -> None:
        if model_name not in _MODELS:
            raise ValueError(
                f"R3MTransform model_name: expected one of {list(_MODELS)}, got {model_name!r}"
            )
        in_keys, out_keys = resolve_keys(in_keys, out_keys, "r3m_vec", stack_images)
        net = resnet(_MODELS[model_name])
        net.fc = nn.Identity()
        if download:
            path = Path(download_path) if download_path is not None else _default_path(model_name)
            fetch_weights(path, _URLS[model_name], "R3MTransform")
            load_checkpoint(
                net,
                path,
                entry="r3m",
                strip=("module.", "convnet."),
                keep=lambda name: not name.startswith(("lang_enc", "lang_rew")),
            )
        self.model_name = model_name
        super().__init__(
            *image_pipeline(
                in_keys,
                out_keys,
                net,
                resnet_width(_MODELS[model_name]),
                size=size,
                stack_images=stack_images,
                tensor_pixels_keys=tensor_pixels_keys,
            )
        )
