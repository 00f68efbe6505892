"""The rollout loop and the step-and-maybe-reset helpers used by :class:`EnvBase`.

These are free functions so that batched envs, transformed envs and collectors
share one implementation. They rely on keys cached by the env when its specs
were set and never validate data per step.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from tdrl.envs._columnar import Handover
from tdrl.envs._keys import as_tuple, from_tuple
from tdrl.envs._policy import ActionsExhausted, action_feeder, as_policy
from tdrl.envs._policy_call import policy_caller
from tdrl.envs._stack import Irregular, stack_steps
from tdrl.envs._step_mdp import merge_next
from tdrl.envs._td_fast import any_true, fast_get

if TYPE_CHECKING:
    from tdrl.envs.common import EnvBase

__all__ = ["maybe_reset", "rollout", "step_and_maybe_reset"]


def _any_done(data: TensorDictBase, done_flag_keys: list) -> bool:
    for key in done_flag_keys:
        done = fast_get(data, key)
        if done is not None and any_true(done):
            return True
    return False


def maybe_reset(env: EnvBase, tensordict: TensorDictBase) -> TensorDictBase:
    """Reset the elements of ``tensordict`` whose done flag is set; no-op when none is.

    Each done level gets a ``"_reset"`` mask equal to its ``"done"`` entry.
    """
    cache = env._cache
    flag_keys = cache.done_flag_keys
    if len(flag_keys) == 1:
        done = fast_get(tensordict, flag_keys[0])
        if done is None or not any_true(done):
            return tensordict
        tensordict.set(cache.reset_keys[0], done)
        return env.reset(tensordict)
    masks = []
    any_done = False
    for reset_key, flag_key in zip(cache.reset_keys, flag_keys):
        done = tensordict.get(flag_key, None)
        if done is None:
            continue
        masks.append((reset_key, done))
        if not any_done and any_true(done):
            any_done = True
    if not any_done:
        return tensordict
    for reset_key, done in masks:
        tensordict.set(reset_key, done)
    return env.reset(tensordict)


def step_and_maybe_reset(
    env: EnvBase, tensordict: TensorDictBase
) -> tuple[TensorDictBase, TensorDictBase]:
    """Step ``env`` then build the next input, partially resetting done elements.

    Returns:
        the stepped ``tensordict`` (with its ``"next"`` entry) and the input of
        the next step (``step_mdp`` of it, reset where done).
    """
    tensordict = env.step(tensordict)
    tensordict_ = env.step_mdp(tensordict)
    tensordict_ = maybe_reset(env, tensordict_)
    for hook in env._post_step_hooks():
        hook(tensordict, tensordict_)
    return tensordict, tensordict_


def _policy_device(policy: Any) -> torch.device | None:
    if isinstance(policy, torch.nn.Module):
        for param in policy.parameters():
            return param.device
    return None


def _finished(env: EnvBase, data: TensorDictBase) -> torch.Tensor:
    """Per-element done flags, reduced to the batch dims of ``data``."""
    cache = env._cache
    batch = data.batch_size
    result = None
    for key in cache.done_flag_keys:
        done = data.get(key, None)
        if done is None:
            continue
        root = not isinstance(key, tuple) or len(key) == 1
        done = done.reshape(*batch, -1)
        done = done.any(-1) if root else done.all(-1)
        result = done if result is None else (result | done if root else result & done)
        if root:
            return done
    if result is None:
        return torch.zeros(batch, dtype=torch.bool, device=data.device)
    return result


def _set_truncated(env: EnvBase, next_data: TensorDictBase) -> None:
    found = False
    for keys in env._cache.done_keys_groups:
        for key in keys:
            if as_tuple(key)[-1] != "truncated":
                continue
            found = True
            prefix = as_tuple(key)[:-1]
            truncated = next_data.get(key)
            next_data.set(key, torch.ones_like(truncated))
            done_key = from_tuple((*prefix, "done"))
            done = next_data.get(done_key, None)
            if done is not None:
                next_data.set(done_key, torch.ones_like(done))
    if not found:
        raise RuntimeError(
            "set_truncated was set to True but the env done spec has no 'truncated' entry "
            f"(done keys: {env.done_keys}); call env.add_truncated_keys() first"
        )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause automatic garbage collection; restore the caller's setting on exit.

    A rollout allocates a few short-lived objects per step and keeps one tensordict per
    step; the cyclic garbage collector would walk every kept step on each full pass.
    Nothing is lost: unreachable cycles made meanwhile are collected on the next pass.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()


DYNAMIC_CONTIGUOUS = (
    "The environment specs are dynamic. Call rollout with return_contiguous=False (or leave "
    "it unset) to get the steps as a lazy stack: dims marked -1 change size between steps"
)


def has_dynamic_specs(env: EnvBase) -> bool:
    """Whether a spec of ``env`` has a dynamic (``-1``) dim (cached with the env's keys)."""
    derived = env._cache.derived
    dynamic = derived.get("dynamic_specs")
    if dynamic is None:
        dynamic = derived["dynamic_specs"] = any(
            -1 in tuple(spec.shape)
            for parent in (env.output_spec, env.input_spec)
            for spec in parent.values(True, True)
        )
    return dynamic


def _check_break_flags(any_done: bool | None, all_done: bool | None) -> tuple[bool, bool]:
    if any_done and all_done:
        raise ValueError(
            "break_when_any_done and break_when_all_done cannot both be True; pick one"
        )
    if all_done is None:
        all_done = False
    if any_done is None:
        any_done = not all_done
    return bool(any_done), bool(all_done)


def rollout(
    env: EnvBase,
    max_steps: int,
    policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
    callback: Callable[..., Any] | None = None,
    auto_reset: bool = True,
    auto_cast_to_device: bool = False,
    break_when_any_done: bool | None = None,
    break_when_all_done: bool | None = None,
    return_contiguous: bool | None = None,
    tensordict: TensorDictBase | None = None,
    set_truncated: bool = False,
    out: TensorDictBase | None = None,
    actions: Iterable | None = None,
    storing_device: Any = None,
    set_state: bool | None = None,
) -> TensorDictBase:
    """Run ``env`` for up to ``max_steps`` steps; see :meth:`EnvBase.rollout`."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps}")
    any_done, all_done = _check_break_flags(break_when_any_done, break_when_all_done)
    dynamic = has_dynamic_specs(env)
    if return_contiguous is None:
        return_contiguous = not dynamic
    elif return_contiguous and dynamic:
        raise RuntimeError(DYNAMIC_CONTIGUOUS)
    if actions is not None:
        if policy is not None:
            raise ValueError("rollout: got both a policy and actions; pass one of them")
        if hasattr(actions, "__len__"):
            if len(actions) == 0:
                raise ValueError("rollout actions: expected at least one action, got none")
            max_steps = min(max_steps, len(actions))
        policy = action_feeder(env, actions)
    if set_state is not None and not auto_reset:
        raise ValueError(
            "rollout(set_state=...) applies to the initial reset; with auto_reset=False "
            "there is none (reset the env to its state before the rollout)"
        )
    if (
        policy is None
        and callback is None
        and auto_reset
        and tensordict is None
        and set_state is None
    ):
        if return_contiguous and out is None and not all_done:
            # the env may run random-action rollouts on a cheaper path with the same data
            with _gc_paused():
                result = env._random_rollout(max_steps, any_done, set_truncated)
            if result is not None:
                return result
    if auto_reset:
        if set_state is None:
            tensordict = env.reset(tensordict)
        else:
            tensordict = env.reset(tensordict, set_state=set_state)
    elif tensordict is None:
        raise ValueError("rollout(auto_reset=False) needs an initial tensordict")
    elif not all_done:
        tensordict = maybe_reset(env, tensordict)
    policy = env.rand_action if policy is None else as_policy(env, policy)
    policy_device = _policy_device(policy) if auto_cast_to_device else None
    policy = policy_caller(policy)
    cast = policy_device is not None and policy_device != env.device
    with _gc_paused():
        if callback is None and return_contiguous and out is None and not (all_done or cast):
            # the env may run the policy's loop on a cheaper path with the same data
            result = env._policy_rollout(policy, tensordict, max_steps, any_done, set_truncated)
            if isinstance(result, Handover):
                return _continue(env, result, policy, any_done, set_truncated, storing_device)
            if result is not None:
                return result if storing_device is None else result.to(storing_device)
        steps = _run(
            env,
            tensordict,
            max_steps,
            policy,
            callback,
            any_done,
            all_done,
            set_truncated,
            cast,
            policy_device,
        )
        if not steps:
            raise ValueError("rollout actions: the iterable gave no action")
        result = _stack(steps, return_contiguous, out, storing_device)
        # free the per-step tensordicts while the collector is paused: resumed with them
        # alive, its next pass would walk all of them
        del steps, tensordict
    return result


def _continue(
    env: EnvBase,
    handover: Handover,
    policy: Callable[[TensorDictBase], TensorDictBase],
    any_done: bool,
    set_truncated: bool,
    storing_device: Any,
) -> TensorDictBase:
    """The generic loop from the step where a cheaper path handed the rollout over."""
    steps = handover.steps
    tensordict = handover.tensordict
    call = policy
    if handover.outputs is not None:
        # the policy's module ran on this step already: write its outputs, call it no more
        tensordict = policy.write_other(tensordict, handover.outputs.value)
        call = _called_once(policy)
    steps.extend(
        _run(
            env,
            tensordict,
            handover.remaining,
            call,
            None,
            any_done,
            False,
            set_truncated,
            False,
            None,
        )
    )
    result = _stack(steps, True, None, storing_device)
    del steps, tensordict
    return result


def _called_once(
    policy: Callable[[TensorDictBase], TensorDictBase],
) -> Callable[[TensorDictBase], TensorDictBase]:
    """``policy``, except that its first call returns its input (already holding the outputs)."""
    pending = [True]

    def call(tensordict: TensorDictBase) -> TensorDictBase:
        if pending:
            pending.clear()
            return tensordict
        return policy(tensordict)

    return call


def _run(
    env: EnvBase,
    tensordict: TensorDictBase,
    max_steps: int,
    policy: Callable[[TensorDictBase], TensorDictBase],
    callback: Callable[..., Any] | None,
    any_done: bool,
    all_done: bool,
    set_truncated: bool,
    cast: bool,
    policy_device: Any,
) -> list:
    """The rollout loop proper: returns the list of stepped tensordicts."""
    steps: list = []
    try:
        _loop(
            env,
            tensordict,
            max_steps,
            policy,
            callback,
            any_done,
            all_done,
            set_truncated,
            cast,
            policy_device,
            steps.append,
        )
    except ActionsExhausted:
        pass  # an iterable of actions ran out: the rollout ends with the steps taken
    return steps


def _loop(
    env: EnvBase,
    tensordict: TensorDictBase,
    max_steps: int,
    policy: Callable[[TensorDictBase], TensorDictBase],
    callback: Callable[..., Any] | None,
    any_done: bool,
    all_done: bool,
    set_truncated: bool,
    cast: bool,
    policy_device: Any,
    append: Callable[[TensorDictBase], None],
) -> None:
    env_device = env.device
    cache = env._cache
    excluded = cache.mdp_excluded
    done_flag_keys = cache.done_flag_keys
    step = env.step
    hooks = env._post_step_hooks()
    last = max_steps - 1
    step_reset = None
    if not (any_done or all_done or hooks or cast) and callback is None:
        step_reset = _fused_step_reset(env)
    for i in range(max_steps):
        if cast:
            tensordict = tensordict.to(policy_device)
        result = policy(tensordict)
        if result is not tensordict and result is not None:
            # a policy returning a new tensordict (e.g. only the action): merge it
            tensordict = tensordict.update(result)
        if cast:
            tensordict = tensordict.to(env_device)
        if all_done:
            tensordict.set("_step", ~_finished(env, tensordict))
        if step_reset is not None and i != last:
            tensordict, next_input = step_reset(tensordict)
            append(tensordict)
            tensordict = next_input
            continue
        tensordict = step(tensordict)
        if set_truncated and i == last:
            _set_truncated(env, tensordict.get("next"))
        append(tensordict)
        if callback is not None:
            callback(env, tensordict)
        if i == last:
            if hooks:
                _run_hooks(hooks, tensordict, None)
            break
        if any_done:
            if _any_done(fast_get(tensordict, "next"), done_flag_keys):
                if hooks:
                    _run_hooks(hooks, tensordict, None)
                break
            next_input = merge_next(tensordict, excluded, True, keep_empty=True)
        elif all_done:
            next_input = merge_next(tensordict, excluded, True, keep_empty=True)
            if bool(_finished(env, next_input).all()):
                if hooks:
                    _run_hooks(hooks, tensordict, None)
                break
        else:
            next_input = maybe_reset(env, merge_next(tensordict, excluded, True, keep_empty=True))
        if hooks:
            _run_hooks(hooks, tensordict, next_input)
        tensordict = next_input


def _fused_step_reset(env: EnvBase) -> Callable | None:
    """The env's own ``step_and_maybe_reset``, when it fuses the step and the resets.

    Batched envs step and reset their done sub-envs in one round trip to the workers,
    with the data of ``step``, ``step_mdp`` and ``maybe_reset`` in turn; other envs
    (None) run those three in the loop.
    """
    from tdrl.envs._env_rollouts import EnvRollouts

    if type(env).step_and_maybe_reset is EnvRollouts.step_and_maybe_reset:
        return None
    return env.step_and_maybe_reset


def _run_hooks(hooks: tuple, tensordict: TensorDictBase, next_input: TensorDictBase | None) -> None:
    for hook in hooks:
        hook(tensordict, next_input)


def _stack(
    steps: list, return_contiguous: bool, out: TensorDictBase | None, storing_device: Any
) -> TensorDictBase:
    """The rollout's steps stacked along a new ``"time"`` dim, moved to ``storing_device``."""
    dim = steps[0].batch_dims
    if not return_contiguous:
        # named at construction: naming afterwards walks (and may densify) nested stacks
        result = LazyStackedTensorDict(*steps, stack_dim=dim, stack_dim_name="time")
    else:
        if out is not None:
            result = torch.stack(steps, dim, out=out)
        else:
            try:
                result = stack_steps(steps, dim)
            except Irregular:
                result = torch.stack(steps, dim)
        result.refine_names(*([None] * dim), "time")
    return result if storing_device is None else result.to(storing_device)
