"""Import cost of ``tdrl.data`` against ``tensordict`` alone (its floor: tdrl.data imports it).

Each round starts two fresh interpreters, one running ``import tdrl.data`` and one running
``import tensordict``, in alternating order, and times them (wall clock, interpreter
start-up included). The medians are reported with their ratio (target: at most 1.1x), and
the script checks that importing ``tdrl.data`` pulled in no optional backend.

Usage: ``python benchmarks/bench_import.py [--quick] [--rounds N]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGETS = {"tdrl.data": "import tdrl.data", "tensordict": "import tensordict"}
OPTIONAL_BACKENDS = (
    "gymnasium",
    "gym",
    "mujoco",
    "h5py",
    "pygame",
    "dm_control",
    "vmas",
    "pettingzoo",
)


def time_import(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def backends_pulled_in() -> list[str]:
    code = (
        "import sys, tdrl.data; "
        f"print(','.join(m for m in {OPTIONAL_BACKENDS!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return [name for name in out.stdout.strip().split(",") if name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    parser.add_argument("--rounds", type=int, default=None, help="number of alternating rounds")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)

    for code in TARGETS.values():
        time_import(code)
    times: dict[str, list[float]] = {name: [] for name in TARGETS}
    for round_index in range(rounds):
        order = list(TARGETS) if round_index % 2 == 0 else list(reversed(TARGETS))
        for name in order:
            times[name].append(time_import(TARGETS[name]))

    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["tdrl.data"] / medians["tensordict"]
    backends = backends_pulled_in()
    print(f"{'import':<12} {'median s':>9} {'min s':>8}")
    for name, values in times.items():
        print(f"{name:<12} {medians[name]:>9.3f} {min(values):>8.3f}")
    print(f"ratio tdrl.data / tensordict: {ratio:.3f}x (target <= 1.1x)")
    print(f"optional backends imported by tdrl.data: {backends or 'none'}")
    print(
        json.dumps(
            {
                "benchmark": "import",
                "rounds": rounds,
                "median_s": {name: round(value, 4) for name, value in medians.items()},
                "ratio": round(ratio, 4),
                "target_ratio": 1.1,
                "optional_backends_imported": backends,
            }
        )
    )


if __name__ == "__main__":
    main()
