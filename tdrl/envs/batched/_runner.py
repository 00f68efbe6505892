"""EnvRunner: one sub-env of a batched env and the buffers it reads and writes.

SerialEnv holds one runner per sub-env in its own process; ParallelEnv's
worker function holds one runner and maps pipe commands to its methods. The
runner's methods return the (small, picklable) reply payload of each command.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from tdrl.data import Composite
from tdrl.envs._keys import leaf_keys
from tdrl.envs.batched import _shared
from tdrl.envs.metadata import EnvMetaData

_NESTED = (TensorDict, LazyStackedTensorDict)

SPEC_DISAGREES = (
    "sub-env {worker} does not match the specs the batched env was built from, at key {key!r}: "
    "expected {expected}, got {got}"
)

#: The reply of ``getattr`` when the attribute is a method (called through ``call``).
CALLABLE = "<callable>"


def _describe(spec: Any) -> str:
    return f"{type(spec).__name__} of shape {tuple(spec.shape)} and dtype {spec.dtype}"


def check_specs_agree(worker: int, expected: Composite, got: Composite, prefix: tuple) -> None:
    """Raise ``ValueError`` naming the first key where ``got`` differs from ``expected``."""
    expected_keys = leaf_keys(expected)
    got_keys = leaf_keys(got)
    for key in expected_keys:
        full = (*prefix, *(key if isinstance(key, tuple) else (key,)))
        if key not in got_keys:
            raise ValueError(
                SPEC_DISAGREES.format(worker=worker, key=full, expected="an entry", got="none")
            )
        want, have = expected[key], got[key]
        if (
            type(want) is not type(have)
            or tuple(want.shape) != tuple(have.shape)
            or want.dtype != have.dtype
        ):
            raise ValueError(
                SPEC_DISAGREES.format(
                    worker=worker, key=full, expected=_describe(want), got=_describe(have)
                )
            )
    for key in got_keys:
        if key not in expected_keys:
            full = (*prefix, *(key if isinstance(key, tuple) else (key,)))
            raise ValueError(
                SPEC_DISAGREES.format(
                    worker=worker, key=full, expected="no entry", got=_describe(got[key])
                )
            )


def refuse_post_step_hooks(env: Any) -> None:
    """Sub-envs may not rewrite the post-step data: the batched env's own loop needs it whole."""
    hooks = env._post_step_hooks()
    if hooks:
        names = sorted({type(getattr(hook, "__self__", hook)).__name__ for hook in hooks})
        raise RuntimeError(
            f"{', '.join(names)} cannot live inside a SerialEnv/ParallelEnv worker: it drops "
            "entries from the data of the step loop that the batched env has to collect. "
            "Put it outside, on the batched env: TransformedEnv(ParallelEnv(n, make_env), "
            f"{names[0]}(...))"
        )


class EnvRunner:
    """Builds one sub-env and runs the batched-env commands on it.

    Args:
        worker: the index of the sub-env in the batch.
        env_fn: builds the env.
        env_kwargs: keyword arguments of ``env_fn``.
        arena: the buffer arena, or None when data goes through the replies.
        layout: the buffer layout (None with ``arena``).
        expected_specs: the ``(output_spec, input_spec)`` the buffers were built from.
        device: the device the env is moved to, if any.
    """

    def __init__(
        self,
        worker: int,
        env_fn: Callable[..., Any],
        env_kwargs: dict,
        arena: torch.Tensor | None,
        layout: _shared.BufferLayout | None,
        expected_specs: tuple[Composite, Composite] | None,
        device: torch.device | None = None,
        consolidate: bool = False,
    ) -> None:
        self.worker = worker
        self.consolidate = consolidate
        env = env_fn(**env_kwargs)
        refuse_post_step_hooks(env)
        if device is not None and env.device != device:
            env = env.to(device)
        self.env = env
        if expected_specs is not None:
            check_specs_agree(
                worker, expected_specs[0], env.output_spec.to("cpu"), ("output_spec",)
            )
            check_specs_agree(worker, expected_specs[1], env.input_spec.to("cpu"), ("input_spec",))
        self.batch_size = env.batch_size
        # the env's last reset / step output (rewards left out): the next input starts from
        # it, as a single env's does after step_mdp, so an env or a transform may read its
        # previous observations from the input (the parent only sends actions and states)
        self.last_root: TensorDictBase | None = None
        self.reward_names = frozenset(key for key in env.reward_keys if isinstance(key, str))
        self.nested_rewards = [key for key in env.reward_keys if not isinstance(key, str)]
        self.writer = None
        self.done_flags = None
        self.input_td = None
        self.input_pipe_keys: list = []
        views = None
        if arena is not None and layout is not None:
            views = _shared.worker_views(arena, layout, worker)
            self.writer = _shared.BufferWriter(views, layout.pipe_keys[worker], worker)
            done_view = next((t for key, t, _ in views["next"] if key == "done"), None)
            # a numpy view of the same memory: checking it is cheaper than a torch op
            self.done_flags = done_view.numpy() if done_view is not None else None
            self.input_td = TensorDict({}, batch_size=self.batch_size)
            for key, tensor, _ in views["input"]:
                self.input_td.set(key, tensor)
            self.state_keys = [key for key, _, optional in views["input"] if optional]
            self.input_pipe_keys = layout.pipe_keys[worker]["input"]
        env_device = env.device
        self.to_cpu = env_device is not None and env_device.type != "cpu"
        self.input_device = env_device
        self.views = views
        self._plan_fast_paths()
        self.flat_input = None
        if self.input_td is not None and all(
            isinstance(key, str) for key in self.input_td.keys(True, True)
        ):
            self.flat_input = list(self.input_td.items())

    def _plan_fast_paths(self) -> None:
        """Choose the step and reset paths from the env's current configuration.

        Run again after a command that may change it (an attribute set, a method call).
        """
        env = self.env
        self.fast_step = (
            self.input_td is not None
            and not self.to_cpu
            and not self.input_pipe_keys
            and hasattr(env, "_checked_step")
        )
        self.direct_step = self.direct_reset = None
        if self.fast_step:
            views = self.views
            self.direct_step = self._direct_stepper(env, views)
            root = {key: tensor for key, tensor, _ in views["root"]}
            if len(root) == len(views["root"]):
                self.direct_reset = env._direct_resetter(root)

    @staticmethod
    def _direct_stepper(env: Any, views: dict[str, list]) -> Callable[[], bool] | None:
        """The env's in-place step over these buffers, when it has one (see EnvBase)."""
        inputs = views["input"]
        if len(inputs) != 1 or inputs[0][0] != env.action_key:
            return None
        outputs = {key: tensor for key, tensor, _ in views["next"]}
        if len(outputs) != len(views["next"]):
            return None
        return env._direct_stepper(inputs[0][1], outputs)

    # ------------------------------------------------------------------ commands
    def _input(self, data: Any) -> TensorDictBase:
        """The env input of a step: buffer views, or the tensordict sent with the command."""
        if self.input_td is None:
            return self._after_last_root(data)
        td = self.input_td.copy()
        if data:
            for key, value in data.items():
                td.set_non_tensor(key, value)
        if self.to_cpu:
            td = td.to(self.env.device)
        return self._after_last_root(td)

    def _after_last_root(self, td: TensorDictBase) -> TensorDictBase:
        """``td`` over the entries of the env's last output (``td`` wins where both have one)."""
        last = self.last_root
        if last is None:
            return td
        if type(last) is TensorDict and type(td) is TensorDict:
            nested = _NESTED
            if not any(type(value) in nested for value in td._tensordict.values()) and not any(
                type(value) in nested for value in last._tensordict.values()
            ):
                return TensorDict._new_unsafe(
                    {**last._tensordict, **td._tensordict},
                    batch_size=td.batch_size,
                    device=td.device,
                    nested=False,
                )
        return last.clone(False).update(td)

    def _remember(self, root: TensorDictBase, rewards: bool) -> None:
        """Keep the env's output as the base of its next input (``rewards``: drop them)."""
        if not rewards:
            self.last_root = root
        elif type(root) is TensorDict and not self.nested_rewards:
            names = self.reward_names
            self.last_root = TensorDict._new_unsafe(
                {key: value for key, value in root._tensordict.items() if key not in names},
                batch_size=root.batch_size,
                device=root.device,
                nested=False,
            )
        else:
            self.last_root = root.exclude(*self.reward_names, *self.nested_rewards)

    def _output(self, region: str, data: TensorDictBase) -> Any:
        if self.writer is None:
            data = data.to("cpu") if self.to_cpu else data
            # one storage for all the leaves: one buffer to pickle instead of one per leaf
            return data.consolidate() if self.consolidate else data
        missing, extra = self.writer.write(region, data)
        if missing or extra:
            return (missing, extra)
        return None

    def step(self, payload: Any) -> Any:
        """Step the env; ``payload`` is ``(inputs, sub_mask)`` or None."""
        env = self.env
        if payload is None and self.direct_step is not None:
            self.direct_step()
            return None
        if payload is None and self.fast_step:
            # EnvBase.step without its "next" bookkeeping (the buffers take the data)
            td = self._after_last_root(self._fresh_input())
            next_td = env._checked_step(td)
            self._remember(next_td, rewards=True)
            return self._output("next", next_td)
        inputs, sub_mask = payload if payload is not None else (None, None)
        td = self._input(inputs)
        if sub_mask is not None:
            td.set("_step", sub_mask)
        td = env.step(td)
        next_td = td.get("next")
        self._remember(next_td, rewards=True)
        return self._output("next", next_td)

    def step_and_maybe_reset(self, payload: Any) -> Any:
        """Step, then reset the env if its root ``"done"`` is set (one round trip).

        Returns None (no reset, nothing to report) or ``(step_reply, reset_reply, reset)``.
        """
        if payload is None and self.direct_step is not None:
            if self.direct_step():
                return (None, self.reset(None), True)
            return None

        step_reply = self.step(payload)
        if self.done_flags is not None and self.done_flags.any():
            return (step_reply, self.reset(None), True)
        return None if step_reply is None else (step_reply, None, False)

    def _fresh_input(self) -> TensorDictBase:
        """A new tensordict over the input buffer views (so the env may add entries)."""
        if self.flat_input is not None:
            return TensorDict._new_unsafe(
                dict(self.flat_input),
                batch_size=self.batch_size,
                device=self.input_device,
                nested=False,
            )
        return self.input_td.copy()

    def reset(self, payload: Any) -> Any:
        """Reset the env; ``payload`` is ``(kwargs, reset_entries, use_state)`` or None."""
        if payload is None and self.direct_reset is not None:
            self.direct_reset()
            self.last_root = None
            return None
        kwargs, entries, use_state = payload if payload is not None else ({}, None, False)
        td = None
        if entries is not None or use_state:
            td = TensorDict({}, batch_size=self.batch_size, device=self.env.device)
            if use_state and self.input_td is not None:
                for key in self.state_keys:
                    td.set(key, self.input_td.get(key).clone())
            if entries is not None:
                td.update(entries)
        out = self.env.reset(td, **kwargs)
        self._remember(out, rewards=False)
        return self._output("root", out)

    def seed(self, payload: tuple) -> Any:
        """Seed the env; return the next seed."""
        seed, static_seed = payload
        return self.env.set_seed(seed, static_seed=static_seed)

    def get_attribute(self, name: str) -> Any:
        """An attribute of the env (:data:`CALLABLE` for methods); ``name`` may be dotted."""
        value = operator.attrgetter(name)(self.env)
        if callable(value) and not isinstance(value, (torch.Tensor, TensorDictBase)):
            return CALLABLE
        return value

    def set_attribute(self, payload: tuple) -> None:
        """Set an attribute of the env."""
        name, value = payload
        setattr(self.env, name, value)
        self._plan_fast_paths()

    def call(self, payload: tuple) -> Any:
        """Call a method of the env (or of one of its attributes: ``name`` may be dotted)."""
        name, args, kwargs = payload
        try:
            return operator.attrgetter(name)(self.env)(*args, **kwargs)
        finally:
            self._plan_fast_paths()

    def metadata(self) -> EnvMetaData:
        """The :class:`EnvMetaData` of the live env (specs, example data, batch size)."""
        return EnvMetaData.metadata_from_env(self.env)

    def close(self) -> None:
        """Close the env."""
        self.env.close()
