"""Specs inferred from data: what :meth:`EnvBase.auto_specs_` runs.

The env is reset and stepped once through its raw ``_reset`` / ``_step`` (its specs may
be empty or wrong), with the actions the policy writes; each spec is then described from
the entries of that data (shapes, dtypes, non-tensor entries) with
:func:`~tdrl.data.make_composite_from_td`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.data import Categorical, Composite, make_composite_from_td

if TYPE_CHECKING:
    from tdrl.envs.common import EnvBase

__all__ = ["auto_specs_"]

DONE_KEYS = ("done", "terminated", "truncated")


def _keys(value: NestedKey | Sequence[NestedKey]) -> list[NestedKey]:
    return [value] if isinstance(value, (str, tuple)) else list(value)


def _describe(env: EnvBase, data: TensorDictBase, keys: list, what: str) -> Composite:
    present = data.keys(True, True)
    missing = [key for key in keys if key not in present]
    if missing:
        raise KeyError(
            f"auto_specs_: the {what} keys {missing} are not in the data the env produced "
            f"(it has {sorted(map(str, present))})"
        )
    spec = make_composite_from_td(data.select(*keys), unsqueeze_null_shapes=False)
    return spec.to(env.device) if env.device is not None else spec


def auto_specs_(
    env: EnvBase,
    policy: Callable[[TensorDictBase], TensorDictBase],
    *,
    tensordict: TensorDictBase | None = None,
    action_key: NestedKey | Sequence[NestedKey] = "action",
    done_key: NestedKey | Sequence[NestedKey] | None = None,
    observation_key: NestedKey | Sequence[NestedKey] = "observation",
    reward_key: NestedKey | Sequence[NestedKey] = "reward",
) -> None:
    """Set the observation, action, reward and done specs of ``env`` from one reset and step.

    See :meth:`tdrl.envs.EnvBase.auto_specs_` for the arguments.
    """
    reset = env._reset(tensordict.copy() if tensordict is not None else None)
    if tensordict is not None:
        reset = tensordict.copy().update(reset)
    acted = policy(reset.copy())
    if acted is None:
        raise TypeError("auto_specs_: the policy returned None; it must return the tensordict")
    step = env._step(acted.copy())
    batch_size = env.batch_size
    for data in (reset, acted, step):
        if data.batch_size[: len(batch_size)] != batch_size:
            raise ValueError(
                f"auto_specs_: expected data with the env batch size {tuple(batch_size)}, "
                f"got {tuple(data.batch_size)}"
            )
    env.full_observation_spec = _describe(env, step, _keys(observation_key), "observation")
    env.full_action_spec = _describe(env, acted, _keys(action_key), "action")
    env.full_reward_spec = _describe(env, step, _keys(reward_key), "reward")
    present = step.keys(True, True)
    if done_key is None:
        done_keys = [key for key in DONE_KEYS if key in present]
    else:
        done_keys = _keys(done_key)
    if done_keys:
        env.full_done_spec = _describe(env, step, done_keys, "done")
    else:
        leaf = Categorical(2, (*batch_size, 1), dtype=torch.bool, device=env.device)
        env.full_done_spec = Composite(
            done=leaf, terminated=leaf.clone(), shape=batch_size, device=env.device
        )
