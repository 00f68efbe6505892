""":class:`VC1Transform`: VC-1 visual embeddings (Majumdar et al., 2023) of image observations.

Follows the VC-1 release (facebookresearch/eai-vc, vc_models 0.1): an MAE-pretrained ViT
(timm layout) whose output is the class token after the final norm, fed with images resized
to 256, centre-cropped to 224 and ImageNet-normalised; checkpoints hold the encoder under
``"model"`` (decoder and mask-token entries are ignored).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from tdrl.envs.transforms._encoder import (
    PretrainedEncoder,
    fetch_weights,
    image_pipeline,
    load_checkpoint,
    resolve_keys,
)
from tdrl.envs.transforms._vision_nets import VisionTransformer
from tdrl.envs.transforms.transform import NestedKey

__all__ = ["VC1Transform"]

_has_vc = importlib.util.find_spec("vc_models") is not None

_BASE_URL = "https://dl.fbaipublicfiles.com/eai-vc"
# model name -> ViT shape (embedding size, depth, heads); "default" is a small untrained ViT
_MODELS = {
    "vc1_vitb": (768, 12, 12),
    "vc1_vitl": (1024, 24, 16),
    "default": (16, 1, 1),
}


class VC1Transform(PretrainedEncoder):
    """Replaces image observations by their VC-1 embeddings.

    Images (``[..., H, W, 3]`` uint8 or ``[..., 3, H, W]`` float in ``[0, 1]``) are resized
    to 256 x 256 (bicubic), centre-cropped to 224 x 224, normalised with the ImageNet
    statistics and encoded by a ViT with 16 x 16 patches: ``"vc1_vitb"`` (768 features) or
    ``"vc1_vitl"`` (1024 features), whose published weights are read from
    ``download_path/<model_name>.pth`` (default folder ``~/.cache/tdrl/vc1``), downloaded
    there first when missing; ``"default"`` is a small randomly initialised ViT (16
    features) for tests and pipelines that do not need trained features.

    Args:
        in_keys: the image entries.
        out_keys: where the embeddings go (one per image entry).
        model_name: ``"vc1_vitb"``, ``"vc1_vitl"`` or ``"default"``.
        del_keys: remove the image entries.

    Keyword Args:
        download_path: the folder of the checkpoints.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> vc1 = VC1Transform(in_keys=["pixels"], out_keys=["vec"], model_name="default")
        >>> td = vc1(TensorDict({"pixels": torch.randint(255, (2, 64, 64, 3), dtype=torch.uint8)}, [2]))
        >>> td["vec"].shape, "pixels" in td.keys()
        (torch.Size([2, 16]), False)
    """

    def __init__(
        self,
        in_keys: list[NestedKey],
        out_keys: list[NestedKey],
        model_name: str,
        del_keys: bool = True,
        *,
        download_path: str | os.PathLike | None = None,
    ) -> None:
        if model_name not in _MODELS:
            raise ValueError(
                f"VC1Transform model_name: expected one of {list(_MODELS)}, got {model_name!r}"
            )
        in_keys, out_keys = resolve_keys(in_keys, out_keys, "vc1_vec", stack_images=False)
        dim, depth, heads = _MODELS[model_name]
        net = VisionTransformer(
            img_size=224, patch_size=16, embed_dim=dim, depth=depth, num_heads=heads
        )
        if model_name != "default":
            folder = Path(download_path) if download_path is not None else _default_folder()
            path = fetch_weights(
                folder / f"{model_name}.pth", f"{_BASE_URL}/{model_name}.pth", "VC1Transform"
            )

            def adapt(state: dict) -> dict:
                if "pos_embed" in state:
                    state["pos_embed"] = net.resize_pos_embed(state["pos_embed"])
                return state

            load_checkpoint(
                net,
                path,
                entry="model",
                keep=lambda name: "decoder" not in name and "mask_token" not in name,
                adapt=adapt,
            )
        self.model_name = model_name
        super().__init__(
            *image_pipeline(
                in_keys,
                out_keys,
                net,
                dim,
                size=256,
                crop=224,
                interpolation="bicubic",
                stack_images=False,
                del_keys=del_keys,
            )
        )


def _default_folder() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "tdrl" / "vc1"
