"""Per-step spec operations against the bare torch calls that do the same work, in the same run.

An env step goes through a few spec calls: ``encode`` turns the simulator's numpy outputs into
tensors, ``rand`` draws random actions, ``zero`` builds reset placeholders and ``is_in`` checks
values when a debug check is on. Each row times one of these calls on a typical spec and the
bare torch code that produces the same tensor (no validation, no dispatch), alternating rounds
and taking the median:

- ``encode``: a float64 numpy observation (17,) into a float32 ``Bounded`` spec vs
  ``torch.as_tensor(array, dtype=float32)``; a python float reward into an ``Unbounded((1,))``
  vs ``torch.tensor([value])``; a python int action index into ``OneHot(4)`` vs one row of an
  identity matrix; the same three through a ``Composite`` vs building the TensorDict by hand;
  each with memoized encoding on as well as off;
- ``rand``: ``Bounded(-1, 1, (6,))`` vs ``torch.empty(6).uniform_(-1, 1)``; ``Categorical(4)``
  vs ``torch.randint``;
- ``zero``: ``Bounded((17,))`` vs ``torch.zeros``;
- ``is_in``: ``Bounded((17,))`` on a valid tensor vs the bare comparison ``(x >= low) & (x <= high)``.

Usage: ``python benchmarks/bench_specs.py [--quick]``; prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Categorical, Composite, OneHot, Unbounded


def per_call_us(fn, calls: int) -> float:
    """Process CPU microseconds per call of ``fn``."""
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def compare(ours, base, calls: int, rounds: int) -> tuple[float, float]:
    """Median per-call CPU microseconds of ``ours`` and ``base``, measured in alternating rounds."""
    ours()
    base()
    ours_t, base_t = [], []
    for _ in range(rounds):
        ours_t.append(per_call_us(ours, calls))
        base_t.append(per_call_us(base, calls))
    return statistics.median(ours_t), statistics.median(base_t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    calls, rounds = (2_000, 5) if args.quick else (10_000, 9)

    obs_spec = Bounded(-10.0, 10.0, shape=(17,))
    reward_spec = Unbounded((1,))
    action_spec = OneHot(4)
    composite = Composite(observation=obs_spec, reward=reward_spec, action=action_spec)
    obs_np = np.random.default_rng(0).uniform(-1, 1, 17)
    eye = torch.eye(4, dtype=torch.bool)
    raw = {"observation": obs_np, "reward": 0.5, "action": 2}

    def bare_composite():
        return TensorDict(
            {
                "observation": torch.as_tensor(obs_np, dtype=torch.float32),
                "reward": torch.tensor([0.5]),
                "action": eye[2].clone(),
            },
            batch_size=(),
        )

    rows = [
        (
            "encode obs",
            lambda: obs_spec.encode(obs_np),
            lambda: torch.as_tensor(obs_np, dtype=torch.float32),
            2.0,
        ),
        (
            "encode reward",
            lambda: reward_spec.encode(0.5),
            lambda: torch.tensor([0.5]),
            2.0,
        ),
        ("encode one-hot", lambda: action_spec.encode(2), lambda: eye[2].clone(), 2.0),
        ("encode composite", lambda: composite.encode(raw), bare_composite, 2.0),
        (
            "rand bounded",
            Bounded(-1.0, 1.0, shape=(6,)).rand,
            lambda: torch.empty(6).uniform_(-1.0, 1.0),
            2.0,
        ),
        (
            "rand categorical",
            Categorical(4).rand,
            lambda: torch.randint(0, 4, ()),
            2.0,
        ),
        ("zero bounded", obs_spec.zero, lambda: torch.zeros(17), 2.0),
    ]
    value = obs_spec.rand()
    low, high = obs_spec.low, obs_spec.high
    rows.append(
        (
            "is_in bounded",
            lambda: obs_spec.is_in(value),
            lambda: bool(((value >= low) & (value <= high)).all()),
            2.0,
        )
    )

    results: dict[str, float] = {}
    table = []
    for name, ours, base, target in rows:
        ours_us, base_us = compare(ours, base, calls, rounds)
        key = name.replace(" ", "_").replace("-", "_")
        results[f"{key}_ratio"] = ours_us / base_us
        results[f"{key}_target"] = target
        table.append((name, ours_us, base_us, target))
    for spec in (obs_spec, reward_spec, action_spec, composite):
        spec.memoize_encode(True)
    for name, ours, base, target in rows[:4]:
        ours_us, base_us = compare(ours, base, calls, rounds)
        key = f"memo_{name.replace(' ', '_').replace('-', '_')}"
        results[f"{key}_ratio"] = ours_us / base_us
        results[f"{key}_target"] = target
        table.append((f"{name} (memoized)", ours_us, base_us, target))

    print(f"{'operation':28s} {'tdrl us':>9s} {'bare us':>9s} {'ratio':>7s} {'<= target':>9s}")
    for name, ours_us, base_us, target in table:
        print(f"{name:28s} {ours_us:9.2f} {base_us:9.2f} {ours_us / base_us:7.2f} {target:7.1f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
