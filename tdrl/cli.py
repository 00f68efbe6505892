"""The ``tdrl`` command: ``demo``, ``check-env``, ``bench`` and ``info``.

Run ``tdrl --help`` (or ``python -m tdrl --help``) for the list of commands and
``tdrl <command> --help`` for their options.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]

DEFAULT_ENV = "CartPole-v1"
DEFAULT_FRAMES = 10_000
DEFAULT_WORKERS = 2
DEFAULT_OUT = "tdrl-demo"
VIDEO_STEPS = 60

#: Targets of ratios whose benchmark script does not state them in its JSON line.
#: A ``target`` / ``target_ratio`` / ``<metric>_target`` entry in the JSON takes precedence.
KNOWN_TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ("bench_rb", "uniform_ratio"): ("<=", 2.0),
    ("bench_rb", "prioritized_ratio"): ("<=", 5.0),
    ("bench_rb", "extend_1000_ratio"): ("<=", 1.5),
    ("bench_rb", "extend_10000_ratio"): ("<=", 1.5),
    ("bench_env", "env=counting rollout_over_plain"): ("<=", 2.0),
    ("bench_batched", "parallel_over_async"): (">=", 1.0),
    ("bench_batched", "serial_over_sync"): (">=", 0.5),
    ("bench_batched", "startup_ratio"): ("<=", 2.0),
    ("bench_slice", "slice_ratio"): ("<=", 5.0),
    ("bench_slice", "flat_ratio"): ("<=", 0.6),
    ("bench_collectors", "ratio"): (">=", 1.6),
    ("bench_ray_buffer", "extend_ratio"): ("<=", 3.0),
    ("bench_ray_buffer", "sample_ratio"): ("<=", 3.0),
}


# --------------------------------------------------------------------------- helpers
def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None) -> str:
    """A plain text table with left-aligned columns."""
    lines = [list(map(str, row)) for row in rows]
    if header is not None:
        lines.insert(0, list(header))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines
    ]
    if header is not None:
        out.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(out)


def _human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _folder_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


# ------------------------------------------------------------------------------ info
#: Other optional libraries (pip name, import name), listed by ``tdrl info``: tdrl.data's
#: offline datasets and LLM data, and Ray for the collectors and buffers that scale out.
_DATA_LIBRARIES = (
    ("h5py", "h5py"),
    ("minari", "minari"),
    ("huggingface_hub", "huggingface_hub"),
    ("datasets", "datasets"),
    ("tokenizers", "tokenizers"),
    ("transformers", "transformers"),
    ("scikit-learn", "sklearn"),
    ("ray", "ray"),
)


def cmd_info(args: argparse.Namespace) -> int:
    """Print the versions of tdrl and its dependencies, and the simulator libraries found."""
    from tdrl.envs.libs.backends import backend_status

    rows = [
        ("python", platform.python_version()),
        ("tdrl", _version("tdrl")),
        ("torch", _version("torch")),
        ("tensordict", _version("tensordict")),
        ("numpy", _version("numpy")),
        ("gymnasium", _version("gymnasium")),
    ]
    print("versions")
    print(_table(rows))
    print("\nsimulator libraries")
    backends = [
        (name, "yes" if found else "no", version or "-", package)
        for name, found, version, package in backend_status()
    ]
    print(_table(backends, header=("library", "installed", "version", "pip package")))
    print("\nother libraries (offline datasets, LLM data, scale-out)")
    data = [
        (name, _version(name) if importlib.util.find_spec(module) else "-")
        for name, module in _DATA_LIBRARIES
    ]
    print(_table(data, header=("library", "version")))
    return 0


# ------------------------------------------------------------------------- check-env
def cmd_check_env(args: argparse.Namespace) -> int:
    """Build ``env_id`` with the ``--lib`` backend, print its specs and run ``check_env_specs``."""
    from tdrl.envs.libs.backends import BACKENDS, make_backend_env
    from tdrl.envs.utils import check_env_specs

    row = BACKENDS.get(args.lib)
    label = f"{args.lib}:{args.env_id}"
    if row is None:
        print(f"--lib: expected one of {', '.join(BACKENDS)}, got {args.lib!r}", file=sys.stderr)
        return 2
    try:
        env = make_backend_env(args.lib, args.env_id)
    except Exception as err:  # any failure of the simulator library to build the env
        hint = f" (env ids: {row.env_id_help})" if row.env_id_help else ""
        print(f"cannot build {label}: {type(err).__name__}: {err}{hint}", file=sys.stderr)
        return 2
    try:
        print(
            f"{label} ({type(env).__name__}): batch_size={list(env.batch_size)}, device={env.device}"
        )
        for name in ("observation", "action", "reward", "done", "state"):
            spec = getattr(env, f"full_{name}_spec")
            print(f"\n{name}_spec:\n{spec}")
        try:
            check_env_specs(env, seed=args.seed)
        except AssertionError as err:
            print(f"\ncheck_env_specs: FAILED\n{err}")
            return 1
        print("\ncheck_env_specs: OK")
        return 0
    finally:
        env.close()


# ----------------------------------------------------------------------------- bench
def _benchmarks_dir(explicit: str | None) -> Path:
    if explicit is not None:
        return Path(explicit)
    in_checkout = Path(__file__).resolve().parents[1] / "benchmarks"
    return in_checkout if in_checkout.is_dir() else Path.cwd() / "benchmarks"


def _last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


def _is_ratio(key: str) -> bool:
    if key.startswith("target") or key.endswith("_target"):
        return False
    return key == "ratio" or key.endswith("_ratio") or "_over_" in key


def _label(item: dict) -> str:
    parts = [f"{key}={item[key]}" for key in ("env", "name", "batch") if key in item]
    return " ".join(parts)


def _declared_target(record: dict, key: str) -> tuple[str, float] | None:
    names = [f"{key}_target"]
    if key.endswith("_ratio"):
        names.append(f"{key[: -len('_ratio')]}_target")
    if key == "ratio":
        names += ["target_ratio", "target"]
    for name in names:
        value = record.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return ("<=", float(value))
    return None


def _ratios(script: str, result: dict) -> list[tuple[str, float, tuple[str, float] | None]]:
    """The ratio entries of a benchmark JSON line, with their targets when known."""
    found = []

    def visit(record: dict, prefix: str) -> None:
        for key, value in record.items():
            if isinstance(value, dict):
                visit(value, f"{prefix}{key}.")
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        label = _label(item)
                        visit(item, f"{prefix}{label} " if label else prefix)
            elif _is_ratio(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
                metric = f"{prefix}{key}"
                target = _declared_target(record, key)
                if target is None:
                    target = KNOWN_TARGETS.get((script, metric))
                if target is None:
                    short = re.sub(r" batch=\S+", "", metric)
                    target = KNOWN_TARGETS.get((script, short))
                found.append((metric, float(value), target))

    visit(result, "")
    return found


def _status(value: float, target: tuple[str, float] | None) -> str:
    if target is None:
        return "-"
    op, bound = target
    ok = value <= bound if op == "<=" else value >= bound
    return "ok" if ok else "MISSED"


def cmd_bench(args: argparse.Namespace) -> int:
    """Run every ``benchmarks/bench_*.py`` and print a markdown table of ratios and targets."""
    folder = _benchmarks_dir(args.dir)
    scripts = sorted(folder.glob("bench_*.py"))
    if args.only:
        scripts = [script for script in scripts if args.only in script.stem]
    if not scripts:
        print(f"no benchmark scripts (bench_*.py) found in {folder}", file=sys.stderr)
        return 1
    rows = []
    failures = 0
    for script in scripts:
        command = [sys.executable, str(script)] + ([] if args.full else ["--quick"])
        print(f"running {script.name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=args.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            failures += 1
            rows.append((script.stem, f"timed out after {args.timeout} s", "", "", "FAILED"))
            continue
        elapsed = time.perf_counter() - start
        result = _last_json(proc.stdout) if proc.returncode == 0 else None
        if result is None:
            failures += 1
            reason = f"exit code {proc.returncode}" if proc.returncode else "no JSON line"
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            rows.append((script.stem, f"{reason}: {tail[0][:80]}", "", "", "FAILED"))
            continue
        ratios = _ratios(script.stem, result)
        if not ratios:
            rows.append((script.stem, f"(no ratio reported, {elapsed:.0f} s)", "", "", "-"))
        for metric, value, target in ratios:
            shown = "-" if target is None else f"{target[0]} {target[1]:g}"
            rows.append((script.stem, metric, f"{value:.3f}", shown, _status(value, target)))
    print("| benchmark | ratio | value | target | status |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    missed = sum(1 for row in rows if row[-1] == "MISSED")
    print(f"\n{len(scripts)} scripts, {failures} failed, {missed} ratios off target")
    return 1 if failures else 0


# ------------------------------------------------------------------------------ demo
def _same(left: Any, right: Any) -> bool:
    """Deep equality of checkpoint states (tensors, tensordicts, containers, numbers)."""
    import torch
    from tensordict import TensorDictBase

    if isinstance(left, TensorDictBase) and isinstance(right, TensorDictBase):
        return left.batch_size == right.batch_size and bool((left == right).all())
    if isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor):
        return left.shape == right.shape and bool(torch.equal(left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right))
    return left == right


def _make_gym_env(env_id: str, **kwargs: Any) -> Any:
    from tdrl.envs import GymEnv

    return GymEnv(env_id, **kwargs)


def _progress(total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="frame", desc="collecting", file=sys.stderr, mininterval=0.5)


def _collect(args: argparse.Namespace, logger: Any) -> tuple[Any, dict]:
    """Collect ``args.frames`` frames from a ParallelEnv into a prioritized buffer."""
    from tdrl.collectors import SyncDataCollector
    from tdrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
    from tdrl.envs import (
        Compose,
        EnvCreator,
        ParallelEnv,
        RewardSum,
        StepCounter,
        TransformedEnv,
    )

    start = time.perf_counter()
    base = ParallelEnv(args.workers, EnvCreator(functools.partial(_make_gym_env, args.env)))
    base.start()
    startup = time.perf_counter() - start
    env = TransformedEnv(base, Compose(StepCounter(), RewardSum()))
    env.set_seed(args.seed)
    frames_per_batch = args.workers * args.steps_per_batch
    collector = SyncDataCollector(env, frames_per_batch=frames_per_batch, total_frames=args.frames)
    buffer = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(args.frames), batch_size=256
    )
    bar = _progress(len(collector) * frames_per_batch)
    frames = updates = 0
    collect_time = 0.0
    episodes_done = 0
    returns_sum = 0.0
    tick = time.perf_counter()
    try:
        for data in collector:
            collect_time += time.perf_counter() - tick
            buffer.extend(data.reshape(-1))
            frames += data.numel()
            sample = buffer.sample()
            # a stand-in for TD errors: favour transitions late in their episode
            sample.set("td_error", sample["next", "step_count"].squeeze(-1).float())
            buffer.update_tensordict_priority(sample)
            updates += 1
            ended = data["next", "done"]
            if ended.any():
                returns = data["next", "episode_reward"][ended]
                episodes_done += returns.numel()
                returns_sum += float(returns.sum())
                logger.log_scalar("episode_reward", float(returns.mean()), step=frames)
            logger.log_scalar("buffer_size", len(buffer), step=frames)
            if bar is not None:
                bar.update(data.numel())
                bar.set_postfix(buffer=len(buffer), refresh=False)
            logger.log_scalar("frames_per_s", frames / max(collect_time, 1e-9), step=frames)
            tick = time.perf_counter()
    finally:
        if bar is not None:
            bar.close()
        collector.shutdown()
    stats = {
        "frames": frames,
        "collect_s": collect_time,
        "startup_s": startup,
        "updates": updates,
        "episodes": episodes_done,
        "mean_return": returns_sum / episodes_done if episodes_done else float("nan"),
        "batch_shape": list(data.batch_size),
    }
    return buffer, stats


def _checkpoint(buffer: Any, folder: Path) -> bool:
    """Dump the buffer to ``folder``, load it into a fresh buffer and compare both."""
    from tdrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    buffer.dumps(folder)
    restored = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(buffer.storage.max_size), batch_size=256
    )
    restored.loads(folder)
    same = len(restored) == len(buffer) and _same(restored[:], buffer[:])
    return same and _same(restored.sampler.state_dict(), buffer.sampler.state_dict())


def _record_video(args: argparse.Namespace, logger: Any) -> tuple[Path, int]:
    """Render a short random rollout of a single env into an mp4 through the logger."""
    from tdrl.envs import TransformedEnv
    from tdrl.record import PixelRenderTransform, VideoRecorder

    env = _make_gym_env(args.env, render_mode="rgb_array")
    recorder = VideoRecorder(logger, tag="rollout", in_keys=["pixels"], fps=30)
    env = TransformedEnv(env, PixelRenderTransform())
    env.append_transform(recorder)
    env.set_seed(args.seed)
    try:
        env.rollout(args.video_steps, break_when_any_done=False)
        frames = len(recorder.obs)
        recorder.dump()
    finally:
        env.close()
    return logger.experiment.log_dir / "videos" / "rollout_0.mp4", frames


def cmd_demo(args: argparse.Namespace) -> int:
    """Collect, store, prioritize, checkpoint and record on a gymnasium env; print a summary."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import torch

    from tdrl.record import CSVLogger, generate_exp_name

    torch.manual_seed(args.seed)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run_name = generate_exp_name("demo", args.env.replace("/", "-"))
    logger = CSVLogger(run_name, log_dir=out / "logs", video_format="mp4", video_fps=30)
    print(f"tdrl demo: {args.frames} frames of {args.env} on {args.workers} workers -> {out}")
    buffer, stats = _collect(args, logger)
    checkpoint = out / "checkpoint"
    same = _checkpoint(buffer, checkpoint)
    video, video_frames = _record_video(args, logger)
    run_folders = (checkpoint, logger.experiment.log_dir)
    files = sorted(path for folder in run_folders for path in folder.rglob("*") if path.is_file())
    fps = stats["frames"] / max(stats["collect_s"], 1e-9)
    rows = [
        ("env", f"{args.env} x {args.workers} workers (ParallelEnv + StepCounter, RewardSum)"),
        ("frames collected", f"{stats['frames']} in batches of {stats['batch_shape']}"),
        (
            "collection time",
            f"{stats['collect_s']:.2f} s (+ {stats['startup_s']:.2f} s worker start-up)",
        ),
        ("frames/s", f"{fps:,.0f}"),
        ("episodes finished", f"{stats['episodes']} (mean return {stats['mean_return']:.1f})"),
        ("buffer size", f"{len(buffer)} transitions (TensorDictPrioritizedReplayBuffer)"),
        ("priority updates", f"{stats['updates']} sample + update_priority rounds"),
        (
            "checkpoint",
            f"{checkpoint.relative_to(out.parent)}/ ({_human_bytes(_folder_size(checkpoint))}, "
            "written with ReplayBuffer.dumps, read back with loads)",
        ),
        ("checkpoint reload", "identical" if same else "MISMATCH"),
        ("video", f"{video.relative_to(out.parent)} ({video_frames} frames)"),
        ("files written", len(files)),
    ]
    print()
    print(_table(rows, header=("summary", "")))
    print()
    print(_table(_files_by_folder(files, out.parent), header=("folder", "files", "size")))
    return 0 if same else 1


def _files_by_folder(files: list[Path], root: Path) -> list[tuple[str, int, str]]:
    """One row per folder: its relative path, how many files it holds and their total size."""
    folders: dict[Path, list[Path]] = {}
    for path in files:
        folders.setdefault(path.parent, []).append(path)
    return [
        (
            f"{folder.relative_to(root)}/",
            len(paths),
            _human_bytes(sum(path.stat().st_size for path in paths)),
        )
        for folder, paths in folders.items()
    ]


# ---------------------------------------------------------------------------- parser
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tdrl`` command."""
    parser = argparse.ArgumentParser(
        prog="tdrl",
        description="tdrl: TensorDict-native RL environments and replay buffers.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo",
        help="collect from a gymnasium env into a prioritized buffer, checkpoint, record a video",
        description=(
            "End-to-end run: collect frames from a ParallelEnv of a gymnasium env (with "
            "StepCounter and RewardSum transforms) into a prioritized replay buffer, sample "
            "and update priorities, checkpoint the buffer and load it back, record an mp4 of a "
            "short rollout, and print a summary table. Everything is written under --out."
        ),
    )
    demo.add_argument(
        "--env", default=DEFAULT_ENV, help=f"gymnasium env id (default {DEFAULT_ENV})"
    )
    demo.add_argument(
        "--frames",
        type=_positive_int,
        default=DEFAULT_FRAMES,
        help=f"frames to collect (default {DEFAULT_FRAMES})",
    )
    demo.add_argument(
        "--workers",
        type=_positive_int,
        default=DEFAULT_WORKERS,
        help=f"ParallelEnv worker processes (default {DEFAULT_WORKERS})",
    )
    demo.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT})")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument(
        "--steps-per-batch",
        type=_positive_int,
        default=50,
        help="env steps per collected batch (default 50)",
    )
    demo.add_argument(
        "--video-steps",
        type=_positive_int,
        default=VIDEO_STEPS,
        help=f"frames in the recorded video (default {VIDEO_STEPS})",
    )
    demo.set_defaults(handler=cmd_demo)

    check = commands.add_parser(
        "check-env",
        help="build an env, print its specs and run check_env_specs",
        description=(
            "Build ENV_ID with a simulator backend (gymnasium by default), print its specs and "
            "check a short rollout against them. `tdrl info` lists the backends."
        ),
    )
    check.add_argument(
        "env_id",
        metavar="ENV_ID",
        help="the env id, e.g. CartPole-v1 (gymnasium) or cheetah/run (dm_control)",
    )
    check.add_argument(
        "--lib",
        default="gymnasium",
        metavar="LIB",
        help="the backend that builds ENV_ID (default gymnasium; see `tdrl info`)",
    )
    check.add_argument(
        "--seed", type=int, default=0, help="seed of the checked rollout (default 0)"
    )
    check.set_defaults(handler=cmd_check_env)

    bench = commands.add_parser(
        "bench",
        help="run benchmarks/bench_*.py and print their ratios against targets",
        description=(
            "Run each benchmarks/bench_*.py script (with --quick unless --full) in a subprocess, "
            "read the JSON line it prints last and print a markdown table of every ratio "
            "against its target. A script that fails is reported and makes the exit code 1."
        ),
    )
    bench.add_argument("--full", action="store_true", help="run the full benchmarks (no --quick)")
    bench.add_argument(
        "--only", metavar="TEXT", help="run only the scripts whose name contains TEXT"
    )
    bench.add_argument(
        "--timeout", type=float, default=300, help="seconds allowed per script (default 300)"
    )
    bench.add_argument("--dir", help="the benchmarks folder (default: the checkout's benchmarks/)")
    bench.set_defaults(handler=cmd_bench)

    info = commands.add_parser(
        "info",
        help="print versions and the simulator libraries available",
        description="Print the versions of Python, tdrl and its dependencies, and which simulator libraries are installed.",
    )
    info.set_defaults(handler=cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tdrl`` command with ``argv`` (``sys.argv[1:]`` by default); return its exit code."""
    args = build_parser().parse_args(argv)
    return args.handler(args)
