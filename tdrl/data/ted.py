"""Converters between the TED layout and compact ones: flat (deduplicated), nested and HDF5.

TED (the episode data format) stores what belongs to step ``t`` at the root of a
TensorDict and what belongs to ``t + 1`` under ``"next"``. Within a trajectory the
observations at ``("next", key)`` of step ``t`` are the root ``key`` of step ``t + 1``,
so TED holds them twice. The converters here work on TED data whose last batch dim is
time (``[*B, T]``, as rollouts are laid out):

* :class:`TED2Flat` / :class:`Flat2TED`: drop the duplicated ``"next"`` entries, keeping
  them only at the steps where they cannot be recovered from the following root entry
  (ends of trajectories, ends of rows, and any step where the two differ), and restore them.
  The round trip is exact.
* :class:`TED2Nested` / :class:`Nested2TED`: one row per trajectory, as jagged nested tensors.
* :class:`H5Split` / :class:`H5Combine`: write a flat TED TensorDict to an HDF5 file (one
  compressed dataset per entry) and read it back.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = [
    "DEFAULT_DONE_KEYS",
    "Flat2TED",
    "H5Combine",
    "H5Split",
    "Nested2TED",
    "TED2Flat",
    "TED2Nested",
]

#: The flags that end a trajectory in TED data (under ``"next"``).
DEFAULT_DONE_KEYS: tuple[str, ...] = ("done", "truncated", "terminated")
_DEFAULT_REWARD_KEYS = ("reward",)


def _as_tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _leaf_keys(td: TensorDictBase) -> list[tuple]:
    return [_as_tuple(key) for key in td.keys(include_nested=True, leaves_only=True)]


def duplicated_keys(
    td: TensorDictBase,
    done_keys: tuple = DEFAULT_DONE_KEYS,
    reward_keys: tuple = _DEFAULT_REWARD_KEYS,
) -> list[tuple]:
    """Keys stored both at the root and under ``"next"`` (observations, states, done flags).

    Reward entries are never duplicated. ``done_keys`` is accepted for API compatibility:
    done flags are deduplicated like observations (exactly, as a flag is kept wherever it
    differs from the root flag of the following step).
    """
    if "next" not in td.keys():
        return []
    root = {key for key in _leaf_keys(td) if key[0] != "next"}
    skip = set(reward_keys)
    return [key for key in _leaf_keys(td.get("next")) if key in root and key[-1] not in skip]


def _rows(value: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """``[*B, T, *feature]`` as ``[prod(B), T, -1]``."""
    time = value.shape[batch_dims - 1]
    rows = value.shape[: batch_dims - 1].numel()
    return value.reshape(rows, time, value.shape[batch_dims:].numel())


def find_stops(
    td: TensorDictBase,
    keys: list[tuple],
    done_key: Any = ("next", "done"),
) -> torch.Tensor:
    """Flat positions (over ``[*B, T]``) whose ``"next"`` entries cannot come from step ``t + 1``.

    A step is a stop when it is the last of its row, when ``done_key`` is set, or when one of
    ``keys`` differs between ``("next", key)`` at ``t`` and ``key`` at ``t + 1``.
    """
    dims = td.batch_dims
    if dims == 0:
        raise ValueError("TED data needs at least one batch dimension (time), got batch_size=[]")
    time = td.shape[-1]
    stop = torch.zeros(td.shape.numel() // max(time, 1), time, dtype=torch.bool)
    if time:
        stop[:, -1] = True
    done = td.get(done_key, None)
    if done is not None:
        stop |= _rows(done, dims).ne(0).any(-1)
    for key in keys:
        if time < 2:
            break
        current = _rows(td.get(("next", *key)), dims)
        following = _rows(td.get(key), dims)
        stop[:, :-1] |= (current[:, :-1] != following[:, 1:]).any(-1)
    return stop.reshape(-1).nonzero().squeeze(1)


class _TEDConverter:
    """The key settings shared by the TED converters (done, shift, is-full, done and reward keys)."""

    def __init__(
        self,
        done_key: Any = ("next", "done"),
        shift_key: str = "shift",
        is_full_key: str = "is_full",
        done_keys: tuple = DEFAULT_DONE_KEYS,
        reward_keys: tuple = _DEFAULT_REWARD_KEYS,
    ) -> None:
        self.done_key = done_key
        self.shift_key = shift_key
        self.is_full_key = is_full_key
        self.done_keys = set(done_keys)
        self.reward_keys = tuple(reward_keys)


class TED2Flat(_TEDConverter):
    """Turns TED data into a flat, deduplicated TensorDict (see the module docs).

    The result has an empty batch size and two entries: ``"data"`` (the input without the
    duplicated ``"next"`` entries, same batch size) and ``"stops"`` (one row per kept
    position: ``"index"``, the flat position over the input's batch dims, and the ``"next"``
    entries there).

    Args:
        done_key: the flag that ends trajectories.
        shift_key: accepted for API compatibility; the flat layout needs no shift.
        is_full_key: accepted for API compatibility; the flat layout needs no fill flag.
        done_keys: accepted for API compatibility (done flags are deduplicated too).
        reward_keys: leaf names of rewards (kept in full).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> obs = torch.arange(6.0).unsqueeze(-1)
        >>> ted = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:],
        ...     "done": torch.zeros(5, 1, dtype=torch.bool)}}, [5])
        >>> flat = TED2Flat()(ted)
        >>> ("next", "obs") in flat["data"].keys(True), flat["stops", "index"].tolist()
        (False, [4])
        >>> bool((Flat2TED()(flat) == ted).all())
        True
    """

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        """Flatten ``data``; ``path`` is accepted for API compatibility (nothing is written)."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"TED2Flat expects a TensorDict, got {type(data).__name__}")
        keys = duplicated_keys(data, self.done_keys, self.reward_keys)
        stops = find_stops(data, keys, self.done_key)
        flat_view = data.reshape(-1)
        kept = data.exclude(*[("next", *key) for key in keys])
        stop_rows = {("next", *key): flat_view.get(("next", *key))[stops] for key in keys}
        stop_td = TensorDict({"index": stops}, batch_size=[stops.numel()])
        for key, value in stop_rows.items():
            stop_td.set(key, value)
        return TensorDict({"data": kept, "stops": stop_td}, batch_size=[])


class Flat2TED(_TEDConverter):
    """Restores the TED layout from the output of :class:`TED2Flat`.

    Args:
        done_key, shift_key, is_full_key, done_keys, reward_keys: as in :class:`TED2Flat`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> obs = torch.arange(4.0)
        >>> ted = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:]}}, [3])
        >>> Flat2TED()(TED2Flat()(ted))["next", "obs"]
        tensor([1., 2., 3.])
    """

    def __call__(self, data: TensorDictBase, out: TensorDictBase | None = None) -> TensorDictBase:
        """Rebuild the TED TensorDict (written into ``out`` when given)."""
        if not isinstance(data, TensorDictBase) or "data" not in data.keys():
            raise ValueError(
                "Flat2TED expects the output of TED2Flat (entries 'data' and 'stops'), got "
                f"{type(data).__name__} with keys {list(data.keys()) if isinstance(data, TensorDictBase) else []}"
            )
        kept = data.get("data")
        stops = data.get("stops")
        index = stops.get("index")
        result = kept.clone(False)
        if "next" in stops.keys():
            for key in _leaf_keys(stops.get("next")):
                result.set(
                    ("next", *key),
                    restore_next(kept.get(key), index, stops.get(("next", *key)), kept.batch_dims),
                )
        if out is not None:
            out.update(result)
            return out
        return result


def restore_next(
    root: torch.Tensor, stops: torch.Tensor, at_stops: torch.Tensor, batch_dims: int
) -> torch.Tensor:
    """The ``"next"`` values of a duplicated entry from its root values and the kept stop rows."""
    shape = root.shape
    flat = root.reshape(-1, *shape[batch_dims:])
    following = torch.roll(flat, -1, 0) if flat.shape[0] else flat.clone()
    following[stops] = at_stops.to(following.dtype)
    return following.reshape(shape)


def trajectory_offsets(data: TensorDictBase, done_key: Any = ("next", "done")) -> torch.Tensor:
    """Offsets (length ``num_trajectories + 1``) of the trajectories of flattened TED data."""
    stops = find_stops(data, [], done_key)
    return torch.cat([torch.zeros(1, dtype=torch.long), stops + 1])


class TED2Nested(_TEDConverter):
    """Splits TED data into trajectories: one row per trajectory, as jagged nested tensors.

    Trajectories end where ``done_key`` is set and at the end of each row of the time dim.
    The result has batch size ``[num_trajectories]``; every leaf is a nested tensor of shape
    ``[num_trajectories, j, *feature]`` sharing one set of offsets.

    Args:
        done_key: the flag that ends trajectories.
        shift_key, is_full_key, done_keys, reward_keys: accepted for API compatibility with
            :class:`TED2Flat`; every entry is kept.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> ted = TensorDict({"obs": torch.arange(5), "next": {"done": done}}, [5])
        >>> nested = TED2Nested()(ted)
        >>> nested.batch_size, [t.tolist() for t in nested["obs"].unbind(0)]
        (torch.Size([2]), [[0, 1], [2, 3, 4]])
        >>> bool((Nested2TED()(nested) == ted).all())
        True
    """

    def __call__(self, data: TensorDictBase, path: Any = None) -> TensorDictBase:
        """Split ``data`` into trajectories; ``path`` is accepted for API compatibility."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"TED2Nested expects a TensorDict, got {type(data).__name__}")
        offsets = trajectory_offsets(data, self.done_key)
        flat = data.reshape(-1)
        source = {}
        for key in _leaf_keys(flat):
            values = flat.get(key)
            source[key] = torch.nested.nested_tensor_from_jagged(values, offsets)
        out = TensorDict({}, batch_size=[offsets.numel() - 1])
        for key, value in source.items():
            out.set(key, value)
        return out


class Nested2TED(_TEDConverter):
    """Concatenates the trajectories made by :class:`TED2Nested` back into flat TED data.

    Args:
        done_key, shift_key, is_full_key, done_keys, reward_keys: accepted for symmetry with
            :class:`TED2Nested`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> ted = TensorDict({"obs": torch.arange(3.0)}, [3])
        >>> Nested2TED()(TED2Nested()(ted))["obs"]
        tensor([0., 1., 2.])
    """

    def __call__(self, data: TensorDictBase, out: TensorDictBase | None = None) -> TensorDictBase:
        """Concatenate the trajectories (written into ``out`` when given)."""
        source = {}
        count = None
        for key in _leaf_keys(data):
            value = data.get(key)
            if not getattr(value, "is_nested", False):
                raise TypeError(
                    f"Nested2TED expects nested tensors, got a dense tensor at key {key}"
                )
            values = value.values()
            source[key] = values
            count = values.shape[0]
        result = TensorDict({}, batch_size=[count or 0])
        for key, value in source.items():
            result.set(key, value)
        if out is not None:
            out.update(result)
            return out
        return result


def _h5_path(key: tuple) -> str:
    return "/".join(key)


class H5Split:
    """Writes the output of :class:`TED2Flat` to an HDF5 file, one compressed dataset per entry.

    Args:
        h5_kwargs: options for ``h5py.Group.create_dataset`` (default gzip compression).
        done_key, done_keys, reward_keys: as in :class:`TED2Flat`, used when ``data`` is TED
            data that still needs flattening.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensordict import TensorDict
        >>> obs = torch.arange(5.0)
        >>> ted = TensorDict({"obs": obs[:-1], "next": {"obs": obs[1:]}}, [4])
        >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
        >>> _ = H5Split()(ted, path)
        >>> bool((H5Combine()(path) == ted).all())
        True
    """

    def __init__(
        self,
        h5_kwargs: dict | None = None,
        done_key: Any = ("next", "done"),
        done_keys: tuple = DEFAULT_DONE_KEYS,
        reward_keys: tuple = _DEFAULT_REWARD_KEYS,
    ) -> None:
        self.h5_kwargs = {"compression": "gzip"} if h5_kwargs is None else dict(h5_kwargs)
        self._flatten = TED2Flat(done_key=done_key, done_keys=done_keys, reward_keys=reward_keys)

    def __call__(
        self, data: TensorDictBase, path: str | os.PathLike, metadata: dict | None = None
    ) -> str:
        """Write ``data`` (TED, or already flat) to the HDF5 file ``path``; returns the path."""
        import h5py

        flat = data if "stops" in data.keys() and "data" in data.keys() else self._flatten(data)
        path = os.fspath(path)
        with h5py.File(path, "w") as handle:
            for part in ("data", "stops"):
                td = flat.get(part)
                group = handle.create_group(part)
                group.attrs["batch_size"] = json.dumps(list(td.batch_size))
                for key in _leaf_keys(td):
                    value = td.get(key).detach().cpu().contiguous()
                    kwargs = self.h5_kwargs if value.numel() else {}
                    group.create_dataset(_h5_path(key), data=value.numpy(), **kwargs)
                nodes = {
                    _h5_path(_as_tuple(key)): list(td.get(key).batch_size)
                    for key in td.keys(include_nested=True)
                    if isinstance(td.get(key), TensorDictBase)
                }
                group.attrs["nodes"] = json.dumps(nodes)
            handle.attrs["tdrl_format"] = "ted-flat"
            handle.attrs["metadata"] = json.dumps(metadata or {})
        return path


class H5Combine:
    """Reads an HDF5 file written by :class:`H5Split` back into TED data.

    Args:
        flat: if ``True`` return the flat TensorDict (``"data"`` / ``"stops"``) unexpanded.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensordict import TensorDict
        >>> ted = TensorDict({"obs": torch.zeros(3, 2)}, [3])
        >>> path = H5Split()(ted, os.path.join(tempfile.mkdtemp(), "data.h5"))
        >>> H5Combine()(path)["obs"].shape
        torch.Size([3, 2])
    """

    def __init__(self, flat: bool = False) -> None:
        self.flat = flat
        self._expand = Flat2TED()

    @staticmethod
    def read_metadata(path: str | os.PathLike) -> dict:
        """The metadata dict stored by :class:`H5Split`."""
        import h5py

        with h5py.File(os.fspath(path), "r") as handle:
            _check_h5(handle, path)
            return json.loads(handle.attrs["metadata"])

    def __call__(
        self, path: str | os.PathLike, out: TensorDictBase | None = None
    ) -> TensorDictBase:
        """Read the file at ``path`` (written into ``out`` when given)."""
        import h5py

        with h5py.File(os.fspath(path), "r") as handle:
            _check_h5(handle, path)
            parts = {}
            for part in ("data", "stops"):
                group = handle[part]
                td = TensorDict({}, batch_size=json.loads(group.attrs["batch_size"]))
                for name, batch in json.loads(group.attrs["nodes"]).items():
                    td.set(tuple(name.split("/")), TensorDict({}, batch_size=batch))
                group.visititems(lambda name, item, td=td: _read_dataset(td, name, item))
                parts[part] = td
        flat = TensorDict(parts, batch_size=[])
        result = flat if self.flat else self._expand(flat)
        if out is not None:
            out.update(result)
            return out
        return result


def _check_h5(handle: Any, path: Any) -> None:
    if (
        handle.attrs.get("tdrl_format") != "ted-flat"
        or "data" not in handle
        or "stops" not in handle
    ):
        raise ValueError(
            f"{os.fspath(path)} is not a flat TED HDF5 file written by H5Split "
            "(missing 'tdrl_format' attribute or 'data' / 'stops' groups)"
        )


def _read_dataset(td: TensorDictBase, name: str, item: Any) -> None:
    import h5py

    if isinstance(item, h5py.Dataset):
        td.set(tuple(name.split("/")), torch.from_numpy(item[()]))
