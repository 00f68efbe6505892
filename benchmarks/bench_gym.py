"""GymEnv rollout overhead against a hand-written gymnasium loop keeping the same data.

Both sides run CartPole-v1 for N steps with random actions, resetting when an episode ends,
and keep observation, action, reward, terminated and truncated for every step, stacked into
tensors at the end. The two are timed alternately in the same process; the table shows the
median of the repeats and the ratio tdrl / hand loop (the target is <= 3x).

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

    hand_times, tdrl_times = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        hand_loop(raw_env, steps, rng)
        hand_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        data = tdrl_rollout(env, steps)
        tdrl_times.append(time.perf_counter() - start)
    assert data.batch_size == torch.Size([steps])

    hand = statistics.median(hand_times)
    ours = statistics.median(tdrl_times)
    ratio = ours / hand
    print(f"{ENV_ID}, {steps} steps, median of {repeats}")
    print(f"{'side':<12}{'total s':>10}{'us/step':>10}")
    print(f"{'hand loop':<12}{hand:>10.4f}{hand / steps * 1e6:>10.2f}")
    print(f"{'tdrl':<12}{ours:>10.4f}{ours / steps * 1e6:>10.2f}")
    print(f"ratio tdrl / hand loop: {ratio:.2f}x (target <= 3x)")
    result = {
        "benchmark": "gym_rollout",
        "env": ENV_ID,
        "steps": steps,
        "repeats": repeats,
        "hand_loop_s": hand,
        "tdrl_s": ours,
        "hand_us_per_step": hand / steps * 1e6,
        "tdrl_us_per_step": ours / steps * 1e6,
        "ratio": ratio,
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
