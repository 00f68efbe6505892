"""Pieces shared by the two running-statistics normalisers (``VecNorm`` and ``VecNormV2``).

Both keep their statistics in TensorDicts that may live in shared memory, update
them under a multiprocessing lock, and save them in ``state_dict()`` as one flat
dict whose keys are the statistics' nested keys joined with :data:`SEP`.
"""

from __future__ import annotations

import multiprocessing
import warnings
from multiprocessing.context import get_spawning_popen

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.replay_buffers.process_lock import ProcessLock
from tdrl.envs.transforms.transform import Transform

#: joins the nested keys of the statistics in ``state_dict()``
SEP = "<SEP>"

UNINITIALIZED_STATE_WARNING = (
    "Querying state_dict on an uninitialized {owner} transform: it holds no statistics yet, "
    "so its state is empty. Loading that state later into an initialized {owner} raises."
)
VOID_STATE_ERROR = (
    "{owner}.load_state_dict called with a void state-dict while the instance is initialized. "
    "Could not find a tensordict of statistics to load."
)
UNINITIALIZED_LOAD_WARNING = (
    "VecNorm wasn't initialized{shared}: the loaded statistics {action}. Processes holding "
    "the loaded tensors do not see this transform's updates; send the transform to its "
    "workers after load_state_dict, not before."
)
FROZEN_UNINITIALIZED_ERROR = (
    "{owner}.frozen_copy: the transform has no statistics to freeze. Make sure the VecNorm "
    "has been initialized (by an env, a first call or load_state_dict) before freezing it."
)


def flatten_state(stats: TensorDictBase) -> dict:
    """The statistics as a flat ``{SEP-joined key: tensor}`` dict (the tensors themselves)."""
    return dict(stats.flatten_keys(SEP).items())


def unflatten_state(state: dict) -> TensorDictBase:
    """The inverse of :func:`flatten_state`."""
    return TensorDict(dict(state), []).unflatten_keys(SEP)


def is_shared(stats: TensorDictBase) -> bool:
    """Whether every tensor of ``stats`` lives in shared (or memory-mapped) memory."""
    leaves = list(stats.values(True, True))
    return bool(leaves) and all(
        leaf.is_shared() or getattr(leaf, "filename", None) is not None for leaf in leaves
    )


def warn_uninitialized_state(owner: str) -> dict:
    warnings.warn(UNINITIALIZED_STATE_WARNING.format(owner=owner), UserWarning, stacklevel=4)
    return {}


class LockedStats(Transform):
    """A transform holding a lock around its statistics updates.

    A multiprocessing lock only travels to spawned processes; a :class:`ProcessLock` travels
    anywhere.
    """

    def use_process_lock(self, lock: ProcessLock) -> None:
        """Guard the statistics updates with ``lock``, shared with other processes.

        :class:`~tdrl.envs.EnvCreator` gives the transforms of every env it builds its own
        lock, so that processes updating the same shared statistics take turns.
        """
        self.__dict__["lock"] = lock

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if get_spawning_popen() is None and not isinstance(state.get("lock"), ProcessLock):
            # locks only travel to processes being spawned; a fresh one is made on load
            state["lock"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if self.__dict__.get("lock") is None:
            self.__dict__["lock"] = multiprocessing.Lock()


def float_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def merged_moments(
    loc: torch.Tensor,
    var: torch.Tensor,
    count: torch.Tensor,
    batch_mean: torch.Tensor,
    batch_var: torch.Tensor,
    n: float,
    decay: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, variance and sample count after merging a batch of ``n`` samples.

    The batch gets the weight ``max(n / (count + n), 1 - decay)``: while few samples
    have been seen (and always with ``decay=1``) the result is the exact mean and
    population variance of all samples; later, old samples fade exponentially.
    ``count`` counts samples and broadcasts against ``loc`` from the left.
    """
    total = count + n
    share = (n / total.to(loc.dtype)).clamp_min(1.0 - decay)
    share = _align(share, loc)
    delta = batch_mean - loc
    new_loc = loc + delta * share
    new_var = (1 - share) * var + share * batch_var + share * (1 - share) * delta.pow(2)
    return new_loc, new_var, total


def _align(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if value.ndim < like.ndim:
        return value.reshape(*value.shape, *(1,) * (like.ndim - value.ndim))
    return value
