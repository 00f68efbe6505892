"""PettingZooEnv rollout overhead against a hand loop over the same PettingZoo parallel env.

Both sides run MPE's ``simple_spread_v3`` (3 agents, discrete actions, 25-step episodes)
through PettingZoo's parallel API for N steps with random actions, resetting when an episode
ends, and keep every step's observations (before and after the step), actions, rewards and
terminated / truncated flags, stacked into tensors at the end. They alternate in the same
process; the table shows the medians and the ratio tdrl / hand loop (target <= 3x).

``env.rollout(n)`` without a policy keeps its steps in columns; the row "tdrl (policy)" runs
the same random actions given as a policy (``policy=env.rand_action``), which takes the
generic step loop that collectors and batched envs use (one tensordict per step). It is
shown for information; the target is on the first row.

The reference implementation of the API, measured the same way, is not run here (tdrl never
imports it): measure it in a separate environment with the same hand loop.

    python benchmarks/bench_pettingzoo.py [--quick] [--steps N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASK = "simple_spread_v3"
N_AGENTS = 3
N_ACTIONS = 5


def hand_loop(env, steps: int, rng: np.random.Generator) -> dict:
    """PettingZoo's own parallel loop keeping the data a rollout returns."""
    kept = {key: [] for key in ("obs", "action", "next_obs", "reward", "term", "trunc")}
    agents = list(env.possible_agents)
    observations, _ = env.reset()
    for _ in range(steps):
        action = rng.integers(N_ACTIONS, size=len(agents))
        next_observations, rewards, terminated, truncated, _ = env.step(
            {agent: int(a) for agent, a in zip(agents, action)}
        )
        kept["obs"].append(np.stack([observations[agent] for agent in agents]))
        kept["action"].append(action)
        kept["next_obs"].append(np.stack([next_observations[agent] for agent in agents]))
        kept["reward"].append([rewards[agent] for agent in agents])
        kept["term"].append([terminated[agent] for agent in agents])
        kept["trunc"].append([truncated[agent] for agent in agents])
        if any(terminated.values()) or any(truncated.values()):
            next_observations, _ = env.reset()
        observations = next_observations
    return {
        "obs": torch.from_numpy(np.stack(kept["obs"])),
        "action": torch.from_numpy(np.stack(kept["action"])),
        "next_obs": torch.from_numpy(np.stack(kept["next_obs"])),
        "reward": torch.tensor(kept["reward"], dtype=torch.float32).unsqueeze(-1),
        "term": torch.tensor(kept["term"]).unsqueeze(-1),
        "trunc": torch.tensor(kept["trunc"]).unsqueeze(-1),
    }


def tdrl_rollout(env, steps: int):
    return env.rollout(steps, break_when_any_done=False)


def tdrl_policy_rollout(env, steps: int):
    return env.rollout(steps, break_when_any_done=False, policy=env.rand_action)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    steps = args.steps or (300 if args.quick else 3_000)
    repeats = args.repeats

    warnings.filterwarnings("ignore")
    from mpe2 import simple_spread_v3

    from tdrl.envs.libs.pettingzoo import PettingZooEnv

    raw_env = simple_spread_v3.parallel_env(N=N_AGENTS)
    raw_env.reset(seed=0)
    env = PettingZooEnv(TASK, parallel=True, seed=0, N=N_AGENTS)
    rng = np.random.default_rng(0)
    hand_loop(raw_env, 50, rng)
    tdrl_rollout(env, 50)

    hand_times, tdrl_times, policy_times = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        hand_loop(raw_env, steps, rng)
        hand_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        data = tdrl_rollout(env, steps)
        tdrl_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        policy_data = tdrl_policy_rollout(env, steps)
        policy_times.append(time.perf_counter() - start)
    assert data.batch_size == policy_data.batch_size == torch.Size([steps])

    hand = statistics.median(hand_times)
    tdrl = statistics.median(tdrl_times)
    policy = statistics.median(policy_times)
    ratio = tdrl / hand
    print(f"PettingZoo {TASK} (parallel, {N_AGENTS} agents), {steps} steps, median of {repeats}")
    print(f"{'side':<16}{'s':>10}{'us/step':>10}")
    print(f"{'hand loop':<16}{hand:>10.4f}{hand / steps * 1e6:>10.1f}")
    print(f"{'tdrl':<16}{tdrl:>10.4f}{tdrl / steps * 1e6:>10.1f}")
    print(f"{'tdrl (policy)':<16}{policy:>10.4f}{policy / steps * 1e6:>10.1f}")
    print(f"ratio tdrl / hand loop: {ratio:.2f}x (target <= 3x)")
    print(f"ratio tdrl (policy) / hand loop: {policy / hand:.2f}x (information)")
    print(
        json.dumps(
            {
                "benchmark": "pettingzoo_rollout",
                "task": TASK,
                "steps": steps,
                "repeats": repeats,
                "hand_loop_s": hand,
                "tdrl_s": tdrl,
                "hand_us_per_step": hand / steps * 1e6,
                "tdrl_us_per_step": tdrl / steps * 1e6,
                "tdrl_policy_s": policy,
                "policy_ratio": policy / hand,
                "ratio": ratio,
                "target": 3.0,
            }
        )
    )


if __name__ == "__main__":
    main()
