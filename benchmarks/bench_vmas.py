"""VmasEnv rollout overhead against VMAS's own ``env.step`` loop keeping the same data.

Both sides run the "balance" scenario (4 agents) with ``num_envs`` worlds for N steps with
random continuous actions, resetting the worlds that end, and keep every step's actions,
observations, rewards, info entries and done flags, stacked along time at the end. The
rollout also returns each step's input observations (its root entries); the hand loop keeps
those too. The two alternate in the same process; the table shows the medians and the ratio
tdrl / hand loop (the target is <= 1.2x at 1024 worlds).

On a CPU a VMAS step of 1024 worlds takes long enough (~0.1-0.5 s) to hide any wrapper cost,
so the same ratio is also reported for a small batch (``small_batch_ratio``, 16 worlds, no
target), where the wrapper's own per-step work is a visible share of the step.

    python benchmarks/bench_vmas.py [--quick] [--num-envs B] [--steps N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCENARIO = "balance"
N_AGENTS = 4


def hand_loop(env, steps: int) -> dict:
    """VMAS's own loop: random actions, step, reset ended worlds, keep everything."""
    n_envs = env.num_envs
    kept = {key: [] for key in ("obs", "action", "next_obs", "reward", "info", "term", "trunc")}
    observations = env.reset()
    info_keys = None
    for _ in range(steps):
        actions = (torch.rand(n_envs, N_AGENTS, 2) * 2 - 1).unbind(1)
        next_observations, rewards, terminated, truncated, infos = env.step(list(actions))
        if info_keys is None:
            info_keys = list(infos[0])
        kept["obs"].append(torch.stack(observations, 1))
        kept["action"].append(torch.stack(actions, 1))
        kept["next_obs"].append(torch.stack(next_observations, 1))
        kept["reward"].append(torch.stack(rewards, 1))
        kept["info"].append(
            {key: torch.stack([info[key] for info in infos], 1) for key in info_keys}
        )
        kept["term"].append(terminated)
        kept["trunc"].append(truncated)
        ended = (terminated | truncated).nonzero().reshape(-1).tolist()
        for index in ended:
            env.reset_at(index, return_observations=False)
        if ended:
            next_observations = env.get_from_scenario(
                get_observations=True, get_rewards=False, get_infos=False, get_dones=False
            )[0]
        observations = next_observations
    out = {key: torch.stack(values, 1) for key, values in kept.items() if key != "info"}
    out["info"] = {key: torch.stack([info[key] for info in kept["info"]], 1) for key in info_keys}
    return out


def tdrl_rollout(env, steps: int):
    return env.rollout(steps, break_when_any_done=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    steps = args.steps or (4 if args.quick else 30)
    repeats = args.repeats or (3 if args.quick else 5)

    warnings.filterwarnings("ignore")
    result = {"benchmark": "vmas_rollout", "scenario": SCENARIO, "steps": steps}
    print(f"VMAS {SCENARIO}, {N_AGENTS} agents, {steps} steps, median of {repeats}")
    print(f"{'num_envs':<10}{'hand ms/step':>14}{'tdrl ms/step':>14}{'ratio':>8}")
    for num_envs, label in ((args.num_envs, "ratio"), (16, "small_batch_ratio")):
        hand, tdrl = measure(num_envs, steps * (10 if num_envs == 16 else 1), repeats)
        ratio = tdrl / hand
        print(f"{num_envs:<10}{hand * 1e3:>14.3f}{tdrl * 1e3:>14.3f}{ratio:>8.3f}")
        result[label] = ratio
        result[f"num_envs_{num_envs}_hand_ms_per_step"] = hand * 1e3
        result[f"num_envs_{num_envs}_tdrl_ms_per_step"] = tdrl * 1e3
    print(
        f"ratio tdrl / hand loop at {args.num_envs} worlds: {result['ratio']:.3f}x (target <= 1.2x)"
    )
    result["num_envs"] = args.num_envs
    result["target"] = 1.2
    print(json.dumps(result))


def measure(num_envs: int, steps: int, repeats: int) -> tuple[float, float]:
    """Median seconds per step of the hand loop and of the rollout, run alternately."""
    import vmas

    from tdrl.envs.libs.vmas import VmasEnv

    raw_env = vmas.make_env(
        SCENARIO, num_envs=num_envs, n_agents=N_AGENTS, seed=0, terminated_truncated=True
    )
    env = VmasEnv(SCENARIO, num_envs=num_envs, n_agents=N_AGENTS, seed=0)
    hand_loop(raw_env, 2)
    tdrl_rollout(env, 2)
    hand_times, tdrl_times = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        hand_loop(raw_env, steps)
        hand_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        data = tdrl_rollout(env, steps)
        tdrl_times.append(time.perf_counter() - start)
    assert data.batch_size == torch.Size([num_envs, steps])
    return statistics.median(hand_times) / steps, statistics.median(tdrl_times) / steps


if __name__ == "__main__":
    main()
