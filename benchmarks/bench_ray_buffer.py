"""RayReplayBuffer calls against a local buffer plus one Ray round trip of the same bytes.

Measures, in one run on a local Ray cluster:
- ``extend`` of 1,000 CartPole-sized transitions on a RayReplayBuffer (from the driver)
  against the same ``extend`` on a local buffer plus one round trip of the batch to an
  echo actor;
- ``sample(256)`` on the RayReplayBuffer against a local ``sample(256)`` plus one round
  trip of a 256-item batch.
The issue's target: each ratio <= 3. Prints a table and one JSON line.

Usage: python benchmarks/bench_ray_buffer.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import ray
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, RayReplayBuffer, TensorDictReplayBuffer


@ray.remote(num_cpus=0)
class Echo:
    """Returns what it receives: one round trip of the bytes."""

    def echo(self, data):
        return data


def _transitions(count: int) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(count, 4),
            "action": torch.zeros(count, 2),
            ("next", "observation"): torch.randn(count, 4),
            ("next", "reward"): torch.ones(count, 1),
            ("next", "done"): torch.zeros(count, 1, dtype=torch.bool),
        },
        [count],
    )


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    repeats = 20 if args.quick else 100
    ray.init(num_cpus=2, include_dashboard=False)
    data = _transitions(1000)
    small = _transitions(256)
    local = TensorDictReplayBuffer(storage=LazyTensorStorage(1_000_000))
    remote = RayReplayBuffer(
        storage=LazyTensorStorage(1_000_000), replay_buffer_cls=TensorDictReplayBuffer
    )
    echo = Echo.remote()
    for _ in range(3):  # warm-up: lazy storages, actor imports
        local.extend(data)
        remote.extend(data)
        ray.get(echo.echo.remote(data))
    remote_extend = _median_seconds(lambda: remote.extend(data), repeats)
    local_extend = _median_seconds(lambda: local.extend(data), repeats)
    trip_extend = _median_seconds(lambda: ray.get(echo.echo.remote(data)), repeats)
    remote_sample = _median_seconds(lambda: remote.sample(256), repeats)
    local_sample = _median_seconds(lambda: local.sample(256), repeats)
    trip_sample = _median_seconds(lambda: ray.get(echo.echo.remote(small)), repeats)
    ray.shutdown()
    extend_ratio = remote_extend / (local_extend + trip_extend)
    sample_ratio = remote_sample / (local_sample + trip_sample)
    print(f"{'call':<16}{'remote ms':>12}{'local ms':>12}{'round trip ms':>15}{'ratio':>8}")
    for name, rem, loc, trip, ratio in (
        ("extend(1000)", remote_extend, local_extend, trip_extend, extend_ratio),
        ("sample(256)", remote_sample, local_sample, trip_sample, sample_ratio),
    ):
        print(f"{name:<16}{rem * 1e3:>12.3f}{loc * 1e3:>12.3f}{trip * 1e3:>15.3f}{ratio:>8.2f}")
    print(
        json.dumps(
            {
                "benchmark": "ray_buffer",
                "extend_ratio": round(extend_ratio, 3),
                "sample_ratio": round(sample_ratio, 3),
                "remote_extend_ms": round(remote_extend * 1e3, 3),
                "remote_sample_ms": round(remote_sample * 1e3, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
