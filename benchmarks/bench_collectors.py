"""Multi-process collection against one in-process collector, measured alternately in one run.

Compares, on CartPole-v1 with a random policy, the frames/s of
``MultiSyncDataCollector`` with 2 worker processes against one ``SyncDataCollector``
(the issue's target: >= 1.6x on 2 cores). Each round builds both collectors, skips their
first batch (start-up), then times the same number of frames. Prints a table and one
JSON line.

Usage: python benchmarks/bench_collectors.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial

from tdrl.collectors import MultiSyncDataCollector, SyncDataCollector
from tdrl.envs.libs.gym import GymEnv

ENV_NAME = "CartPole-v1"
WORKERS = 2


def _frames_per_second(collector, batches: int) -> float:
    iterator = iter(collector)
    next(iterator)  # start-up and first batch are not timed
    frames = 0
    start = time.perf_counter()
    for _ in range(batches):
        frames += next(iterator).numel()
    elapsed = time.perf_counter() - start
    collector.shutdown()
    return frames / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    rounds = 3 if args.quick else 5
    batches = 10 if args.quick else 30
    frames_per_batch = 1000
    make_env = partial(GymEnv, ENV_NAME)
    single, multi = [], []
    for _ in range(rounds):
        single.append(
            _frames_per_second(
                SyncDataCollector(make_env(), frames_per_batch=frames_per_batch), batches
            )
        )
        multi.append(
            _frames_per_second(
                MultiSyncDataCollector([make_env] * WORKERS, frames_per_batch=frames_per_batch),
                batches,
            )
        )
    single_fps, multi_fps = statistics.median(single), statistics.median(multi)
    print(f"{'collector':<40}{'frames/s':>12}")
    print(f"{'SyncDataCollector':<40}{single_fps:>12.0f}")
    print(f"{f'MultiSyncDataCollector ({WORKERS} workers)':<40}{multi_fps:>12.0f}")
    print(f"ratio: {multi_fps / single_fps:.2f}x")
    print(
        json.dumps(
            {
                "benchmark": "collectors",
                "env": ENV_NAME,
                "sync_frames_per_s": round(single_fps),
                "multisync_frames_per_s": round(multi_fps),
                "workers": WORKERS,
                "ratio": round(multi_fps / single_fps, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
