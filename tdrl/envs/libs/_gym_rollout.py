"""Fast paths of a single plain gym env: columnar random rollouts and in-place steps.

``env.rollout(n)`` with no policy steps the env with :meth:`~tdrl.envs.EnvBase.rand_action`.
For a plain :class:`~tdrl.envs.libs.gym.GymWrapper` (one simulator, no info readers, no
transforms) the same steps can run on the simulator directly: each step keeps its action and
observation tensors and its reward and done flags as Python values, and every tensor of the
result is built once, at the end. The data is identical to the generic loop's: the same random
draws in the same order, the same resets, the same dtypes and shapes. Only the two tensordicts
and the four one-element tensors the generic loop builds per step are skipped.

Batched envs keep each sub-env's step output in preallocated buffers; for such an env,
:func:`direct_stepper` writes the simulator's results straight into them (the same values the
env's ``_step`` returns) instead of building a tensordict to copy from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict

if TYPE_CHECKING:
    from tdrl.envs.libs.gym import GymWrapper

__all__ = ["direct_resetter", "direct_stepper", "random_rollout"]

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
    next_source["reward"] = torch.from_numpy(_reward_column(rewards))
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


def _reward_column(rewards: list) -> np.ndarray:
    """The ``(steps, 1)`` float32 rewards (floats, ints, numpy scalars or 0-d arrays)."""
    return np.asarray(rewards, dtype=np.float32).reshape(len(rewards), 1)


def direct_stepper(
    env: GymWrapper, action: torch.Tensor, outputs: dict[Any, torch.Tensor]
) -> Callable[[], bool] | None:
    """A callable stepping ``env`` with the value of ``action`` and writing into ``outputs``.

    ``outputs`` must hold exactly the keys of the env's step output (observations, reward and
    the three flags) as CPU tensors of the spec shapes; otherwise the result is None. The
    callable returns whether the step ended the episode.
    """
    obs_keys = _observation_keys(env)
    if set(outputs) != {*obs_keys, "reward", *_FLAGS} or any(
        value.device.type != "cpu" for value in outputs.values()
    ):
        return None
    simulator_step = env._env.step if env.wrapper_frame_skip == 1 else env._simulator_step
    write_action = _action_writer(env, action)
    read_observation = _observation_writer(env, obs_keys, outputs)
    # numpy views of the one-element buffers: a store is cheaper than a tensor op
    reward = outputs["reward"].numpy().reshape(-1)
    terminated_out = outputs["terminated"].numpy().reshape(-1)
    truncated_out = outputs["truncated"].numpy().reshape(-1)
    done_out = outputs["done"].numpy().reshape(-1)

    def step() -> bool:
        observation, step_reward, terminated, truncated, _ = simulator_step(write_action())
        terminated = bool(terminated)
        truncated = bool(truncated)
        read_observation(observation)
        reward[0] = step_reward
        terminated_out[0] = terminated
        truncated_out[0] = truncated
        done = terminated or truncated
        done_out[0] = done
        return done

    return step


def direct_resetter(env: GymWrapper, outputs: dict[Any, torch.Tensor]) -> Callable[[], None] | None:
    """A callable resetting ``env`` and writing the reset data into ``outputs``, or None.

    ``outputs`` must hold exactly the keys of the env's reset output (observations and the
    three flags, which a gym reset leaves False).
    """
    obs_keys = _observation_keys(env)
    if set(outputs) != {*obs_keys, *_FLAGS} or any(
        value.device.type != "cpu" for value in outputs.values()
    ):
        return None
    simulator_reset = env._env.reset
    read_observation = _observation_writer(env, obs_keys, outputs)
    flags = [outputs[flag] for flag in _FLAGS]

    def reset() -> None:
        observation, _ = simulator_reset()
        read_observation(observation)
        for flag in flags:
            flag.zero_()

    return reset


def _observation_keys(env: GymWrapper) -> list:
    keys = [key for key, _ in env._obs_readers]
    if env.from_pixels:
        keys.append("pixels")
    return keys


def _action_writer(env: GymWrapper, action: torch.Tensor) -> Callable[[], Any]:
    """The simulator's action from the current value of ``action`` (a buffer view)."""
    write_numpy = env._action_codec.write_numpy
    if env._convert_actions_to_numpy and write_numpy is not None:
        array = action.numpy()
        return lambda: write_numpy(array)
    write_action = env._write_action
    return lambda: write_action(action)


def _observation_writer(
    env: GymWrapper, obs_keys: list, outputs: dict[Any, torch.Tensor]
) -> Callable[[Any], None]:
    """Writes a simulator observation into the observation buffers."""
    codecs = env._obs_codecs
    if not env.from_pixels and all(codecs[key].read_into is not None for key in obs_keys):
        # numpy stores into numpy views of the buffers, no tensor in between
        targets = [(key, codecs[key].read_into, outputs[key].numpy()) for key in obs_keys]
        if env._obs_is_dict:

            def write_dict(observation: Any) -> None:
                for key, read_into, out in targets:
                    read_into(out, observation[key])

            return write_dict
        ((_, read_into, out),) = targets
        return lambda observation: read_into(out, observation)
    read_obs = env._read_obs
    buffers = [(key, outputs[key]) for key in obs_keys]

    def write(observation: Any) -> None:
        values = read_obs(observation)
        for key, buffer in buffers:
            buffer.copy_(values[key])

    return write
