"""R3M, VIP and VC-1 encoder transforms: architectures, weights, envs, batched envs, buffers."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Composite as CompositeSpec
from tdrl.data import LazyTensorStorage, Unbounded
from tdrl.data.replay_buffers import ReplayBuffer, TensorDictReplayBuffer
from tdrl.envs import (
    CatTensors,
    Compose,
    EnvBase,
    ParallelEnv,
    R3MTransform,
    SerialEnv,
    TransformedEnv,
    VC1Transform,
    VIPRewardTransform,
    VIPTransform,
    check_env_specs,
)
from tdrl.envs.transforms import vc1 as vc1_module
from tdrl.envs.transforms._encoder import EncoderNet
from tdrl.envs.transforms._vision_nets import VisionTransformer, resnet

SIZE = 16  # images are resized to this side before the networks (keeps the tests fast)


class PixelEnv(EnvBase):
    """A tiny stateful env of 12x12 RGB uint8 frames whose content depends on a step counter."""

    def __init__(self, device=None):
        super().__init__(device=device, batch_size=())
        self.observation_spec = CompositeSpec(
            pixels=Unbounded((12, 12, 3), dtype=torch.uint8),
            count=Unbounded((1,), dtype=torch.int64),
        )
        self.action_spec = Unbounded((1,), dtype=torch.float32)
        self.reward_spec = Unbounded((1,), dtype=torch.float32)

    def _frame(self, count):
        value = (count * 37) % 256
        return value.to(torch.uint8).view(1, 1, 1).expand(12, 12, 3).clone()

    def _reset(self, tensordict=None, **kwargs):
        count = self._count = torch.zeros(1, dtype=torch.int64)
        return TensorDict(
            {
                "pixels": self._frame(count),
                "count": count,
                "done": torch.zeros(1, dtype=torch.bool),
                "terminated": torch.zeros(1, dtype=torch.bool),
            },
            [],
        )

    def _step(self, tensordict):
        count = self._count = self._count + 1
        return TensorDict(
            {
                "pixels": self._frame(count),
                "count": count,
                "reward": torch.ones(1),
                "done": torch.zeros(1, dtype=torch.bool),
                "terminated": torch.zeros(1, dtype=torch.bool),
            },
            [],
        )

    def _set_seed(self, seed):
        pass


def r3m_env():
    return TransformedEnv(
        PixelEnv(), R3MTransform("resnet18", in_keys=["pixels"], out_keys=["vec"], size=SIZE)
    )


def test_architectures_have_the_published_sizes():
    with torch.device("meta"):
        counts = {
            depth: sum(p.numel() for p in resnet(depth).parameters()) for depth in (18, 34, 50)
        }
        vit = VisionTransformer(embed_dim=768, depth=12, num_heads=12)
    # torchvision's resnet18/34/50 and timm's vit_base_patch16_224 without its head
    assert counts == {18: 11_689_512, 34: 21_797_672, 50: 25_557_032}
    assert sum(p.numel() for p in vit.parameters()) == 85_798_656
    names = set(resnet(50).state_dict())
    assert {"layer2.0.downsample.0.weight", "layer4.2.conv3.weight", "fc.bias"} <= names


def test_r3m_in_an_env():
    env = r3m_env()
    check_env_specs(env)
    td = env.reset()
    assert set(td.keys()) == {"vec", "count", "done", "terminated"}
    assert td["vec"].shape == (512,)
    data = env.rollout(3)
    assert data["next", "vec"].shape == (3, 512)
    # different frames give different embeddings; the network runs in eval mode
    assert not torch.allclose(data["next", "vec"][0], data["next", "vec"][1])
    assert not env.transform.net.net.training
    assert env.transform.device == torch.device("cpu")


def test_r3m_stacks_or_separates_several_images():
    def make(stack):
        out_keys = ["vec"] if stack else ["vec", "vec2"]
        return TransformedEnv(
            TransformedEnv(PixelEnv(), CatTensors(["pixels"], "pixels2", del_keys=False, dim=-1)),
            R3MTransform(
                "resnet18",
                in_keys=["pixels", "pixels2"],
                out_keys=out_keys,
                size=SIZE,
                stack_images=stack,
            ),
        )

    stacked = make(True)
    check_env_specs(stacked)
    assert stacked.reset()["vec"].shape == (1024,)
    separate = make(False)
    check_env_specs(separate)
    td = separate.reset()
    assert td["vec"].shape == td["vec2"].shape == (512,)
    assert torch.allclose(td["vec"], td["vec2"])  # the same frame twice


def test_r3m_keeps_tensor_pixels_on_request():
    env = TransformedEnv(
        PixelEnv(),
        R3MTransform(
            "resnet18",
            in_keys=["pixels"],
            out_keys=["vec"],
            size=SIZE,
            tensor_pixels_keys=["float_pixels"],
        ),
    )
    check_env_specs(env)
    td = env.reset()
    assert td["float_pixels"].shape == (3, 12, 12) and td["float_pixels"].dtype == torch.float32


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_encoder_inside_and_around_batched_envs(batched):
    inner = batched(2, r3m_env)
    try:
        check_env_specs(inner)
        assert inner.rollout(2)["next", "vec"].shape == (2, 2, 512)
    finally:
        inner.close()
    outer = TransformedEnv(
        batched(2, PixelEnv),
        R3MTransform("resnet18", in_keys=["pixels"], out_keys=["vec"], size=SIZE),
    )
    try:
        check_env_specs(outer)
        assert outer.reset()["vec"].shape == (2, 512)
    finally:
        outer.close()


@pytest.mark.parametrize("buffer", [ReplayBuffer, TensorDictReplayBuffer])
def test_encoder_as_buffer_and_module_transform(buffer):
    r3m = R3MTransform("resnet18", in_keys=["pixels"], out_keys=["vec"], size=SIZE)
    rb = buffer(storage=LazyTensorStorage(20))
    rb.append_transform(r3m)
    rb.extend(TensorDict({"pixels": torch.randint(255, (10, 16, 16, 3), dtype=torch.uint8)}, [10]))
    sample = rb.sample(4)
    assert sample["vec"].shape == (4, 512) and "pixels" not in sample.keys()
    composed = Compose(R3MTransform("resnet18", in_keys=["pixels"], out_keys=["vec"], size=SIZE))
    single = composed(
        TensorDict({"pixels": torch.randint(255, (16, 16, 3), dtype=torch.uint8)}, [])
    )
    assert single["vec"].shape == (512,)
    sequential = torch.nn.Sequential(r3m, torch.nn.Identity())
    out = sequential(TensorDict({"pixels": torch.rand(3, 3, 16, 16)}, [3]))
    assert out["vec"].shape == (3, 512)


def test_r3m_loads_a_checkpoint(tmp_path):
    reference = resnet(18).eval()
    reference.fc = torch.nn.Identity()
    state = {f"module.convnet.{k}": v for k, v in reference.state_dict().items()}
    state["module.lang_enc.weight"] = torch.zeros(3)  # language head: ignored
    path = tmp_path / "model.pt"
    torch.save({"r3m": state}, path)
    r3m = R3MTransform(
        "resnet18",
        in_keys=["pixels"],
        out_keys=["vec"],
        size=SIZE,
        download=True,
        download_path=path,
    )
    images = torch.rand(2, 3, SIZE, SIZE)
    expected = reference(
        (images - torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1))
        / torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    )
    got = r3m(TensorDict({"pixels": images}, [2]))["vec"]
    assert torch.allclose(got, expected, atol=1e-4)
    torch.save({"r3m": {"module.convnet.conv1.weight": torch.zeros(1)}}, tmp_path / "bad.pt")
    with pytest.raises(RuntimeError, match="bad.pt does not match the network"):
        R3MTransform("resnet18", download=True, download_path=tmp_path / "bad.pt")
    with pytest.raises((ImportError, RuntimeError), match="gdown|download of"):
        R3MTransform("resnet18", download=True, download_path=tmp_path / "absent" / "model.pt")


def test_argument_errors():
    with pytest.raises(ValueError, match="model_name: expected one of"):
        R3MTransform("resnet101")
    with pytest.raises(ValueError, match="out_keys: expected 2 key"):
        R3MTransform("resnet18", in_keys=["a", "b"], out_keys=["x"], stack_images=False)
    with pytest.raises(ValueError, match="expected 'resnet50'"):
        VIPTransform("resnet18")
    with pytest.raises(
        ValueError, match="'pixels': expected RGB images of shape .*got shape \\(4, 5\\)"
    ):
        R3MTransform("resnet18", in_keys=["pixels"], size=SIZE)(
            TensorDict({"pixels": torch.rand(4, 5)}, [])
        )


def test_encoder_net_spec_shapes():
    net = EncoderNet(["a", "b"], ["ea", "eb"], torch.nn.Flatten(), 7, del_keys=False)
    spec = CompositeSpec(a=Unbounded((4, 3, 8, 8)), b=Unbounded((4, 3, 8, 8)), shape=(4,))
    out = net.transform_observation_spec(spec.clone())
    assert out["ea"].shape == out["eb"].shape == (4, 7) and "a" in out.keys()
    deleting = EncoderNet(["a"], ["ea"], torch.nn.Flatten(), 7)
    assert "a" not in deleting.transform_observation_spec(spec.clone()).keys()


def test_vip_embeddings_and_checkpoint(tmp_path):
    env = TransformedEnv(PixelEnv(), VIPTransform(in_keys=["pixels"], out_keys=["vec"], size=SIZE))
    check_env_specs(env)
    assert env.reset()["vec"].shape == (1024,)
    reference = resnet(50).eval()
    reference.fc = torch.nn.Linear(2048, 1024)
    path = tmp_path / "vip.pt"
    torch.save({"vip": {f"module.convnet.{k}": v for k, v in reference.state_dict().items()}}, path)
    vip = VIPTransform(
        in_keys=["pixels"], out_keys=["vec"], size=SIZE, download=True, download_path=path
    )
    assert torch.equal(vip.net.net.fc.weight, reference.fc.weight)


def test_vip_reward_measures_progress_to_the_goal():
    env = TransformedEnv(
        PixelEnv(), VIPRewardTransform(in_keys=["pixels"], out_keys=["vec"], size=SIZE)
    )
    with pytest.raises(
        KeyError, match="VIPRewardTransform requires the 'goal_image' key to be present"
    ):
        env.reset()
    goal = TensorDict({"goal_image": torch.full((12, 12, 3), 111, dtype=torch.uint8)}, [])
    start = env.reset(goal)
    assert {"goal_image", "goal_embedding", "vec"} <= set(start.keys())
    data = env.rollout(4, auto_reset=False, tensordict=start)
    goal_embedding = data["goal_embedding"]
    assert torch.allclose(goal_embedding, goal_embedding[:1].expand_as(goal_embedding))
    assert torch.allclose(data["next", "vec"][:-1], data["vec"][1:])
    expected = torch.linalg.vector_norm(
        data["vec"] - goal_embedding, dim=-1
    ) - torch.linalg.vector_norm(data["next", "vec"] - goal_embedding, dim=-1)
    assert torch.allclose(data["next", "reward"].squeeze(-1), expected, atol=1e-5)
    check_env_specs(env, tensordict=goal)


def test_vip_reward_over_a_parallel_env():
    env = TransformedEnv(
        ParallelEnv(2, PixelEnv),
        VIPRewardTransform(in_keys=["pixels"], out_keys=["vec"], size=SIZE),
    )
    try:
        goal = TensorDict({"goal_image": torch.zeros(2, 12, 12, 3, dtype=torch.uint8)}, [2])
        data = env.rollout(2, auto_reset=False, tensordict=env.reset(goal))
        assert data["next", "reward"].shape == (2, 2, 1)
        assert data["goal_embedding"].shape == (2, 2, 1024)
    finally:
        env.close()


@pytest.mark.parametrize("del_keys", [True, False])
def test_vc1_default_model_in_an_env(del_keys):
    env = TransformedEnv(
        PixelEnv(),
        VC1Transform(
            in_keys=["pixels"],
            out_keys=[("nested", "vec")],
            model_name="default",
            del_keys=del_keys,
        ),
    )
    check_env_specs(env)
    td = env.rollout(2)
    assert td["next", "nested", "vec"].shape == (2, 16)
    assert ("pixels" in td.keys()) is not del_keys


def test_vc1_loads_a_checkpoint_with_another_grid(tmp_path, monkeypatch):
    monkeypatch.setitem(vc1_module._MODELS, "vc1_vitb", (32, 2, 2))
    trained = VisionTransformer(img_size=112, patch_size=16, embed_dim=32, depth=2, num_heads=2)
    state = dict(trained.state_dict())
    state["decoder_embed.weight"] = torch.zeros(2)  # MAE decoder entries are ignored
    state["mask_token"] = torch.zeros(1, 1, 32)
    torch.save({"model": state}, tmp_path / "vc1_vitb.pth")
    vc1 = VC1Transform(["pixels"], ["vec"], "vc1_vitb", download_path=tmp_path)
    assert torch.equal(vc1.net.net.blocks[1].mlp.fc2.weight, trained.blocks[1].mlp.fc2.weight)
    assert vc1.net.net.pos_embed.shape == (1, 14 * 14 + 1, 32)  # interpolated from 7x7
    out = vc1(TensorDict({"pixels": torch.randint(255, (2, 20, 20, 3), dtype=torch.uint8)}, [2]))
    assert out["vec"].shape == (2, 32)


def test_vc1_in_serial_env_workers():
    env = SerialEnv(
        2, lambda: TransformedEnv(PixelEnv(), VC1Transform(["pixels"], ["vec"], "default"))
    )
    try:
        check_env_specs(env)
        assert env.reset()["vec"].shape == (2, 16)
    finally:
        env.close()
