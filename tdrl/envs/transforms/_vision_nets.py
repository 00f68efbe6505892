"""Image encoders in plain torch with the parameter names of their usual implementations.

:func:`resnet` builds torchvision's ResNet-18/34/50 (torchvision 0.28 layout: ``conv1``,
``bn1``, ``layer1``-``layer4`` of ``BasicBlock`` / ``Bottleneck`` with ``downsample``,
``fc``) and :class:`VisionTransformer` timm's ViT (timm 0.9 layout: ``patch_embed.proj``,
``cls_token``, ``pos_embed``, ``blocks.<i>.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}``,
``norm``), so published checkpoints of those layouts load with ``load_state_dict``.
torchvision itself is not used: its wheels on PyPI are built against CUDA torch and do not
import next to the CPU build of torch.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["VisionTransformer", "resnet", "resnet_width"]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1, 3x3 and 1x1 convolutions with a residual connection (ResNet-50, stride on the 3x3)."""

    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


_DEPTHS = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
}


class ResNet(nn.Module):
    """A ResNet for ImageNet-sized images (7x7 stem, four stages, average pool, ``fc``)."""

    def __init__(self, block: type, layers: tuple[int, ...], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(block, 64, layers[0], 1)
        self.layer2 = self._stage(block, 128, layers[1], 2)
        self.layer3 = self._stage(block, 256, layers[2], 2)
        self.layer4 = self._stage(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc: nn.Module = nn.Linear(512 * block.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def _stage(self, block: type, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, H, W]`` images to ``[N, out]`` features (the output of ``fc``)."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet_width(depth: int) -> int:
    """The number of features before ``fc`` of a ResNet of ``depth`` layers."""
    return 512 * _DEPTHS[depth][0].expansion


def resnet(depth: int) -> ResNet:
    """A randomly initialised ResNet-18, -34 or -50 (torchvision's layout).

    Examples:
        >>> net = resnet(18).eval()
        >>> net(torch.zeros(1, 3, 32, 32)).shape
        torch.Size([1, 1000])
    """
    if depth not in _DEPTHS:
        raise ValueError(f"ResNet depth: expected one of {sorted(_DEPTHS)}, got {depth}")
    block, layers = _DEPTHS[depth]
    return ResNet(block, layers)


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, dim))


class _Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = _Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = _Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class _PatchEmbed(nn.Module):
    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    """A ViT encoder returning the class token after the final norm (MAE / VC-1 style).

    Args:
        img_size: the side of the (square) input images.
        patch_size: the side of the patches.
        embed_dim: the token width (the output size).
        depth: the number of transformer blocks.
        num_heads: attention heads per block.
        mlp_ratio: hidden width of the MLPs relative to ``embed_dim``.

    Examples:
        >>> vit = VisionTransformer(img_size=32, patch_size=16, embed_dim=8, depth=1, num_heads=2)
        >>> vit(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 8])
    """

    def __init__(
        self,
        img_size: int = 224,
        patch_size: int = 16,
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(
                f"VisionTransformer: img_size ({img_size}) must be a multiple of patch_size ({patch_size})"
            )
        self.img_size = img_size
        self.patch_embed = _PatchEmbed(patch_size, embed_dim)
        grid = img_size // patch_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, grid * grid + 1, embed_dim))
        self.blocks = nn.Sequential(
            *(_Block(embed_dim, num_heads, mlp_ratio) for _ in range(depth))
        )
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, img_size, img_size]`` images to ``[N, embed_dim]`` class-token features."""
        tokens = self.patch_embed(x) + self.pos_embed[:, 1:]
        cls = (self.cls_token + self.pos_embed[:, :1]).expand(tokens.shape[0], -1, -1)
        tokens = self.blocks(torch.cat([cls, tokens], 1))
        return self.norm(tokens)[:, 0]

    def resize_pos_embed(self, pos_embed: torch.Tensor) -> torch.Tensor:
        """Interpolate a checkpoint's position embedding (class token first) to this grid."""
        grid = int(math.isqrt(self.pos_embed.shape[1] - 1))
        old = int(math.isqrt(pos_embed.shape[1] - 1))
        if old == grid:
            return pos_embed
        patches = pos_embed[:, 1:].reshape(1, old, old, -1).permute(0, 3, 1, 2)
        patches = nn.functional.interpolate(
            patches, size=(grid, grid), mode="bicubic", align_corners=False
        )
        patches = patches.permute(0, 2, 3, 1).reshape(1, grid * grid, -1)
        return torch.cat([pos_embed[:, :1], patches], 1)
