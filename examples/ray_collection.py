"""Move real data across Ray: N collector actors -> one Ray replay buffer -> a sampling loop.

Nothing is trained. ``--collectors`` actors each run a collector on CartPole-v1 with a random
policy and write their batches straight into one :class:`~tdrl.data.RayReplayBuffer`; the
driver keeps sampling from that buffer while the actors collect, then prints the frames/s
collected and the samples/s drawn.

Usage: python examples/ray_collection.py [--collectors 2] [--frames 20000]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import ray

from tdrl.collectors import RayCollector
from tdrl.data import LazyTensorStorage, RayReplayBuffer, TensorDictReplayBuffer
from tdrl.envs import GymEnv


def main() -> None:
    """Collect into a Ray buffer while sampling from it; print the rates."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", type=int, default=2, help="collector actors")
    parser.add_argument("--frames", type=int, default=20_000, help="frames to collect")
    parser.add_argument("--frames-per-batch", type=int, default=500)
    parser.add_argument("--sample-size", type=int, default=256)
    args = parser.parse_args()

    ray.init(num_cpus=args.collectors + 1, include_dashboard=False)
    buffer = RayReplayBuffer(
        storage=LazyTensorStorage(100_000),
        replay_buffer_cls=TensorDictReplayBuffer,
        batch_size=args.sample_size,
    )
    collector = RayCollector(
        partial(GymEnv, "CartPole-v1"),
        num_collectors=args.collectors,
        frames_per_batch=args.frames_per_batch,
        total_frames=args.frames,
        replay_buffer=buffer,
    )
    samples = 0
    start = time.perf_counter()
    for _ in collector:  # each step: one actor wrote one batch into the buffer
        batch = buffer.sample()
        samples += batch.numel()
    elapsed = time.perf_counter() - start
    frames = len(buffer)
    collector.shutdown()
    print(f"collector actors : {args.collectors}")
    print(f"frames collected : {frames} in {elapsed:.2f}s -> {frames / elapsed:,.0f} frames/s")
    print(f"items sampled    : {samples} -> {samples / elapsed:,.0f} samples/s")
    buffer.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
