"""The spec accessors of :class:`~tdrl.envs.EnvBase` and the plumbing behind them.

An env keeps two locked Composites: ``_output_spec`` (observations, rewards, done
flags) and ``_input_spec`` (actions and state). The properties here read and assign
their entries; every assignment is validated against the env batch size and refreshes
the keys cached from the specs (see :class:`~tdrl.envs._keys.EnvKeys`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from tdrl.data import Composite
from tdrl.envs._done import complete_done_spec
from tdrl.envs._keys import (
    SpecCache,
    done_flag_key,
    empty_levels,
    group_done_keys,
    leaf_keys,
    reset_key_for,
)
from tdrl.envs._step_mdp import excluded_set

__all__ = ["EnvSpecs"]

SPEC_BATCH_MISMATCH = (
    "{name} at key {key!r} has shape {got}, which does not start with the env batch size {expected}"
)

OUTPUT_ENTRIES = ("full_observation_spec", "full_reward_spec", "full_done_spec")
INPUT_ENTRIES = ("full_action_spec", "full_state_spec")


def _leaf_or_composite(full: Composite, keys: list) -> Any:
    if len(keys) == 1:
        return full[keys[0]]
    return full


def _unbatched_property(name: str) -> property:
    """A property reading ``name`` without the env batch dims and assigning it expanded."""

    def fget(self: EnvSpecs) -> Any:
        return self._unbatched(getattr(self, name))

    def fset(self: EnvSpecs, value: Any) -> None:
        setattr(self, name, self._batched(value))

    doc = (
        f"``{name}`` without the env batch dims; assigning a spec for one element of the "
        f"batch sets ``{name}`` to it expanded to the env batch size."
    )
    return property(fget, fset, doc=doc)


def _assignable_before_init(setter: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """Let a spec setter run before ``EnvBase.__init__``: the assignment is then kept and
    replayed, in order, once ``__init__`` has built the env's (empty) specs."""

    @functools.wraps(setter)
    def fset(self: EnvSpecs, value: Any) -> None:
        if "_output_spec" not in self.__dict__:
            self.__dict__.setdefault("_early_specs", []).append((setter.__name__, value))
            return
        setter(self, value)

    return fset


class _MaterializedCache:
    """Non-data descriptor of ``EnvSpecs._cache``: built (and the specs locked) on first use.

    Once built, the cache lives in the instance ``__dict__``, which Python reads before a
    non-data descriptor, so later reads cost a plain attribute lookup. Assigning specs
    drops it (``_invalidate``); the next read rebuilds it.
    """

    def __get__(self, env: EnvSpecs | None, owner: type) -> Any:
        if env is None:
            return self
        env._refresh()
        return env.__dict__["_cache"]


class EnvSpecs:
    """Mixin of :class:`~tdrl.envs.EnvBase`: spec properties, their setters and the key cache.

    Each ``*_spec`` property has an ``*_spec_unbatched`` counterpart: the same spec for
    one element of the env batch (the env batch dims removed), which is what a policy
    written for a single env expects. Assigning an ``*_spec_unbatched`` sets the spec
    expanded to the env batch size, so a batched env can describe one element.

    Examples:
        >>> from tdrl.envs import PendulumEnv, SerialEnv
        >>> env = SerialEnv(2, PendulumEnv)
        >>> env.action_spec.shape, env.action_spec_unbatched.shape
        (torch.Size([2, 1]), torch.Size([1]))
    """

    _batch_size: torch.Size
    _device: torch.device | None
    _spec_locked: bool
    _input_spec: Composite
    _output_spec: Composite

    # The keys derived from the specs, built on first use; see _MaterializedCache.
    _cache = _MaterializedCache()

    # ------------------------------------------------------------ spec plumbing
    def _apply_early_specs(self) -> None:
        """Apply the spec assignments a subclass made before calling ``EnvBase.__init__``."""
        for name, value in self.__dict__.pop("_early_specs", ()):
            setattr(self, name, value)

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
        self._invalidate()

    def _invalidate(self) -> None:
        """Drop the key cache after a spec assignment; it is rebuilt on next use."""
        self.__dict__.pop("_cache", None)

    def _materialize(self) -> None:
        """Build the key cache (and lock the specs) if no one has used them yet."""
        if "_cache" not in self.__dict__:
            self._refresh()

    def _complete_done_levels(self, output_spec: Composite) -> None:
        """Complete the done levels of ``output_spec`` in place (see ``_refresh``)."""
        done_spec, plan = complete_done_spec(output_spec["full_done_spec"])
        if done_spec is not output_spec["full_done_spec"]:
            output_spec["full_done_spec"] = done_spec
        self.__dict__["_done_completions"] = plan

    def _refresh(self) -> None:
        """Recompute the cached keys and leaf specs; lock the specs if ``spec_locked``.

        Until this first runs (at the first use of the env, its keys or its
        ``input_spec`` / ``output_spec``), the spec Composites stay unlocked, so a
        constructor may still edit them in place (``self.full_done_spec["truncated"] =
        ...``); done levels such an edit left incomplete are completed here.
        """
        out, inp = self._output_spec, self._input_spec
        out.unlock_()
        inp.unlock_()
        self._complete_done_levels(out)
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
        done_specs = out["full_done_spec"]
        cache.scalar_done_shapes = [
            (key, done_specs[key].shape)
            for key in cache.done_keys
            if done_specs[key].shape.numel() == 1 and done_specs[key].shape
        ]
        # reward entries that are also state (e.g. running sums) travel to the next step
        state_keys = set(cache.state_keys)
        # (an empty Composite of the reward spec goes with the reward entries)
        rewards = [*cache.reward_keys, *empty_levels(out["full_reward_spec"])]
        cache.mdp_excluded = excluded_set([k for k in rewards if k not in state_keys])
        cache.action_leaf = _leaf_or_composite(inp["full_action_spec"], cache.action_keys)
        cache.reward_leaf = _leaf_or_composite(out["full_reward_spec"], cache.reward_keys)
        cache.done_leaf = _leaf_or_composite(out["full_done_spec"], cache.done_keys)
        self.__dict__["_cache"] = cache
        self.__dict__["_specs_used"] = True
        if self._spec_locked:
            out.lock_()
            inp.lock_()

    @property
    def input_spec(self) -> Composite:
        """Locked Composite with ``full_action_spec`` and ``full_state_spec``."""
        self._materialize()
        return self._input_spec

    @input_spec.setter
    @_assignable_before_init
    def input_spec(self, value: Composite) -> None:
        for name in INPUT_ENTRIES:
            spec = value.get(name, None)
            spec = self._prepare(name, spec, None)
            self._input_spec.unlock_()
            self._input_spec[name] = spec
        self._invalidate()

    @property
    def output_spec(self) -> Composite:
        """Locked Composite with the full observation, reward and done specs."""
        self._materialize()
        return self._output_spec

    @output_spec.setter
    @_assignable_before_init
    def output_spec(self, value: Composite) -> None:
        for name in OUTPUT_ENTRIES:
            spec = value.get(name, None)
            if name == "full_done_spec" and spec is not None:
                spec = self._complete_done(spec)
            spec = self._prepare(name, spec, None)
            self._output_spec.unlock_()
            self._output_spec[name] = spec
        self.__dict__["_default_done"] = False
        self._invalidate()

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
    @_assignable_before_init
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
    @_assignable_before_init
    def full_state_spec(self, value: Composite | None) -> None:
        self._set_entry("_input_spec", "full_state_spec", self._prepare("state_spec", value, None))

    state_spec = full_state_spec

    @property
    def full_action_spec(self) -> Composite:
        """All action entries, as a Composite."""
        return self._input_spec["full_action_spec"]

    @full_action_spec.setter
    @_assignable_before_init
    def full_action_spec(self, value: Composite) -> None:
        self._set_entry(
            "_input_spec", "full_action_spec", self._prepare("action_spec", value, "action")
        )

    @property
    def action_spec(self) -> Any:
        """The action leaf spec when there is a single action, the Composite otherwise."""
        return self._leaf_spec("_input_spec", "full_action_spec", "action_leaf")

    @action_spec.setter
    @_assignable_before_init
    def action_spec(self, value: Any) -> None:
        key = self._single_key(leaf_keys(self.full_action_spec), "action")
        self._set_entry("_input_spec", "full_action_spec", self._prepare("action_spec", value, key))

    @property
    def full_reward_spec(self) -> Composite:
        """All reward entries, as a Composite."""
        return self._output_spec["full_reward_spec"]

    @full_reward_spec.setter
    @_assignable_before_init
    def full_reward_spec(self, value: Composite) -> None:
        self._set_entry(
            "_output_spec", "full_reward_spec", self._prepare("reward_spec", value, "reward")
        )

    @property
    def reward_spec(self) -> Any:
        """The reward leaf spec when there is a single reward, the Composite otherwise."""
        return self._leaf_spec("_output_spec", "full_reward_spec", "reward_leaf")

    @reward_spec.setter
    @_assignable_before_init
    def reward_spec(self, value: Any) -> None:
        key = self._single_key(leaf_keys(self.full_reward_spec), "reward")
        self._set_entry(
            "_output_spec", "full_reward_spec", self._prepare("reward_spec", value, key)
        )

    @property
    def full_done_spec(self) -> Composite:
        """All done / terminated / truncated entries, as a Composite."""
        return self._output_spec["full_done_spec"]

    @full_done_spec.setter
    @_assignable_before_init
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
        return self._leaf_spec("_output_spec", "full_done_spec", "done_leaf")

    @done_spec.setter
    @_assignable_before_init
    def done_spec(self, value: Any) -> None:
        self.full_done_spec = value

    def _leaf_spec(self, parent: str, name: str, cached: str) -> Any:
        """The leaf (or Composite) spec of ``name``, from the key cache once the env is used.

        Before the specs are first used (in a constructor), it is read without building
        the cache, which would lock the specs: ``self.done_spec[key] = spec`` still works.
        """
        if "_cache" in self.__dict__ or self.__dict__.get("_specs_used"):
            return getattr(self._cache, cached)
        full = self.__dict__[parent][name]
        return _leaf_or_composite(full, leaf_keys(full))

    @staticmethod
    def _single_key(keys: list, default: str) -> Any:
        return keys[0] if len(keys) == 1 else default

    # ------------------------------------------------------- unbatched views
    def _unbatched(self, spec: Any) -> Any:
        """``spec`` for one element of the env batch (its leading batch dims indexed out)."""
        ndim = len(self._batch_size)
        if ndim == 0:
            return spec
        return spec[(0,) * ndim]

    def _batched(self, spec: Any) -> Any:
        """``spec`` (written for one element of the batch) expanded to the env batch size."""
        if not self._batch_size:
            return spec
        return spec.expand(*self._batch_size, *spec.shape)

    input_spec_unbatched = _unbatched_property("input_spec")
    output_spec_unbatched = _unbatched_property("output_spec")
    full_action_spec_unbatched = _unbatched_property("full_action_spec")
    action_spec_unbatched = _unbatched_property("action_spec")
    full_observation_spec_unbatched = _unbatched_property("full_observation_spec")
    observation_spec_unbatched = full_observation_spec_unbatched
    full_state_spec_unbatched = _unbatched_property("full_state_spec")
    state_spec_unbatched = full_state_spec_unbatched
    full_reward_spec_unbatched = _unbatched_property("full_reward_spec")
    reward_spec_unbatched = _unbatched_property("reward_spec")
    full_done_spec_unbatched = _unbatched_property("full_done_spec")
    done_spec_unbatched = _unbatched_property("done_spec")
