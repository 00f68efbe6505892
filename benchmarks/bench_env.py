"""Rollout cost of EnvBase against a hand loop over the env's own ``_step`` keeping the same data.

For a minimal counting env (4-float observation) and PendulumEnv, at batch sizes 1
and 1024, this measures steps/s of

* ``keeping``: the hand loop ``next = env._step(td); next["action"] = a; td = next``,
  keeping every step's input and output and stacking them along time at the end: the
  data a rollout returns. This is the baseline: ``rollout / keeping`` is tdrl's cost for
  the same work (target for the counting env at batch 1024: at most 1.0x);
* ``rollout``: ``env.rollout(n, policy, break_when_any_done=False)`` with a policy
  writing the same fixed action (stacking of the result included);
* ``rollout_rand``: the same rollout with the default random policy;
* ``plain`` (reference only): the hand loop keeping nothing. At batch 1024 a rollout
  returns ~45 MB per 1000 steps, which that loop never writes, so no rollout can match it;
* ``floor`` (reference only): the plain loop plus allocating and filling tensors of the
  rollout result's shapes once, the least any loop returning the data pays
  (``floor / plain``).

It also prints the cost of touching a fresh 4 KB page of memory for the first time, which
sets how expensive the data a rollout returns is on the machine at hand.

Runs alternate; steps/s are medians over the rounds, and ``rollout / keeping`` is the median
of the per-round ratios (the two run back to back, in alternating order). ``--clock cpu`` times with the process CPU
clock instead of the wall clock, which is steadier on a machine shared with other jobs.

Usage: ``python benchmarks/bench_env.py [--quick] [--steps N] [--repeats R] [--clock wall|cpu]``
"""

from __future__ import annotations

import argparse
import json
import mmap
import statistics
import sys
import time
from pathlib import Path

import torch
from tensordict import TensorDict

CLOCK = time.perf_counter

#: ``rollout / keeping`` bounds, by (env, batch size).
TARGET_OVER_KEEPING = {("counting", 1024): 1.0}

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tdrl.data import Bounded, Categorical, Composite, Unbounded  # noqa: E402
from tdrl.envs import EnvBase, PendulumEnv  # noqa: E402


class CountingEnv(EnvBase):
    """Minimal stateful env: 4-float observation counting steps, never done."""

    def __init__(self, batch_size=()):
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        self.observation_spec = Composite(observation=Unbounded((*batch, 4)), shape=batch)
        self.action_spec = Bounded(-1.0, 1.0, (*batch, 1))
        self.reward_spec = Unbounded((*batch, 1))
        self.done_spec = Categorical(2, (*batch, 1), dtype=torch.bool)
        self.count = torch.zeros((*batch, 4))
        self.false = torch.zeros((*batch, 1), dtype=torch.bool)

    def _reset(self, tensordict=None, **kwargs):
        self.count = torch.zeros_like(self.count)
        return TensorDict(
            {"observation": self.count, "done": self.false, "terminated": self.false},
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        self.count = self.count + 1
        return TensorDict(
            {
                "observation": self.count,
                "reward": tensordict["action"],
                "done": self.false,
                "terminated": self.false,
            },
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


def make_case(name: str, batch: int):
    if name == "counting":
        env = CountingEnv(batch_size=(batch,) if batch > 1 else ())
        init = None
    else:
        env = PendulumEnv(seed=0)
        init = TensorDict(batch_size=[batch]) if batch > 1 else None
    td0 = env.reset(None if init is None else init.clone())
    action = env.rand_action(td0.clone())["action"]
    return env, init, action


def plain_loop(env, init, action, steps: int) -> float:
    td = env.reset(None if init is None else init.clone())
    td.set("action", action)
    start = CLOCK()
    for _ in range(steps):
        nxt = env._step(td)
        nxt.set("action", action)
        td = nxt
    return (CLOCK() - start) / steps


def keeping_loop(env, init, action, steps: int) -> float:
    """The plain loop, also keeping what a rollout returns (stacked along time at the end)."""
    td = env.reset(None if init is None else init.clone())
    td.set("action", action)
    start = CLOCK()
    roots, nexts = [], []
    for _ in range(steps):
        nxt = env._step(td)
        roots.append(td)
        nexts.append(nxt)
        nxt.set("action", action)
        td = nxt
    dim = td.batch_dims
    root_keys = [key for key in roots[0].keys() if key != "reward"]
    kept = {key: torch.stack([r.get(key) for r in roots], dim) for key in root_keys}
    kept.update(
        {
            ("next", key): torch.stack([n.get(key) for n in nexts], dim)
            for key in nexts[0].keys()
            if key != "action"
        }
    )
    return (CLOCK() - start) / steps


def result_layout(env, init, action, steps: int) -> list:
    """Shapes and dtypes of the leaves of a rollout's result."""
    result = env.rollout(
        steps,
        policy=lambda td: td.set("action", action),
        break_when_any_done=False,
        tensordict=None if init is None else init.clone(),
    )
    return [(value.shape, value.dtype) for value in result.values(True, True)]


def fill_outputs(layout: list, steps: int) -> float:
    """Time to allocate and fill (once) tensors of the result's layout, per step."""
    start = CLOCK()
    outputs = [torch.empty(shape, dtype=dtype).fill_(0) for shape, dtype in layout]
    elapsed = CLOCK() - start
    del outputs
    return elapsed / steps


def rollout_run(env, init, action, steps: int, random_policy: bool) -> float:
    def policy(td):
        return td.set("action", action)

    start = CLOCK()
    env.rollout(
        steps,
        policy=None if random_policy else policy,
        break_when_any_done=False,
        tensordict=None if init is None else init.clone(),
    )
    return (CLOCK() - start) / steps


def page_fault_us(megabytes: int = 64) -> float:
    """Cost of the first touch of a fresh 4 KB page of memory (median of 3), in us.

    It bounds how fast any rollout can hand back newly written data on this machine.
    """
    size = megabytes << 20
    costs = []
    for _ in range(3):
        region = mmap.mmap(-1, size)
        start = time.perf_counter()
        for offset in range(0, size, 4096):
            region[offset] = 1
        costs.append((time.perf_counter() - start) / (size // 4096) * 1e6)
        region.close()
    return statistics.median(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    # batch 1 runs are short: 5000 steps keep the medians steady; at batch 1024 a rollout
    # of 1000 steps already keeps ~60 MB
    default_steps = {1: 1000 if args.quick else 5000, 1024: 200 if args.quick else 1000}
    repeats = args.repeats or (3 if args.quick else 9)
    torch.set_num_threads(1)
    results = []
    print(
        f"{'env':<10}{'batch':>6}{'plain st/s':>14}{'keeping st/s':>14}{'rollout st/s':>14}"
        f"{'rand st/s':>12}{'/keeping':>10}{'target':>8}{'/plain':>8}{'floor/plain':>13}"
    )
    for name in ("counting", "pendulum"):
        for batch in (1, 1024):
            steps = args.steps or default_steps[batch]
            env, init, action = make_case(name, batch)
            plain_loop(env, init, action, 20)
            rollout_run(env, init, action, 20, False)
            layout = result_layout(env, init, action, steps)
            plain, keep, roll, rand, fill = [], [], [], [], []
            for round_ in range(repeats):
                plain.append(plain_loop(env, init, action, steps))
                # the pair whose ratio is the target runs back to back, in alternating order
                if round_ % 2:
                    roll.append(rollout_run(env, init, action, steps, False))
                    keep.append(keeping_loop(env, init, action, steps))
                else:
                    keep.append(keeping_loop(env, init, action, steps))
                    roll.append(rollout_run(env, init, action, steps, False))
                rand.append(rollout_run(env, init, action, steps, True))
                fill.append(fill_outputs(layout, steps))
            p, k, r, q, f = (statistics.median(x) for x in (plain, keep, roll, rand, fill))
            # the median of the per-round ratios: a change of load between rounds moves
            # both sides of a round alike
            ratio = statistics.median(a / b for a, b in zip(roll, keep))
            record = {
                "env": name,
                "batch": batch,
                "steps": steps,
                "keeping_steps_per_s": round(1 / k),
                "rollout_steps_per_s": round(1 / r),
                "rollout_random_policy_steps_per_s": round(1 / q),
                "rollout_over_keeping": round(ratio, 3),
                "plain_steps_per_s": round(1 / p),
                "floor_over_plain": round((p + f) / p, 3),
            }
            target = TARGET_OVER_KEEPING.get((name, batch))
            if target is not None:
                record["rollout_over_keeping_target"] = target
            results.append(record)
            print(
                f"{name:<10}{batch:>6}{1 / p:>14.0f}{1 / k:>14.0f}{1 / r:>14.0f}{1 / q:>12.0f}"
                f"{ratio:>10.2f}{'<= ' + str(target) if target else '-':>8}{r / p:>8.2f}"
                f"{(p + f) / p:>13.2f}"
            )
    fault = page_fault_us()
    print(f"first touch of a fresh 4 KB page: {fault:.2f} us (wall clock, Python loop included)")
    print(
        json.dumps(
            {
                "benchmark": "env_rollout",
                "clock": args.clock,
                "repeats": repeats,
                "page_fault_us": round(fault, 3),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
