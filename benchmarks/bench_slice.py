"""Slice sampling and compact checkpoints, against baselines measured in the same run.

Transitions are TED steps (observation 17 floats, action 6, and under "next" the
observation, reward and done) forming episodes of 50 to 500 steps. Figures:

- ``SliceSampler`` (8 slices of 32 steps, ``cache_values=True``) ``sample()`` of a
  TensorDictReplayBuffer vs a bare ``index_select`` gather of the same 256 items, medians
  over alternating rounds (target: at most 5x);
- uniform ``sample()`` of the same buffer, for reference;
- bytes written by ``FlatStorageCheckpointer`` / ``NestedStorageCheckpointer`` /
  ``H5StorageCheckpointer`` vs the plain TED checkpoint (``TensorStorageCheckpointer``) of
  the same buffer (target for the flat one: at most 0.6x).

Usage: ``python benchmarks/bench_slice.py [--quick]``; prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
from _baselines import bare_gather
from tensordict import TensorDict

from tdrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.data.replay_buffers.checkpointers import (
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    NestedStorageCheckpointer,
    TensorStorageCheckpointer,
    checkpoint_bytes,
)
from tdrl.data.replay_buffers.slice_samplers import SliceSampler

BATCH = 256
NUM_SLICES = 8


def episodes(n: int) -> TensorDict:
    """``n`` TED steps of consecutive episodes (observations chain within an episode)."""
    lengths = torch.randint(50, 501, (n // 50 + 1,))
    ends = lengths.cumsum(0)
    ends = ends[ends < n]
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[ends - 1] = True
    done[-1] = True
    obs = torch.randn(n + 1, 17)
    next_obs = obs[1:].clone()
    root_obs = obs[:-1].clone()
    root_obs[ends] = torch.randn(ends.numel(), 17)  # resets start from a fresh observation
    return TensorDict(
        {
            "observation": root_obs,
            "action": torch.randn(n, 6),
            "next": {"observation": next_obs, "reward": torch.randn(n, 1), "done": done},
        },
        [n],
    )


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def compare(ours, base, calls: int, rounds: int) -> tuple[float, float]:
    """Median per-call microseconds of ``ours`` and ``base``, measured in alternating rounds."""
    ours()
    base()
    ours_t, base_t = [], []
    for _ in range(rounds):
        ours_t.append(per_call_us(ours, calls))
        base_t.append(per_call_us(base, calls))
    return statistics.median(ours_t), statistics.median(base_t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller storage, fewer rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    size = 100_000 if args.quick else 1_000_000
    calls, rounds = (100, 5) if args.quick else (300, 9)
    data = episodes(size)
    results: dict[str, float] = {"size": size, "batch": BATCH, "num_slices": NUM_SLICES}
    rows = []

    sampler = SliceSampler(num_slices=NUM_SLICES, end_key=("next", "done"), cache_values=True)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(size), sampler=sampler, batch_size=BATCH)
    rb.extend(data)
    ours, base = compare(rb.sample, bare_gather(rb, BATCH, 64), calls, rounds)
    results.update(
        slice_us=ours, gather_us=base, slice_ratio=ours / base, slice_batches_s=1e6 / ours
    )
    rows.append(("SliceSampler sample() (8 x 32)", ours, base, ours / base, "<= 5"))

    urb = TensorDictReplayBuffer(storage=LazyTensorStorage(size), batch_size=BATCH)
    urb.extend(data)
    ours, base = compare(urb.sample, bare_gather(urb, BATCH, 64), calls, rounds)
    results.update(uniform_us=ours, uniform_ratio=ours / base)
    rows.append(("uniform sample() (reference)", ours, base, ours / base, "-"))

    print(f"{'operation':36s} {'tdrl us':>9s} {'bare us':>9s} {'ratio':>7s} {'target':>7s}")
    for name, ours, base, ratio, target in rows:
        print(f"{name:36s} {ours:9.1f} {base:9.1f} {ratio:7.2f} {target:>7s}")
    print(f"slice batches/s: {results['slice_batches_s']:.0f} (reference implementation: ~664)")

    ckpt_size = 100_000 if args.quick else 300_000
    storage = LazyTensorStorage(ckpt_size)
    storage.set(slice(0, ckpt_size), episodes(ckpt_size))
    checkpointers = {
        "TED (TensorStorageCheckpointer)": TensorStorageCheckpointer(),
        "FlatStorageCheckpointer": FlatStorageCheckpointer(),
        "NestedStorageCheckpointer": NestedStorageCheckpointer(),
        "H5StorageCheckpointer (gzip)": H5StorageCheckpointer(),
    }
    sizes = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, checkpointer in checkpointers.items():
            path = os.path.join(folder, name.split()[0])
            start = time.perf_counter()
            checkpointer.dumps(storage, path)
            elapsed = time.perf_counter() - start
            sizes[name] = (checkpoint_bytes(path), elapsed)
    ted_bytes = sizes["TED (TensorStorageCheckpointer)"][0]
    print(f"\ncheckpoint bytes ({ckpt_size} steps)")
    for name, (count, elapsed) in sizes.items():
        print(
            f"  {name:34s} {count / 1e6:8.1f} MB  {count / ted_bytes:5.2f}x TED  ({elapsed:.2f} s)"
        )
    results["ted_bytes"] = ted_bytes
    results["flat_bytes"] = sizes["FlatStorageCheckpointer"][0]
    results["flat_ratio"] = results["flat_bytes"] / ted_bytes
    results["h5_ratio"] = sizes["H5StorageCheckpointer (gzip)"][0] / ted_bytes
    print(f"  flat / TED target: <= 0.6, got {results['flat_ratio']:.3f}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in results.items()}))


if __name__ == "__main__":
    main()
