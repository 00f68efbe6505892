"""Transforms meant for replay buffers.

:class:`MultiStepTransform` writes n-step transitions, :class:`NextStateReconstructor`
rebuilds next observations at sampling time and :class:`PolicyAgeFilter` drops data
collected by outdated policies.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key

from tdrl.data.postprocs import MultiStep
from tdrl.envs.transforms.transform import MISSING_KEY_ERROR, NestedKey, Transform, _key_list

__all__ = ["MultiStepTransform", "NextStateReconstructor", "PolicyAgeFilter"]


class MultiStepTransform(Transform):
    """Writes n-step transitions into a replay buffer, across the batches it is extended with.

    Used as a buffer transform, it runs on the data given to ``extend`` (the inverse path):
    batches of ``[*B, T]`` TED data (time last) are joined to the last ``n_steps`` steps of
    the previous batch, :class:`~tdrl.data.MultiStep` computes the n-step rewards and next
    observations, and every step whose window is complete is written. The last ``n_steps``
    steps are held back until the next batch completes them, so the first batch writes
    ``T - n_steps`` steps. Sampling is unchanged.

    Args:
        n_steps: the largest window.
        gamma: the discount factor.
        reward_keys, done_key, done_keys, mask_key: as in :class:`~tdrl.data.MultiStep`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(20),
        ...     transform=MultiStepTransform(n_steps=3, gamma=0.9))
        >>> def batch(start):
        ...     t = torch.arange(start, start + 5.0)
        ...     return TensorDict({"obs": t, "next": {"obs": t + 1, "reward": torch.ones(5, 1),
        ...         "done": torch.zeros(5, 1, dtype=torch.bool)}}, [5])
        >>> _ = rb.extend(batch(0))
        >>> _ = rb.extend(batch(5))
        >>> len(rb), rb[3]["next", "obs"].item(), round(rb[3]["next", "reward"].item(), 2)
        (7, 6.0, 2.71)
    """

    def __init__(
        self,
        n_steps: int,
        gamma: float,
        *,
        reward_keys: list | None = None,
        done_key: Any = None,
        done_keys: list | None = None,
        mask_key: Any = None,
    ) -> None:
        super().__init__()
        self.n_steps = int(n_steps)
        self.gamma = float(gamma)
        self.multi_step = MultiStep(
            gamma,
            n_steps,
            reward_keys=reward_keys,
            done_key=done_key,
            done_keys=done_keys,
            mask_key=mask_key,
        )
        self.__dict__["_held"] = None

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sampled data passes unchanged."""
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        held = self.__dict__["_held"]
        if held is not None:
            if held.shape[:-1] != tensordict.shape[:-1]:
                raise ValueError(
                    f"MultiStepTransform: batch shape mismatch: expected data of shape "
                    f"({', '.join(map(str, held.shape[:-1]))}, T), got {tuple(tensordict.shape)}"
                )
            tensordict = torch.cat([held, tensordict], dim=tensordict.batch_dims - 1)
        time = tensordict.shape[-1]
        keep = max(time - self.n_steps, 0)
        self.__dict__["_held"] = tensordict[..., keep:].clone()
        out = self.multi_step(tensordict.clone())
        return out[..., :keep]

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Turn a batch into the n-step transitions that are complete so far."""
        return self._inv_call(tensordict)

    def empty_cache(self) -> None:
        """Forget the steps held back from the previous batch."""
        self.__dict__["_held"] = None
        super().empty_cache()

    def __repr__(self) -> str:
        return f"MultiStepTransform(n_steps={self.n_steps}, gamma={self.gamma})"


def _present(tensordict: TensorDictBase, key: NestedKey) -> bool:
    return key in tensordict.keys(True, True)


def _per_item(value: torch.Tensor, n: int) -> torch.Tensor:
    """``value`` (``[n, ...]``) reduced to one entry per item: any for bools, the tensor else."""
    return value.reshape(n, -1)


class NextStateReconstructor(Transform):
    """Rebuilds ``("next", key)`` in sampled batches from the next item's ``key``.

    Storing only root observations halves the memory of a buffer; this transform
    puts the next observations back at sampling time. Item ``i`` of a flat batch
    gets ``key`` of item ``i + 1`` when the two are consecutive steps of one
    trajectory: same trajectory id (``traj_key``), item ``i`` not done
    (``done_key``) and, with ``step_count_key``, step counts that differ by one.
    Otherwise (last item, trajectory boundary, non-adjacent items drawn by a random
    sampler) it gets ``fill_value`` (NaN by default), never an invented value. Use
    it with a sampler that keeps trajectories contiguous (e.g. ``SliceSampler``).
    In an env it does nothing.

    Args:
        keys: the entries to rebuild (default ``["observation"]``).

    Keyword Args:
        traj_key: the trajectory-id entry (None: no trajectory check).
        done_key: the done entry of each step (None: no done check).
        step_count_key: a step counter entry to check that steps are consecutive.
        fill_value: the value of entries that cannot be rebuilt; required for
            non-floating entries (NaN by default).
        strict: raise ``KeyError`` when ``traj_key`` or ``done_key`` is missing from
            the data (False: skip that check).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import NextStateReconstructor
        >>> td = TensorDict({"observation": torch.arange(4.0).unsqueeze(-1),
        ...     ("next", "done"): torch.tensor([[False], [True], [False], [False]])}, [4])
        >>> out = NextStateReconstructor(traj_key=None)(td)
        >>> out["next", "observation"].flatten().tolist()
        [1.0, nan, 3.0, nan]
    """

    def __init__(
        self,
        keys: Sequence[NestedKey] | NestedKey | None = None,
        *,
        traj_key: NestedKey | None = ("collector", "traj_ids"),
        done_key: NestedKey | None = ("next", "done"),
        step_count_key: NestedKey | None = None,
        fill_value: float | int | None = None,
        strict: bool = True,
    ) -> None:
        super().__init__(in_keys=["observation"] if keys is None else keys)
        self.out_keys = [unravel_key(("next", key)) for key in self.in_keys]
        self.traj_key = None if traj_key is None else unravel_key(traj_key)
        self.done_key = None if done_key is None else unravel_key(done_key)
        self.step_count_key = None if step_count_key is None else unravel_key(step_count_key)
        self.fill_value = fill_value
        self.strict = bool(strict)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        # in an env the next observations are real: nothing to rebuild
        return next_tensordict

    def _entry(self, tensordict: TensorDictBase, key: NestedKey | None, what: str) -> Any:
        if key is None:
            return None
        if _present(tensordict, key):
            return tensordict.get(key)
        if self.strict:
            raise KeyError(
                f"NextStateReconstructor: the {what} {key!r} is not in the data (keys: "
                f"{sorted(map(str, tensordict.keys(True, True)))}); pass {what.replace(' ', '_')}"
                "=None to skip that check, or strict=False to skip it when missing"
            )
        return None

    def _consecutive(self, tensordict: TensorDictBase) -> torch.Tensor:
        """For each item, whether the next item of the batch is its next step."""
        n = tensordict.batch_size[0]
        valid = torch.zeros(n, dtype=torch.bool, device=tensordict.device)
        if n < 2:
            return valid
        valid[:-1] = True
        traj = self._entry(tensordict, self.traj_key, "trajectory key")
        if traj is not None:
            traj = _per_item(traj, n)
            valid[:-1] &= (traj[:-1] == traj[1:]).all(-1)
        done = self._entry(tensordict, self.done_key, "done key")
        if done is not None:
            valid[:-1] &= ~_per_item(done, n)[:-1].bool().any(-1)
        if self.step_count_key is not None:
            steps = _per_item(tensordict.get(self.step_count_key), n)
            valid[:-1] &= ((steps[1:] - steps[:-1]) == 1).all(-1)
        return valid

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write ``("next", key)`` for every key, from the next item where it is the next step."""
        if tensordict.batch_dims != 1:
            raise ValueError(
                "NextStateReconstructor: expected a flat batch (one batch dim, items in "
                f"storage order), got batch size {tuple(tensordict.batch_size)}; "
                "reshape(-1) it first"
            )
        valid = self._consecutive(tensordict)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = tensordict.get(in_key, None)
            if value is None:
                if not self.missing_tolerance:
                    raise KeyError(
                        MISSING_KEY_ERROR.format(
                            owner="NextStateReconstructor", key=in_key, keys=_key_list(tensordict)
                        )
                    )
                continue
            fill = self.fill_value
            if fill is None:
                if not value.dtype.is_floating_point:
                    raise TypeError(
                        f"NextStateReconstructor: entry {in_key!r} has the non-floating dtype "
                        f"{value.dtype}, which cannot hold NaN; pass fill_value= (e.g. -1)"
                    )
                fill = float("nan")
            shifted = torch.roll(value, -1, 0)
            mask = valid.reshape(-1, *(1,) * (value.ndim - 1))
            fill_tensor = torch.as_tensor(fill, dtype=value.dtype, device=value.device)
            tensordict.set(out_key, torch.where(mask, shifted, fill_tensor))
        return tensordict

    def __repr__(self) -> str:
        return (
            f"NextStateReconstructor(keys={self.in_keys}, traj_key={self.traj_key!r}, "
            f"done_key={self.done_key!r})"
        )


class PolicyAgeFilter(Transform):
    """Drops data collected by a policy more than ``max_policy_lag`` versions old.

    Each item carries the version of the policy that collected it
    (``policy_version_key``); it is stale when ``current - version > max_policy_lag``,
    where ``current`` is ``policy_version`` (an int, or a callable returning the
    current version, read at each call). On a replay buffer it filters both the
    data written (``extend``) and the data sampled, so items that became stale
    after they were stored never come out. Items are rows of the first batch dim: a
    row with any stale element is dropped. Data without a batch dim passes
    unfiltered; in an env the transform does nothing.

    Args:
        policy_version: the current policy version, or a callable returning it.
        max_policy_lag: the largest accepted age (a non-negative int).

    Keyword Args:
        policy_version_key: the entry holding the versions.
        strict: raise ``KeyError`` when the data lack that entry (else warn and keep
            the data).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10),
        ...     transform=PolicyAgeFilter(3, max_policy_lag=1))
        >>> _ = rb.extend(TensorDict({"policy_version": torch.tensor([0, 2, 3])}, [3]))
        >>> len(rb)
        2
    """

    def __init__(
        self,
        policy_version: int | Callable[[], int],
        max_policy_lag: int = 0,
        *,
        policy_version_key: NestedKey = "policy_version",
        strict: bool = False,
    ) -> None:
        if isinstance(max_policy_lag, bool) or not isinstance(max_policy_lag, int):
            raise TypeError(
                f"PolicyAgeFilter max_policy_lag: expected an int, got {max_policy_lag!r}"
            )
        if max_policy_lag < 0:
            raise ValueError(
                f"PolicyAgeFilter max_policy_lag: expected a non-negative int, got {max_policy_lag}"
            )
        if not callable(policy_version) and (
            isinstance(policy_version, bool) or not isinstance(policy_version, int)
        ):
            raise TypeError(
                "PolicyAgeFilter policy_version: expected an int or a callable returning one, "
                f"got {policy_version!r}"
            )
        super().__init__()
        self.policy_version = policy_version
        self.max_policy_lag = max_policy_lag
        self.policy_version_key = unravel_key(policy_version_key)
        self.strict = bool(strict)

    def current_version(self) -> int:
        """The current policy version."""
        version = self.policy_version
        return int(version() if callable(version) else version)

    def _filter(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims == 0:
            return tensordict
        versions = tensordict.get(self.policy_version_key, None)
        if versions is None:
            message = (
                f"PolicyAgeFilter: expected the entry {self.policy_version_key!r} in the data, "
                f"got keys {_key_list(tensordict)}"
            )
            if self.strict:
                raise KeyError(message)
            warnings.warn(message + "; the data pass unfiltered", UserWarning, stacklevel=3)
            return tensordict
        oldest = versions.reshape(tensordict.batch_size[0], -1).min(-1).values
        fresh = (self.current_version() - oldest) <= self.max_policy_lag
        if bool(fresh.all()):
            return tensordict
        return tensordict[fresh]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Drop the stale items of sampled data."""
        return self._filter(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._filter(tensordict)

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Drop the stale items of data written to a buffer."""
        return self._filter(tensordict)

    def _needs_inverse(self) -> bool:
        # in an env, the inverse path carries actions, not collected data
        return False

    def __repr__(self) -> str:
        return (
            f"PolicyAgeFilter(policy_version={self.policy_version!r}, "
            f"max_policy_lag={self.max_policy_lag}, policy_version_key={self.policy_version_key!r})"
        )
