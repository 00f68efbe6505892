"""Environment helpers: step_mdp, check_env_specs, done aggregation, random policy..."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import (
    TensorDictBase,
)

from tdrl.data import Composite, Stacked, make_composite_from_td
from tdrl.envs._checks import spec_mismatch
from tdrl.envs._keys import as_tuple, from_tuple, group_done_keys, leaf_keys
from tdrl.envs._partial import is_data_leaf
from tdrl.envs._step_mdp import mdp_plan, merge_next
from tdrl.envs._td_fast import any_true
from tdrl.envs.exploration import ExplorationType, exploration_type, set_exploration_type
from tdrl.envs.marl import MarlGroupMapType, check_marl_grouping
from tdrl.envs.rollout import has_dynamic_specs
from tdrl.modules.random_policy import RandomPolicy

if TYPE_CHECKING:
    from tdrl.envs.common import EnvBase

__all__ = [
    "ExplorationType",
    "MarlGroupMapType",
    "RandomPolicy",
    "check_env_specs",
    "check_marl_grouping",
    "exploration_type",
    "get_available_libraries",
    "make_composite_from_td",
    "set_exploration_type",
    "step_mdp",
    "terminated_or_truncated",
]


def step_mdp(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase | None = None,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
    reward_keys: Any = "reward",
    done_keys: Any = "done",
    action_keys: Any = "action",
) -> TensorDictBase:
    """Move the content of ``tensordict["next"]`` to the root of a new tensordict (``t <- t+1``).

    Args:
        tensordict: a tensordict with a ``"next"`` entry.
        next_tensordict: if given, the result is written into it and it is returned.
        keep_other: keep the root entries that ``"next"`` does not overwrite.
        exclude_reward: drop the ``reward_keys``.
        exclude_done: drop the ``done_keys``.
        exclude_action: drop the ``action_keys`` (otherwise they stay at the root).
        reward_keys: the reward key(s).
        done_keys: the done key(s).
        action_keys: the action key(s).

    Every nesting level of the result is a new container, so updating it in
    place never changes ``tensordict``. A nested level with no entry left (all its
    entries excluded, or none to begin with) is left out.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(observation=torch.zeros(2), action=torch.ones(1),
        ...                 next=TensorDict(observation=torch.ones(2), reward=torch.ones(1)))
        >>> sorted(step_mdp(td).keys())
        ['observation']
        >>> step_mdp(td)["observation"]
        tensor([1., 1.])
        >>> sorted(step_mdp(td, exclude_action=False, exclude_reward=False).keys())
        ['action', 'observation', 'reward']
    """
    excluded, kept_root = mdp_plan(
        reward_keys, done_keys, action_keys, exclude_reward, exclude_done, exclude_action
    )
    out = merge_next(tensordict, excluded, keep_other, kept_root)
    if next_tensordict is not None:
        next_tensordict.update(out)
        return next_tensordict
    return out


class _StepMDP:
    """:func:`step_mdp` bound to the keys of one env, resolved once for repeated calls.

    Calling it on a stepped tensordict gives what ``step_mdp`` gives with the env's
    ``reward_keys``, ``done_keys`` and ``action_keys``, without resolving the keys at
    each call. The keys are read at construction: build a new one after changing
    the env's specs.

    Args:
        env: the env whose keys are used.
        keep_other: keep the root entries that ``"next"`` does not overwrite.
        exclude_reward: drop the reward entries.
        exclude_done: drop the done entries.
        exclude_action: drop the action entries.

    Examples:
        >>> from tdrl.envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> to_next = _StepMDP(env, keep_other=False)
        >>> sorted(to_next(env.rand_step(env.reset())).keys())
        ['done', 'params', 'terminated', 'th', 'thdot']
    """

    def __init__(
        self,
        env: EnvBase,
        keep_other: bool = True,
        exclude_reward: bool = True,
        exclude_done: bool = False,
        exclude_action: bool = True,
    ) -> None:
        self.keep_other = keep_other
        self.excluded, self.kept_root = mdp_plan(
            env.reward_keys,
            env.done_keys,
            env.action_keys,
            exclude_reward,
            exclude_done,
            exclude_action,
        )

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Return the input of the next step built from ``tensordict["next"]``."""
        return merge_next(tensordict, self.excluded, self.keep_other, self.kept_root)


def terminated_or_truncated(
    data: TensorDictBase,
    full_done_spec: Composite | None = None,
    key: str | None = "_reset",
    write_full_false: bool = False,
) -> bool:
    """Aggregate done / terminated / truncated per level; optionally write the result.

    For each done level of ``data`` (read from ``full_done_spec`` when given,
    found by name otherwise), the OR of its end-of-trajectory entries is written
    under ``key`` at that level (when any is True, or always with
    ``write_full_false``).

    Returns:
        True when any entry is True.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict(done=torch.tensor([[False], [True]]),
        ...                   truncated=torch.tensor([[False], [False]]), batch_size=[2])
        >>> terminated_or_truncated(data)
        True
        >>> data["_reset"].squeeze(-1)
        tensor([False,  True])
    """
    if full_done_spec is not None:
        done_keys = leaf_keys(full_done_spec)
    else:
        done_keys = [
            k
            for k in data.keys(include_nested=True, leaves_only=True)
            if as_tuple(k)[-1] in ("done", "terminated", "truncated")
        ]
    any_done = False
    for prefix, keys in group_done_keys(done_keys):
        aggregate = None
        for done_key in keys:
            value = data.get(done_key, None)
            if value is None:
                continue
            aggregate = value if aggregate is None else aggregate | value
        if aggregate is None:
            continue
        level_any = any_true(aggregate)
        any_done = any_done or level_any
        if key is not None and (level_any or write_full_false):
            data.set(from_tuple((*prefix, key)), aggregate)
    return any_done


def get_available_libraries() -> dict[str, bool]:
    """Map each simulator backend tdrl wraps to whether it is installed (nothing is imported).

    The backends are the rows of :data:`tdrl.envs.libs.backends.BACKENDS`.

    Examples:
        >>> libraries = get_available_libraries()
        >>> isinstance(libraries["gymnasium"], bool)
        True
    """
    from tdrl.envs.libs.backends import BACKENDS

    return {name: row.installed for name, row in BACKENDS.items()}


CHECK_FAIL = "check_env_specs: {what} at key {key!r}: {detail}"


class SpecDtypeError(AssertionError, TypeError):
    """Raised by :func:`check_env_specs` when an entry's dtype is not its spec's.

    An ``AssertionError`` like every other disagreement it reports; also a
    ``TypeError`` (a value of the wrong type), which other implementations of this
    check raise for dtypes.

    Examples:
        >>> import torch
        >>> from tdrl.envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> env.reward_spec = env.reward_spec.clone().to(torch.float64)
        >>> try:
        ...     check_env_specs(env)
        ... except TypeError as err:
        ...     print(err)
        check_env_specs: dtype mismatch at key ('next', 'reward'): expected reward.dtype to be torch.float64 (the spec's), got torch.float32
    """


def _expected_entries(env: EnvBase) -> dict:
    """Spec of every entry of a rollout step, keyed by full key (next entries under 'next')."""
    entries: dict = {}
    for spec, keys in (
        (env.full_state_spec, env.state_keys),
        (env.full_action_spec, env.action_keys),
        (env.full_observation_spec, env.observation_keys),
        (env.full_done_spec, env.done_keys),
    ):
        for key in keys:
            entries[as_tuple(key)] = spec[key]
    for spec, keys in (
        (env.full_observation_spec, env.observation_keys),
        (env.full_reward_spec, env.reward_keys),
        (env.full_done_spec, env.done_keys),
    ):
        for key in keys:
            entries[("next", *as_tuple(key))] = spec[key]
    return entries


def check_env_specs(
    env: EnvBase,
    return_contiguous: bool | None = None,
    check_dtype: bool = True,
    seed: int | None = None,
    tensordict: TensorDictBase | None = None,
    break_when_any_done: bool | str = False,
) -> None:
    """Run a short rollout and check that its data matches the env specs.

    Every entry of the specs must be present in the data with the expected
    shape (``-1`` dims match any size) and dtype and be within the spec's
    domain, and the data must hold no entry the specs do not declare (a state entry
    may also show in ``"next"``).
    Non-tensor entries (strings, python objects) are checked for presence only.
    Action masks are not checked: a spec holds the mask of the last step only,
    while a masked env (``ActionMask``, ``TicTacToeEnv``) changes it at every step,
    so each step's values are checked against the spec's domain without its mask.

    Args:
        env: the env to check.
        return_contiguous: also check that the steps stack contiguously (default: unless
            a spec has a dynamic ``-1`` dim).
        check_dtype: compare dtypes too.
        seed: if given, seed the env first.
        tensordict: an initial tensordict passed to ``reset``.
        break_when_any_done: forwarded to the rollout (``"both"`` runs both ways).

    Raises:
        AssertionError: naming the first key that disagrees and how (a dtype
            disagreement raises :class:`SpecDtypeError`, also a ``TypeError``).

    Examples:
        >>> from tdrl.envs import PendulumEnv
        >>> check_env_specs(PendulumEnv(), seed=0)
    """
    if break_when_any_done == "both":
        check_env_specs(env, return_contiguous, check_dtype, seed, tensordict, True)
        check_env_specs(env, return_contiguous, check_dtype, None, tensordict, False)
        return
    if return_contiguous is None:
        return_contiguous = not has_dynamic_specs(env)
    if seed is not None:
        env.set_seed(seed)
    data = env.rollout(
        3,
        return_contiguous=False,
        tensordict=tensordict,
        break_when_any_done=bool(break_when_any_done),
    )
    env_ndim = len(env.batch_size)
    entries = _expected_entries(env)
    # a state entry the step also returns (an RNG key, a hidden state...) may show in "next"
    optional = {("next", *as_tuple(key)) for key in env.state_keys}
    for step in data.tensordicts:
        _check_data(step, entries, env_ndim, check_dtype, step.batch_dims, None, optional)
    if return_contiguous:
        try:
            torch.stack(data.tensordicts, data.stack_dim)
        except (RuntimeError, KeyError, ValueError) as err:
            raise AssertionError(
                f"check_env_specs: the rollout steps cannot be stacked contiguously ({err}); "
                "use return_contiguous=False for envs with dynamic specs"
            ) from err


def _check_data(
    data: TensorDictBase,
    entries: dict,
    env_ndim: int,
    check_dtype: bool,
    lead_ndim: int,
    time_dim: int | None,
    optional: set | None = None,
) -> None:
    present = {
        as_tuple(k) for k in data.keys(include_nested=True, leaves_only=True, is_leaf=is_data_leaf)
    }
    for key, spec in entries.items():
        if key not in present:
            raise AssertionError(
                CHECK_FAIL.format(
                    what="missing entry",
                    key=from_tuple(key),
                    detail="declared in the specs but absent from the rollout data",
                )
            )
        if isinstance(spec, Stacked):
            # a heterogeneous group: one tensor per stacked element, each with its own spec
            values = _stacked_parts(data, key, spec.dim + data.batch_dims - env_ndim)
            if len(values) != len(spec.specs):
                raise AssertionError(
                    CHECK_FAIL.format(
                        what="shape mismatch",
                        key=from_tuple(key),
                        detail=f"expected {len(spec.specs)} stacked elements, got {len(values)}",
                    )
                )
            for value, element in zip(values, spec.specs):
                _check_value(value, element, key, data, env_ndim, check_dtype, lead_ndim, time_dim)
            continue
        value = data.get(key)
        _check_value(value, spec, key, data, env_ndim, check_dtype, lead_ndim, time_dim)
    unexpected = sorted(present - set(entries) - (optional or set()), key=str)
    unexpected = [k for k in unexpected if not _is_private(k)]
    if unexpected:
        raise AssertionError(
            CHECK_FAIL.format(
                what="undeclared entry",
                key=from_tuple(unexpected[0]),
                detail="present in the rollout data but in no spec (all undeclared: "
                f"{[from_tuple(k) for k in unexpected]})",
            )
        )


def _stacked_parts(data: TensorDictBase, key: tuple, dim: int) -> list:
    """The value of ``key`` in each element of a heterogeneous stack (stack dim ``dim``)."""
    container = data.get(key[:-1]) if len(key) > 1 else data
    return [part.get(key[-1]) for part in container.unbind(dim)]


def _check_value(
    value: Any,
    spec: Any,
    key: tuple,
    data: TensorDictBase,
    env_ndim: int,
    check_dtype: bool,
    lead_ndim: int,
    time_dim: int | None,
) -> None:
    if not isinstance(value, torch.Tensor):
        return
    mismatch = spec_mismatch(spec, value, data.batch_size, env_ndim, check_dtype)
    if mismatch is not None:
        what, expected, got = mismatch
        if what == "dtype":
            raise SpecDtypeError(
                CHECK_FAIL.format(
                    what="dtype mismatch",
                    key=from_tuple(key),
                    detail=f"expected {key[-1]}.dtype to be {expected} (the spec's), got {got}",
                )
            )
        raise AssertionError(
            CHECK_FAIL.format(
                what=f"{what} mismatch",
                key=from_tuple(key),
                detail=f"expected {expected}, got {got}",
            )
        )
    if -1 not in tuple(spec.shape) and value.dtype == spec.dtype:
        if time_dim is not None:
            value = value.movedim(time_dim, 0)
        _check_domain(spec, value, key, lead_ndim, env_ndim)


def _without_mask(spec: Any) -> Any:
    """``spec`` with its action mask cleared (a copy), or ``spec`` itself when it has none."""
    if getattr(spec, "mask", None) is None or not hasattr(spec, "update_mask"):
        return spec
    spec = spec.clone()
    spec.update_mask(None)
    return spec


def _is_private(key: tuple) -> bool:
    return key[-1] in ("_reset", "_step")


def _check_domain(
    spec: Any, value: torch.Tensor, key: tuple, lead_ndim: int, env_ndim: int
) -> None:
    if not hasattr(spec, "is_in"):
        return
    # the specs hold the mask of the last step only: each step's values are checked
    # against the spec's domain, not against a mask that may have changed since
    spec = _without_mask(spec)
    target = (*value.shape[:lead_ndim], *tuple(spec.shape[env_ndim:]))
    if tuple(spec.shape) != target:
        spec = spec.expand(*target)
    if not spec.is_in(value):
        raise AssertionError(
            CHECK_FAIL.format(
                what="value out of spec",
                key=from_tuple(key),
                detail=f"the data is not in the domain of its {type(spec).__name__} spec",
            )
        )
