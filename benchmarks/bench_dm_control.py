"""DMControlEnv rollout overhead against a hand-written dm_control loop keeping the same data.

Both sides run the suite's cheetah-run task for N steps with random actions (uniform in the
action bounds), resetting when an episode ends, and keep every step's observations (copied out
of the simulator), action, reward and terminated / truncated flags, stacked into tensors at the
end. The two are timed alternately in the same process; the table shows the median of the
repeats and the ratio tdrl / hand loop (the target is <= 1.5x).

With no policy, ``rollout`` runs DMControlEnv's columnar random-action path. The same rollout
with an explicit policy (``policy=env.rand_action``), which runs the generic per-step loop, is
timed too and reported as ``generic_over_hand`` (no target).

    python benchmarks/bench_dm_control.py [--quick] [--steps N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

DOMAIN, TASK = "cheetah", "run"
TARGET = 1.5


def hand_loop(env, steps: int, rng: np.random.Generator) -> dict:
    spec = env.action_spec()
    keys = list(env.observation_spec())
    observations: dict[str, list] = {key: [] for key in keys}
    actions, rewards, terminateds, truncateds = [], [], [], []
    step = env.reset()
    for _ in range(steps):
        action = rng.uniform(spec.minimum, spec.maximum)
        for key in keys:
            observations[key].append(np.array(step.observation[key], copy=True))
        step = env.step(action)
        actions.append(action)
        rewards.append(step.reward)
        last = step.last()
        terminated = last and step.discount == 0.0
        terminateds.append(terminated)
        truncateds.append(last and not terminated)
        if last:
            step = env.reset()
    out = {key: torch.from_numpy(np.stack(values)) for key, values in observations.items()}
    out.update(
        action=torch.from_numpy(np.stack(actions)),
        reward=torch.tensor(rewards, dtype=torch.float64).unsqueeze(-1),
        terminated=torch.tensor(terminateds).unsqueeze(-1),
        truncated=torch.tensor(truncateds).unsqueeze(-1),
    )
    return out


def tdrl_rollout(env, steps: int):
    return env.rollout(steps, break_when_any_done=False)


def tdrl_generic_rollout(env, steps: int):
    return env.rollout(steps, policy=env.rand_action, break_when_any_done=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    steps = args.steps or (1_000 if args.quick else 5_000)

    from dm_control import suite

    from tdrl.envs.libs.dm_control import DMControlEnv

    raw_env = suite.load(DOMAIN, TASK, task_kwargs={"random": 0})
    env = DMControlEnv(DOMAIN, TASK)
    env.set_seed(0)
    rng = np.random.default_rng(0)
    hand_loop(raw_env, 100, rng)
    tdrl_rollout(env, 100)

    hand, ours, generic = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        hand_loop(raw_env, steps, rng)
        hand.append(time.perf_counter() - start)
        start = time.perf_counter()
        data = tdrl_rollout(env, steps)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        tdrl_generic_rollout(env, steps)
        generic.append(time.perf_counter() - start)
    assert data.batch_size == torch.Size([steps])
    hand_s, tdrl_s = statistics.median(hand), statistics.median(ours)
    generic_s = statistics.median(generic)
    ratio = tdrl_s / hand_s
    print(f"dm_control {DOMAIN}-{TASK}, {steps} steps, median of {args.repeats}")
    print(f"{'side':<12}{'wall s':>10}{'us/step':>10}")
    for label, value in (("hand loop", hand_s), ("tdrl", tdrl_s), ("generic", generic_s)):
        print(f"{label:<12}{value:>10.4f}{value / steps * 1e6:>10.1f}")
    print(f"ratio tdrl / hand loop: {ratio:.2f}x (target <= {TARGET}x)")
    result = {
        "benchmark": "dm_control_rollout",
        "env": f"{DOMAIN}-{TASK}",
        "steps": steps,
        "repeats": args.repeats,
        "hand_loop_s": hand_s,
        "tdrl_s": tdrl_s,
        "hand_us_per_step": hand_s / steps * 1e6,
        "tdrl_us_per_step": tdrl_s / steps * 1e6,
        "generic_us_per_step": generic_s / steps * 1e6,
        "ratio": ratio,
        "target": TARGET,
        "generic_over_hand": generic_s / hand_s,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
