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
from tdrl.envs import rollout as _rollout
from tdrl.envs._checks import check_inputs, check_outputs
from tdrl.envs._done import (
    check_done_after_reset,
    complete_done_data,
    complete_done_spec,
    fill_missing_done,
)
from tdrl.envs._env_keys import EnvKeys
from tdrl.envs._keys import (
    DoneCompletion,
    SpecCache,
    done_flag_key,
    group_done_keys,
    leaf_keys,
    reset_key_for,
)
from tdrl.envs._step_mdp import (
    excluded_set,
    fast_get,
    fast_set,
    keep_preset_entries,
    set_next,
)

__all__ = ["EnvBase", "seed_generator"]

BATCH_MISMATCH = (
    "{method} expected a tensordict with batch size {expected} (the env batch size), got {got}"
)
SPEC_BATCH_MISMATCH = (
    "{name} at key {key!r} has shape {got}, which does not start with the env batch size {expected}"
)

_OUTPUT_ENTRIES = ("full_observation_spec", "full_reward_spec", "full_done_spec")
_INPUT_ENTRIES = ("full_action_spec", "full_state_spec")


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


def _leaf_or_composite(full: Composite, keys: list) -> Any:
    if len(keys) == 1:
        return full[keys[0]]
    return full


class EnvBase(EnvKeys, nn.Module):
    """Base class of all tdrl environments: specs, reset / step protocol, rollouts.

    A subclass assigns its specs in ``__init__`` and implements ``_reset``,
    ``_step`` (returning the *next* data, not nested under ``"next"``) and
    ``_set_seed``. Everything else (done completion, partial resets and steps,
    rollouts, random actions) is provided here.

    Args:
        device: the device of the data the env reads and writes.
        batch_size: the batch size of the env (leading dims of every spec).
        run_type_checks: check actions and outputs against the specs at each step.
        allow_done_after_reset: do not raise when a reset element is still done.
        spec_locked: lock the specs; in-place edits raise, assignments are allowed.
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
        if batch_size is None:
            batch_size = ()
        elif isinstance(batch_size, int):
            batch_size = (batch_size,)
        batch_size = torch.Size(batch_size)
        self.__dict__["_device"] = device
        self.__dict__["_batch_size"] = batch_size
        self.__dict__["_spec_locked"] = spec_locked
        self.__dict__["_default_done"] = True
        class_locked = getattr(type(self), "batch_locked", None)
        if isinstance(class_locked, bool):
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
        self._refresh()

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
            (self._input_spec, _INPUT_ENTRIES),
            (self._output_spec, _OUTPUT_ENTRIES),
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
            {k: specs[k] for k in _INPUT_ENTRIES}, shape=value, device=self._device
        )
        self.__dict__["_output_spec"] = Composite(
            {k: specs[k] for k in _OUTPUT_ENTRIES}, shape=value, device=self._device
        )
        self._refresh()

    @property
    def shape(self) -> torch.Size:
        """Alias of :attr:`batch_size`."""
        return self._batch_size

    @property
    def batch_locked(self) -> bool:
        """Whether inputs must have exactly the env batch size (False: any leading batch)."""
        return self._batch_locked

    @batch_locked.setter
    def batch_locked(self, value: bool) -> None:
        self.__dict__["_batch_locked"] = bool(value)

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

    def set_spec_lock_(self, mode: bool = True) -> EnvBase:
        """Lock (or unlock) the specs; locking again refreshes the cached keys."""
        self.__dict__["_spec_locked"] = bool(mode)
        self._refresh()
        return self

    # ------------------------------------------------------------ spec plumbing
    def _check_spec_batch(self, name: str, spec: Any, key: Any = None) -> None:
        batch = tuple(self._batch_size)
        shape = tuple(spec.shape)
        if shape[: len(batch)] != batch:
            raise ValueError(
                SPEC_BATCH_MISMATCH.format(
                    name=name, key=key if key is not None else name, got=shape, expected=batch
                )
            )
        if isinstance(spec, Composite):
            for leaf_key in leaf_keys(spec):
                leaf_shape = tuple(spec[leaf_key].shape)
                if leaf_shape[: len(batch)] != batch:
                    raise ValueError(
                        SPEC_BATCH_MISMATCH.format(
                            name=name, key=leaf_key, got=leaf_shape, expected=batch
                        )
                    )

    def _prepare(self, name: str, spec: Any, default_key: str | None) -> Composite:
        if spec is None:
            spec = Composite(shape=self._batch_size, device=self._device)
        if not isinstance(spec, Composite):
            if default_key is None:
                raise TypeError(f"{name} must be a Composite spec, got {type(spec).__name__}")
            self._check_spec_batch(name, spec, default_key)
            spec = Composite({default_key: spec}, shape=self._batch_size, device=self._device)
        else:
            self._check_spec_batch(name, spec)
        if self._device is not None and spec.device != self._device:
            spec = spec.to(self._device)
        return spec

    def _set_entry(self, parent_name: str, name: str, spec: Composite) -> None:
        parent = self.__dict__[parent_name]
        parent.unlock_()
        parent[name] = spec
        self._refresh()

    def _refresh(self) -> None:
        """Recompute the cached keys and leaf specs; relock the specs if needed."""
        out, inp = self._output_spec, self._input_spec
        out.unlock_()
        inp.unlock_()
        completions = self.__dict__.get("_done_completions", [])
        cache = SpecCache()
        cache.action_keys = leaf_keys(inp["full_action_spec"])
        cache.state_keys = leaf_keys(inp["full_state_spec"])
        cache.observation_keys = leaf_keys(out["full_observation_spec"])
        cache.reward_keys = leaf_keys(out["full_reward_spec"])
        cache.done_keys = leaf_keys(out["full_done_spec"])
        groups = group_done_keys(cache.done_keys)
        cache.done_keys_groups = [keys for _, keys in groups]
        cache.reset_keys = [reset_key_for(prefix) for prefix, _ in groups]
        cache.done_flag_keys = [done_flag_key(prefix, keys) for prefix, keys in groups]
        cache.done_completions = completions
        # reward entries that are also state (e.g. running sums) travel to the next step
        state_keys = set(cache.state_keys)
        cache.mdp_excluded = excluded_set([k for k in cache.reward_keys if k not in state_keys])
        cache.action_leaf = _leaf_or_composite(inp["full_action_spec"], cache.action_keys)
        cache.reward_leaf = _leaf_or_composite(out["full_reward_spec"], cache.reward_keys)
        cache.done_leaf = _leaf_or_composite(out["full_done_spec"], cache.done_keys)
        self.__dict__["_cache"] = cache
        if self._spec_locked:
            out.lock_()
            inp.lock_()

    @property
    def input_spec(self) -> Composite:
        """Locked Composite with ``full_action_spec`` and ``full_state_spec``."""
        return self._input_spec

    @input_spec.setter
    def input_spec(self, value: Composite) -> None:
        for name in _INPUT_ENTRIES:
            spec = value.get(name, None)
            spec = self._prepare(name, spec, None)
            self._input_spec.unlock_()
            self._input_spec[name] = spec
        self._refresh()

    @property
    def output_spec(self) -> Composite:
        """Locked Composite with the full observation, reward and done specs."""
        return self._output_spec

    @output_spec.setter
    def output_spec(self, value: Composite) -> None:
        for name in _OUTPUT_ENTRIES:
            spec = value.get(name, None)
            if name == "full_done_spec" and spec is not None:
                spec = self._complete_done(spec)
            spec = self._prepare(name, spec, None)
            self._output_spec.unlock_()
            self._output_spec[name] = spec
        self.__dict__["_default_done"] = False
        self._refresh()

    @property
    def specs(self) -> Composite:
        """A Composite holding ``output_spec`` and ``input_spec``."""
        return Composite(
            output_spec=self._output_spec,
            input_spec=self._input_spec,
            shape=self._batch_size,
            device=self._device,
        )

    @property
    def full_observation_spec(self) -> Composite:
        """All observation entries."""
        return self._output_spec["full_observation_spec"]

    @full_observation_spec.setter
    def full_observation_spec(self, value: Composite) -> None:
        self._set_entry(
            "_output_spec",
            "full_observation_spec",
            self._prepare("observation_spec", value, "observation"),
        )

    observation_spec = full_observation_spec

    @property
    def full_state_spec(self) -> Composite:
        """All input entries that are not actions (empty for most stateful envs)."""
        return self._input_spec["full_state_spec"]

    @full_state_spec.setter
    def full_state_spec(self, value: Composite | None) -> None:
        self._set_entry("_input_spec", "full_state_spec", self._prepare("state_spec", value, None))

    state_spec = full_state_spec

    @property
    def full_action_spec(self) -> Composite:
        """All action entries, as a Composite."""
        return self._input_spec["full_action_spec"]

    @full_action_spec.setter
    def full_action_spec(self, value: Composite) -> None:
        self._set_entry(
            "_input_spec", "full_action_spec", self._prepare("action_spec", value, "action")
        )

    @property
    def action_spec(self) -> Any:
        """The action leaf spec when there is a single action, the Composite otherwise."""
        return self._cache.action_leaf

    @action_spec.setter
    def action_spec(self, value: Any) -> None:
        key = self._single_key(self._cache.action_keys, "action")
        self._set_entry("_input_spec", "full_action_spec", self._prepare("action_spec", value, key))

    @property
    def full_reward_spec(self) -> Composite:
        """All reward entries, as a Composite."""
        return self._output_spec["full_reward_spec"]

    @full_reward_spec.setter
    def full_reward_spec(self, value: Composite) -> None:
        self._set_entry(
            "_output_spec", "full_reward_spec", self._prepare("reward_spec", value, "reward")
        )

    @property
    def reward_spec(self) -> Any:
        """The reward leaf spec when there is a single reward, the Composite otherwise."""
        return self._cache.reward_leaf

    @reward_spec.setter
    def reward_spec(self, value: Any) -> None:
        key = self._single_key(self._cache.reward_keys, "reward")
        self._set_entry(
            "_output_spec", "full_reward_spec", self._prepare("reward_spec", value, key)
        )

    @property
    def full_done_spec(self) -> Composite:
        """All done / terminated / truncated entries, as a Composite."""
        return self._output_spec["full_done_spec"]

    @full_done_spec.setter
    def full_done_spec(self, value: Composite) -> None:
        self.__dict__["_default_done"] = False
        self._set_entry("_output_spec", "full_done_spec", self._complete_done(value))

    def _complete_done(self, value: Any) -> Composite:
        spec, completions = complete_done_spec(self._prepare("done_spec", value, "done"))
        self.__dict__["_done_completions"] = completions
        return spec

    @property
    def done_spec(self) -> Any:
        """The done leaf spec when there is a single done entry, the Composite otherwise."""
        return self._cache.done_leaf

    @done_spec.setter
    def done_spec(self, value: Any) -> None:
        self.full_done_spec = value

    @staticmethod
    def _single_key(keys: list, default: str) -> Any:
        return keys[0] if len(keys) == 1 else default

    # ---------------------------------------------------------------- protocol
    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _reset")

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _step")

    def _set_seed(self, seed: int | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _set_seed")

    def _check_batch(self, method: str, tensordict: TensorDictBase) -> None:
        if self._batch_locked and tensordict.batch_size != self._batch_size:
            raise ValueError(
                BATCH_MISMATCH.format(
                    method=method,
                    expected=tuple(self._batch_size),
                    got=tuple(tensordict.batch_size),
                )
            )

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        """Reset the env (or part of it, through ``"_reset"`` entries) and return the first data.

        With a ``tensordict`` carrying ``"_reset"`` masks, only the masked
        elements are reset; the others keep the input's values. A ``"_reset"`` at
        a shallower level overrides nested ones; a level without ``"_reset"`` is
        fully reset. The input is updated in place and returned, without the
        ``"_reset"`` entries.
        """
        cache = self._cache
        masks = None
        if tensordict is not None:
            self._check_batch("reset", tensordict)
            masks = _partial.collect_reset_masks(tensordict, cache.reset_keys)
            if len(masks) == len(cache.reset_keys) and not any(
                _partial.any_true(m) for m in masks.values()
            ):
                # every level has a "_reset" and none is set: nothing to reset
                _partial.remove_reset_keys(tensordict, cache.reset_keys)
                return tensordict
        handler = self._auto_reset_handler
        if handler is not None and masks and handler.has_stash():
            tensordict_reset = handler.on_reset(
                self.full_done_spec.zero(self._rand_shape(tensordict))
            )
        else:
            tensordict_reset = self._reset(tensordict, **kwargs)
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
        if completions:
            complete_done_data(data, completions)
        return data

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Run one step: write the ``_step`` output under ``"next"`` and return ``tensordict``.

        A ``"_step"`` boolean mask in the input runs a partial step on unbatched
        and batch-unlocked envs; masked-out elements keep the input's values (or
        zeros). Batch-locked batched envs receive the mask in ``_step``.

        Entries already present under ``"next"`` in the input (written by a policy)
        are kept unless the env produces an entry with the same key.
        """
        if self._batch_locked and tensordict.batch_size != self._batch_size:
            self._check_batch("step", tensordict)
        if fast_get(tensordict, "_step") is not None:
            return self._partial_step(tensordict, tensordict.get("_step"))
        preset = fast_get(tensordict, "next")
        if self.run_type_checks:
            self._check_inputs(tensordict)
        next_tensordict = self._step(tensordict)
        # inlined _finish_step: this is the hot path
        device = self._device
        if (
            device is not None
            and next_tensordict.device is not None
            and next_tensordict.device != device
        ):
            next_tensordict = next_tensordict.to(device)
        completions = self._cache.done_completions
        if completions:
            complete_done_data(next_tensordict, completions)
        if self.run_type_checks:
            self._check_outputs(next_tensordict)
        handler = self._auto_reset_handler
        if handler is not None:
            next_tensordict = handler.on_step(
                next_tensordict, self._cache.observation_keys, self._cache.done_flag_keys
            )
        if preset is not None:
            keep_preset_entries(preset, next_tensordict)
        set_next(tensordict, next_tensordict)
        return tensordict

    def _finish_step(
        self, tensordict: TensorDictBase, next_tensordict: TensorDictBase
    ) -> TensorDictBase:
        next_tensordict = self._post_process(next_tensordict)
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
        next_tensordict = _partial.partial_step(self, tensordict, mask)
        next_tensordict = self._finish_step(tensordict, next_tensordict)
        if preset is not None:
            keep_preset_entries(preset, next_tensordict)
        tensordict.set("next", next_tensordict)
        return tensordict

    def _check_inputs(self, tensordict: TensorDictBase) -> None:
        check_inputs(self, tensordict)

    def _check_outputs(self, next_tensordict: TensorDictBase) -> None:
        check_outputs(self, next_tensordict)

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then build the input of the next step, resetting the done elements.

        Returns ``(tensordict, tensordict_)``: the stepped input (with ``"next"``)
        and the data for the next step (``step_mdp`` output, partially reset).
        """
        return _rollout.step_and_maybe_reset(self, tensordict)

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Reset the elements of ``tensordict`` whose done flags are set, if any."""
        return _rollout.maybe_reset(self, tensordict)

    def rollout(
        self,
        max_steps: int,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        callback: Callable[..., Any] | None = None,
        auto_reset: bool = True,
        auto_cast_to_device: bool = False,
        break_when_any_done: bool | None = None,
        break_when_all_done: bool | None = None,
        return_contiguous: bool = True,
        tensordict: TensorDictBase | None = None,
        set_truncated: bool = False,
        out: TensorDictBase | None = None,
    ) -> TensorDictBase:
        """Run up to ``max_steps`` steps and stack them along a trailing ``"time"`` dim.

        Automatic garbage collection is paused while the steps run (and restored
        afterwards, also on error) so that long rollouts do not pay for repeated
        walks over the steps they keep; no garbage is lost. With no policy (and no
        callback, initial ``tensordict`` or ``out``), an env may produce the same data
        on a cheaper path: a plain single :class:`~tdrl.envs.GymEnv` keeps the steps
        in columns instead of one tensordict per step.

        Args:
            max_steps: the maximum number of steps.
            policy: a callable writing the action in a tensordict (random actions if None).
            callback: called as ``callback(env, tensordict)`` after each step.
            auto_reset: reset the env first (with ``tensordict`` as input if given).
            auto_cast_to_device: move data to the policy's device and back.
            break_when_any_done: stop when any element is done (default unless
                ``break_when_all_done`` is set).
            break_when_all_done: step only unfinished elements and stop when all are done.
            return_contiguous: stack into one tensordict; False gives a lazy stack
                (needed for dynamic specs).
            tensordict: the initial data (required when ``auto_reset=False``).
            set_truncated: mark the last step as truncated (and done).
            out: a tensordict to write the stacked result into.
        """
        return _rollout.rollout(
            self,
            max_steps,
            policy=policy,
            callback=callback,
            auto_reset=auto_reset,
            auto_cast_to_device=auto_cast_to_device,
            break_when_any_done=break_when_any_done,
            break_when_all_done=break_when_all_done,
            return_contiguous=return_contiguous,
            tensordict=tensordict,
            set_truncated=set_truncated,
            out=out,
        )

    def _random_rollout(
        self, max_steps: int, break_when_any_done: bool, set_truncated: bool
    ) -> TensorDictBase | None:
        """A faster equivalent of ``rollout(max_steps)`` with random actions, or None.

        Envs that can produce exactly the data of the generic loop more cheaply (same
        random draws, same resets) override this; None means "use the generic loop".
        """
        return None

    def _direct_stepper(
        self, action: torch.Tensor, outputs: dict[Any, torch.Tensor]
    ) -> Callable[[], bool] | None:
        """A step writing straight into preallocated ``outputs`` buffers, or None.

        Batched envs offer each sub-env the views of its buffers (``action`` to read,
        ``outputs`` mapping each step-output key to its buffer); an env whose step can
        fill them in place, with exactly what ``step`` would produce, returns a callable
        that does so and returns the done flag. None (the default) keeps the generic path.
        """
        return None

    def _direct_resetter(self, outputs: dict[Any, torch.Tensor]) -> Callable[[], None] | None:
        """A full reset writing straight into preallocated ``outputs`` buffers, or None.

        The reset counterpart of :meth:`_direct_stepper`: the callable writes exactly
        what ``reset()`` would return. None (the default) keeps the generic path.
        """
        return None

    # ----------------------------------------------------------------- helpers
    def _rand_shape(self, tensordict: TensorDictBase | None) -> torch.Size:
        if tensordict is not None and not self._batch_locked:
            return tensordict.batch_size[: tensordict.batch_dims - len(self._batch_size)]
        return torch.Size([])

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write a random action (sampled from the action spec) in ``tensordict`` and return it."""
        cache = self._cache
        if tensordict is None:
            shape = None
            tensordict = TensorDict({}, batch_size=self._batch_size, device=self._device)
        else:
            shape = None if self._batch_locked else self._rand_shape(tensordict)
        if len(cache.action_keys) == 1:
            fast_set(tensordict, cache.action_keys[0], cache.action_leaf.rand(shape))
        else:
            tensordict.update(self.full_action_spec.rand(shape))
        return tensordict

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Take a step with a random action."""
        return self.step(self.rand_action(tensordict))

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
            self._refresh()
        super().to(*args, **kwargs)
        return self

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
