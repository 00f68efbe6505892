"""Transforms that act at reset time or change how steps and resets happen."""

from __future__ import annotations

import operator
import random as _random
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import Composite, Unbounded
from tdrl.envs._partial import align_mask
from tdrl.envs.auto_reset import AutoResetHandler
from tdrl.envs.transforms.transform import FORWARD_NOT_IMPLEMENTED, NestedKey, Transform

__all__ = [
    "AutoResetTransform",
    "ConditionalSkip",
    "EndOfLifeTransform",
    "FrameSkipTransform",
    "NoopResetEnv",
    "TensorDictPrimer",
]


PARENT_ERROR = (
    "{owner} needs to be part of a TransformedEnv (through any Compose); it has no parent env"
)


def _require_parent(transform: Transform, message: str = PARENT_ERROR) -> Any:
    parent = transform.parent
    if parent is None:
        raise RuntimeError(message.format(owner=type(transform).__name__))
    return parent


class TensorDictPrimer(Transform):
    """Adds entries (e.g. recurrent states) to the data at reset, and carries them across steps.

    Each primer is a spec; at reset its entry gets a default value (zeros, a given
    value, or a random sample with ``random=True``), expanded to the env batch size.
    Primers are added to the observation and state specs, so they travel with the
    data like any state. On a step, a primer that the step did not write is copied
    from the input.

    Args:
        primers: a dict or Composite of specs (specs may also be given as keyword
            arguments).
        random: draw reset values from the specs instead of using defaults
            (``default_value`` is then not used).
        default_value: the reset value: a number, a callable returning a tensor, or
            a dict mapping keys to either.
        reset_key: the ``"_reset"`` entry to read for partial resets (default: the
            root one).
        expand_specs: how primers whose batch shape (the shape of the ``primers``
            Composite) differs from the env batch size are handled: True expands them
            to it, False uses the leaf specs as they are (they must then start with the
            env batch size), None (default) refuses the mismatch with a RuntimeError.
        single_default_value: with a callable ``default_value``, call it once and use
            the result for every primer.
        call_before_env_reset: write the primers before the base env's reset (the env
            can then read them) rather than after.
        **kwargs: primers given by name.

    Examples:
        >>> from tdrl.data import Unbounded
        >>> from tdrl.envs import PendulumEnv, TensorDictPrimer, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(PendulumEnv(), TensorDictPrimer(hidden=Unbounded((4,))))
        >>> check_env_specs(env)
        >>> env.reset()["hidden"]
        tensor([0., 0., 0., 0.])
    """

    def __init__(
        self,
        primers: dict | Composite | None = None,
        random: bool | None = None,
        default_value: float | Callable[[], torch.Tensor] | dict | None = None,
        reset_key: NestedKey | None = None,
        expand_specs: bool | None = None,
        single_default_value: bool = False,
        call_before_env_reset: bool = False,
        **kwargs: Any,
    ) -> None:
        if primers is not None and kwargs:
            raise ValueError(
                "TensorDictPrimer: give primers either as a dict / Composite or as keyword "
                f"arguments, got both (keyword arguments {sorted(kwargs)})"
            )
        primers = dict(kwargs) if primers is None else primers
        if not isinstance(primers, Composite):
            primers = Composite(primers)
        super().__init__(out_keys=list(primers.keys(True, True)))
        self.primers = primers
        self.random = bool(random)
        self.default_value = default_value
        self.reset_key = "_reset" if reset_key is None else reset_key
        self.expand_specs = expand_specs
        self.single_default_value = single_default_value
        self.call_before_env_reset = call_before_env_reset
        self._batch_size = torch.Size([])
        self._device: Any = None

    def _default_for(self, key: NestedKey) -> Any:
        default = self.default_value
        if isinstance(default, dict):
            return default.get(key, 0.0)
        return 0.0 if default is None else default

    def _values(self, batch_size: torch.Size) -> dict:
        """Fresh reset values of every primer, with ``batch_size`` leading dims."""
        out = {}
        single = None
        for key in self.out_keys:
            spec = self.primers[key]
            extra = batch_size[: len(batch_size) - len(self._batch_size)]
            if self.random:
                value = spec.rand(extra)
            else:
                default = self._default_for(key)
                if callable(default):
                    if self.single_default_value:
                        single = default() if single is None else single
                        value = single
                    else:
                        value = default()
                    value = (
                        torch.as_tensor(value, device=spec.device)
                        .expand((*extra, *spec.shape))
                        .clone()
                    )
                else:
                    value = spec.zero(extra)
                    if default != 0:
                        value.fill_(default)
            out[key] = value
        return out

    def _fill(self, target: TensorDictBase, source: TensorDictBase | None) -> TensorDictBase:
        values = self._values(target.batch_size)
        reset = None if source is None else source.get(self.reset_key, None)
        for key, value in values.items():
            if target.get(key, None) is not None and not self.call_before_env_reset:
                continue
            previous = None if source is None else source.get(key, None)
            if reset is not None and previous is not None and previous.shape == value.shape:
                mask = align_mask(reset, value.shape, "_reset", self.reset_key, key)
                value = torch.where(mask, value, previous)
            target.set(key, value)
        return target

    def _reset_env_preprocess(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        if not self.call_before_env_reset:
            return tensordict
        if tensordict is None:
            container = self.container
            tensordict = TensorDict(
                {},
                batch_size=self._batch_size,
                device=None if container is None else container.device,
            )
        return self._fill(tensordict, tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self.call_before_env_reset:
            for key in self.out_keys:
                if tensordict_reset.get(key, None) is None:
                    value = tensordict.get(key, None)
                    if value is not None:
                        tensordict_reset.set(key, value)
            return tensordict_reset
        return self._fill(tensordict_reset, tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.out_keys:
            if next_tensordict.get(key, None) is None:
                value = tensordict.get(key, None)
                if value is None:
                    raise KeyError(
                        f"TensorDictPrimer: expected the primer {key!r} in the step input "
                        "(it is written at reset); was the env reset?"
                    )
                next_tensordict.set(key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Add the missing primers (default values) to data that does not come from an env."""
        values = self._values(tensordict.batch_size)
        for key, value in values.items():
            if tensordict.get(key, None) is None:
                tensordict.set(key, value)
        return tensordict

    def _expanded(self, batch_size: torch.Size, device: Any) -> Composite:
        primers = self.primers
        own = tuple(primers.shape)
        batch = tuple(batch_size)
        if own != batch and self.expand_specs is None:
            raise RuntimeError(
                f"TensorDictPrimer: the primers have batch shape {own}, which differs from the "
                f"env batch size {batch}; pass expand_specs=True to expand them to the env batch "
                "size, or expand_specs=False to use the primer specs as they are"
            )
        out = Composite(shape=batch_size, device=device)
        for key in self.out_keys:
            spec = primers[key]
            if own != batch and self.expand_specs:
                spec = spec.expand(*batch_size, *spec.shape[len(own) :])
            elif tuple(spec.shape[: len(batch)]) != batch:
                raise ValueError(
                    f"TensorDictPrimer: the spec of {key!r} has shape {tuple(spec.shape)}, which "
                    f"does not start with the env batch size {batch}; pass expand_specs=True "
                    "to expand it"
                )
            if device is not None and spec.device != device:
                spec = spec.to(device)
            out[key] = spec
        return out

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the primers to the observation spec."""
        output_spec = super().transform_output_spec(output_spec)
        self._batch_size = output_spec.shape
        self._device = output_spec.device
        expanded = self._expanded(output_spec.shape, output_spec.device)
        self.primers = expanded
        observation_spec = output_spec["full_observation_spec"]
        for key in self.out_keys:
            observation_spec[key] = expanded[key].clone()
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Add the primers to the state spec."""
        input_spec = super().transform_input_spec(input_spec)
        expanded = self._expanded(input_spec.shape, input_spec.device)
        state_spec = input_spec["full_state_spec"]
        for key in self.out_keys:
            state_spec[key] = expanded[key].clone()
        return input_spec

    def __repr__(self) -> str:
        return f"TensorDictPrimer(primers={list(self.out_keys)}, random={self.random})"


class NoopResetEnv(Transform):
    """Takes a number of random steps after each reset (Atari-style no-op starts).

    The env must be a single (unbatched) one: in a batched env every element would
    take the same number of steps. Put the transform in each sub-env instead
    (``ParallelEnv(n, lambda: TransformedEnv(make_env(), NoopResetEnv()))``).

    Args:
        noops: the (maximum) number of random steps (0: none).
        random: draw the number of steps uniformly in ``[1, noops]``.

    Raises:
        ValueError: at reset, when the parent env has a batch size.
        RuntimeError: at reset, when the env is done within the random steps ten times
            in a row.

    Examples:
        >>> from tdrl.envs import NoopResetEnv, PendulumEnv, StepCounter, TransformedEnv
        >>> from tdrl.envs.transforms import Compose
        >>> env = TransformedEnv(PendulumEnv(), Compose(StepCounter(), NoopResetEnv(3, random=False)))
        >>> env.reset()["step_count"]
        tensor([3])
    """

    PARENT_ERROR = (
        "NoopResetEnv.parent not found. Make sure that the parent is set: the transform takes "
        "random steps in its env at reset, so it must be part of a TransformedEnv"
    )

    def __init__(self, noops: int = 30, random: bool = True) -> None:
        if isinstance(noops, bool) or not isinstance(noops, int):
            raise TypeError(f"NoopResetEnv noops: expected an int, got {type(noops).__name__}")
        if noops < 0:
            raise ValueError(f"NoopResetEnv noops: expected an int >= 0, got {noops}")
        super().__init__()
        self.noops = noops
        self.random = random

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        parent = _require_parent(self, self.PARENT_ERROR)
        if parent.batch_size:
            raise ValueError(
                "NoopResetEnv: The parent environment batch-size is non-null "
                f"({tuple(parent.batch_size)}); all its elements would take the same random "
                "steps. Add the transform to each sub-env of the batch instead"
            )
        if self.noops == 0:
            return tensordict_reset
        noops = _random.randint(1, self.noops) if self.random else self.noops
        output_keys = list(tensordict_reset.keys(True, True))
        data = tensordict_reset
        for _ in range(10):
            for _ in range(noops):
                data = parent.rand_step(data)
                data = _next_root(data, parent)
                if any(
                    bool(data.get(key).any()) for key in parent.done_keys if key in data.keys(True)
                ):
                    break
            else:
                return data.select(*output_keys, strict=False)
            data = parent.reset()
        raise RuntimeError(
            f"NoopResetEnv: the env was done within {noops} random steps in 10 attempts in a "
            "row; lower noops"
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    def __repr__(self) -> str:
        return f"NoopResetEnv(noops={self.noops}, random={self.random})"


def _next_root(data: TensorDictBase, env: Any) -> TensorDictBase:
    """The ``"next"`` entry of ``data`` with the state entries carried over."""
    next_data = data.get("next")
    for key in env.state_keys:
        if next_data.get(key, None) is None and data.get(key, None) is not None:
            next_data.set(key, data.get(key))
    return next_data


class FrameSkipTransform(Transform):
    """Repeats each action ``frame_skip`` times, summing the rewards.

    The repetition stops early when the env is done.

    Args:
        frame_skip: how many env steps each action lasts (>= 1).

    Examples:
        >>> from tdrl.envs import FrameSkipTransform, PendulumEnv, StepCounter, TransformedEnv
        >>> from tdrl.envs.transforms import Compose
        >>> env = TransformedEnv(PendulumEnv(), Compose(FrameSkipTransform(3)))
        >>> td = env.rand_step(env.reset())
        >>> td["next", "reward"].shape
        torch.Size([1])
    """

    PARENT_ERROR = (
        "parent not found for FrameSkipTransform: it repeats the steps of its env, so it must "
        "be part of a TransformedEnv"
    )

    def __init__(self, frame_skip: int = 1) -> None:
        if isinstance(frame_skip, bool) or not isinstance(frame_skip, int):
            raise TypeError(
                f"FrameSkipTransform frame_skip: expected an int, got {type(frame_skip).__name__}"
            )
        if frame_skip < 1:
            raise ValueError(
                "FrameSkipTransform: frame_skip should have a value greater or equal to one, "
                f"got {frame_skip}"
            )
        super().__init__()
        self.frame_skip = frame_skip

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.frame_skip == 1:
            return next_tensordict
        parent = _require_parent(self, self.PARENT_ERROR)
        reward_keys = parent.reward_keys
        done_keys = parent.done_keys
        rewards = {key: next_tensordict.get(key) for key in reward_keys}
        state_keys = parent.state_keys
        for _ in range(self.frame_skip - 1):
            if any(
                bool(next_tensordict.get(key).any())
                for key in done_keys
                if key in next_tensordict.keys(True)
            ):
                break
            step_input = tensordict
            if state_keys:
                step_input = tensordict.clone(False)
                step_input.update(next_tensordict.select(*state_keys, strict=False))
            next_tensordict = parent._step(step_input)
            for key in reward_keys:
                rewards[key] = rewards[key] + next_tensordict.get(key)
        for key, value in rewards.items():
            next_tensordict.set(key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: the transform repeats env steps."""
        raise RuntimeError(
            "FrameSkipTransform can only be used when appended to a transformed env; it has no "
            "meaning on data from a buffer or a module"
        )

    def __repr__(self) -> str:
        return f"FrameSkipTransform(frame_skip={self.frame_skip})"


def _simulator(env: Any) -> Any:
    """The simulator object under a (possibly transformed) wrapper env."""
    while True:
        inner = env.__dict__.get("_base_env")
        if inner is None:
            break
        env = inner
    simulator = env.__dict__.get("_env")
    if simulator is None:
        raise AttributeError(
            f"EndOfLifeTransform: expected a gym wrapper env holding a simulator in `_env`, "
            f"got {type(env).__name__}"
        )
    return simulator


class EndOfLifeTransform(Transform):
    """Writes an end-of-life flag when a game with several lives loses one (e.g. Atari).

    The number of lives is read from the simulator under the env, through the
    ``eol_attribute`` path (a method or an attribute). ``eol_key`` is True on the step
    where a life was lost or the episode ended; value functions can treat it as a
    termination while the env itself goes on.

    Args:
        eol_key: the name of the end-of-life entry.
        lives_key: the name of the entry holding the number of lives.
        done_key: the done entry the flag is combined with.
        eol_attribute: the dotted path of the lives counter on the simulator.

    Examples:
        >>> import gymnasium as gym
        >>> from tdrl.envs import EndOfLifeTransform, TransformedEnv
        >>> from tdrl.envs.libs.gym import GymWrapper
        >>> class Lives(gym.Wrapper):
        ...     def lives(self):
        ...         return 3
        >>> base = GymWrapper(Lives(gym.make("CartPole-v1")))
        >>> env = TransformedEnv(base, EndOfLifeTransform(eol_attribute="lives"))
        >>> td = env.rand_step(env.reset())
        >>> td["next", "lives"].item(), td["next", "end-of-life"].shape
        (3, torch.Size([1]))
    """

    def __init__(
        self,
        eol_key: NestedKey = "end-of-life",
        lives_key: NestedKey = "lives",
        done_key: NestedKey = "done",
        eol_attribute: str = "unwrapped.ale.lives",
    ) -> None:
        super().__init__(out_keys=[eol_key, lives_key])
        self.eol_key = eol_key
        self.lives_key = lives_key
        self.done_key = done_key
        self.eol_attribute = eol_attribute
        self._getter = operator.attrgetter(eol_attribute)

    #: the message of the error raised without a parent env (formatted with the type)
    NO_PARENT_ERR = (
        "parent not found for {}: the lives are read from the simulator of the env, add "
        "the transform to a TransformedEnv"
    )

    def _lives(self, device: Any) -> torch.Tensor:
        parent = self.parent
        if parent is None:
            raise RuntimeError(self.NO_PARENT_ERR.format(type(self)))
        lives = self._getter(_simulator(parent))
        if callable(lives):
            lives = lives()
        return torch.as_tensor(lives, dtype=torch.int64, device=device)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        done = next_tensordict.get(self.done_key, None)
        if done is None:
            raise KeyError(
                f"EndOfLifeTransform: expected the done entry {self.done_key!r} in the step output, "
                f"got keys {list(next_tensordict.keys(True, True))}"
            )
        lives = self._lives(done.device)
        previous = tensordict.get(self.lives_key, None)
        lost = torch.zeros_like(done) if previous is None else (previous > lives).expand_as(done)
        next_tensordict.set(self.eol_key, lost | done)
        next_tensordict.set(self.lives_key, lives.expand(tensordict.batch_size))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        done = tensordict_reset.get(self.done_key)
        tensordict_reset.set(self.eol_key, torch.zeros_like(done))
        tensordict_reset.set(
            self.lives_key, self._lives(done.device).expand(tensordict_reset.batch_size)
        )
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: the flag is read from the env's simulator."""
        raise RuntimeError(FORWARD_NOT_IMPLEMENTED.format(type(self)))

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Add the end-of-life flag (shaped like ``done``) and the lives counter."""
        output_spec = super().transform_output_spec(output_spec)
        done = output_spec["full_done_spec"][self.done_key]
        observation_spec = output_spec["full_observation_spec"]
        observation_spec[self.eol_key] = done.clone()
        observation_spec[self.lives_key] = Unbounded(
            shape=output_spec.shape, dtype=torch.int64, device=done.device
        )
        return output_spec

    def __repr__(self) -> str:
        return f"EndOfLifeTransform(eol_key={self.eol_key!r}, lives_key={self.lives_key!r})"


class AutoResetTransform(Transform):
    """Handles envs that reset themselves inside their step (auto-resetting envs).

    On each step, the observations the env returned are kept aside; with ``replace``,
    those of done elements (which already belong to the next episode) are replaced
    by a fill value in the step output. The next reset triggered by a done flag
    hands the kept observations out instead of resetting the env. Put it first in
    the chain: it must see the env's own observations.

    Keyword Args:
        replace: replace the observations of done elements in the step output.
        fill_float: fill value for floating entries (``"nan"`` or a number).
        fill_int: fill value for integer entries.
        fill_bool: fill value for boolean entries.

    Examples:
        >>> import torch
        >>> from tdrl.envs import AutoResetTransform, PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), AutoResetTransform())
        >>> env.rollout(3)["next", "th"].shape
        torch.Size([3])
    """

    def __init__(
        self,
        *,
        replace: bool | None = None,
        fill_float: float | str = "nan",
        fill_int: int = -1,
        fill_bool: bool = False,
    ) -> None:
        super().__init__()
        self.replace = True if replace is None else replace
        self.fill_float = fill_float
        self.fill_int = fill_int
        self.fill_bool = fill_bool
        self._handler = AutoResetHandler(
            replace=self.replace, fill_float=fill_float, fill_int=fill_int, fill_bool=fill_bool
        )
        self._observation_keys: list = []
        self._done_flag_keys: list = ["done"]

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._handler.on_step(next_tensordict, self._observation_keys, self._done_flag_keys)

    def _reset_bypass(
        self, tensordict: TensorDictBase | None, done_template: Callable
    ) -> TensorDictBase | None:
        """The reset output built from the kept observations, when a done flag triggered it."""
        if tensordict is None or not self._handler.has_stash():
            return None
        parent = _require_parent(self)
        if not any(tensordict.get(key, None) is not None for key in parent.reset_keys):
            return None
        return self._handler.on_reset(done_template())

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    def transform_output_spec(self, output_spec: Any) -> Any:
        """Record the observation and done keys; the specs are unchanged."""
        output_spec = super().transform_output_spec(output_spec)
        self._observation_keys = list(output_spec["full_observation_spec"].keys(True, True))
        done_keys = [
            key
            for key in output_spec["full_done_spec"].keys(True, True)
            if (key if isinstance(key, str) else key[-1]) == "done"
        ]
        self._done_flag_keys = done_keys
        return output_spec

    def __repr__(self) -> str:
        return f"AutoResetTransform(replace={self.replace})"


class ConditionalSkip(Transform):
    """Skips the env step for the elements where ``cond(tensordict)`` is True.

    The transform writes a ``"_step"`` mask (``~cond``) in the step input: the base
    env only steps the elements that are not skipped, and skipped elements keep the
    input's observations with zero rewards. Transforms of the same TransformedEnv do
    not run on skipped elements either; wrap the env in another TransformedEnv for
    transforms that should.

    Args:
        cond: maps the step input to a boolean tensor (or bool) of the batch size;
            True means skip.

    Examples:
        >>> from tdrl.envs import ConditionalSkip, PendulumEnv, StepCounter, TransformedEnv
        >>> base = TransformedEnv(PendulumEnv(), StepCounter(step_count_key="inner"))
        >>> env = TransformedEnv(
        ...     TransformedEnv(base, ConditionalSkip(lambda td: td["outer"] % 2 == 1)),
        ...     StepCounter(step_count_key="outer"))
        >>> rollout = env.rollout(5)
        >>> rollout["next", "outer"].squeeze(-1), rollout["next", "inner"].squeeze(-1)
        (tensor([1, 2, 3, 4, 5]), tensor([1, 1, 2, 2, 3]))
    """

    def __init__(self, cond: Callable[[TensorDictBase], torch.Tensor | bool]) -> None:
        if not callable(cond):
            raise TypeError(f"ConditionalSkip cond: expected a callable, got {type(cond).__name__}")
        super().__init__()
        self.cond = cond

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        skip = self.cond(tensordict)
        skip = torch.as_tensor(skip, device=tensordict.device)
        if skip.dtype != torch.bool:
            raise TypeError(
                f"ConditionalSkip cond: expected a boolean result, got dtype {skip.dtype}"
            )
        previous = tensordict.get("_step", None)
        step = ~skip
        if previous is not None:
            step = step.reshape(previous.shape) & previous
        tensordict.set("_step", step.expand(tensordict.batch_size) if step.ndim == 0 else step)
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Not available outside an env: the transform decides which env steps run."""
        raise NotImplementedError(
            "ConditionalSkip cannot be called outside an env: it marks the elements whose env "
            "step is skipped (use it in a TransformedEnv)"
        )

    def __repr__(self) -> str:
        return f"ConditionalSkip(cond={self.cond!r})"
