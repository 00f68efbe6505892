"""RemoteTensorDictReplayBuffer used locally against TensorDictReplayBuffer, in one run.

Both buffers get the same storage kind, sampler and data. Measures ``extend`` of 1,000
CartPole-sized transitions and ``sample(256)``; the ratio (remote-capable / plain) shows the
cost of the methods' RRef check on the hot path (target: <= 1.05). Prints a table and one
JSON line.

Usage: python benchmarks/bench_remote_rb.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, RemoteTensorDictReplayBuffer, TensorDictReplayBuffer


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
    repeats = 30 if args.quick else 300
    torch.set_num_threads(1)
    data = _transitions(1000)
    results = {}
    for op in ("extend", "sample"):
        timings = {}
        # interleave the two kinds in rounds so that machine load hits both alike
        for _ in range(3):
            for cls in (TensorDictReplayBuffer, RemoteTensorDictReplayBuffer):
                rb = cls(storage=LazyTensorStorage(100_000), batch_size=256)
                rb.extend(data)
                if op == "extend":
                    seconds = _median_seconds(lambda rb=rb: rb.extend(data), repeats)
                else:
                    seconds = _median_seconds(lambda rb=rb: rb.sample(), repeats)
                timings.setdefault(cls.__name__, []).append(seconds)
        plain = min(timings["TensorDictReplayBuffer"])
        remote = min(timings["RemoteTensorDictReplayBuffer"])
        results[op] = {"plain_us": plain * 1e6, "remote_us": remote * 1e6, "ratio": remote / plain}
    print(f"{'op':<8}{'TensorDictRB (us)':>20}{'RemoteTDRB (us)':>18}{'ratio':>8}")
    for op, row in results.items():
        print(f"{op:<8}{row['plain_us']:>20.1f}{row['remote_us']:>18.1f}{row['ratio']:>8.3f}")
    print(json.dumps({"bench": "remote_rb_local", **results}))


if __name__ == "__main__":
    main()
