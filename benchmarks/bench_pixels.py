"""Per-frame cost of the pixel pipeline's transforms against the same torch operations.

Renders a few CartPole-v1 frames (400 x 600 RGB, uint8), then processes them with
``Compose(ToTensorImage(), GrayScale(), Resize(64, 64), CatFrames(4, dim=-3))``
exactly as a ``TransformedEnv`` step does (``transform._step``), and with the same
torch operations called directly on the same frames (permute and scale, luma
weights, antialiased bilinear ``interpolate``, clamp, 4-frame stack). Both run
alternately in one process; the table reports the median time per frame of each
and their ratio (target: at most 1.5). Rendering is not timed.

Usage::

    python benchmarks/bench_pixels.py [--quick] [--frames N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from tdrl.envs import CatFrames, Compose, GrayScale, Resize, ToTensorImage  # noqa: E402

TARGET_RATIO = 1.5
SIZE = 64
STACK = 4
WEIGHTS = (0.2989, 0.587, 0.114)


def _render(count: int) -> list[torch.Tensor]:
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env.reset(seed=0)
    frames = []
    for _ in range(count):
        frames.append(torch.from_numpy(env.render().copy()))
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.close()
    return frames


def _direct(frames: list[torch.Tensor]) -> None:
    """The pipeline's torch operations, written by hand."""
    stack = None
    for frame in frames:
        image = frame.movedim(-1, -3).to(torch.float32).div_(255)
        red, green, blue = image.unbind(-3)
        gray = red.mul(WEIGHTS[0]).add_(green, alpha=WEIGHTS[1]).add_(blue, alpha=WEIGHTS[2])
        small = F.interpolate(
            gray.reshape(1, 1, *gray.shape),
            size=(SIZE, SIZE),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )
        small = small.reshape(1, SIZE, SIZE).clamp_(0.0, 0.9999)
        if stack is None:
            stack = torch.cat([small] * STACK, -3)
            continue
        out = torch.cat([stack.narrow(-3, 1, STACK - 1), small], -3)
        stack.copy_(out)


def _pipeline() -> Compose:
    return Compose(ToTensorImage(), GrayScale(), Resize(SIZE, SIZE), CatFrames(STACK, dim=-3))


def _bind(transform: Compose, frame: torch.Tensor) -> None:
    """Give the transforms their specs (as a TransformedEnv does), so Resize clamps."""
    from tdrl.data import Bounded, Composite

    shape = tuple(frame.shape)
    output_spec = Composite(
        full_observation_spec=Composite(pixels=Bounded(0, 255, shape=shape, dtype=torch.uint8)),
        full_reward_spec=Composite(),
        full_done_spec=Composite(),
    )
    transform.transform_output_spec(output_spec)


def _transformed(transform: Compose, frames: list[torch.Tensor]) -> None:
    """The same frames through the transforms, as an env step runs them."""
    root = TensorDict({}, [])
    tds = [TensorDict({"pixels": frame}, []) for frame in frames]
    transform._reset(root, tds[0])
    for td in tds[1:]:
        transform._step(root, td)


def _time(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--frames", type=int, default=None, help="rendered frames per round")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds")
    args = parser.parse_args()
    count = args.frames or (16 if args.quick else 48)
    rounds = args.rounds or (7 if args.quick else 21)
    torch.set_num_threads(1)

    frames = _render(count)
    transform = _pipeline()
    _bind(transform, frames[0])
    _direct(frames)
    _transformed(transform, frames)

    direct_times, transform_times = [], []
    for index in range(rounds):
        # alternate which path goes first, so neither always runs on a warmer cache
        if index % 2:
            transform_times.append(_time(_transformed, transform, frames) / count)
            direct_times.append(_time(_direct, frames) / count)
        else:
            direct_times.append(_time(_direct, frames) / count)
            transform_times.append(_time(_transformed, transform, frames) / count)
    direct_us = statistics.median(direct_times) * 1e6
    transform_us = statistics.median(transform_times) * 1e6
    ratio = transform_us / direct_us

    height, width = frames[0].shape[:2]
    print(
        f"CartPole-v1 frames {height}x{width}x3 -> {STACK}x{SIZE}x{SIZE}, "
        f"{count} frames x {rounds} alternating rounds (medians)"
    )
    print(f"{'path':<60}{'us/frame':>10}")
    print(f"{'torch operations called directly':<60}{direct_us:>10.1f}")
    print(
        f"{'ToTensorImage+GrayScale+Resize+CatFrames (transform._step)':<60}{transform_us:>10.1f}"
    )
    print(f"ratio {ratio:.2f} (target <= {TARGET_RATIO})")
    print(
        json.dumps(
            {
                "benchmark": "pixels",
                "frames": count,
                "rounds": rounds,
                "direct_us_per_frame": round(direct_us, 2),
                "transform_us_per_frame": round(transform_us, 2),
                "ratio": round(ratio, 3),
                "target": TARGET_RATIO,
            }
        )
    )


if __name__ == "__main__":
    main()
