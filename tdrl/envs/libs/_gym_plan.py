"""GymStepPlan: the one spelling of a gym step, and the fast paths built on it.

A :class:`~tdrl.envs.libs.gym.GymWrapper` step is: write the action for the simulator, call
the simulator (``frame_skip`` times, rewards summed), read the observations, the reward and
the three flags. :class:`GymStepPlan` holds those conversions, prepared once from the specs.
Every path that steps a gym env goes through it:

- ``GymWrapper._step`` (the generic path: the data becomes one tensordict per step);
- :meth:`GymStepPlan.columnar_rollout`, ``env.rollout(n)`` without a policy or with a plain
  ``TensorDictModule`` policy (and so the batches of a ``SyncDataCollector``): each step keeps
  its tensors and Python flags, every column is built once at the end;
- :meth:`GymStepPlan.stepper_into`, used by batched envs: the step writes its results straight
  into the batched env's buffers.

The fast paths give the data of the generic path, bit for bit (same random draws, same
resets, same dtypes and shapes), and run only when the env's step is exactly the plan's:
:func:`fast_path_blocker` says why not otherwise (a vector env, an info reader, auto-reset,
type checks, an accelerator, or a step method replaced on the class or on the instance).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Composite, OneHot
from tdrl.envs._checks import check_layout
from tdrl.envs._columnar import ActionSource, Handover, ModuleOutputs, random_source
from tdrl.envs._overrides import override_reason

if TYPE_CHECKING:
    from tdrl.envs.libs.gym import GymWrapper

__all__ = ["FAST_PATH_METHODS", "GymStepPlan", "fast_path_blocker"]

_FLAGS = ("done", "terminated", "truncated")
#: the env methods whose work the fast paths do without calling them: replacing one (on the
#: class or on the instance) sends every step through the generic path, where it runs
FAST_PATH_METHODS = (
    "step",
    "_checked_step",
    "_step",
    "_finish_step",
    "reset",
    "_reset",
    "_post_process",
    "rand_action",
    # a subclass's own plan (other reward or observation conversions) has no fast paths
    "_make_step_plan",
)


def fast_path_blocker(env: GymWrapper, stock: type) -> str | None:
    """Why ``env`` must step on the generic path, or None when its fast paths may run.

    Decided from the env's actual configuration and bound methods: ``stock`` is the class
    whose methods the fast paths stand for; a method of :data:`FAST_PATH_METHODS` set on the
    instance or overridden by a subclass disqualifies them.
    """
    if env._is_batched:
        return "vector env"
    if env._info_dict_reader:
        return "info dict reader"
    if env._auto_reset_handler is not None:
        return "auto_reset"
    if env.run_type_checks:
        return "run_type_checks"
    device = env.device
    if device is not None and device.type != "cpu":
        return f"device {device}"
    if len(env._cache.action_keys) != 1:
        return "several action keys"
    return override_reason(env, stock, FAST_PATH_METHODS)


def _written_order(start: TensorDictBase, out_keys: tuple) -> list[tuple[str, int]]:
    """``(key, index in out_keys)`` of the outputs in the order of a step's root entries.

    The outputs carried in the first step's input keep their place; the others follow, in
    the order the policy writes them.
    """
    carried = [key for key in start.keys() if key in out_keys]
    order = carried + [key for key in out_keys if key not in carried]
    return [(key, out_keys.index(key)) for key in order]


class GymStepPlan:
    """The conversions of one gym step, prepared once from the env's specs.

    Args:
        env: the wrapper whose step this is (its codecs, readers and pools are built).
    """

    def __init__(self, env: GymWrapper) -> None:
        self._owner = env
        self.simulator = env._env
        self.batched = env._is_batched
        codec = env._action_codec
        self._convert_action = env._convert_actions_to_numpy
        self.write_action: Callable[[Any], Any] = (
            codec.write if self._convert_action else (lambda action: action)
        )
        self._write_action_numpy = codec.write_numpy if self._convert_action else None
        action_spec = codec.spec
        # a Dict / Tuple action space gives a tensordict action: its leaves are the codec's
        composite = isinstance(action_spec, Composite)
        self._action_shape = None if composite else action_spec.shape
        self._action_dtype = action_spec.dtype
        self._obs_readers = env._obs_readers
        self._obs_codecs = env._obs_codecs
        self._obs_is_dict = env._obs_is_dict
        self._from_pixels = env.from_pixels
        self._flag_shape = env._flag_shape
        self._flag_pool = env.__dict__.get("_flag_pool")
        self._reward_pool = env.__dict__.get("_reward_pool")
        self.observation_keys = [key for key, _ in self._obs_readers]
        if self._from_pixels:
            self.observation_keys.append("pixels")

    # ------------------------------------------------------------------ the step
    def simulate(self, action: Any) -> tuple:
        """One env step on the simulator: ``frame_skip`` calls, rewards summed."""
        frame_skip = self._owner.wrapper_frame_skip
        if frame_skip == 1:
            return self.simulator.step(action)
        reward = 0.0
        for _ in range(frame_skip):
            observation, step_reward, terminated, truncated, info = self.simulator.step(action)
            reward = reward + step_reward
            if np.any(terminated) or np.any(truncated):
                break
        return observation, reward, terminated, truncated, info

    def _bound_simulate(self) -> Callable[[Any], tuple]:
        """:meth:`simulate` for a run of steps: the simulator's own ``step`` without skips."""
        return self.simulator.step if self._owner.wrapper_frame_skip == 1 else self.simulate

    def read_observation(self, observation: Any) -> dict[str, Any]:
        """The simulator's observation as a dict of tensors (and the rendered frame)."""
        readers = self._obs_readers
        if self._obs_is_dict:
            out = {key: read(observation[key]) for key, read in readers}
        elif readers:
            out = {"observation": readers[0][1](observation)}
        else:
            out = {}
        if self._from_pixels:
            out["pixels"] = torch.from_numpy(np.ascontiguousarray(self._owner._render()))
        return out

    def reward(self, reward: Any) -> torch.Tensor:
        """The reward tensor (float32, the env's batch dims and a trailing 1)."""
        if self.batched:
            return torch.from_numpy(np.asarray(reward, dtype=np.float32)).reshape(self._flag_shape)
        return self._reward_pool.take(reward)

    def flags(self, terminated: Any, truncated: Any) -> dict[str, torch.Tensor]:
        """The ``terminated``, ``truncated`` and ``done`` tensors of a step."""
        if self.batched:
            shape = self._flag_shape
            term = torch.from_numpy(np.asarray(terminated, dtype=np.bool_)).reshape(shape)
            trunc = torch.from_numpy(np.asarray(truncated, dtype=np.bool_)).reshape(shape)
            return {"terminated": term, "truncated": trunc, "done": term | trunc}
        take = self._flag_pool.take
        terminated = bool(terminated)
        truncated = bool(truncated)
        return {
            "terminated": take(terminated),
            "truncated": take(truncated),
            "done": take(terminated or truncated),
        }

    def step(self, action: torch.Tensor) -> tuple[dict[str, Any], Any, Any, Any, Any]:
        """Run one step from an action tensor.

        The action's shape must be the spec's and its dtype the spec's or one its values
        survive a cast to (checked at every step, a tuple comparison); its values are
        checked only under ``run_type_checks``.

        Returns:
            ``(observations, reward, terminated, truncated, info)``: the observations read
            into tensors, the other values as the simulator gave them.
        """
        shape = self._action_shape
        if shape is not None:
            try:
                bad = action.shape != shape or action.dtype != self._action_dtype
            except AttributeError:  # not a tensor
                bad = True
            if bad:
                action = check_layout("action", "action", action, shape, self._action_dtype)
        observation, reward, terminated, truncated, info = self.simulate(self.write_action(action))
        return self.read_observation(observation), reward, terminated, truncated, info

    # ------------------------------------------------------------------ fast paths
    def columnar_rollout(
        self,
        max_steps: int,
        break_when_any_done: bool,
        set_truncated: bool,
        source: ActionSource | None = None,
        start: TensorDictBase | None = None,
    ) -> TensorDict | Handover:
        """``env.rollout(max_steps, ...)`` with each column built once at the end.

        Args:
            max_steps: the maximum number of steps.
            break_when_any_done: stop after the first step that ends an episode.
            set_truncated: mark the last step as truncated (and done).
            source: where the actions come from: random actions from the spec (None) or
                the direct policy call (:func:`~tdrl.envs._columnar.policy_source`).
            start: the input of the first step, already reset where needed (:meth:`accepts`
                it); None resets the env.

        Returns:
            the rollout, or a :class:`~tdrl.envs._columnar.Handover` when the action source
            needs the generic loop from some step on. The caller checks
            :func:`fast_path_blocker` first.
        """
        env = self._owner
        if source is None:
            source = random_source(_column_sampler(env._cache.action_leaf), "action")
        if start is None:
            start = env.reset()
        produce = source.produce
        action_index = source.out_keys.index("action")
        check = None if source.checked else self._checked_action
        simulate = self._bound_simulate()
        write_action = self.write_action
        read_observation = self.read_observation
        reset = self._reset_observation
        roots, outputs, nexts = [], [], []
        rewards, terminateds, truncateds = [], [], []
        entries = start._tensordict
        root = {key: entries[key] for key in self.observation_keys}
        last = max_steps - 1
        for i in range(max_steps):
            values = produce(root)
            if type(values) is not tuple:
                columns = (roots, outputs, nexts, rewards, terminateds, truncateds)
                return self._handover(source, start, columns, root, values, max_steps - i)
            action = values[action_index]
            if check is not None:
                action = check(action)
            observation, reward, terminated, truncated, _ = simulate(write_action(action))
            observation = read_observation(observation)
            terminated = bool(terminated)
            truncated = bool(truncated)
            roots.append(root)
            outputs.append(values)
            nexts.append(observation)
            rewards.append(reward)
            terminateds.append(terminated)
            truncateds.append(truncated)
            if i == last or ((terminated or truncated) and break_when_any_done):
                break
            root = reset() if terminated or truncated else observation
        columns = (roots, outputs, nexts, rewards, terminateds, truncateds)
        # as in the generic loop, only a rollout that ran all its steps is marked truncated
        set_truncated = set_truncated and len(outputs) == max_steps
        return self._columns(source.out_keys, start, columns, set_truncated)

    def accepts(self, tensordict: TensorDictBase, out_keys: tuple) -> bool:
        """Whether ``tensordict`` can start a columnar rollout writing ``out_keys``.

        It must hold exactly the root entries of a step, in the generic loop's order (the
        observations and the three flags, as plain tensors of the specs' layout on the env's
        device), then possibly some of ``out_keys`` (carried from an earlier step).
        """
        env = self._owner
        if type(tensordict) is not TensorDict or tensordict.batch_size != env.batch_size:
            return False
        if tensordict.device != env.device:
            return False
        keys = list(tensordict.keys())
        expected = [*self.observation_keys, *_FLAGS]
        count = len(expected)
        carried = keys[count:]
        if keys[:count] != expected or not set(carried) <= set(out_keys):
            return False
        specs = env.output_spec
        for parent in ("full_observation_spec", "full_done_spec"):
            for key, spec in specs[parent].items(True, True):
                value = tensordict.get(key, None)
                if type(value) is not torch.Tensor:
                    return False
                if value.dtype != spec.dtype or value.shape != spec.shape:
                    return False
        return True

    def _checked_action(self, action: torch.Tensor) -> Any:
        """``action`` cast to the spec's dtype when it must be (as :meth:`step` does)."""
        shape = self._action_shape
        if shape is not None and (action.shape != shape or action.dtype != self._action_dtype):
            return check_layout("action", "action", action, shape, self._action_dtype)
        return action

    def _reset_observation(self) -> dict:
        """The observation entries of a reset (the flags of a gym reset are always False)."""
        data = self._owner.reset()
        return {key: value for key, value in data.items() if key not in _FLAGS}

    def _handover(
        self,
        source: ActionSource,
        start: TensorDictBase,
        columns: tuple,
        root: dict,
        outputs: ModuleOutputs | None,
        remaining: int,
    ) -> Handover:
        """The steps so far and the next step's input, as the generic loop would hold them."""
        out_keys = source.out_keys
        roots, step_outputs = columns[0], columns[1]
        if not roots:
            return Handover([], start, outputs, remaining)
        steps = list(self._columns(out_keys, start, columns, False).unbind(0))
        # the root of a later step: its observations, flags a step or reset left False,
        # and the outputs of the step before (kept by step_mdp and by the reset)
        source_dict: dict = dict(root)
        for flag in _FLAGS:
            source_dict[flag] = torch.zeros(self._flag_shape, dtype=torch.bool)
        last = step_outputs[-1]
        source_dict.update((key, last[index]) for key, index in _written_order(start, out_keys))
        owner = self._owner
        tensordict = TensorDict._new_unsafe(
            source_dict, batch_size=owner.batch_size, device=owner.device
        )
        return Handover(steps, tensordict, outputs, remaining)

    def _columns(
        self, out_keys: tuple, start: TensorDictBase, columns: tuple, set_truncated: bool
    ) -> TensorDict:
        roots, outputs, nexts, rewards, terminateds, truncateds = columns
        steps = len(outputs)
        batch = torch.Size([steps])
        device = self._owner.device
        keys = list(roots[0])
        flag_shape = (steps, 1)
        terminated = torch.tensor(terminateds, dtype=torch.bool).reshape(flag_shape)
        truncated = torch.tensor(truncateds, dtype=torch.bool).reshape(flag_shape)
        if set_truncated:
            truncated[-1] = True
        next_source = {key: torch.stack([step[key] for step in nexts]) for key in keys}
        # (steps, 1) float32 rewards from floats, ints, numpy scalars or 0-d arrays
        next_source["reward"] = torch.from_numpy(
            np.asarray(rewards, dtype=np.float32).reshape(steps, 1)
        )
        next_source["terminated"] = terminated
        next_source["truncated"] = truncated
        next_source["done"] = terminated | truncated
        # the same key order as the generic loop's result
        source = {"next": TensorDict._new_unsafe(next_source, batch_size=batch, device=device)}
        source.update({key: torch.stack([step[key] for step in roots]) for key in keys})
        # Every later root holds a reset's flags (all False) or the flags of a step that did
        # not end its episode (also all False): a step that ends one is followed by a reset.
        entries = start._tensordict
        for flag in _FLAGS:
            column = torch.zeros(flag_shape, dtype=torch.bool)
            column[0] = entries[flag]
            source[flag] = column
        if len(out_keys) == 1:
            source[out_keys[0]] = torch.stack([values[0] for values in outputs])
        else:
            for key, index in _written_order(start, out_keys):
                source[key] = torch.stack([values[index] for values in outputs])
        result = TensorDict._new_unsafe(source, batch_size=batch, device=device)
        result.refine_names("time")
        return result

    def stepper_into(
        self, action: torch.Tensor, outputs: dict[Any, torch.Tensor]
    ) -> Callable[[], bool] | None:
        """A callable stepping with the value of ``action`` and writing into ``outputs``.

        ``outputs`` must hold exactly the keys of the step output (observations, reward and
        the three flags) as CPU tensors of the spec shapes; otherwise the result is None. The
        callable returns whether the step ended the episode. The caller checks
        :func:`fast_path_blocker` first.
        """
        obs_keys = self.observation_keys
        if not self._cpu_buffers(outputs, {*obs_keys, "reward", *_FLAGS}):
            return None
        simulate = self._bound_simulate()
        write_action = self._action_reader(action)
        read_observation = self._observation_writer(outputs)
        # numpy views of the one-element buffers: a store is cheaper than a tensor op
        reward = outputs["reward"].numpy().reshape(-1)
        terminated_out = outputs["terminated"].numpy().reshape(-1)
        truncated_out = outputs["truncated"].numpy().reshape(-1)
        done_out = outputs["done"].numpy().reshape(-1)

        def step() -> bool:
            observation, step_reward, terminated, truncated, _ = simulate(write_action())
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

    def resetter_into(self, outputs: dict[Any, torch.Tensor]) -> Callable[[], None] | None:
        """A callable resetting the simulator and writing the reset data into ``outputs``.

        ``outputs`` must hold exactly the keys of a reset output (observations and the three
        flags, which a gym reset leaves False); otherwise the result is None.
        """
        if not self._cpu_buffers(outputs, {*self.observation_keys, *_FLAGS}):
            return None
        simulator_reset = self.simulator.reset
        read_observation = self._observation_writer(outputs)
        flags = [outputs[flag] for flag in _FLAGS]

        def reset() -> None:
            observation, _ = simulator_reset()
            read_observation(observation)
            for flag in flags:
                flag.zero_()

        return reset

    @staticmethod
    def _cpu_buffers(outputs: dict[Any, torch.Tensor], keys: set) -> bool:
        return set(outputs) == keys and all(
            value.device.type == "cpu" for value in outputs.values()
        )

    def _action_reader(self, action: torch.Tensor) -> Callable[[], Any]:
        """The simulator's action from the current value of ``action`` (a buffer view)."""
        write_numpy = self._write_action_numpy
        if write_numpy is not None:
            array = action.numpy()
            return lambda: write_numpy(array)
        write_action = self.write_action
        return lambda: write_action(action)

    def _observation_writer(self, outputs: dict[Any, torch.Tensor]) -> Callable[[Any], None]:
        """Writes a simulator observation into the observation buffers."""
        obs_keys = self.observation_keys
        codecs = self._obs_codecs
        if not self._from_pixels and all(codecs[key].read_into is not None for key in obs_keys):
            # numpy stores into numpy views of the buffers, no tensor in between
            targets = [(key, codecs[key].read_into, outputs[key].numpy()) for key in obs_keys]
            if self._obs_is_dict:

                def write_dict(observation: Any) -> None:
                    for key, read_into, out in targets:
                        read_into(out, observation[key])

                return write_dict
            ((_, read_into, out),) = targets
            return lambda observation: read_into(out, observation)
        read_observation = self.read_observation
        buffers = [(key, outputs[key]) for key in obs_keys]

        def write(observation: Any) -> None:
            values = read_observation(observation)
            for key, buffer in buffers:
                buffer.copy_(values[key])

        return write


def _column_sampler(spec: Any) -> Callable[[], torch.Tensor]:
    """The random-action sampler of a columnar rollout: ``spec.rand`` or an equivalent.

    For a plain one-hot spec (no mask, no batch dims, ``rand`` not replaced on the
    instance), each draw makes the same ``torch.randint`` call as ``OneHot.rand`` (same
    values, same random-number stream) but returns a row of the spec's identity without
    copying it: the columnar loop stacks its actions into a new column at the end, so the
    rows it holds are never handed out.
    """
    if (
        type(spec) is not OneHot
        or spec.mask is not None
        or spec.shape != (spec.n,)
        or "rand" in spec.__dict__
        or "_rand" in spec.__dict__
    ):
        return spec.rand
    rows = spec.enumerate()
    n = spec.n
    device = spec.device
    randint = torch.randint

    def sample() -> torch.Tensor:
        return rows[randint(0, n, (), device=device)]

    return sample
