"""Random-action rollouts of a single gym env, kept in columns.

``env.rollout(n)`` with no policy steps the env with :meth:`~tdrl.envs.EnvBase.rand_action`.
For a plain :class:`~tdrl.envs.libs.gym.GymWrapper` (one simulator, no info readers, no
transforms) the same steps can run on the simulator directly: each step keeps its action and
observation tensors and its reward and done flags as Python values, and every tensor of the
result is built once, at the end. The data is identical to the generic loop's: the same random
draws in the same order, the same resets, the same dtypes and shapes. Only the two tensordicts
and the four one-element tensors the generic loop builds per step are skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict

if TYPE_CHECKING:
    from tdrl.envs.libs.gym import GymWrapper

__all__ = ["random_rollout"]

_FLAGS = ("done", "terminated", "truncated")


def random_rollout(
    env: GymWrapper, max_steps: int, break_when_any_done: bool, set_truncated: bool
) -> TensorDict:
    """Run ``env.rollout(max_steps)`` with random actions and return the stacked data.

    The caller checks that the env qualifies (see ``GymWrapper._random_rollout``).
    """
    sample_action = env._cache.action_leaf.rand
    write_action = env._write_action
    simulator_step = env._simulator_step
    read_obs = env._read_obs
    roots, actions, nexts = [], [], []
    rewards, terminateds, truncateds = [], [], []
    root = _reset_observation(env)
    last = max_steps - 1
    for i in range(max_steps):
        action = sample_action()
        observation, reward, terminated, truncated, _ = simulator_step(write_action(action))
        terminated = bool(terminated)
        truncated = bool(truncated)
        observation = read_obs(observation)
        roots.append(root)
        actions.append(action)
        nexts.append(observation)
        rewards.append(reward)
        terminateds.append(terminated)
        truncateds.append(truncated)
        if i == last or ((terminated or truncated) and break_when_any_done):
            break
        root = _reset_observation(env) if terminated or truncated else observation
    return _columns(env, roots, actions, nexts, rewards, terminateds, truncateds, set_truncated)


def _reset_observation(env: GymWrapper) -> dict:
    """The observation entries of a reset (the flags of a gym reset are always False)."""
    data = env.reset()
    return {key: value for key, value in data.items() if key not in _FLAGS}


def _columns(
    env: GymWrapper,
    roots: list,
    actions: list,
    nexts: list,
    rewards: list,
    terminateds: list,
    truncateds: list,
    set_truncated: bool,
) -> TensorDict:
    steps = len(actions)
    batch = torch.Size([steps])
    device = env.device
    keys = list(roots[0])
    flag_shape = (steps, 1)
    terminated = torch.tensor(terminateds, dtype=torch.bool).reshape(flag_shape)
    truncated = torch.tensor(truncateds, dtype=torch.bool).reshape(flag_shape)
    if set_truncated:
        truncated[-1] = True
    next_source = {key: torch.stack([step[key] for step in nexts]) for key in keys}
    next_source["reward"] = torch.tensor(rewards, dtype=torch.float32).reshape(flag_shape)
    next_source["terminated"] = terminated
    next_source["truncated"] = truncated
    next_source["done"] = terminated | truncated
    # the same key order as the generic loop's result
    source = {"next": TensorDict._new_unsafe(next_source, batch_size=batch, device=device)}
    source.update({key: torch.stack([step[key] for step in roots]) for key in keys})
    # Every root holds a reset's flags (all False) or the flags of a step that did not end
    # its episode (also all False): a step that ends one is followed by a reset.
    for flag in _FLAGS:
        source[flag] = torch.zeros(flag_shape, dtype=torch.bool)
    source["action"] = torch.stack(actions)
    result = TensorDict._new_unsafe(source, batch_size=batch, device=device)
    result.refine_names("time")
    return result
