"""Offline datasets: building a D4RL dataset and sampling slices from it, against bare baselines.

A D4RL-layout HDF5 file of ``N`` transitions (1M by default; observation 17 floats, next
observation, action 6 floats, reward, terminal and timeout flags, episodes of 1000 steps) is
written once. Figures, medians over alternating rounds:

- ``load``: building the dataset with ``D4RLExperienceReplay`` (reading the file into a new
  memory-mapped TED folder: copies, next-step entries, done flags, episode ids) vs reading
  the same arrays into memory with h5py + numpy (target: at most 1.5x);
- ``sample``: ``sample()`` of the built dataset with a ``SliceSampler`` (``cache_values=True``)
  vs a bare ``index_select`` of the same stored tensors at as many random runs of as many
  rows, for batches of 8 slices of 32 steps and of 32 slices of 32 steps (target: at most 2x).
  The runs are drawn anew for every call of the baseline, as ``sample()`` draws them: a few
  index sets cycled would keep their rows in the CPU caches while ``sample()`` reads rows
  from memory. That cache-warm gather (64 index sets cycled) is printed for reference.
  Sampling figures are process CPU time with one torch thread (the machine may be shared),
  wall time beside; a sampling ratio is the median of the ratios of many short rounds, each
  timed next to its baseline's, so that a change of load on a shared machine moves both.

Usage: ``python benchmarks/bench_datasets.py [--quick]``; prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch

from tdrl.data.datasets import D4RLExperienceReplay
from tdrl.data.replay_buffers import SliceSampler

DATASET = "halfcheetah-medium-v2"
KEYS = ("observations", "next_observations", "actions", "rewards", "terminals", "timeouts")
SLICE_LEN = 32
SLICE_COUNTS = (8, 32)


def write_file(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f["observations"] = rng.standard_normal((n, 17), dtype=np.float32)
        f["next_observations"] = rng.standard_normal((n, 17), dtype=np.float32)
        f["actions"] = rng.standard_normal((n, 6), dtype=np.float32)
        f["rewards"] = rng.standard_normal(n, dtype=np.float32)
        f["terminals"] = np.zeros(n, bool)
        f["timeouts"] = np.arange(n) % 1000 == 999


def read_arrays(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {key: f[key][()] for key in KEYS}


def timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def bench_load(root: Path, raw: Path, rounds: int) -> tuple[float, float]:
    ours, base = [], []
    for i in range(rounds + 1):
        target = root / f"build{i}"
        link = D4RLExperienceReplay.raw_file(DATASET, target)
        link.parent.mkdir(parents=True)
        os.symlink(raw, link)
        build = timed(D4RLExperienceReplay, DATASET, 256, root=target, download=False)
        read = timed(read_arrays, raw)
        shutil.rmtree(target)
        if i:  # the first round warms the page cache
            ours.append(build)
            base.append(read)
    return statistics.median(ours), statistics.median(base)


def per_call_us(fn, calls: int) -> tuple[float, float]:
    """Microseconds per call of ``fn``: process CPU time and wall time."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6


def bench_sample(
    data: D4RLExperienceReplay, num_slices: int, calls: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Median (CPU, wall) microseconds per call of ``sample()`` and of the two gathers."""
    stored = data.storage.get(slice(None))  # views of the memory-mapped tensors
    leaves = [stored.get(key) for key in stored.keys(True, True)]
    length = len(data)
    offsets = torch.arange(SLICE_LEN)

    def runs(count: int) -> list[torch.Tensor]:
        starts = torch.randint(length - SLICE_LEN, (count, num_slices, 1))
        return list((starts + offsets).reshape(count, -1))

    state = {"i": 0, "pool": runs(calls)}

    def bare() -> list:
        pool = state["pool"]
        state["i"] = (state["i"] + 1) % len(pool)
        index = pool[state["i"]]
        return [leaf.index_select(0, index) for leaf in leaves]

    def ours():
        return data.sample()

    ours()
    bare()
    ours_t, fresh_t, warm_t = [], [], []
    for _ in range(rounds):
        ours_t.append(per_call_us(ours, calls))
        # one new set of runs per call, as sample() reads: rows no earlier call of the round read
        state["pool"] = runs(calls)
        fresh_t.append(per_call_us(bare, calls))
        # 64 sets cycled: their rows stay in the CPU caches (for reference only)
        state["pool"] = runs(64)
        warm_t.append(per_call_us(bare, calls))
    out = {
        name: (statistics.median(t[0] for t in times), statistics.median(t[1] for t in times))
        for name, times in (("sample", ours_t), ("fresh", fresh_t), ("warm", warm_t))
    }
    for name, base_t in (("fresh", fresh_t), ("warm", warm_t)):
        out[f"{name}_ratio"] = (
            statistics.median(o[0] / b[0] for o, b in zip(ours_t, base_t)),
            statistics.median(o[1] / b[1] for o, b in zip(ours_t, base_t)),
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    args = parser.parse_args()
    # one thread: a gather split over threads costs more CPU time than its wall time, which
    # would flatter the CPU ratio (sample() and the bare gather then use the same one thread)
    torch.set_num_threads(1)
    n = 1_000_000
    rounds = 3 if args.quick else 5
    # sampling: short rounds, many of them (each round's ratio compares the sides under one load)
    sample_rounds, sample_calls = (6, 50) if args.quick else (15, 100)
    results: dict = {"transitions": n}
    with tempfile.TemporaryDirectory(prefix="tdrl_bench_datasets_") as tmp:
        root = Path(tmp)
        raw = D4RLExperienceReplay.raw_file(DATASET, root / "source")
        write_file(raw, n)
        build, read = bench_load(root, raw, rounds)
        results.update(load_s=build, h5py_read_s=read, load_ratio=build / read, load_target=1.5)
        samples = {}
        for num_slices in SLICE_COUNTS:
            data = D4RLExperienceReplay(
                DATASET,
                num_slices * SLICE_LEN,
                root=root / "source",
                download=False,
                sampler=SliceSampler(slice_len=SLICE_LEN, cache_values=True),
            )
            figures = bench_sample(data, num_slices, sample_calls, sample_rounds)
            samples[num_slices] = figures
            shape = f"{num_slices}x{SLICE_LEN}"
            (ratio, wall_ratio), (warm_ratio, _) = figures["fresh_ratio"], figures["warm_ratio"]
            results.update(
                {
                    f"sample_{shape}_us": figures["sample"][0],
                    f"gather_{shape}_us": figures["fresh"][0],
                    f"sample_{shape}_ratio": ratio,
                    f"sample_{shape}_target": 2.0,
                    f"sample_{shape}_wall_ratio": wall_ratio,
                    f"gather_warm_{shape}_us": figures["warm"][0],
                    f"sample_{shape}_warm_ratio": warm_ratio,
                }
            )
            del data
    print(f"{'figure':34s} {'tdrl':>10s} {'baseline':>10s} {'ratio':>7s} {'target':>7s}")
    print(
        f"{f'build from HDF5 ({n} steps), s':34s} {build:10.3f} {read:10.3f} "
        f"{results['load_ratio']:7.2f} {'<= 1.5':>7s}"
    )
    for num_slices, figures in samples.items():
        (ours, ours_wall), (base, base_wall), (warm, _) = (
            figures["sample"],
            figures["fresh"],
            figures["warm"],
        )
        (ratio, wall_ratio), (warm_ratio, _) = figures["fresh_ratio"], figures["warm_ratio"]
        name = f"slice sample ({num_slices}x{SLICE_LEN}), CPU us"
        print(f"{name:34s} {ours:10.1f} {base:10.1f} {ratio:7.2f} {'<= 2':>7s}")
        name = "  the same, wall us"
        print(f"{name:34s} {ours_wall:10.1f} {base_wall:10.1f} {wall_ratio:7.2f}")
        name = "  vs a cache-warm gather, CPU us"
        print(f"{name:34s} {ours:10.1f} {warm:10.1f} {warm_ratio:7.2f} {'(info)':>7s}")
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in results.items()}))


if __name__ == "__main__":
    main()
