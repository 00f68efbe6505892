from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from tdrl.record.loggers import (
    CSVLogger,
    Logger,
    TensorBoardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)

av = pytest.importorskip("av")


def _mp4_frames(path):
    with av.open(str(path)) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    return np.stack(frames)


def test_csv_scalars_on_disk(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    for step, value in enumerate([0.5, 1.5, 2.5]):
        logger.log_scalar("reward", value, step=step * 10)
    logger.log_scalar("loss", torch.tensor(3.0))
    logger.log_scalar("loss", 4.0)
    logger.log_scalar("train/lr", 0.1, step=1)
    scalars = tmp_path / "exp" / "scalars"
    assert (scalars / "reward.csv").read_text().splitlines() == ["0,0.5", "10,1.5", "20,2.5"]
    assert (scalars / "loss.csv").read_text().splitlines() == ["0,3.0", "1,4.0"]
    assert (scalars / "train" / "lr.csv").read_text() == "1,0.1\n"
    assert isinstance(logger, Logger)
    assert "exp" in repr(logger)


def test_csv_metrics_hparams_text_histogram(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    logger.log_metrics({"eval": {"return": 1.0, "length": 10}}, step=3)
    logger.log_hparams({"lr": 0.001, "gamma": 0.99})
    logger.log_str("note", "hello", step=2)
    logger.log_histogram("weights", torch.tensor([1.0, 2.0]), step=5)
    root = tmp_path / "exp"
    assert (root / "scalars" / "eval" / "return.csv").read_text() == "3,1.0\n"
    assert (root / "scalars" / "eval" / "length.csv").read_text() == "3,10\n"
    assert (root / "hparams.txt").read_text().splitlines() == ["lr: 0.001", "gamma: 0.99"]
    assert (root / "texts" / "note.txt").read_text() == "2,hello\n"
    assert (root / "histograms" / "weights.csv").read_text() == "5,1.0,2.0\n"


@pytest.mark.parametrize(
    "video",
    [
        torch.randint(0, 256, (12, 3, 32, 48), dtype=torch.uint8),  # T, C, H, W
        torch.rand(12, 32, 48, 3),  # T, H, W, C floats in [0, 1]
        np.random.randint(0, 256, (1, 12, 32, 48, 3), dtype=np.uint8),  # numpy, batched
        torch.randint(0, 256, (12, 1, 32, 48), dtype=torch.uint8),  # grayscale
    ],
)
def test_csv_mp4_written_and_read_back(tmp_path, video):
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4", video_fps=10)
    logger.log_video("clip", video, step=7)
    frames = _mp4_frames(tmp_path / "exp" / "videos" / "clip_7.mp4")
    assert frames.shape == (12, 32, 48, 3)


def test_csv_mp4_odd_size_and_batch_of_videos(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4")
    logger.log_video("clip", torch.zeros(2, 5, 3, 15, 21, dtype=torch.uint8))
    videos = tmp_path / "exp" / "videos"
    assert sorted(path.name for path in videos.iterdir()) == ["clip_0_0.mp4", "clip_0_1.mp4"]
    assert _mp4_frames(videos / "clip_0_1.mp4").shape[0] == 5


def test_csv_mp4_pixel_values_survive(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4")
    video = torch.zeros(4, 32, 32, 3, dtype=torch.uint8)
    video[:, :, :16] = 200
    logger.log_video("clip", video, step=0)
    frames = _mp4_frames(tmp_path / "exp" / "videos" / "clip_0.mp4").astype(int)
    assert abs(frames[:, :, :12].mean() - 200) < 8 and frames[:, :, 20:].mean() < 8


def test_csv_gif_and_pt_formats(tmp_path):
    from PIL import Image

    gif_logger = CSVLogger("gif", log_dir=tmp_path, video_format="gif")
    # distinct frames: identical consecutive frames may be merged by the gif encoder
    video = (torch.arange(6) * 40).to(torch.uint8).view(6, 1, 1, 1).expand(6, 3, 16, 16)
    gif_logger.log_video("clip", video, step=0)
    with Image.open(tmp_path / "gif" / "videos" / "clip_0.gif") as image:
        assert image.n_frames == 6
    pt_logger = CSVLogger("pt", log_dir=tmp_path)
    pt_logger.log_video("clip", torch.zeros(6, 3, 16, 16, dtype=torch.uint8), step=0)
    frames = torch.load(tmp_path / "pt" / "videos" / "clip_0.pt")
    assert frames.shape == (6, 16, 16, 3) and frames.dtype == torch.uint8


def test_csv_rejects_bad_format_and_bad_video(tmp_path):
    with pytest.raises(ValueError, match="video_format"):
        CSVLogger("exp", log_dir=tmp_path, video_format="avi")
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4")
    with pytest.raises(ValueError, match=r"\[T, C, H, W\]"):
        logger.log_video("clip", torch.zeros(3, 16, 16))
    with pytest.raises(ValueError, match="channels"):
        logger.log_video("clip", torch.zeros(3, 5, 16, 16))
    with pytest.raises(ValueError, match="exp_name"):
        CSVLogger("", log_dir=tmp_path)


def test_generate_exp_name_and_get_logger(tmp_path):
    first, second = generate_exp_name("SAC", "walk"), generate_exp_name("SAC", "walk")
    assert first.startswith("SAC_walk_") and first != second
    logger = get_logger("csv", str(tmp_path), "exp", video_format="mp4")
    assert isinstance(logger, CSVLogger) and logger.video_format == "mp4"
    with pytest.raises(ValueError, match="logger_type"):
        get_logger("mlflow-ish", str(tmp_path), "exp")


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is not None, reason="installed")
def test_tensorboard_logger_without_tensorboard_says_what_to_install(tmp_path):
    with pytest.raises(ImportError, match="tensorboard"):
        TensorBoardLogger("exp", log_dir=tmp_path)


def test_tensorboard_logger_writes_events(tmp_path):
    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger("exp", log_dir=tmp_path)
    logger.log_scalar("reward", 1.0, step=0)
    logger.log_histogram("weights", torch.randn(10), step=0)
    logger.experiment.flush()
    assert any(path.name.startswith("events") for path in (tmp_path / "exp").iterdir())


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="installed")
def test_wandb_logger_without_wandb_says_what_to_install(tmp_path):
    with pytest.raises(ImportError, match="wandb"):
        WandbLogger("exp", offline=True, save_dir=str(tmp_path))


def test_wandb_logger_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger("exp", offline=True, save_dir=str(tmp_path), project="tdrl-test")
    logger.log_scalar("reward", 1.0, step=0)
    logger.log_hparams({"lr": 0.1})
    logger.experiment.finish()
    assert (tmp_path / "wandb").is_dir()
