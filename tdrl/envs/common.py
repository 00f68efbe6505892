"""EnvBase: spec plumbing and the step / reset protocol of every tdrl environment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from tdrl.data import Categorical, Composite
from tdrl.envs import _partial
from tdrl.envs._checks import check_inputs, check_outputs
from tdrl.envs._done import (
    check_done_after_reset,
    complete_done_data,
    fill_missing_done,
)
from tdrl.envs._env_rollouts import EnvRollouts
from tdrl.envs._env_specs import INPUT_ENTRIES, OUTPUT_ENTRIES, EnvSpecs
from tdrl.envs._keys import DoneCompletion, EnvKeys, as_tuple, from_tuple
from tdrl.envs._set_state import reset_kwargs
from tdrl.envs._step_mdp import attach_next
from tdrl.envs._td_fast import any_true, fast_get, fast_set

__all__ = ["BatchSizeError", "EnvBase", "seed_generator"]

BATCH_LOCKED_READ_ONLY = (
    "batch_locked is a read-only property: it tells whether the env's _reset / _step accept "
    "other batch sizes; a subclass declares `_batch_locked = False` as a class attribute"
)
BATCH_MISMATCH = (
    "{method}: Expected a tensordict with shape==env.batch_size, got batch size {got} "
    "where env.batch_size={expected}"
)
UNLOCKED_BATCH_MISMATCH = (
    "{method}: Expected a tensordict with shape==env.batch_size={expected} or a batch size "
    "ending with it (the env is batch-unlocked: leading dims are free), got batch size {got}"
)


SELECT_RESET_ONLY_WITH_STATE = (
    "reset(select_reset_only=True, set_state=True): select_reset_only hands _reset only "
    "the '_reset' entries of the input, so there is no state to restore; drop one of them"
)


class BatchSizeError(ValueError, RuntimeError):
    """A tensordict whose batch size does not fit a batch-locked env.

    A ``ValueError`` (a bad input); also a ``RuntimeError``, so that code written to
    catch the ``RuntimeError`` other implementations of this env API raise here still
    catches it.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import SerialEnv, PendulumEnv
        >>> env = SerialEnv(2, PendulumEnv)
        >>> try:
        ...     env.reset(TensorDict(batch_size=[3]))
        ... except RuntimeError as err:
        ...     print(type(err).__name__, isinstance(err, ValueError))
        BatchSizeError True
        >>> env.close()
    """


def seed_generator(seed: int) -> int:
    """Return a new seed deterministically derived from ``seed`` (in ``[0, 2**32 - 1)``).

    Examples:
        >>> seed_generator(0) == seed_generator(0)
        True
    """
    return int(np.random.default_rng(seed).integers(0, 2**32 - 1))


def _parse_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _default_done_spec(batch_size: torch.Size, device: Any) -> Composite:
    leaf = Categorical(2, shape=(*batch_size, 1), dtype=torch.bool, device=device)
    return Composite(done=leaf, terminated=leaf.clone(), shape=batch_size, device=device)


def _declared_specs(cls: type) -> tuple[Composite, Composite] | None:
    """The class-level ``(_output_spec, _input_spec)`` of an env class, if it declares them."""
    output_spec = getattr(cls, "_output_spec", None)
    input_spec = getattr(cls, "_input_spec", None)
    if output_spec is None and input_spec is None:
        return None
    batch_size = (output_spec if output_spec is not None else input_spec).shape
    if output_spec is None:
        output_spec = Composite(shape=batch_size)
    if input_spec is None:
        input_spec = Composite(shape=batch_size)
    for name, spec in (("_output_spec", output_spec), ("_input_spec", input_spec)):
        if not isinstance(spec, Composite):
            raise TypeError(
                f"{cls.__name__}.{name}: a class-level spec must be a Composite, "
                f"got {type(spec).__name__}"
            )
    return output_spec, input_spec


class EnvBase(EnvSpecs, EnvKeys, EnvRollouts, nn.Module):
    """Base class of all tdrl environments: specs, reset / step protocol, rollouts.

    A subclass assigns its specs in ``__init__`` and implements ``_reset``,
    ``_step`` (returning the *next* data, not nested under ``"next"``) and
    ``_set_seed``. Everything else (done completion, partial resets and steps,
    rollouts, random actions) is provided here. A subclass may instead declare its
    specs as class attributes ``_output_spec`` and ``_input_spec`` (Composites with the
    ``full_*_spec`` entries): ``__init__`` then starts from copies of them and takes the
    batch size from their shape when it is given none.
    Specs assigned before calling ``super().__init__()`` are kept and applied, in the
    order they were assigned, at the end of ``__init__`` (once the batch size and
    device are known).

    Args:
        device: the device of the data the env reads and writes.
        batch_size: the batch size of the env (leading dims of every spec).
        run_type_checks: check actions and outputs against the specs at each step.
        allow_done_after_reset: do not raise when a reset element is still done.
        spec_locked: lock the specs once the env is first used (stepped, reset, its
            keys or ``input_spec`` / ``output_spec`` read); from then on in-place edits
            raise and assignments through the spec setters are allowed.
        auto_reset: the env's ``_step`` resets done elements by itself; resets in
            rollouts then reuse the observations ``_step`` returned.
        auto_reset_replace: with ``auto_reset``, replace the observations of the
            last step of an episode with NaN (floats), -1 (ints) or False.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import Bounded, Composite, Unbounded
        >>> class CountingEnv(EnvBase):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.observation_spec = Composite(observation=Unbounded((1,)))
        ...         self.action_spec = Bounded(-1, 1, (1,))
        ...         self.reward_spec = Unbounded((1,))
        ...     def _reset(self, tensordict=None):
        ...         self.count = torch.zeros(1)
        ...         return TensorDict(observation=self.count, done=torch.zeros(1, dtype=torch.bool))
        ...     def _step(self, tensordict):
        ...         self.count = self.count + 1
        ...         return TensorDict(observation=self.count, reward=torch.ones(1),
        ...                           done=self.count >= 3)
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = CountingEnv()
        >>> env.done_keys
        ['done', 'terminated']
        >>> rollout = env.rollout(10)
        >>> rollout.batch_size, rollout.names
        (torch.Size([3]), ['time'])
        >>> rollout["next", "terminated"].squeeze(-1)
        tensor([False, False,  True])
    """

    _batch_locked: bool = True

    def __new__(cls, *args: Any, _batch_locked: bool | None = None, **kwargs: Any) -> EnvBase:
        """Create the (uninitialised) env; the constructor arguments are for ``__init__``.

        Python passes the constructor arguments to ``__new__`` as well as to ``__init__``.
        They are accepted (and ignored) here so that a subclass may define its own
        ``__new__``, for instance to build class-level ``_output_spec`` / ``_input_spec``
        from its arguments (see ``__init__``), and forward everything to this one.

        Args:
            *args: the constructor's positional arguments (ignored).
            _batch_locked: a subclass's ``__new__`` may pass False to make a
                batch-unlocked env without adding that switch to its ``__init__``.
            **kwargs: the constructor's keyword arguments (ignored).
        """
        env = super().__new__(cls)
        if _batch_locked is not None:
            env.__dict__["_batch_locked"] = bool(_batch_locked)
        return env

    def __init__(
        self,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        auto_reset: bool = False,
        auto_reset_replace: bool = True,
    ) -> None:
        super().__init__()
        device = _parse_device(device)
        declared = _declared_specs(type(self))
        if batch_size is None:
            batch_size = declared[0].shape if declared is not None else ()
        elif isinstance(batch_size, int):
            batch_size = (batch_size,)
        batch_size = torch.Size(batch_size)
        self.__dict__["_device"] = device
        self.__dict__["_batch_size"] = batch_size
        self.__dict__["_spec_locked"] = spec_locked
        self.__dict__["_default_done"] = True
        class_locked = getattr(type(self), "batch_locked", None)
        if isinstance(class_locked, bool) and "_batch_locked" not in self.__dict__:
            # a subclass may declare ``batch_locked = False`` as a class attribute
            self.__dict__["_batch_locked"] = class_locked
        self.run_type_checks = run_type_checks
        self.allow_done_after_reset = allow_done_after_reset
        self.is_closed = False
        self.__dict__["_input_spec"] = Composite(
            full_action_spec=Composite(shape=batch_size, device=device),
            full_state_spec=Composite(shape=batch_size, device=device),
            shape=batch_size,
            device=device,
        )
        self.__dict__["_output_spec"] = Composite(
            full_observation_spec=Composite(shape=batch_size, device=device),
            full_reward_spec=Composite(shape=batch_size, device=device),
            full_done_spec=_default_done_spec(batch_size, device),
            shape=batch_size,
            device=device,
        )
        handler = None
        if auto_reset:
            from tdrl.envs.auto_reset import AutoResetHandler

            handler = AutoResetHandler(replace=auto_reset_replace)
        self.__dict__["_auto_reset_handler"] = handler
        self.__dict__["_done_completions"] = [DoneCompletion("done", "terminated")]
        if declared is not None:
            self.output_spec = declared[0].clone()
            self.input_spec = declared[1].clone()
        self._apply_early_specs()

    # ------------------------------------------------------------------ basics
    @property
    def device(self) -> torch.device | None:
        """The device of the data this env reads and writes (None: unspecified)."""
        return self._device

    @property
    def batch_size(self) -> torch.Size:
        """The batch size of the env: the leading dims of all its specs and data."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        value = torch.Size(value)
        self.__dict__["_batch_size"] = value
        specs = {}
        for parent, names in (
            (self._input_spec, INPUT_ENTRIES),
            (self._output_spec, OUTPUT_ENTRIES),
        ):
            for name in names:
                spec = parent[name]
                if name == "full_done_spec" and self._default_done:
                    spec = _default_done_spec(value, self._device)
                    self.__dict__["_done_completions"] = [DoneCompletion("done", "terminated")]
                elif spec.is_empty():
                    spec = Composite(shape=value, device=self._device)
                else:
                    self._check_spec_batch(name, spec)
                specs[name] = spec
        self.__dict__["_input_spec"] = Composite(
            {k: specs[k] for k in INPUT_ENTRIES}, shape=value, device=self._device
        )
        self.__dict__["_output_spec"] = Composite(
            {k: specs[k] for k in OUTPUT_ENTRIES}, shape=value, device=self._device
        )
        self._invalidate()

    @property
    def shape(self) -> torch.Size:
        """Alias of :attr:`batch_size`."""
        return self._batch_size

    @property
    def batch_locked(self) -> bool:
        """Whether inputs must have exactly the env batch size (False: any leading batch).

        Read-only: it says what the env's ``_reset`` / ``_step`` can handle. A subclass
        declares ``_batch_locked = False`` as a class attribute (or its ``__new__``
        passes ``_batch_locked=False``).
        """
        return self._batch_locked

    @batch_locked.setter
    def batch_locked(self, value: bool) -> None:
        raise RuntimeError(BATCH_LOCKED_READ_ONLY)

    @property
    def supports_set_state(self) -> bool:
        """Whether ``reset(tensordict, set_state=True)`` restores the state held by the input.

        A subclass whose ``_reset`` reads ``set_state`` from its keyword arguments declares
        ``_supports_set_state = True`` on its class; ``reset(..., set_state=True)`` on
        other envs raises a ``NotImplementedError``.
        """
        return bool(getattr(self, "_supports_set_state", False))

    @property
    def auto_reset(self) -> bool:
        """Whether the env resets done elements inside ``_step`` (see ``auto_reset``)."""
        return self._auto_reset_handler is not None

    @property
    def spec_locked(self) -> bool:
        """Whether the specs are locked against in-place edits."""
        return self._spec_locked

    @spec_locked.setter
    def spec_locked(self, value: bool) -> None:
        self.set_spec_lock_(value)

    @property
    def is_spec_locked(self) -> bool:
        """Alias of :attr:`spec_locked`."""
        return self._spec_locked

    def set_spec_lock_(self, mode: bool = True) -> EnvBase:
        """Lock (or unlock) the specs; locking again refreshes the cached keys."""
        self.__dict__["_spec_locked"] = bool(mode)
        self._refresh()
        return self

    # ---------------------------------------------------------------- protocol
    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _reset")

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _step")

    def _set_seed(self, seed: int | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _set_seed")

    def _check_batch(self, method: str, tensordict: TensorDictBase) -> None:
        batch_size, expected = tensordict.batch_size, self._batch_size
        if batch_size == expected:
            return
        if self._batch_locked:
            message = BATCH_MISMATCH
        elif expected and batch_size[len(batch_size) - len(expected) :] != expected:
            message = UNLOCKED_BATCH_MISMATCH
        else:
            return
        raise BatchSizeError(
            message.format(method=method, expected=tuple(expected), got=tuple(batch_size))
        )

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        """Reset the env (or part of it, through ``"_reset"`` entries) and return the first data.

        With a ``tensordict`` carrying ``"_reset"`` masks, only the masked
        elements are reset; the others keep the input's values. A ``"_reset"`` at
        a shallower level overrides nested ones; a level without ``"_reset"`` is
        fully reset. The input is updated in place and returned, without the
        ``"_reset"`` entries.

        Keyword arguments go to ``_reset``, except ``select_reset_only=True``, which
        hands ``_reset`` only the input's ``"_reset"`` entries (it then sees no state,
        so ``set_state=True`` with it is refused), and ``set_state`` (see
        :attr:`supports_set_state`).
        """
        cache = self._cache
        masks = None
        if tensordict is not None:
            self._check_batch("reset", tensordict)
            masks = _partial.collect_reset_masks(tensordict, cache.reset_keys)
            if len(masks) == len(cache.reset_keys) and not any(any_true(m) for m in masks.values()):
                # every level has a "_reset" and none is set: nothing to reset
                _partial.remove_reset_keys(tensordict, cache.reset_keys)
                return tensordict
        reset_input = tensordict
        if kwargs:
            if kwargs.pop("select_reset_only", False):
                if kwargs.get("set_state"):
                    raise ValueError(SELECT_RESET_ONLY_WITH_STATE)
                if tensordict is not None:
                    reset_input = tensordict.select(*cache.reset_keys, strict=False)
            kwargs = reset_kwargs(self, kwargs)
        handler = self._auto_reset_handler
        if handler is not None and masks and handler.has_stash():
            tensordict_reset = handler.on_reset(
                self.full_done_spec.zero(self._rand_shape(tensordict))
            )
        else:
            tensordict_reset = self._reset(reset_input, **kwargs)
            if not isinstance(tensordict_reset, TensorDictBase):
                raise TypeError(
                    f"{type(self).__name__}._reset must return a TensorDictBase, "
                    f"got {type(tensordict_reset).__name__}"
                )
        tensordict_reset = self._post_process(tensordict_reset)
        fill_missing_done(
            tensordict_reset, self._cache.done_keys, self.full_done_spec, len(self._batch_size)
        )
        if not self.allow_done_after_reset:
            check_done_after_reset(tensordict_reset, self._cache.done_flag_keys, masks)
        if tensordict is None:
            _partial.remove_reset_keys(tensordict_reset, cache.reset_keys)
            return tensordict_reset
        return _partial.update_during_reset(tensordict_reset, tensordict, cache.reset_keys, masks)

    def _post_process(self, data: TensorDictBase) -> TensorDictBase:
        device = self._device
        if device is not None and data.device is not None and data.device != device:
            data = data.to(device)
        completions = self._cache.done_completions
        if completions and complete_done_data(data, completions):
            self._fill_done(data)
        return data

    def _fill_done(self, data: TensorDictBase) -> None:
        """Write False for the done entries of the levels ``data`` says nothing about."""
        fill_missing_done(data, self._cache.done_keys, self.full_done_spec, len(self._batch_size))

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Run one step: write the ``_step`` output under ``"next"`` and return ``tensordict``.

        A ``"_step"`` boolean mask in the input runs a partial step on unbatched
        and batch-unlocked envs; masked-out elements keep the input's values (or
        zeros). Batch-locked batched envs receive the mask in ``_step``.

        Entries already present under ``"next"`` in the input (written by a policy)
        are kept unless the env produces an entry with the same key.
        """
        if tensordict.batch_size != self._batch_size:
            self._check_batch("step", tensordict)
        if fast_get(tensordict, "_step") is not None:
            return self._partial_step(tensordict, tensordict.get("_step"))
        preset = fast_get(tensordict, "next")
        return attach_next(tensordict, self._checked_step(tensordict), preset)

    def _checked_step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The input check, ``_step`` and :meth:`_finish_step`: the next data of a full step.

        Every caller that steps an env without the ``"next"`` bookkeeping of :meth:`step`
        (a transformed env stepping its base, a batched-env worker) runs this, so that
        ``run_type_checks``, done completion and auto-reset behave the same everywhere.
        """
        if self.run_type_checks:
            self._check_inputs(tensordict)
        return self._finish_step(tensordict, self._step(tensordict))

    def _finish_step(
        self, tensordict: TensorDictBase, next_tensordict: TensorDictBase
    ) -> TensorDictBase:
        """The post-step of every step path: type, device, done completion, checks, auto-reset.

        ``next_tensordict`` is what ``_step`` returned; the result is what goes under
        ``"next"``.
        """
        if type(next_tensordict) is not TensorDict and not isinstance(
            next_tensordict, TensorDictBase
        ):
            raise TypeError(
                f"{type(self).__name__}._step must return a TensorDictBase, "
                f"got {type(next_tensordict).__name__}"
            )
        device = self._device
        if (
            device is not None
            and next_tensordict.device is not None
            and next_tensordict.device != device
        ):
            next_tensordict = next_tensordict.to(device)
        cache = self._cache
        for key, shape in cache.scalar_done_shapes:
            value = fast_get(next_tensordict, key)
            if type(value) is torch.Tensor and not value.shape:
                # a python bool given for a one-element done entry: the spec's shape
                fast_set(next_tensordict, key, value.reshape(shape))
        completions = cache.done_completions
        if completions and complete_done_data(next_tensordict, completions):
            self._fill_done(next_tensordict)
        if self.run_type_checks:
            self._check_outputs(next_tensordict)
        handler = self._auto_reset_handler
        if handler is not None:
            next_tensordict = handler.on_step(
                next_tensordict, self._cache.observation_keys, self._cache.done_flag_keys
            )
        return next_tensordict

    def _partial_step(self, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        preset = fast_get(tensordict, "next")
        if self.run_type_checks:
            self._check_inputs(tensordict)
        next_tensordict = _partial.partial_step(self, tensordict, mask)
        return attach_next(tensordict, self._finish_step(tensordict, next_tensordict), preset)

    def _check_inputs(self, tensordict: TensorDictBase) -> None:
        check_inputs(self, tensordict)

    def _check_outputs(self, next_tensordict: TensorDictBase) -> None:
        check_outputs(self, next_tensordict)

    def add_truncated_keys(self) -> EnvBase:
        """Add a ``"truncated"`` entry to each done level that lacks one; return the env.

        The entry has the spec of the level's done flag. Steps that do not write it
        get False, so ``rollout(set_truncated=True)`` can mark the last step.
        """
        spec = self.full_done_spec.clone()
        completions = []
        for level in self._cache.done_completions:
            if level.truncated is None:
                prefix = as_tuple(level.done)[:-1]
                truncated = from_tuple((*prefix, "truncated"))
                spec[truncated] = spec[level.done].clone()
                level = DoneCompletion(level.done, level.terminated, truncated, True)
            completions.append(level)
        self._set_entry("_output_spec", "full_done_spec", spec)
        self.__dict__["_done_completions"] = completions
        self.__dict__["_default_done"] = False
        return self

    # ----------------------------------------------------------------- helpers
    def _rand_shape(self, tensordict: TensorDictBase | None) -> torch.Size:
        if tensordict is not None and not self._batch_locked:
            return tensordict.batch_size[: tensordict.batch_dims - len(self._batch_size)]
        return torch.Size([])

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled tensordict with the layout of one step (root + ``"next"``)."""
        state = self.full_state_spec.zero()
        observation = self.full_observation_spec.zero()
        done = self.full_done_spec.zero()
        action = self.full_action_spec.zero()
        next_td = observation.clone()
        next_td.update(self.full_reward_spec.zero())
        next_td.update(done.clone())
        root = state
        root.update(action)
        root.update(observation)
        root.update(done)
        root.set("next", next_td)
        return root

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed the env and return the next seed to use (deterministic in ``seed``).

        Args:
            seed: the seed; None leaves the env unseeded.
            static_seed: return ``seed`` itself instead of a derived one.
        """
        self._set_seed(seed)
        if seed is None or static_seed:
            return seed
        return seed_generator(seed)

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Release the env's resources."""
        self.is_closed = True

    def to(self, *args: Any, **kwargs: Any) -> EnvBase:
        """Move the env (specs and any parameters) to a device."""
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:
            device = _parse_device(device)
            self.__dict__["_device"] = device
            self.__dict__["_input_spec"] = self._input_spec.to(device)
            self.__dict__["_output_spec"] = self._output_spec.to(device)
            self._invalidate()
        super().to(*args, **kwargs)
        return self

    @classmethod
    def register_gym(
        cls,
        id: str,  # noqa: A002 - the name gym uses
        *,
        entry_point: Callable[..., EnvBase] | None = None,
        transform: Any = None,
        info_keys: Any = None,
        backend: str | None = None,
        to_numpy: bool = False,
        **kwargs: Any,
    ) -> None:
        """Register this env class (or ``entry_point``) in the registry of the gym library.

        ``gym.make(id, **kw)`` then builds the env with the registered ``kwargs`` updated
        by ``kw`` and returns it behind the gym API: spaces built from the specs, and
        ``reset`` / ``step`` returning dicts of numpy arrays (``to_numpy``) or tensors.
        Keyword arguments of ``make`` may also set ``transform``, ``info_keys`` and
        ``to_numpy``.

        Args:
            id: the gym id, e.g. ``"MyEnv-v0"``.
            entry_point: the callable building the env (default: this class).
            transform: a transform applied to every env built (a copy each time).
            info_keys: observation entries returned in the ``info`` dict instead.
            backend: the gym library to register in (default: the one in use).
            to_numpy: return numpy arrays instead of tensors.
            **kwargs: keyword arguments of the env constructor, and those of the gym
                registry (``max_episode_steps``, ``reward_threshold``...).
        """
        from tdrl.envs.libs._gym_export import register_gym

        register_gym(
            cls,
            id,
            entry_point=entry_point,
            transform=transform,
            info_keys=info_keys,
            backend=backend,
            to_numpy=to_numpy,
            **kwargs,
        )

    def auto_specs_(
        self,
        policy: Callable[[TensorDictBase], TensorDictBase],
        *,
        tensordict: TensorDictBase | None = None,
        action_key: Any = "action",
        done_key: Any = None,
        observation_key: Any = "observation",
        reward_key: Any = "reward",
    ) -> None:
        """Infer the observation, action, reward and done specs from one reset and one step.

        The env's ``_reset`` and ``_step`` run once (``policy`` writes the actions), and
        each spec is described from the entries found under its keys. For envs whose
        specs are unknown in advance; check the result with :meth:`check_env_specs`.

        Args:
            policy: writes the action entries into the tensordict it gets and returns it.
            tensordict: the input of the reset (e.g. its state entries).
            action_key: the action key(s) the policy writes.
            done_key: the done key(s) (default: those of ``"done"``, ``"terminated"``,
                ``"truncated"`` the step returns; a ``done`` / ``terminated`` pair if none).
            observation_key: the observation key(s).
            reward_key: the reward key(s).
        """
        from tdrl.envs._auto_specs import auto_specs_

        auto_specs_(
            self,
            policy,
            tensordict=tensordict,
            action_key=action_key,
            done_key=done_key,
            observation_key=observation_key,
            reward_key=reward_key,
        )

    def append_transform(self, transform: Any) -> Any:
        """Return ``TransformedEnv(self, transform)``."""
        from tdrl.envs.transforms import TransformedEnv

        return TransformedEnv(self, transform)

    def check_env_specs(self, *args: Any, **kwargs: Any) -> None:
        """Run :func:`tdrl.envs.utils.check_env_specs` on this env."""
        from tdrl.envs.utils import check_env_specs

        check_env_specs(self, *args, **kwargs)

    def empty_cache(self) -> None:
        """Recompute the cached keys (after in-place edits of unlocked specs)."""
        self._refresh()

    def __repr__(self) -> str:
        def describe(spec: Composite, keys: list) -> str:
            parts = [f"{key!r}: {type(spec[key]).__name__}{tuple(spec[key].shape)}" for key in keys]
            return "{" + ", ".join(parts) + "}"

        lines = [
            f"batch_size={self._batch_size}",
            f"device={self._device}",
            f"batch_locked={self._batch_locked}",
            f"observation_spec={describe(self.full_observation_spec, self.observation_keys)}",
            f"action_spec={describe(self.full_action_spec, self.action_keys)}",
            f"reward_spec={describe(self.full_reward_spec, self.reward_keys)}",
            f"done_spec={describe(self.full_done_spec, self.done_keys)}",
        ]
        if self.state_keys:
            lines.append(f"state_spec={describe(self.full_state_spec, self.state_keys)}")
        body = ",\n    ".join(lines)
        return f"{type(self).__name__}(\n    {body})"
