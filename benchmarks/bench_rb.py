"""Replay-buffer throughput against bare tensor baselines measured in the same run.

Transitions hold an observation (17 floats), an action (6 floats), and a "next" entry with
observation, reward and done, as in TED. Every ratio is the median over many short
alternating rounds of the ratio of the buffer operation's time to its baseline's in the
same round (the two run seconds apart, so a change of load on a shared machine moves both);
the times printed are the medians of each side:

- uniform ``sample()`` of a TensorDictReplayBuffer vs a bare ``index_select`` of the same
  storage tensors at pre-drawn indices;
- prioritized ``sample()`` + ``update_priority()`` vs the same bare gather;
- ``extend()`` of a batch vs a bare slice assignment of the same tensors into the buffer's
  own storage tensors. The storage is filled once before timing, as a buffer that has run
  a while is: writing to rows never written before costs a page fault per page, and in an
  empty storage ``extend()`` reached them first (its cursor leads the baseline's), which
  charged every first touch of the storage to tdrl;
- uniform ``sample()`` cost at 10k, 100k and 1M stored items;
- ListStorage vs LazyTensorStorage vs LazyMemmapStorage sampling.

Usage: ``python benchmarks/bench_rb.py [--quick]``; prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
from _baselines import bare_gather
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

BATCH = 256


def transitions(n: int) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(n, 17),
            "action": torch.randn(n, 6),
            "next": {
                "observation": torch.randn(n, 17),
                "reward": torch.randn(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )


def per_call_us(fn, calls: int) -> tuple[float, float]:
    """Microseconds per call of ``fn``: process CPU time and wall time."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6


# CPU time is the headline (the machine may be shared); wall time is reported beside it.
WALL = {}


def compare(ours, base, calls: int, rounds: int, name: str = "") -> tuple[float, float, float]:
    """Median per-call CPU microseconds of ``ours`` and ``base`` and the median per-round ratio.

    ``ours`` and ``base`` run in alternating rounds of ``calls`` calls; the wall-clock
    medians are kept in ``WALL[name]``.
    """
    ours()
    base()
    ours_t, base_t = [], []
    for _ in range(rounds):
        ours_t.append(per_call_us(ours, calls))
        base_t.append(per_call_us(base, calls))
    WALL[name] = (
        statistics.median(t[1] for t in ours_t),
        statistics.median(t[1] for t in base_t),
    )
    ratio = statistics.median(o[0] / b[0] for o, b in zip(ours_t, base_t))
    return statistics.median(t[0] for t in ours_t), statistics.median(t[0] for t in base_t), ratio


def filled_buffer(cls, storage, data, **kwargs):
    rb = cls(storage=storage, batch_size=BATCH, **kwargs)
    chunk = 100_000
    for start in range(0, data.shape[0], chunk):
        rb.extend(data[start : start + chunk])
    return rb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller storage, fewer rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    size = 100_000 if args.quick else 1_000_000
    # short rounds, many of them: the ratio of each round compares the two sides under the
    # same load
    calls, rounds = (50, 10) if args.quick else (100, 27)
    data = transitions(size)
    results: dict[str, float] = {"size": size, "batch": BATCH}
    rows = []

    rb = filled_buffer(TensorDictReplayBuffer, LazyTensorStorage(size), data)
    ours, base, ratio = compare(
        rb.sample, bare_gather(rb, BATCH, 4096), calls, rounds, "uniform sample()"
    )
    results.update(uniform_us=ours, gather_us=base, uniform_ratio=ratio)
    rows.append(("uniform sample()", ours, base, ratio, "<= 2"))

    prb = filled_buffer(
        TensorDictPrioritizedReplayBuffer, LazyTensorStorage(size), data, alpha=0.7, beta=0.5
    )
    priorities = torch.rand(BATCH) + 0.01

    def prioritized_step():
        sample = prb.sample()
        prb.update_priority(sample["index"], priorities)

    prio_name = "prioritized sample()+update_priority()"
    ours, base, ratio = compare(
        prioritized_step, bare_gather(prb, BATCH, 4096), calls, rounds, prio_name
    )
    results.update(prioritized_us=ours, prioritized_ratio=ratio, prioritized_it_s=1e6 / ours)
    rows.append((prio_name, ours, base, ratio, "<= 5"))

    for extend_size in (1_000, 10_000):
        chunk = transitions(extend_size)
        # a full storage: its pages are resident, for extend() and the baseline alike
        erb = filled_buffer(ReplayBuffer, LazyTensorStorage(size), data)
        erb.extend(chunk)
        dst = [erb.storage.content.get(key) for key in erb.storage.stored_keys]
        src = [chunk.get(key) for key in erb.storage.stored_keys]
        cursor = {"c": 0}

        def bare_assign(dst=dst, src=src, cursor=cursor, n=extend_size):
            start = cursor["c"]
            cursor["c"] = (start + n) % (size - n)
            for target, value in zip(dst, src):
                target[start : start + n] = value

        ours, base, ratio = compare(
            lambda erb=erb, chunk=chunk: erb.extend(chunk),
            bare_assign,
            calls,
            rounds,
            f"extend({extend_size})",
        )
        results.update(
            {
                f"extend_{extend_size}_us": ours,
                f"assign_{extend_size}_us": base,
                f"extend_{extend_size}_ratio": ratio,
            }
        )
        rows.append((f"extend({extend_size})", ours, base, ratio, "<= 1.5"))

    print(f"{'':42s} {'---------- CPU ----------':>27s} {'--------- wall ---------':>27s}")
    print(
        f"{'operation':42s} {'tdrl us':>9s} {'bare us':>9s} {'ratio':>7s} "
        f"{'tdrl us':>9s} {'bare us':>9s} {'ratio':>7s} {'target':>7s}"
    )
    for name, ours, base, ratio, target in rows:
        wall_ours, wall_base = WALL[name]
        results[f"{name} wall_ratio"] = wall_ours / wall_base
        print(
            f"{name:42s} {ours:9.1f} {base:9.1f} {ratio:7.2f} "
            f"{wall_ours:9.1f} {wall_base:9.1f} {wall_ours / wall_base:7.2f} {target:>7s}"
        )
    print(
        f"prioritized iterations/s: {results['prioritized_it_s']:.0f} CPU, "
        f"{1e6 / WALL[prio_name][0]:.0f} wall (reference: ~2000)"
    )

    print("\nuniform sample() vs stored items")
    for stored in (10_000, 100_000, 1_000_000):
        if stored > size:
            break
        srb = filled_buffer(TensorDictReplayBuffer, LazyTensorStorage(stored), data[:stored])
        ours, base, _ = compare(srb.sample, bare_gather(srb, BATCH, 4096), calls, rounds)
        results[f"uniform_us_{stored}"] = ours
        print(f"  {stored:>9d} items: {ours:7.1f} us (bare gather {base:6.1f} us)")

    list_size = 2_000 if args.quick else 10_000
    print(f"\nsampling by storage ({list_size} items, batch {BATCH})")
    small = data[:list_size]
    timings = {}
    with tempfile.TemporaryDirectory() as folder:
        storages = {
            "ListStorage": ListStorage(list_size),
            "LazyTensorStorage": LazyTensorStorage(list_size),
            "LazyMemmapStorage": LazyMemmapStorage(list_size, scratch_dir=folder),
        }
        buffers = {}
        for name, storage in storages.items():
            buffers[name] = TensorDictReplayBuffer(storage=storage, batch_size=BATCH)
            if name == "ListStorage":
                buffers[name].extend(list(small.unbind(0)))
            else:
                buffers[name].extend(small)
        samples = {name: [] for name in buffers}
        for _ in range(rounds):
            for name, buffer in buffers.items():
                samples[name].append(per_call_us(buffer.sample, max(calls // 10, 5))[0])
        timings = {name: statistics.median(t) for name, t in samples.items()}
    for name, value in timings.items():
        speedup = timings["ListStorage"] / value
        results[f"{name}_us"] = value
        print(f"  {name:18s} {value:9.1f} us  speed-up vs ListStorage {speedup:6.1f}x")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in results.items()}))


if __name__ == "__main__":
    main()
