"""GymEnv rollout overhead against a hand-written gymnasium loop keeping the same data.

Both sides run CartPole-v1 for N steps with random actions, resetting when an episode ends,
and keep observation, action, reward, terminated and truncated for every step, stacked into
tensors at the end. The two are timed alternately in the same process; the table shows the
median of the repeats and the ratio tdrl / hand loop (the target is <= 3x).

With no policy, ``rollout`` of a plain GymEnv runs the columnar random-action path. For
reference, the same rollout with an explicit policy (``policy=env.rand_action``), which runs
the generic per-step loop, is timed too and reported as ``generic``.

    python benchmarks/bench_gym.py [--quick] [--steps N] [--repeats R] [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

ENV_ID = "CartPole-v1"


def hand_loop(env, steps: int, rng: np.random.Generator) -> dict:
    observations, actions, rewards, terminateds, truncateds = [], [], [], [], []
    observation, _ = env.reset()
    for _ in range(steps):
        action = int(rng.integers(2))
        next_observation, reward, terminated, truncated, _ = env.step(action)
        observations.append(observation)
        actions.append(action)
        rewards.append(reward)
        terminateds.append(terminated)
        truncateds.append(truncated)
        if terminated or truncated:
            next_observation, _ = env.reset()
        observation = next_observation
    return {
        "observation": torch.from_numpy(np.stack(observations)),
        "action": torch.nn.functional.one_hot(torch.tensor(actions), 2),
        "reward": torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1),
        "terminated": torch.tensor(terminateds).unsqueeze(-1),
        "truncated": torch.tensor(truncateds).unsqueeze(-1),
    }


def tdrl_rollout(env, steps: int):
    return env.rollout(steps, break_when_any_done=False)


def tdrl_generic_rollout(env, steps: int):
    return env.rollout(steps, policy=env.rand_action, break_when_any_done=False)


def _per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def breakdown(env, raw_env, calls: int) -> dict:
    """Per-step cost of each piece of a tdrl rollout step, in microseconds."""
    from tdrl.envs.utils import step_mdp

    td = env.reset()
    td = env.rand_action(td)
    action = int(td["action"].argmax())

    def gym_step():
        if any(raw_env.step(action)[2:4]):
            raw_env.reset()

    def wrapper_step():
        if env._step(td)["done"].item():
            env._env.reset()

    def env_step():
        env.step(td)
        if td["next", "done"].item():
            env._env.reset()

    raw_env.reset()
    env.reset()
    pieces = {
        "gymnasium step": _per_call_us(gym_step, calls),
        "GymEnv._step (incl. gymnasium)": _per_call_us(wrapper_step, calls),
        "EnvBase.step (incl. _step)": _per_call_us(env_step, calls),
        "rand_action": _per_call_us(lambda: env.rand_action(td), calls),
        "step_mdp": _per_call_us(lambda: step_mdp(td), calls),
    }
    return pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--breakdown", action="store_true", help="also time each piece of a rollout step"
    )
    args = parser.parse_args()
    steps = args.steps or (1_000 if args.quick else 10_000)
    repeats = args.repeats

    import gymnasium

    from tdrl.envs.libs.gym import GymEnv

    raw_env = gymnasium.make(ENV_ID)
    raw_env.reset(seed=0)
    env = GymEnv(ENV_ID)
    env.set_seed(0)
    rng = np.random.default_rng(0)
    hand_loop(raw_env, 100, rng)
    tdrl_rollout(env, 100)

    hand_wall, hand_cpu, tdrl_wall, tdrl_cpu, generic_wall = [], [], [], [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        hand_loop(raw_env, steps, rng)
        hand_wall.append(time.perf_counter() - wall)
        hand_cpu.append(time.process_time() - cpu)
        wall, cpu = time.perf_counter(), time.process_time()
        data = tdrl_rollout(env, steps)
        tdrl_wall.append(time.perf_counter() - wall)
        tdrl_cpu.append(time.process_time() - cpu)
        wall = time.perf_counter()
        tdrl_generic_rollout(env, steps)
        generic_wall.append(time.perf_counter() - wall)
    assert data.batch_size == torch.Size([steps])

    medians = {
        name: statistics.median(values)
        for name, values in (
            ("hand_wall", hand_wall),
            ("hand_cpu", hand_cpu),
            ("tdrl_wall", tdrl_wall),
            ("tdrl_cpu", tdrl_cpu),
            ("generic_wall", generic_wall),
        )
    }
    ratio_wall = medians["tdrl_wall"] / medians["hand_wall"]
    ratio_cpu = medians["tdrl_cpu"] / medians["hand_cpu"]
    print(f"{ENV_ID}, {steps} steps, median of {repeats} (wall clock and process CPU time)")
    print(f"{'side':<12}{'wall s':>10}{'cpu s':>10}{'wall us/st':>12}{'cpu us/st':>12}")
    for side in ("hand", "tdrl"):
        wall, cpu = medians[f"{side}_wall"], medians[f"{side}_cpu"]
        label = "hand loop" if side == "hand" else side
        print(
            f"{label:<12}{wall:>10.4f}{cpu:>10.4f}{wall / steps * 1e6:>12.2f}{cpu / steps * 1e6:>12.2f}"
        )
    generic_ratio = medians["generic_wall"] / medians["hand_wall"]
    print(f"ratio tdrl / hand loop: wall {ratio_wall:.2f}x, cpu {ratio_cpu:.2f}x (target <= 3x)")
    print(
        f"generic loop (policy=env.rand_action): {medians['generic_wall'] / steps * 1e6:.2f} us/step, "
        f"{generic_ratio:.2f}x the hand loop (reference)"
    )
    result = {
        "benchmark": "gym_rollout",
        "env": ENV_ID,
        "steps": steps,
        "repeats": repeats,
        "hand_loop_s": medians["hand_wall"],
        "tdrl_s": medians["tdrl_wall"],
        "hand_loop_cpu_s": medians["hand_cpu"],
        "tdrl_cpu_s": medians["tdrl_cpu"],
        "hand_us_per_step": medians["hand_wall"] / steps * 1e6,
        "tdrl_us_per_step": medians["tdrl_wall"] / steps * 1e6,
        "ratio": ratio_wall,
        "ratio_cpu": ratio_cpu,
        "generic_us_per_step": medians["generic_wall"] / steps * 1e6,
        "generic_over_hand": generic_ratio,
        "target": 3.0,
    }
    if args.breakdown:
        pieces = breakdown(env, raw_env, min(steps, 5_000))
        print(f"{'piece':<34}{'us/call':>10}")
        for name, value in pieces.items():
            print(f"{name:<34}{value:>10.2f}")
        result["breakdown_us"] = pieces
    print(json.dumps(result))


if __name__ == "__main__":
    main()
