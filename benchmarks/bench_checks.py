"""The per-step action check: what comparing an action's shape and dtype costs a step.

Every gym step compares the action's shape and dtype with the spec's (two tuple
comparisons). This times the step of a plain ``GymWrapper`` around a trivial simulator (so
that the wrapper's own work dominates) with the check on and, in the same run, with it
switched off on the step plan; the difference per step is the check's cost (target: under
0.5 us). Medians of alternating repeats of process CPU time.

    python benchmarks/bench_checks.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium
import numpy as np
import torch

TARGET_US = 0.5


class _TrivialEnv(gymnasium.Env):
    """A simulator whose step costs next to nothing."""

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self._observation = np.zeros(4, dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        return self._observation, {}

    def step(self, action):
        return self._observation, 1.0, False, False, {}


def _per_step_us(step, action, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        step(action)
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    args = parser.parse_args()
    calls = 5_000 if args.quick else 50_000
    repeats = 5 if args.quick else 9

    from tdrl.envs.libs.gym import GymWrapper

    env = GymWrapper(_TrivialEnv())
    plan = env._step_plan
    action = env.rand_action(env.reset())["action"]
    assert isinstance(action, torch.Tensor)
    checked, unchecked = [], []
    _per_step_us(plan.step, action, calls)
    shape = plan._action_shape
    for _ in range(repeats):
        plan._action_shape = shape
        checked.append(_per_step_us(plan.step, action, calls))
        plan._action_shape = None  # what a plan without the check does
        unchecked.append(_per_step_us(plan.step, action, calls))
    plan._action_shape = shape
    with_check, without = statistics.median(checked), statistics.median(unchecked)
    cost = with_check - without
    print(f"gym step on a trivial simulator, {calls} steps, median of {repeats}")
    print(f"with the action check {with_check:.3f} us, without {without:.3f} us")
    print(f"check cost {cost:.3f} us per step (target < {TARGET_US} us)")
    result = {
        "benchmark": "action_check",
        "calls": calls,
        "repeats": repeats,
        "step_us_checked": with_check,
        "step_us_unchecked": without,
        "check_us_per_step": cost,
        "check_over_step_ratio": with_check / without,
        "target_us": TARGET_US,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
