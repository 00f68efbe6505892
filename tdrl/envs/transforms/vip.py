""":class:`VIPTransform` and :class:`VIPRewardTransform`: VIP embeddings (Ma et al., 2022).

Follows the VIP release (facebookresearch/vip, 2022): a torchvision ResNet-50 whose ``fc``
maps to 1024 features, fed with ImageNet-normalised images; the checkpoint (``model.pt``)
holds the network under ``"vip"`` with keys ``module.convnet.<resnet keys>``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from tdrl.data import Unbounded
from tdrl.envs.transforms._encoder import (
    PretrainedEncoder,
    fetch_weights,
    image_pipeline,
    load_checkpoint,
    resolve_keys,
)
from tdrl.envs.transforms._vision_nets import resnet, resnet_width
from tdrl.envs.transforms.transform import NestedKey, Transform

__all__ = ["VIPRewardTransform", "VIPTransform"]

_URL = "https://pytorch.s3.amazonaws.com/models/rl/vip/model.pt"
_EMBEDDING = 1024


class VIPTransform(PretrainedEncoder):
    """Replaces image observations by their VIP embeddings (1024 features).

    Images (``[..., H, W, 3]`` uint8 or ``[..., 3, H, W]`` float in ``[0, 1]``) are resized
    to ``size`` x ``size``, normalised with the ImageNet statistics and encoded by VIP's
    ResNet-50. The network is randomly initialised unless ``download`` is True: the VIP
    checkpoint is then read from ``download_path`` (default ``~/.vip/resnet50/model.pt``,
    where the vip package keeps it), downloaded there first when missing.

    Args:
        model_name: ``"resnet50"`` (the only network VIP published).
        in_keys: the image entries (default ``["pixels"]``); they are removed.
        out_keys: where the embeddings go (default ``["vip_vec"]``).
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
        >>> vip = VIPTransform("resnet50", in_keys=["pixels"], out_keys=["vec"], size=32)
        >>> vip(TensorDict({"pixels": torch.rand(2, 3, 40, 40)}, [2]))["vec"].shape
        torch.Size([2, 1024])
    """

    def __init__(
        self,
        model_name: str = "resnet50",
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
        size: int = 244,
        stack_images: bool = True,
        download: bool = False,
        download_path: str | os.PathLike | None = None,
        tensor_pixels_keys: list[NestedKey] | None = None,
    ) -> None:
        if model_name != "resnet50":
            raise ValueError(f"VIPTransform model_name: expected 'resnet50', got {model_name!r}")
        in_keys, out_keys = resolve_keys(in_keys, out_keys, "vip_vec", stack_images)
        net = resnet(50)
        net.fc = nn.Linear(resnet_width(50), _EMBEDDING)
        if download:
            path = Path(download_path) if download_path is not None else _default_path()
            fetch_weights(path, _URL, type(self).__name__)
            load_checkpoint(net, path, entry="vip", strip=("module.", "convnet."))
        self.model_name = model_name
        super().__init__(
            *image_pipeline(
                in_keys,
                out_keys,
                net,
                _EMBEDDING,
                size=size,
                stack_images=stack_images,
                tensor_pixels_keys=tensor_pixels_keys,
            )
        )


def _default_path() -> Path:
    return Path(os.path.expanduser("~")) / ".vip" / "resnet50" / "model.pt"


GOAL_MISSING = (
    "{owner} requires the {key!r} key to be present in the input tensordict of reset: pass "
    "the goal image(s) there, e.g. env.reset(TensorDict({{{key!r}: images}}, batch_size))"
)


class _GoalProgress(Transform):
    """Rewards progress of the embedding towards the goal's (last transform of VIPRewardTransform)."""

    def __init__(
        self,
        image_key: NestedKey,
        embedding_key: NestedKey,
        embedding_size: int,
        encode: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        super().__init__()
        self.image_key = image_key
        self.embedding_key = embedding_key
        self.embedding_size = embedding_size
        # a plain function (not a submodule): the encoder transforms belong to the Compose
        self.__dict__["_encode"] = encode

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        goal = None if tensordict is None else tensordict.get(GOAL_KEY, None)
        if goal is None:
            raise KeyError(GOAL_MISSING.format(owner="VIPRewardTransform", key=GOAL_KEY))
        tensordict_reset.set(GOAL_KEY, goal)
        tensordict_reset.set(GOAL_EMBEDDING_KEY, self.__dict__["_encode"](goal))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        goal = tensordict.get(GOAL_EMBEDDING_KEY, None)
        if goal is None:
            raise KeyError(
                GOAL_MISSING.format(owner="VIPRewardTransform", key=GOAL_KEY)
                + f" (the step input has no {GOAL_EMBEDDING_KEY!r})"
            )
        before = torch.linalg.vector_norm(tensordict.get(self.embedding_key) - goal, dim=-1)
        after = torch.linalg.vector_norm(next_tensordict.get(self.embedding_key) - goal, dim=-1)
        progress = (before - after).unsqueeze(-1)
        reward = next_tensordict.get("reward", None)
        if reward is not None:
            progress = progress.to(reward.dtype).reshape(reward.shape)
        next_tensordict.set("reward", progress)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Declare the goal image and its embedding as state entries."""
        input_spec = super().transform_input_spec(input_spec)
        parent = self.parent
        if parent is None:
            return input_spec
        base = parent.base_env.full_observation_spec
        if self.image_key not in base.keys(True):
            return input_spec
        image = base[self.image_key].clone()
        state = input_spec["full_state_spec"]
        state[GOAL_KEY] = image
        state[GOAL_EMBEDDING_KEY] = Unbounded(
            (*image.shape[: image.ndim - 3], self.embedding_size), device=image.device
        )
        return input_spec


GOAL_KEY = "goal_image"
GOAL_EMBEDDING_KEY = "goal_embedding"


class VIPRewardTransform(VIPTransform):
    """VIP embeddings plus a reward measuring progress towards a goal image.

    At reset, the goal image(s) must be given in the input under ``"goal_image"``; their
    embedding is kept as ``"goal_embedding"`` (both are carried along as state). The reward
    of a step from ``o_t`` to ``o_{t+1}`` replaces the env's reward with
    ``d(o_t) - d(o_{t+1})``, where ``d`` is the distance between an observation's embedding
    and the goal embedding: positive when the step gets closer to the goal.

    Args:
        model_name, in_keys, out_keys, size, stack_images, download, download_path,
            tensor_pixels_keys: as in :class:`VIPTransform`; one image entry only.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", from_pixels=True, pixels_only=True),
        ...     VIPRewardTransform(in_keys=["pixels"], out_keys=["vec"], size=32))
        >>> goal = TensorDict({"goal_image": torch.zeros(400, 600, 3, dtype=torch.uint8)}, [])
        >>> data = env.rollout(3, auto_reset=False, tensordict=env.reset(goal))
        >>> data["next", "reward"].shape, data["goal_embedding"].shape
        (torch.Size([3, 1]), torch.Size([3, 1024]))
    """

    def __init__(
        self,
        model_name: str = "resnet50",
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
        size: int = 244,
        stack_images: bool = True,
        download: bool = False,
        download_path: str | os.PathLike | None = None,
        tensor_pixels_keys: list[NestedKey] | None = None,
    ) -> None:
        super().__init__(
            model_name,
            in_keys,
            out_keys,
            size,
            stack_images,
            download,
            download_path,
            tensor_pixels_keys,
        )
        images = self.transforms[0].in_keys
        outputs = self.net.out_keys
        if len(images) != 1:
            raise ValueError(f"VIPRewardTransform encodes one image entry, got in_keys={images}")
        encoders = list(self.transforms)

        def encode(goal: torch.Tensor) -> torch.Tensor:
            probe = TensorDict({images[0]: goal}, batch_size=goal.shape[: goal.ndim - 3])
            for transform in encoders:
                probe = transform._call(probe)
            return probe.get(outputs[0])

        self.append(_GoalProgress(images[0], outputs[0], self.embedding_size, encode))
