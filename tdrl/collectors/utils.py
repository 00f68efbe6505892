"""Helpers for collected data: cutting a batch of steps into padded trajectories."""

from __future__ import annotations

import torch
from tensordict import LazyStackedTensorDict, NestedKey, TensorDictBase

__all__ = ["split_trajectories"]


def _replace_last(key: NestedKey, name: str) -> NestedKey:
    if isinstance(key, str):
        return name
    return (*key[:-1], name)


def _prefixed(prefix: str | None, name: str) -> NestedKey:
    return name if prefix is None else (prefix, name)


def _traj_ids_from_done(data: TensorDictBase, done_key: NestedKey) -> torch.Tensor:
    """Number the trajectories of ``data`` from its ``("next", done_key)`` flags.

    A trajectory ends at a step whose done (or truncated, when present next to it) flag is set;
    the ids grow along the time dim and never repeat across the leading dims.
    """
    next_data = data.get("next", None)
    done = None if next_data is None else next_data.get(done_key, None)
    if done is None:
        raise KeyError(
            "split_trajectories: no trajectory ids and no done flags found: expected an entry "
            f"{_replace_last(done_key, 'traj_ids')!r} or ('next', {done_key!r}), got keys "
            f"{sorted(map(str, data.keys(include_nested=True, leaves_only=True)))}"
        )
    truncated = next_data.get(_replace_last(done_key, "truncated"), None)
    if truncated is not None and truncated.shape == done.shape:
        done = done | truncated
    batch = data.batch_size
    done = done.reshape(*batch, -1).any(-1)
    time_dim = len(batch) - 1
    # a trajectory starts right after a done step: shift by one step along time
    starts = torch.zeros_like(done)
    starts.narrow(time_dim, 1, batch[-1] - 1).copy_(done.narrow(time_dim, 0, batch[-1] - 1))
    ids = starts.reshape(-1, batch[-1]).long().cumsum(-1)
    # make the ids of each leading element start after the largest id of the previous one
    offsets = (ids[:, -1] + 1).cumsum(0) - (ids[:, -1] + 1)
    return (ids + offsets.unsqueeze(-1)).reshape(batch)


def split_trajectories(
    rollout_tensordict: TensorDictBase,
    *,
    prefix: str | None = None,
    trajectory_key: NestedKey | None = None,
    done_key: NestedKey | None = None,
    as_nested: bool = False,
) -> TensorDictBase:
    """Cut a batch of steps into one row per trajectory, padded with zeros to the longest one.

    The trajectories are read from a trajectory-id entry (``(prefix, "traj_ids")``; the
    ``"collector"`` prefix is used when the data has a ``"collector"`` entry and neither
    ``prefix`` nor ``trajectory_key`` is given). Without it, they are delimited by the
    ``("next", done_key)`` flags, or-ed with ``"truncated"`` when present. The result has
    batch size ``[n_traj, max_len]`` and a boolean mask entry next to the ids (``(prefix,
    "mask")``) that is True on real steps and False on padding. The rows follow the order in
    which the trajectories appear in the flattened input (leading dims first, then time).

    Args:
        rollout_tensordict: data of batch size ``[*B, T]``, time last.
        prefix: the sub-tensordict holding ``"traj_ids"`` and where ``"mask"`` is written.
        trajectory_key: the full key of the trajectory ids (overrides ``prefix``); the mask is
            written next to it.
        done_key: the done entry under ``"next"`` used when no ids are present (``"done"``).
        as_nested: return the unpadded trajectories as a tensordict of jagged nested
            tensors, batch size ``[n_traj, -1]`` (its ``to_padded_tensor(mask_key=...)`` gives
            the padded result back).

    Returns:
        the padded tensordict ``[n_traj, max_len]`` (or the nested one with ``as_nested``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict(
        ...     {"obs": torch.arange(6.0), "collector": {"traj_ids": torch.tensor([0, 0, 0, 1, 1, 2])}},
        ...     batch_size=[6],
        ... )
        >>> out = split_trajectories(data)
        >>> out.batch_size
        torch.Size([3, 3])
        >>> out["obs"]
        tensor([[0., 1., 2.],
                [3., 4., 0.],
                [5., 0., 0.]])
        >>> out["collector", "mask"]
        tensor([[ True,  True,  True],
                [ True,  True, False],
                [ True, False, False]])
    """
    if not isinstance(rollout_tensordict, TensorDictBase):
        raise TypeError(
            "split_trajectories: expected a TensorDictBase, got "
            f"{type(rollout_tensordict).__name__}"
        )
    if rollout_tensordict.batch_dims == 0 or rollout_tensordict.batch_size[-1] == 0:
        raise ValueError(
            "split_trajectories: expected data with a non-empty trailing time dim, got batch "
            f"size {tuple(rollout_tensordict.batch_size)}"
        )
    if trajectory_key is not None:
        traj_key = trajectory_key
        mask_key = _replace_last(trajectory_key, "mask")
    else:
        if prefix is None and "collector" in rollout_tensordict.keys():
            prefix = "collector"
        traj_key = _prefixed(prefix, "traj_ids")
        mask_key = _prefixed(prefix, "mask")
    data = rollout_tensordict.copy()
    traj_ids = data.get(traj_key, None)
    if traj_ids is None:
        traj_ids = _traj_ids_from_done(data, "done" if done_key is None else done_key)
        data.set(traj_key, traj_ids)
    elif traj_ids.shape != data.batch_size:
        raise ValueError(
            f"split_trajectories: the trajectory ids at key {traj_key!r} must have the batch "
            f"shape {tuple(data.batch_size)}, got {tuple(traj_ids.shape)}"
        )
    flat = data.reshape(-1).clone(False)
    ids = traj_ids.reshape(-1)
    count = ids.numel()
    # a new segment starts wherever the id changes from the previous flattened step
    new_segment = torch.ones(count, dtype=torch.bool, device=ids.device)
    new_segment[1:] = ids[1:] != ids[:-1]
    segment = new_segment.long().cumsum(0) - 1
    starts = new_segment.nonzero().squeeze(-1)
    lengths = torch.diff(starts, append=torch.tensor([count], device=ids.device))
    position = torch.arange(count, device=ids.device) - starts[segment]
    if as_nested:
        flat.set(mask_key, torch.ones(count, dtype=torch.bool, device=ids.device))
        rows = LazyStackedTensorDict.lazy_stack(list(flat.split(lengths.tolist(), 0)), 0)
        return rows.densify(layout=torch.jagged)
    n_traj, max_len = starts.numel(), int(lengths.max())
    out = flat.apply(
        lambda value: value.new_zeros((n_traj, max_len, *value.shape[1:])),
        batch_size=[n_traj, max_len],
    )
    out[segment, position] = flat
    mask = torch.zeros((n_traj, max_len), dtype=torch.bool, device=ids.device)
    mask[segment, position] = True
    out.set(mask_key, mask)
    return out
