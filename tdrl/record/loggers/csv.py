"""CSVLogger: scalars as CSV files, videos as mp4 / gif / pt files, all in one folder."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tdrl.record.loggers._video import VIDEO_FORMATS, as_video_batch, write_video
from tdrl.record.loggers.common import Logger

__all__ = ["CSVExperiment", "CSVLogger"]


class CSVExperiment:
    """The files of a :class:`CSVLogger` experiment.

    Layout under ``log_dir``: ``scalars/<name>.csv`` (one ``step,value`` line per record),
    ``videos/<name>_<step>.<format>``, ``texts/<name>.txt``, ``histograms/<name>.csv`` and
    ``hparams.txt``. Names may contain ``/`` (sub-folders are created).

    Args:
        log_dir: the experiment folder.
        video_format: ``"mp4"``, ``"gif"`` or ``"pt"`` (a ``torch.save`` of the uint8 frames).
        video_fps: frames per second of the encoded videos.
    """

    def __init__(self, log_dir: str | Path, video_format: str = "pt", video_fps: int = 30) -> None:
        if video_format not in VIDEO_FORMATS:
            raise ValueError(f"video_format: expected one of {VIDEO_FORMATS}, got {video_format!r}")
        self.log_dir = Path(log_dir)
        self.video_format = video_format
        self.video_fps = video_fps
        self.scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.videos_counter: dict[str, int] = defaultdict(int)
        self.texts_counter: dict[str, int] = defaultdict(int)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def _file(self, folder: str, name: str, suffix: str) -> Path:
        path = self.log_dir / folder / f"{name}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def add_scalar(self, name: str, value: float, global_step: int | None = None) -> None:
        """Append ``step,value`` to ``scalars/<name>.csv``."""
        if isinstance(value, Tensor):
            value = value.item()
        if global_step is None:
            global_step = len(self.scalars[name])
        self.scalars[name].append((global_step, value))
        with self._file("scalars", name, ".csv").open("a") as file:
            file.write(f"{global_step},{value}\n")

    def add_video(
        self, tag: str, vid_tensor: Any, global_step: int | None = None, **kwargs: Any
    ) -> list[Path]:
        """Write a video (``[T, C, H, W]`` / ``[N, T, C, H, W]``, channels first or last).

        A batch of N > 1 videos gives N files ``<tag>_<step>_<i>``. ``fps`` in ``kwargs``
        overrides the experiment's ``video_fps``. Returns the files written.
        """
        if global_step is None:
            global_step = self.videos_counter[tag]
        self.videos_counter[tag] += 1
        videos = as_video_batch(vid_tensor)
        fps = kwargs.get("fps", self.video_fps)
        paths = []
        for index, frames in enumerate(videos):
            name = f"{tag}_{global_step}" if len(videos) == 1 else f"{tag}_{global_step}_{index}"
            path = self._file("videos", name, f".{self.video_format}")
            if self.video_format == "pt":
                torch.save(frames.clone(), path)
            else:
                write_video(path, frames, fps, self.video_format)
            paths.append(path)
        return paths

    def add_text(self, tag: str, text: str, global_step: int | None = None) -> None:
        """Append ``step,text`` to ``texts/<tag>.txt``."""
        if global_step is None:
            global_step = self.texts_counter[tag]
        self.texts_counter[tag] += 1
        with self._file("texts", tag, ".txt").open("a") as file:
            file.write(f"{global_step},{text}\n")

    def add_histogram(self, tag: str, values: Any, global_step: int | None = None) -> None:
        """Append ``step,v0,v1,...`` (the raw values) to ``histograms/<tag>.csv``."""
        values = torch.as_tensor(values).flatten().tolist()
        with self._file("histograms", tag, ".csv").open("a") as file:
            file.write(
                ",".join(map(str, [global_step if global_step is not None else "", *values]))
            )
            file.write("\n")

    def add_hparams(self, hparams: Mapping[str, Any]) -> None:
        """Write ``hparams.txt`` with one ``key: value`` line per entry."""
        with (self.log_dir / "hparams.txt").open("w") as file:
            for key, value in hparams.items():
                file.write(f"{key}: {value}\n")

    def __repr__(self) -> str:
        return f"CSVExperiment(log_dir={str(self.log_dir)!r}, video_format={self.video_format!r})"


class CSVLogger(Logger):
    """A logger writing plain files: CSV scalars and mp4 / gif / pt videos.

    Files go to ``<log_dir>/<exp_name>/`` (see :class:`CSVExperiment` for the layout). mp4
    videos are encoded with PyAV, or imageio-ffmpeg when PyAV is missing; gif files with
    Pillow (the ``video`` extra installs them).

    Args:
        exp_name: the experiment name (the sub-folder of ``log_dir``).
        log_dir: the parent folder; ``"csv_logs"`` by default.
        video_format: ``"pt"`` (default), ``"mp4"`` or ``"gif"``.
        video_fps: frames per second of the encoded videos.

    Examples:
        >>> import tempfile, torch
        >>> from tdrl.record.loggers import CSVLogger
        >>> folder = tempfile.mkdtemp()
        >>> logger = CSVLogger("exp", log_dir=folder, video_format="mp4")
        >>> logger.log_scalar("reward", 1.5, step=0)
        >>> (logger.experiment.log_dir / "scalars" / "reward.csv").read_text().splitlines()
        ['0,1.5']
        >>> logger.log_video("rollout", torch.zeros(8, 3, 32, 32, dtype=torch.uint8), step=0)
        >>> sorted(path.name for path in (logger.experiment.log_dir / "videos").iterdir())
        ['rollout_0.mp4']
    """

    def __init__(
        self,
        exp_name: str,
        log_dir: str | Path | None = None,
        video_format: str = "pt",
        video_fps: int = 30,
    ) -> None:
        self.video_format = video_format
        self.video_fps = video_fps
        super().__init__(exp_name=exp_name, log_dir=str(log_dir or "csv_logs"))

    def _create_experiment(self) -> CSVExperiment:
        return CSVExperiment(
            Path(self.log_dir) / self.exp_name,
            video_format=self.video_format,
            video_fps=self.video_fps,
        )

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Append ``step,value`` to ``scalars/<name>.csv``."""
        self.experiment.add_scalar(name, value, global_step=step)

    def log_video(self, name: str, video: Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Write ``videos/<name>_<step>.<format>`` (``fps`` may be given in ``kwargs``)."""
        self.experiment.add_video(name, video, global_step=step, **kwargs)

    def log_str(self, name: str, value: str, step: int | None = None) -> None:
        """Append ``step,value`` to ``texts/<name>.txt``."""
        self.experiment.add_text(name, value, global_step=step)

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """Write ``hparams.txt``."""
        self.experiment.add_hparams(dict(cfg))

    def log_histogram(self, name: str, data: Sequence | Tensor, **kwargs: Any) -> None:
        """Append the values of ``data`` to ``histograms/<name>.csv`` (``step`` in kwargs)."""
        self.experiment.add_histogram(name, data, global_step=kwargs.get("step"))

    def __repr__(self) -> str:
        return f"CSVLogger(exp_name={self.exp_name!r}, experiment={self.experiment!r})"
