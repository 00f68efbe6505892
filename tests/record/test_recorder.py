from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import EnvCreator, GymEnv, ParallelEnv, PendulumEnv, SerialEnv, TransformedEnv
from tdrl.envs.utils import check_env_specs
from tdrl.record import CSVLogger, PixelRenderTransform, TensorDictRecorder, VideoRecorder

av = pytest.importorskip("av")


class ListLogger(CSVLogger):
    """A CSV logger that also keeps the videos it was given."""

    def __init__(self, log_dir):
        super().__init__("exp", log_dir=log_dir, video_format="pt")
        self.videos = []

    def log_video(self, name, video, step=None, **kwargs):
        self.videos.append((name, video, step, kwargs))
        super().log_video(name, video, step=step, **kwargs)


def _mp4_frame_count(path):
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def _feed(recorder, frames):
    for frame in frames:
        recorder(TensorDict(pixels=frame))


@pytest.mark.parametrize(
    "frame, expected",
    [
        (torch.zeros(24, 32, 3, dtype=torch.uint8), (3, 24, 32)),  # HWC torch
        (torch.zeros(3, 24, 32, dtype=torch.uint8), (3, 24, 32)),  # CHW torch
        (torch.zeros(24, 32), (1, 24, 32)),  # grayscale
    ],
)
def test_video_recorder_layouts(tmp_path, frame, expected):
    logger = ListLogger(tmp_path)
    recorder = VideoRecorder(logger, tag="clip", fps=12)
    _feed(recorder, [frame] * 4)
    recorder.dump()
    name, video, step, kwargs = logger.videos[0]
    assert (name, step, kwargs) == ("clip", 0, {"fps": 12})
    assert video.shape == (1, 4, *expected)
    assert video.dtype == torch.uint8


def test_video_recorder_numpy_frames(tmp_path):
    logger = ListLogger(tmp_path)
    recorder = VideoRecorder(logger, tag="clip")
    for _ in range(3):
        recorder._apply_transform(np.zeros((24, 32, 3), dtype=np.uint8))
    recorder.dump()
    assert logger.videos[0][1].shape == (1, 3, 3, 24, 32)


def test_video_recorder_batched_grid_or_separate_videos(tmp_path):
    frames = [torch.full((4, 10, 12, 3), i, dtype=torch.uint8) for i in range(5)]
    grid_logger = ListLogger(tmp_path / "grid")
    grid = VideoRecorder(grid_logger, tag="clip")
    _feed(grid, frames)
    grid.dump()
    # 4 images tile into 2 x 2 cells with 2-pixel borders
    assert grid_logger.videos[0][1].shape == (1, 5, 3, 2 * 12 + 2, 2 * 14 + 2)
    apart_logger = ListLogger(tmp_path / "apart")
    apart = VideoRecorder(apart_logger, tag="clip", make_grid=False)
    _feed(apart, frames)
    apart.dump()
    assert apart_logger.videos[0][1].shape == (4, 5, 3, 10, 12)


def test_video_recorder_skip_crop_and_dump_clears(tmp_path):
    logger = ListLogger(tmp_path)
    recorder = VideoRecorder(logger, tag="clip", skip=2, center_crop=8)
    frames = [torch.full((20, 30, 3), i, dtype=torch.uint8) for i in range(6)]
    _feed(recorder, frames)
    assert len(recorder.obs) == 3
    recorder.dump(suffix="eval")
    name, video, step, _ = logger.videos[0]
    assert name == "clip_eval" and step == 0
    assert video.shape == (1, 3, 3, 8, 8)
    assert video[0, :, 0, 0, 0].tolist() == [1, 3, 5]
    assert recorder.obs == [] and recorder.iter == 1
    recorder.dump()
    assert len(logger.videos) == 1  # nothing cached: nothing written
    assert recorder.iter == 2


def test_video_recorder_bad_arguments(tmp_path):
    logger = ListLogger(tmp_path)
    with pytest.raises(ValueError, match="skip"):
        VideoRecorder(logger, tag="clip", skip=0)
    with pytest.raises(TypeError, match="log_video"):
        VideoRecorder(object(), tag="clip")
    recorder = VideoRecorder(logger, tag="clip")
    with pytest.raises(ValueError, match="channels"):
        recorder._apply_transform(torch.zeros(5, 24, 32))


def test_gym_render_to_mp4_frame_count(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4")
    env = GymEnv("CartPole-v1", render_mode="rgb_array")
    env = env.append_transform(PixelRenderTransform())
    env.append_transform(VideoRecorder(logger, tag="rendered", in_keys=["pixels"]))
    env.set_seed(0)
    data = env.rollout(8, break_when_any_done=False)
    assert data["pixels"].shape == (8, 400, 600, 3)
    env.transform.dump()
    env.close()
    # the reset frame plus one per step
    assert _mp4_frame_count(tmp_path / "exp" / "videos" / "rendered_0.mp4") == 9


def test_pixel_render_transform_switch_and_spec():
    env = GymEnv("CartPole-v1", render_mode="rgb_array")
    render = PixelRenderTransform(out_keys=["image"])
    env = env.append_transform(render)
    spec = env.observation_spec["image"]
    assert spec.shape == (400, 600, 3) and spec.dtype == torch.uint8
    check_env_specs(env)
    render.switch("off")
    assert "image" not in env.rollout(2).keys()
    render.switch()
    assert render.enabled
    env.close()


@pytest.mark.filterwarnings("ignore:.*render method without specifying any render mode")
def test_pixel_render_transform_needs_rgb_array():
    env = GymEnv("CartPole-v1")
    with pytest.raises(ValueError, match="rgb_array"):
        env.append_transform(PixelRenderTransform())
    env.close()


def test_pixel_render_transform_on_serial_env():
    env = SerialEnv(2, lambda: GymEnv("CartPole-v1", render_mode="rgb_array"))
    env = env.append_transform(PixelRenderTransform())
    pixels = env.rollout(3, break_when_any_done=False)["pixels"]
    assert pixels.shape == (2, 3, 400, 600, 3)
    env.close()


def _make_rendering_env():
    return GymEnv("CartPole-v1", render_mode="rgb_array")


def test_pixel_render_transform_on_parallel_env(tmp_path):
    # the recipe of the "Recorders" docs: render on the batched env, record a video
    logger = CSVLogger("dummy", log_dir=tmp_path, video_format="mp4")
    env = ParallelEnv(2, EnvCreator(_make_rendering_env))
    env.start()
    env = env.append_transform(PixelRenderTransform())
    env = env.append_transform(VideoRecorder(logger=logger, tag="pixels_record"))
    try:
        check_env_specs(env)
        data = env.rollout(4, break_when_any_done=False)
        assert data["pixels"].shape == (2, 4, 400, 600, 3)
        env.transform.dump()
    finally:
        env.close()
    assert (tmp_path / "dummy" / "videos" / "pixels_record_0.mp4").is_file()


def test_tensordict_recorder_saves_stacked_outputs(tmp_path):
    base = tmp_path / "run"
    recorder = TensorDictRecorder(base, skip=2, in_keys=["th", "reward"])
    env = TransformedEnv(PendulumEnv(), recorder)
    env.rollout(6)
    assert len(recorder.td) == 3
    env.transform.dump()
    saved = torch.load(f"{base}_tensordict.t", weights_only=False)
    assert saved.batch_size == (3,)
    assert set(saved.keys()) == {"th", "reward"}
    assert recorder.td == []


def test_tensordict_recorder_with_resets_and_suffix(tmp_path):
    base = tmp_path / "run"
    recorder = TensorDictRecorder(base, skip_reset=False, skip=1, in_keys=["th"])
    env = TransformedEnv(PendulumEnv(), recorder)
    env.rollout(3)
    env.transform.dump(suffix="a")
    saved = torch.load(f"{base}_a_tensordict.t", weights_only=False)
    assert saved.batch_size == (4,)
    env.transform.dump(suffix="b")
    assert not (tmp_path / "run_b_tensordict.t").exists()
