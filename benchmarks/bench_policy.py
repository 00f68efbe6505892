"""Policy-driven loops against hand-written gymnasium loops running the same MLP.

The loop every training program runs steps an env with a policy. On CartPole-v1 with a
4-64-2 MLP (a ``TensorDictModule`` writing the one-hot argmax action), one thread, no grad:

- ``rollout``: ``env.rollout(n, policy)`` against a hand loop over ``gymnasium.make`` that
  calls the same MLP and keeps the same data (observation, action, next observation, reward,
  terminated, truncated, done), stacked at the end;
- ``collector``: ``SyncDataCollector(env, policy, frames_per_batch=500)`` against the same
  hand loop;
- ``serial``: ``SerialEnv(4).rollout(n, policy)`` against a hand loop over gymnasium's
  ``SyncVectorEnv(4)`` with the MLP on the 4 observations;
- ``parallel``: ``ParallelEnv(4).rollout(n, policy)`` throughput against the same hand loop
  over ``AsyncVectorEnv(4)`` (reported as hand time / tdrl time: >= 1 means tdrl is faster).

The sides run alternately in one process; each figure is the median of the repeats of
process CPU time (wall time for the multi-process pair, whose work is in other processes).

    python benchmarks/bench_policy.py [--quick] [--steps N] [--repeats R] [--profile LOOP]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable

import gymnasium
import torch
from tensordict.nn import TensorDictModule
from torch import nn

ENV_ID = "CartPole-v1"
NUM_ENVS = 4
TARGETS = {
    "rollout_ratio": ("<=", 1.5),
    "collector_ratio": ("<=", 1.6),
    "serial_ratio": ("<=", 1.5),
    "parallel_speedup": (">=", 1.0),
}


class OneHotArgmax(nn.Module):
    """Logits -> the one-hot action of their argmax."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1])


def make_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2), OneHotArgmax())


def make_policy(mlp: nn.Module) -> TensorDictModule:
    return TensorDictModule(mlp, in_keys=["observation"], out_keys=["action"])


def hand_loop(env: gymnasium.Env, mlp: nn.Module, steps: int) -> dict:
    """Steps ``env`` with ``mlp`` and keeps what a rollout keeps, stacked at the end."""
    observations, actions, next_observations = [], [], []
    rewards, terminateds, truncateds = [], [], []
    observation = torch.from_numpy(env.reset()[0])
    for _ in range(steps):
        action = mlp(observation)
        next_observation, reward, terminated, truncated, _ = env.step(int(action.argmax()))
        next_observation = torch.from_numpy(next_observation)
        observations.append(observation)
        actions.append(action)
        next_observations.append(next_observation)
        rewards.append(reward)
        terminateds.append(terminated)
        truncateds.append(truncated)
        if terminated or truncated:
            next_observation = torch.from_numpy(env.reset()[0])
        observation = next_observation
    terminated = torch.tensor(terminateds).unsqueeze(-1)
    truncated = torch.tensor(truncateds).unsqueeze(-1)
    return {
        "observation": torch.stack(observations),
        "action": torch.stack(actions),
        "next_observation": torch.stack(next_observations),
        "reward": torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1),
        "terminated": terminated,
        "truncated": truncated,
        "done": terminated | truncated,
    }


def hand_vector_loop(env: gymnasium.vector.VectorEnv, mlp: nn.Module, steps: int) -> dict:
    """The vector-env hand loop: the MLP on the batch of observations, the same data kept."""
    observations, actions, next_observations = [], [], []
    rewards, terminateds, truncateds = [], [], []
    observation = torch.from_numpy(env.reset()[0])
    for _ in range(steps):
        action = mlp(observation)
        next_observation, reward, terminated, truncated, _ = env.step(action.argmax(-1).numpy())
        next_observation = torch.from_numpy(next_observation)
        observations.append(observation)
        actions.append(action)
        next_observations.append(next_observation)
        rewards.append(torch.from_numpy(reward))
        terminateds.append(torch.from_numpy(terminated))
        truncateds.append(torch.from_numpy(truncated))
        observation = next_observation
    terminated = torch.stack(terminateds).unsqueeze(-1)
    truncated = torch.stack(truncateds).unsqueeze(-1)
    return {
        "observation": torch.stack(observations, 1),
        "action": torch.stack(actions, 1),
        "next_observation": torch.stack(next_observations, 1),
        "reward": torch.stack(rewards, 1).float().unsqueeze(-1),
        "terminated": terminated,
        "truncated": truncated,
        "done": terminated | truncated,
    }


def _time(fn: Callable[[], object], wall: bool) -> float:
    clock = time.perf_counter if wall else time.process_time
    start = clock()
    fn()
    return clock() - start


def _pair(
    tdrl_fn: Callable[[], object], hand_fn: Callable[[], object], repeats: int, wall: bool
) -> tuple[float, float]:
    """Median seconds of each side, run alternately (after one warm-up call each)."""
    tdrl_fn()
    hand_fn()
    tdrl_times, hand_times = [], []
    for _ in range(repeats):
        hand_times.append(_time(hand_fn, wall))
        tdrl_times.append(_time(tdrl_fn, wall))
    return statistics.median(tdrl_times), statistics.median(hand_times)


def _gym_maker() -> gymnasium.Env:
    return gymnasium.make(ENV_ID)


def _collect(collector) -> None:
    for _ in collector:
        pass


def build_loops(steps: int, which: list[str]) -> dict[str, tuple]:
    """``name -> (tdrl_fn, hand_fn, wall_clock, closers)`` for the loops in ``which``."""
    from tdrl.collectors import SyncDataCollector
    from tdrl.envs import ParallelEnv, SerialEnv
    from tdrl.envs.libs.gym import GymEnv

    mlp = make_mlp()
    policy = make_policy(mlp)
    loops = {}
    if "rollout" in which or "collector" in which:
        raw = gymnasium.make(ENV_ID)
        raw.reset(seed=0)
        env = GymEnv(ENV_ID)
        env.set_seed(0)
        if "rollout" in which:
            loops["rollout"] = (
                lambda: env.rollout(steps, policy, break_when_any_done=False),
                lambda: hand_loop(raw, mlp, steps),
                False,
                [],
            )
        if "collector" in which:
            frames = max(500, steps // 500 * 500)
            loops["collector"] = (
                lambda: _collect(
                    SyncDataCollector(env, policy, frames_per_batch=500, total_frames=frames)
                ),
                lambda: hand_loop(raw, mlp, frames),
                False,
                [],
            )
    vector_steps = max(1, steps // NUM_ENVS)
    if "serial" in which:
        serial = SerialEnv(NUM_ENVS, lambda: GymEnv(ENV_ID))
        sync = gymnasium.vector.SyncVectorEnv([_gym_maker] * NUM_ENVS)
        loops["serial"] = (
            lambda: serial.rollout(vector_steps, policy, break_when_any_done=False),
            lambda: hand_vector_loop(sync, mlp, vector_steps),
            False,
            [serial.close, sync.close],
        )
    if "parallel" in which:
        parallel = ParallelEnv(NUM_ENVS, lambda: GymEnv(ENV_ID), mp_start_method="fork")
        asynchronous = gymnasium.vector.AsyncVectorEnv([_gym_maker] * NUM_ENVS, context="fork")
        loops["parallel"] = (
            lambda: parallel.rollout(vector_steps, policy, break_when_any_done=False),
            lambda: hand_vector_loop(asynchronous, mlp, vector_steps),
            True,
            [parallel.close, asynchronous.close],
        )
    return loops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=["rollout", "collector", "serial", "parallel"])
    parser.add_argument(
        "--profile", default=None, help="profile the tdrl side of one loop with cProfile"
    )
    args = parser.parse_args()
    steps = args.steps or (2_000 if args.quick else 10_000)
    repeats = args.repeats or (3 if args.quick else 7)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    result: dict = {"benchmark": "policy_loops", "env": ENV_ID, "steps": steps, "repeats": repeats}
    with torch.no_grad():
        loops = build_loops(steps, [args.profile] if args.profile else args.only)
        if args.profile:
            import cProfile
            import pstats

            tdrl_fn = loops[args.profile][0]
            tdrl_fn()
            profiler = cProfile.Profile()
            profiler.runcall(tdrl_fn)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
            return
        print(f"{ENV_ID}, MLP 4-64-2 policy, {steps} steps, median of {repeats}")
        print(f"{'loop':<11}{'tdrl s':>10}{'hand s':>10}{'ratio':>8}  target")
        for name, (tdrl_fn, hand_fn, wall, closers) in loops.items():
            tdrl_s, hand_s = _pair(tdrl_fn, hand_fn, repeats, wall)
            for close in closers:
                close()
            if name == "parallel":
                key, value = "parallel_speedup", hand_s / tdrl_s
            else:
                key, value = f"{name}_ratio", tdrl_s / hand_s
            op, bound = TARGETS[key]
            print(f"{name:<11}{tdrl_s:>10.4f}{hand_s:>10.4f}{value:>8.2f}  {op} {bound}")
            result[name] = {
                "tdrl_s": tdrl_s,
                "hand_s": hand_s,
                "clock": "wall" if wall else "process cpu",
                key: value,
                "target": bound,
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
