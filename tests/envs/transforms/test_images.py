"""Tests of the image transforms (tdrl/envs/transforms/images.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from tdrl.envs import (
    CatFrames,
    CenterCrop,
    Compose,
    Crop,
    GrayScale,
    GymEnv,
    Resize,
    SerialEnv,
    ToTensorImage,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.common import EnvBase


class ImageEnv(EnvBase):
    """A cheap env emitting random (H, W, 3) uint8 images, for spec checks without rendering."""

    def __init__(self, height: int = 12, width: int = 10, batch_size=()) -> None:
        super().__init__(batch_size=batch_size)
        self.height, self.width = height, width
        shape = (*self.batch_size, height, width, 3)
        self.observation_spec = Composite(
            pixels=Bounded(0, 255, shape=shape, dtype=torch.uint8), shape=self.batch_size
        )
        self.action_spec = Bounded(-1.0, 1.0, shape=(*self.batch_size, 1))
        self.reward_spec = Unbounded((*self.batch_size, 1))

    def _pixels(self) -> torch.Tensor:
        shape = (*self.batch_size, self.height, self.width, 3)
        return torch.randint(0, 256, shape, dtype=torch.uint8)

    def _reset(self, tensordict=None, **kwargs):
        done = torch.zeros((*self.batch_size, 1), dtype=torch.bool)
        return TensorDict(
            {"pixels": self._pixels(), "done": done, "terminated": done.clone()}, self.batch_size
        )

    def _step(self, tensordict):
        done = torch.zeros((*self.batch_size, 1), dtype=torch.bool)
        return TensorDict(
            {
                "pixels": self._pixels(),
                "reward": torch.zeros((*self.batch_size, 1)),
                "done": done,
                "terminated": done.clone(),
            },
            self.batch_size,
        )

    def _set_seed(self, seed):
        torch.manual_seed(seed or 0)


def _td(pixels: torch.Tensor) -> TensorDict:
    return TensorDict({"pixels": pixels}, pixels.shape[:-3])


# ------------------------------------------------------------------ ToTensorImage
def test_to_tensor_image_layout_and_scale():
    pixels = torch.randint(0, 256, (2, 5, 4, 3), dtype=torch.uint8)
    out = ToTensorImage()(_td(pixels))["pixels"]
    assert out.shape == (2, 3, 5, 4)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, pixels.permute(0, 3, 1, 2).float() / 255)


def test_to_tensor_image_options():
    pixels = torch.full((5, 4, 3), 255, dtype=torch.uint8)
    td = TensorDict({"pixels": pixels}, [])
    out = ToTensorImage(unsqueeze=True, dtype=torch.float64, out_keys=["img"])(td)
    assert out["img"].shape == (1, 3, 5, 4) and out["img"].dtype == torch.float64
    assert out["pixels"] is pixels  # the input entry is left alone
    floats = TensorDict({"pixels": torch.full((5, 4, 3), 2.0)}, [])
    assert ToTensorImage()(floats.clone())["pixels"].max() == 2.0  # floats are not rescaled
    original = floats["pixels"]
    assert ToTensorImage(from_int=True)(floats)["pixels"].max() == pytest.approx(2 / 255)
    assert original.max() == 2.0  # and never modified in place
    vector = TensorDict({"pixels": torch.ones(7, 5, dtype=torch.uint8)}, [])
    assert ToTensorImage(shape_tolerant=True)(vector)["pixels"].shape == (7, 5)


def test_to_tensor_image_errors():
    with pytest.raises(TypeError, match="dtype"):
        ToTensorImage(dtype=torch.int64)
    with pytest.raises(ValueError, match="at least 3 dims"):
        ToTensorImage()(TensorDict({"pixels": torch.zeros(4, 3)}, []))


def test_to_tensor_image_spec_does_not_touch_parent():
    base = ImageEnv()
    before = base.observation_spec.clone()
    env = TransformedEnv(base, ToTensorImage())
    spec = env.observation_spec["pixels"]
    assert spec.shape == (3, 12, 10) and spec.dtype == torch.float32
    assert spec.high.max() == 1.0 and spec.low.min() == 0.0
    assert base.observation_spec == before
    check_env_specs(env)


# ------------------------------------------------------------------ Resize
@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest", "area"])
def test_resize_matches_interpolate(mode):
    image = torch.rand(2, 3, 20, 30)
    out = Resize(8, 12, interpolation=mode)(_td(image.permute(0, 2, 3, 1)).set("pixels", image))
    kwargs = {"antialias": True, "align_corners": False} if mode in ("bilinear", "bicubic") else {}
    expected = F.interpolate(image, size=(8, 12), mode=mode, **kwargs)
    torch.testing.assert_close(out["pixels"], expected)


def test_resize_shapes_and_dtypes():
    assert Resize(6)(TensorDict({"pixels": torch.rand(9, 9)}, []))["pixels"].shape == (6, 6)
    td = TensorDict({"pixels": torch.rand(2, 4, 1, 9, 9)}, [2, 4])
    assert Resize(5, 7)(td)["pixels"].shape == (2, 4, 1, 5, 7)
    ints = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    out = Resize(8)(TensorDict({"pixels": ints}, []))["pixels"]
    assert out.dtype == torch.uint8 and out.shape == (3, 8, 8)
    with pytest.raises(ValueError, match="interpolation"):
        Resize(8, interpolation="lanczos")
    with pytest.raises(ValueError, match="positive size"):
        Resize(0)


def test_resize_env_output_stays_in_spec():
    env = TransformedEnv(ImageEnv(40, 40), Compose(ToTensorImage(), Resize(7, 9)))
    spec = env.observation_spec["pixels"]
    assert spec.shape == (3, 7, 9) and isinstance(spec, Bounded)
    check_env_specs(env)
    ones = TensorDict({"pixels": torch.full((40, 40, 3), 255, dtype=torch.uint8)}, [])
    out = env.transform._reset(ones.empty(), ones)["pixels"]
    assert out.max() <= 1.0  # antialiasing rounding is clamped to the spec bounds


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_resize_same_values_in_env_and_replay_buffer(mode):
    # a sharp edge makes bicubic overshoot; a constant image makes antialiasing round up
    env = TransformedEnv(ImageEnv(40, 40), Compose(ToTensorImage(), Resize(7, 9, mode)))
    check_env_specs(env)
    rollout = env.rollout(4)
    edge = torch.zeros(40, 40, 3, dtype=torch.uint8)
    edge[:, 20:] = 255
    frames = [edge, torch.full((40, 40, 3), 255, dtype=torch.uint8)]
    in_env = [
        env.transform._reset(TensorDict(), TensorDict({"pixels": f}, []))["pixels"] for f in frames
    ]
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), transform=Compose(ToTensorImage(), Resize(7, 9, mode))
    )
    rb.extend(TensorDict({"pixels": torch.stack(frames)}, [2]))
    from_buffer = rb[:]["pixels"]
    for index, expected in enumerate(in_env):
        assert torch.equal(from_buffer[index], expected)
        assert 0.0 <= expected.min() and expected.max() <= 1.0
    raw = F.interpolate(
        ToTensorImage()(TensorDict({"p": edge}, []).rename_key_("p", "pixels"))["pixels"][None],
        size=(7, 9),
        mode=mode,
        antialias=True,
    )
    if mode == "bicubic":
        assert raw.max() > 1.0  # the overshoot the clamp removes
    assert rollout["next", "pixels"].shape == (4, 3, 7, 9)


# ------------------------------------------------------------------ crops
def test_crop_and_center_crop():
    image = torch.arange(2 * 6 * 8.0).reshape(2, 1, 6, 8)
    td = TensorDict({"pixels": image}, [2])
    out = Crop(3, 4, top=2, left=1)(td.clone())["pixels"]
    torch.testing.assert_close(out, image[..., 2:5, 1:5])
    center = CenterCrop(2, 4)(td.clone())["pixels"]
    torch.testing.assert_close(center, image[..., 2:4, 2:6])
    with pytest.raises(ValueError, match="does not fit"):
        Crop(7, top=0)(td.clone())
    with pytest.raises(ValueError, match="non-negative"):
        Crop(2, top=-1)


def test_crop_specs():
    env = TransformedEnv(ImageEnv(), Compose(ToTensorImage(), CenterCrop(6, 4)))
    assert env.observation_spec["pixels"].shape == (3, 6, 4)
    check_env_specs(env)
    env = TransformedEnv(ImageEnv(), Compose(ToTensorImage(), Crop(4, top=8, left=6)))
    assert env.observation_spec["pixels"].shape == (3, 4, 4)
    check_env_specs(env)
    with pytest.raises(ValueError, match="does not fit"):
        TransformedEnv(ImageEnv(), Compose(ToTensorImage(), Crop(4, top=9)))


# ------------------------------------------------------------------ GrayScale
def test_grayscale_values():
    image = torch.rand(4, 3, 5, 5)
    out = GrayScale()(TensorDict({"pixels": image}, [4]))["pixels"]
    expected = (0.2989 * image[:, 0] + 0.587 * image[:, 1] + 0.114 * image[:, 2]).unsqueeze(1)
    torch.testing.assert_close(out, expected)
    ints = torch.full((3, 2, 2), 200, dtype=torch.uint8)
    out = GrayScale()(TensorDict({"pixels": ints}, []))["pixels"]
    assert out.dtype == torch.uint8 and out.shape == (1, 2, 2)
    with pytest.raises(ValueError, match="RGB"):
        GrayScale()(TensorDict({"pixels": torch.rand(2, 5, 5)}, []))


def test_grayscale_spec_batched_env():
    env = TransformedEnv(ImageEnv(batch_size=(2,)), Compose(ToTensorImage(), GrayScale()))
    assert env.observation_spec["pixels"].shape == (2, 1, 12, 10)
    check_env_specs(env)


def test_missing_key_is_reported_at_spec_time_and_left_out():
    # as in the reference API, an absent key is skipped (one transform reused across envs),
    # with a warning naming the transform, the key and the keys available
    with pytest.warns(
        UserWarning, match=r"ToTensorImage: key 'rgb' is not in the env output specs.*'pixels'"
    ):
        env = TransformedEnv(ImageEnv(), ToTensorImage(in_keys=["rgb"]))
    assert env.observation_spec["pixels"] == ImageEnv().observation_spec["pixels"]
    env.transform.set_missing_tolerance(True)
    td = env.rollout(3)
    assert td["pixels"].dtype == torch.uint8 and "rgb" not in td.keys()


# ------------------------------------------------------------------ rendered pipeline
def _pixel_pipeline() -> Compose:
    return Compose(ToTensorImage(), GrayScale(), Resize(64, 64), CatFrames(4, dim=-3))


def test_cartpole_pixel_pipeline():
    env = TransformedEnv(GymEnv("CartPole-v1", from_pixels=True), _pixel_pipeline())
    assert env.observation_spec["pixels"].shape == (4, 64, 64)
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["next", "pixels"].shape == (3, 4, 64, 64)
    # frames shift by one per step
    torch.testing.assert_close(rollout["next", "pixels"][0, :3], rollout["pixels"][0, 1:])
    env.close()


def test_cartpole_pixel_pipeline_in_serial_env():
    def make():
        return TransformedEnv(GymEnv("CartPole-v1", from_pixels=True), _pixel_pipeline())

    env = SerialEnv(2, make)
    try:
        assert env.observation_spec["pixels"].shape == (2, 4, 64, 64)
        check_env_specs(env)
    finally:
        env.close()


def test_spec_hooks_take_a_leaf_spec_or_a_composite():
    pixels = Bounded(0, 255, (16, 16, 3), dtype=torch.uint8)
    leaf = ToTensorImage(in_keys=["pixels"]).transform_observation_spec(pixels.clone())
    assert leaf.shape == (3, 16, 16) and bool((leaf.high == 1).all())
    composite = Composite(a=pixels.clone(), b=pixels.clone())
    mapped = ToTensorImage(in_keys=["a"]).transform_observation_spec(composite)
    assert mapped["a"].shape == (3, 16, 16) and mapped["b"].shape == (16, 16, 3)
    stacked = CatFrames(2, dim=-3, in_keys=["a"]).transform_observation_spec(leaf)
    assert stacked.shape == (6, 16, 16)
