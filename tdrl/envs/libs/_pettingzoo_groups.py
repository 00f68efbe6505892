"""PettingZoo agent groups: the layout of a group's data and the per-agent conversions.

A :class:`Group` gathers the agents of one entry of ``group_map``: its action and
observation specs (dense, or stacked per agent when the agents differ), how each agent's
raw observation becomes the group's entries and how each agent's row of the group's
action becomes what PettingZoo's ``step`` takes. Used by
:class:`~tdrl.envs.libs.pettingzoo.PettingZooWrapper`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.data.specs import Categorical, Composite, NonTensor
from tdrl.envs.libs._gym_spaces import is_dict_space, make_space_codec
from tdrl.envs.libs._marl import ACTION_ERROR, check_action_shape, group_spec

__all__ = ["Group", "dig", "nest", "numpy_dtype"]


def nest(flat: Mapping[tuple, Any]) -> dict:
    """Nested dicts from a mapping of key tuples, e.g. ``{("a", "b"): 1}`` -> ``{"a": {"b": 1}}``."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return out


def dig(value: Any, path: tuple) -> Any:
    """``value[path[0]][path[1]]...``."""
    for part in path:
        value = value[part]
    return value


_NUMPY_DTYPES = {
    dtype: torch.empty((), dtype=dtype).numpy().dtype
    for dtype in (
        torch.float16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    )
}


def numpy_dtype(spec: Any) -> np.dtype | None:
    """The numpy dtype of a numeric tensor spec's data, or None for other specs."""
    if isinstance(spec, (Composite, NonTensor)):
        return None
    return _NUMPY_DTYPES.get(spec.dtype)


# ------------------------------------------------------------------------ observations
def _leaf_paths(space: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    if is_dict_space(space):
        out = []
        for key, sub in space.spaces.items():
            out.extend(_leaf_paths(sub, (*path, str(key))))
        return out
    return [(path, space)]


def _observation_layout(space: Any) -> list[tuple[tuple, tuple, Any]]:
    """``(key in the group, path in the raw observation, leaf space)`` of each observed entry.

    A dict observation with an ``"observation"`` entry (PettingZoo's classic games) gives its
    entries directly (``"observation"``, ``"action_mask"``, ...); another dict observation goes
    under ``"observation"``; any other space is ``"observation"``.
    """
    if is_dict_space(space) and "observation" in space.spaces:
        return [(path, path, leaf) for path, leaf in _leaf_paths(space)]
    return [(("observation", *path), path, leaf) for path, leaf in _leaf_paths(space)]


# --------------------------------------------------------------------------- actions
def _action_writer(
    space: Any, categorical: bool, key: tuple, agent: str, owner: str
) -> Callable[[np.ndarray], Any]:
    """How an agent's row of the group's action (numpy) becomes what PettingZoo's ``step`` takes.

    Discrete actions are checked against the space (a ValueError names the key and agent);
    array actions are copied, so that an env editing its action in place leaves the data intact.
    """
    if type(space).__name__ == "Discrete":
        n, start = int(space.n), int(getattr(space, "start", 0))

        def check(index: int) -> int:
            if not 0 <= index < n:
                raise ValueError(
                    ACTION_ERROR.format(
                        env=owner,
                        key=key,
                        expected=f"an action in [0, {n}) for agent {agent!r}",
                        got=index,
                    )
                )
            return index + start

        if categorical:
            return lambda value: check(int(value))
        return lambda value: check(int(value.argmax()))
    codec = make_space_codec(space, (), categorical)
    write_numpy = codec.write_numpy
    if write_numpy is not None:
        return lambda row: write_numpy(np.array(row))
    return lambda row: codec.write(torch.from_numpy(np.array(row)))


class Group:
    """One group's layout and the per-agent conversions of its data."""

    def __init__(
        self, name: str, agents: list[str], env: Any, categorical: bool, owner: str
    ) -> None:
        self.name = name
        self.agents = agents
        self.n = len(agents)
        self.action_key = (name, "action")
        self.writers = []
        self.readers = []
        # per agent: the codec's in-place reader of each entry (None where it has none)
        self.read_intos: list[dict] = []
        action_specs, observation_specs = [], []
        for agent in agents:
            action_space = env.action_space(agent)
            action_specs.append(
                Composite(action=make_space_codec(action_space, (), categorical).spec)
            )
            self.writers.append(
                _action_writer(action_space, categorical, self.action_key, agent, owner)
            )
            layout = _observation_layout(env.observation_space(agent))
            readers = {}
            read_intos = {}
            entries = {}
            for key, path, leaf in layout:
                codec = make_space_codec(leaf, (), False)
                read_intos[key] = codec.read_into
                spec = codec.spec
                if key == ("action_mask",):
                    spec = Categorical(2, spec.shape, dtype=torch.bool)
                    reader = _mask_reader(codec.read)
                else:
                    reader = _contiguous_reader(codec.read)
                readers[key] = (path, reader)
                entries[key] = spec
            self.readers.append(readers)
            self.read_intos.append(read_intos)
            observation_specs.append(Composite(nest(entries)))
        self.action_spec, het_action = group_spec(action_specs, 0)
        self.observation_spec, het_observation = group_spec(observation_specs, 0)
        self.heterogeneous = het_action or het_observation
        self.observation_keys = list(self.readers[0])
        self.action_shape = None if het_action else self.action_spec["action"].shape
        self.has_action_mask = all(("action_mask",) in readers for readers in self.readers)
        # a dense discrete action spec whose mask has the action mask's shape
        action = None if het_action else self.action_spec["action"]
        self.masks_actions = bool(
            self.has_action_mask
            and not self.heterogeneous
            and hasattr(action, "update_mask")
            and tuple(self.observation_spec["action_mask"].shape) == (self.n, action.n)
        )
        self.mask_shapes = [
            spec["action_mask"].shape if self.has_action_mask else None
            for spec in observation_specs
        ]
        self.last: list[dict] = [{} for _ in agents]
        self.layout = self._dense_layout()
        # a copy of the group's last arrays (read_arrays): absent agents keep their rows
        self.last_arrays: list[np.ndarray] | None = None

    def _dense_layout(self) -> list[tuple[tuple, np.dtype, list]] | None:
        """The dense reading of the group's observations, or None when it has none.

        Per observed entry: the group's shape, numpy dtype and each agent's way to fill its
        row; None when an entry is not one numeric tensor for the whole group.
        """
        if self.heterogeneous:
            return None
        layout = []
        for key in self.observation_keys:
            spec = self.observation_spec[key]
            dtype = numpy_dtype(spec)
            if dtype is None:
                return None
            fills = []
            for readers, read_intos in zip(self.readers, self.read_intos):
                path, reader = readers[key]
                read_into = read_intos[key]
                # an agent's row of a (n,)-shaped entry is a scalar, not a view to write into
                if read_into is None or len(spec.shape) < 2:
                    fills.append((path, _filler(reader)))
                else:
                    fills.append((path, _row_filler(read_into)))
            layout.append((tuple(spec.shape), dtype, fills))
        return layout

    def read_arrays(self, observations: Mapping, acting: str | None) -> list[np.ndarray]:
        """The group's observed entries as arrays (one per key, agents along the first dim).

        Only for groups with a dense layout. Absent agents keep their last rows; in AEC envs
        the agents not to act get all-True action masks (see :meth:`read_observations`).
        """
        arrays = [np.empty(shape, dtype) for shape, dtype, _ in self.layout]
        last = self.last_arrays
        for j, agent in enumerate(self.agents):
            raw = observations.get(agent)
            if raw is None:
                if last is None:
                    raise ValueError(
                        f"PettingZoo group {self.name!r}: agent {agent!r} has no observation "
                        f"and none was seen before (observed agents: {sorted(observations)})"
                    )
                for array, previous in zip(arrays, last):
                    array[j] = previous[j]
                continue
            for array, (_, _, fills) in zip(arrays, self.layout):
                path, fill = fills[j]
                fill(array, j, dig(raw, path) if path else raw)
        self.last_arrays = [array.copy() for array in arrays]
        if acting is not None and self.has_action_mask:
            mask = arrays[self.observation_keys.index(("action_mask",))]
            for j, agent in enumerate(self.agents):
                if agent != acting:
                    mask[j] = True
        return arrays

    def read_observations(self, observations: Mapping, acting: str | None) -> list[dict]:
        """Each agent's observed entries; absent agents keep their last ones.

        ``acting`` (AEC envs) is the agent to act next: the action masks of the others are
        all True, as they cannot act.
        """
        out = []
        for j, agent in enumerate(self.agents):
            raw = observations.get(agent)
            if raw is None:
                entries = self.last[j]
            else:
                entries = {
                    key: reader(dig(raw, path)) for key, (path, reader) in self.readers[j].items()
                }
                # a copy: the tensors may view arrays the env edits after the agent has left
                self.last[j] = {key: value.clone() for key, value in entries.items()}
            if acting is not None and self.has_action_mask and agent != acting:
                entries = dict(entries)
                entries[("action_mask",)] = torch.ones(self.mask_shapes[j], dtype=torch.bool)
            out.append(entries)
        return out

    def actions(self, tensordict: TensorDictBase, owner: str) -> Any:
        """The rows of the group's action (numpy), one per agent."""
        if self.heterogeneous:
            agents = tensordict.get(self.name).unbind(0)
            return [_numpy(td.get("action")) for td in agents]
        action = check_action_shape(
            owner, self.action_key, tensordict.get(self.action_key, None), self.action_shape
        )
        return _numpy(action)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _filler(reader: Callable[[Any], torch.Tensor]) -> Callable[[np.ndarray, int, Any], None]:
    """Write what ``reader`` reads as row ``j`` of a group's array."""

    def fill(array: np.ndarray, j: int, value: Any) -> None:
        array[j] = reader(value).numpy()

    return fill


def _row_filler(
    read_into: Callable[[np.ndarray, Any], None],
) -> Callable[[np.ndarray, int, Any], None]:
    """Write a value as row ``j`` of a group's array with a codec's in-place reader."""

    def fill(array: np.ndarray, j: int, value: Any) -> None:
        read_into(array[j], value)

    return fill


def _mask_reader(read: Callable[[Any], torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    return lambda value: read(value).to(torch.bool)


def _contiguous_reader(read: Callable[[Any], torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    """``read`` of a copy of the arrays torch cannot view (e.g. flipped, negative strides)."""

    def contiguous_read(value: Any) -> torch.Tensor:
        if type(value) is np.ndarray and not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        return read(value)

    return contiguous_read
