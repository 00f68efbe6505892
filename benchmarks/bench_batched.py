"""Batched envs against gymnasium's vector envs, measured alternately in one run.

Compares, on CartPole-v1 with 4 sub-envs:
- ParallelEnv(4) env-steps/s against gymnasium AsyncVectorEnv(4, context="fork");
- SerialEnv(4) env-steps/s against gymnasium SyncVectorEnv(4);
- ParallelEnv(4) start-up (construction + first reset) against AsyncVectorEnv(4, fork);
- ParallelEnv(4).close() time.

Both sides step with the same precomputed random actions and keep every
observation they return; tdrl resets finished sub-envs with step_and_maybe_reset
(gymnasium vector envs reset them inside step). Prints a table and one JSON line.

Usage: python benchmarks/bench_batched.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from functools import partial

import gymnasium as gym
import torch

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.libs.gym import GymEnv

ENV_NAME = "CartPole-v1"
NUM_ENVS = 4


def _gym_maker() -> gym.Env:
    return gym.make(ENV_NAME)


def _gym_steps(env: gym.vector.VectorEnv, actions: torch.Tensor) -> float:
    actions = actions.numpy()
    kept = []
    start = time.perf_counter()
    for action in actions:
        obs, *_ = env.step(action)
        kept.append(obs)
    return len(actions) * NUM_ENVS / (time.perf_counter() - start)


def _tdrl_steps(env, actions: torch.Tensor) -> float:
    one_hot = torch.nn.functional.one_hot(actions, 2).to(env.action_spec.dtype)
    td = env.reset()
    kept = []
    start = time.perf_counter()
    for action in one_hot:
        td.set("action", action)
        data, td = env.step_and_maybe_reset(td)
        kept.append(data.get("next"))
    return len(actions) * NUM_ENVS / (time.perf_counter() - start)


def _startup_gym() -> tuple[float, gym.vector.VectorEnv]:
    start = time.perf_counter()
    env = gym.vector.AsyncVectorEnv([_gym_maker] * NUM_ENVS, context="fork")
    env.reset(seed=0)
    return time.perf_counter() - start, env


def _startup_tdrl() -> tuple[float, ParallelEnv]:
    start = time.perf_counter()
    env = ParallelEnv(NUM_ENVS, partial(GymEnv, ENV_NAME))
    env.reset()
    return time.perf_counter() - start, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    rounds = 3 if args.quick else 5
    steps = 300 if args.quick else 1000
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)

    results: dict[str, list[float]] = {
        k: [] for k in ("startup_gym", "startup_tdrl", "close_tdrl", "async", "parallel")
    }
    results.update(sync=[], serial=[])

    for _ in range(rounds):
        t_gym, genv = _startup_gym()
        genv.close()
        t_tdrl, tenv = _startup_tdrl()
        start = time.perf_counter()
        tenv.close()
        results["close_tdrl"].append(time.perf_counter() - start)
        results["startup_gym"].append(t_gym)
        results["startup_tdrl"].append(t_tdrl)

    async_env = gym.vector.AsyncVectorEnv([_gym_maker] * NUM_ENVS, context="fork")
    async_env.reset(seed=0)
    parallel_env = ParallelEnv(NUM_ENVS, partial(GymEnv, ENV_NAME))
    sync_env = gym.vector.SyncVectorEnv([_gym_maker] * NUM_ENVS)
    sync_env.reset(seed=0)
    serial_env = SerialEnv(NUM_ENVS, partial(GymEnv, ENV_NAME))
    actions = torch.randint(0, 2, (steps, NUM_ENVS))
    for _ in range(rounds):
        results["async"].append(_gym_steps(async_env, actions))
        results["parallel"].append(_tdrl_steps(parallel_env, actions))
        results["sync"].append(_gym_steps(sync_env, actions))
        results["serial"].append(_tdrl_steps(serial_env, actions))
    for env in (async_env, parallel_env, sync_env, serial_env):
        env.close()

    med = {key: statistics.median(values) for key, values in results.items()}
    summary = {
        "parallel_steps_per_s": round(med["parallel"]),
        "async_vector_steps_per_s": round(med["async"]),
        "parallel_over_async": round(med["parallel"] / med["async"], 3),
        "serial_steps_per_s": round(med["serial"]),
        "sync_vector_steps_per_s": round(med["sync"]),
        "serial_over_sync": round(med["serial"] / med["sync"], 3),
        "startup_parallel_s": round(med["startup_tdrl"], 4),
        "startup_async_vector_s": round(med["startup_gym"], 4),
        "startup_ratio": round(med["startup_tdrl"] / med["startup_gym"], 3),
        "close_parallel_s": round(med["close_tdrl"], 4),
        "rounds": rounds,
        "steps": steps,
    }
    rows = [
        ("ParallelEnv(4) steps/s", med["parallel"], "AsyncVectorEnv(4, fork)", med["async"]),
        ("SerialEnv(4) steps/s", med["serial"], "SyncVectorEnv(4)", med["sync"]),
        (
            "ParallelEnv(4) start-up s",
            med["startup_tdrl"],
            "AsyncVectorEnv start-up s",
            med["startup_gym"],
        ),
    ]
    print(f"{'tdrl':<28}{'value':>12}   {'baseline':<28}{'value':>12}{'ratio':>8}")
    for name, value, base_name, base in rows:
        print(f"{name:<28}{value:>12.4g}   {base_name:<28}{base:>12.4g}{value / base:>8.3f}")
    print(f"ParallelEnv(4).close() s: {med['close_tdrl']:.4f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
