"""Cost of a transformed env rollout relative to the same env without transforms.

Runs ``GymEnv("CartPole-v1").rollout(n)`` and the same rollout through
``TransformedEnv(GymEnv("CartPole-v1"), Compose(StepCounter(), RewardSum(), InitTracker()))``
alternately in one process, and reports the median time per step of each and
their ratio (target: at most 1.5). Both sides get the same explicit policy (the env's
``rand_action``), so both run the generic step loop: an untransformed GymEnv rolled out
with no policy takes a cheaper columnar path (see ``bench_gym.py``), whose time is shown
too, for reference. When ``RewardSum`` is not available, the chain is
``StepCounter() + InitTracker()`` and the output says so.

``--clock cpu`` times with the process CPU clock instead of the wall clock, which is
steadier on a machine shared with other jobs (the benchmark runs in one thread).
``--calls`` also counts the Python-level calls (functions and builtins, as ``cProfile``
sees them) per step of each rollout: a figure that does not depend on the machine's load.

Usage::

    python benchmarks/bench_transforms.py [--quick] [--steps N] [--rounds R] [--clock wall|cpu]
        [--calls]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time

import torch

from tdrl.envs import Compose, GymEnv, InitTracker, StepCounter, TransformedEnv

TARGET_RATIO = 1.5
CLOCK = time.perf_counter


def _chain() -> tuple[Compose, str]:
    try:
        from tdrl.envs import RewardSum
    except ImportError:
        return Compose(StepCounter(), InitTracker()), "StepCounter+InitTracker"
    return Compose(StepCounter(), RewardSum(), InitTracker()), "StepCounter+RewardSum+InitTracker"


def _time_rollout(env, steps: int, explicit_policy: bool = True) -> float:
    policy = env.rand_action if explicit_policy else None
    start = CLOCK()
    env.rollout(steps, policy=policy, break_when_any_done=False)
    return (CLOCK() - start) / steps


def _calls_per_step(env, steps: int) -> float:
    """Python-level calls (functions and builtins) per step of a rollout with ``rand_action``."""
    profile = cProfile.Profile()
    profile.enable()
    env.rollout(steps, policy=env.rand_action, break_when_any_done=False)
    profile.disable()
    return pstats.Stats(profile).total_calls / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--steps", type=int, default=None, help="steps per rollout")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--calls", action="store_true", help="also count calls per step")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    steps = args.steps or (200 if args.quick else 500)
    rounds = args.rounds or (7 if args.quick else 25)
    torch.set_num_threads(1)

    base = GymEnv("CartPole-v1")
    transform, chain_name = _chain()
    transformed = TransformedEnv(GymEnv("CartPole-v1"), transform)
    base.set_seed(0)
    transformed.set_seed(0)
    for env in (base, transformed):
        env.rollout(50, break_when_any_done=False)

    base_times, transformed_times, columnar_times = [], [], []
    for _ in range(rounds):
        base_times.append(_time_rollout(base, steps))
        transformed_times.append(_time_rollout(transformed, steps))
        columnar_times.append(_time_rollout(base, steps, explicit_policy=False))
    base_us = statistics.median(base_times) * 1e6
    transformed_us = statistics.median(transformed_times) * 1e6
    columnar_us = statistics.median(columnar_times) * 1e6
    ratio = transformed_us / base_us

    print(f"CartPole-v1 rollout, {steps} steps x {rounds} alternating rounds (medians)")
    print(f"{'env':<46}{'us/step':>10}")
    print(f"{'GymEnv':<46}{base_us:>10.1f}")
    print(f"{'TransformedEnv(' + chain_name + ')':<46}{transformed_us:>10.1f}")
    print(f"{'GymEnv, no policy (columnar path)':<46}{columnar_us:>10.1f}")
    print(f"ratio {ratio:.2f} (target <= {TARGET_RATIO})")
    calls = {}
    if args.calls:
        base_calls = _calls_per_step(base, steps)
        transformed_calls = _calls_per_step(transformed, steps)
        print(
            f"calls per step: GymEnv {base_calls:.1f}, transformed {transformed_calls:.1f} "
            f"(ratio {transformed_calls / base_calls:.2f})"
        )
        calls = {
            "base_calls_per_step": round(base_calls, 1),
            "transformed_calls_per_step": round(transformed_calls, 1),
        }
    print(
        json.dumps(
            {
                "benchmark": "transforms",
                "chain": chain_name,
                "clock": args.clock,
                "steps": steps,
                "rounds": rounds,
                "base_us_per_step": round(base_us, 2),
                "transformed_us_per_step": round(transformed_us, 2),
                "columnar_us_per_step": round(columnar_us, 2),
                "ratio": round(ratio, 3),
                "target": TARGET_RATIO,
                **calls,
            }
        )
    )
    base.close()
    transformed.close()


if __name__ == "__main__":
    main()
