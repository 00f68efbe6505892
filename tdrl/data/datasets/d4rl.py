""":class:`D4RLExperienceReplay`: the D4RL offline datasets (HDF5 files), in the TED layout.

Follows the D4RL 1.1 HDF5 layout (the files D4RL's ``get_dataset`` reads): top-level
datasets ``observations``, ``actions``, ``rewards``, ``terminals``, ``timeouts`` (one row
per step, trajectories one after the other), optionally ``next_observations``, a group
``infos`` of per-step arrays and a group ``metadata`` of dataset-level values.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.data.datasets import _files, _ted
from tdrl.data.datasets._ted import DONE_NAMES, episode_ids, fill, shift_next, torch_dtype
from tdrl.data.datasets.common import BaseDatasetExperienceReplay
from tdrl.data.replay_buffers import Sampler, Writer

__all__ = ["D4RLExperienceReplay", "d4rl_url"]

_BASE_URL = "http://rail.eecs.berkeley.edu/datasets/offline_rl"
_MUJOCO_ENVS = ("halfcheetah", "hopper", "walker2d", "ant")
_MUJOCO_LEVELS = ("random", "medium", "expert", "medium-replay", "full-replay", "medium-expert")
_ADROIT = ("pen", "hammer", "door", "relocate")
_ANTMAZE_MAZES = {"umaze": "u-maze", "medium": "big-maze", "large": "hardest-maze"}
_KITCHEN = {
    "kitchen-complete-v0": "mini_kitchen_microwave_kettle_light_slider-v0",
    "kitchen-partial-v0": "kitchen_microwave_kettle_light_slider-v0",
    "kitchen-mixed-v0": "kitchen_microwave_kettle_bottomburner_light-v0",
}
_REQUIRED = ("observations", "actions", "rewards", "terminals")


def d4rl_url(dataset_id: str) -> str:
    """The download address of a D4RL dataset's HDF5 file.

    Covers the gym-mujoco v1/v2, Adroit v1, maze2d v1, antmaze v0/v2 and kitchen datasets;
    other datasets are read through the ``d4rl`` package (``from_env=True``).

    Raises:
        ValueError: the dataset id is not one of those families.

    Examples:
        >>> d4rl_url("walker2d-medium-replay-v2")
        'http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/walker2d_medium_replay-v2.hdf5'
    """
    name, _, version = dataset_id.rpartition("-")
    env, _, level = name.partition("-")
    if env in _MUJOCO_ENVS and level in _MUJOCO_LEVELS and version in ("v1", "v2"):
        return f"{_BASE_URL}/gym_mujoco_{version}/{env}_{level.replace('-', '_')}-{version}.hdf5"
    if env in _ADROIT and level in ("human", "expert", "cloned") and version == "v1":
        return f"{_BASE_URL}/hand_dapg_v1/{dataset_id}.hdf5"
    if env == "maze2d" and version == "v1":
        maze, _, dense = level.partition("-")
        if maze in ("umaze", "medium", "large") and dense in ("", "dense"):
            return f"{_BASE_URL}/maze2d/maze2d-{maze}-{dense or 'sparse'}-v1.hdf5"
    if env == "antmaze" and version in ("v0", "v2"):
        maze, _, kind = level.partition("-")
        if (
            maze in _ANTMAZE_MAZES
            and kind in ("", "play", "diverse")
            and (maze == "umaze") == (kind in ("", "diverse"))
        ):
            multistart = kind != ""
            multigoal = kind == "diverse"
            folder, suffix = ("ant_maze_v2", "_fixed") if version == "v2" else ("ant_maze_new", "")
            return (
                f"{_BASE_URL}/{folder}/Ant_maze_{_ANTMAZE_MAZES[maze]}_noisy_multistart_"
                f"{multistart}_multigoal_{multigoal}_sparse{suffix}.hdf5"
            )
    if dataset_id in _KITCHEN:
        return f"{_BASE_URL}/kitchen/{_KITCHEN[dataset_id]}.hdf5"
    raise ValueError(
        f"no direct download address known for the D4RL dataset {dataset_id!r}: expected a "
        "gym-mujoco v1/v2, Adroit v1, maze2d v1, antmaze v0/v2 or kitchen v0 id (e.g. "
        "'hopper-medium-v2'); use from_env=True to read it through the d4rl package"
    )


def _flatten_h5(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every dataset of an h5py group, by its path (``"infos/qpos"``)."""
    out: dict[str, Any] = {}
    for name, item in group.items():
        path = f"{prefix}{name}"
        if hasattr(item, "items"):
            out.update(_flatten_h5(item, f"{path}/"))
        else:
            out[path] = item
    return out


def _to_python(value: Any) -> Any:
    value = value[()] if hasattr(value, "read_direct") else value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= 64 else f"array{value.shape}"
    if isinstance(value, np.generic):
        return value.item()
    return value


def _key_of(name: str) -> tuple:
    """The TED root key of a per-step array: ``infos/qpos`` -> ``("info", "qpos")``."""
    parts = name.split("/")
    if parts[0] == "infos":
        parts[0] = "info"
    return tuple(parts)


class D4RLExperienceReplay(BaseDatasetExperienceReplay):
    """The D4RL offline datasets as a read-only, memory-mapped replay buffer.

    The HDF5 file of ``dataset_id`` is downloaded once to ``root/raw/<dataset_id>.hdf5``
    (a file placed there by hand is used as is) and converted to the TED layout under
    ``root/<dataset_id>``. Each step holds ``"observation"``, ``"action"``, ``"episode"``
    (a trajectory id), the root ``"done"`` / ``"terminated"`` / ``"truncated"`` flags
    (all False) and ``"next"`` entries: ``"observation"``, ``"reward"``, ``"terminated"``
    (the file's ``terminals``), ``"truncated"`` (``timeouts``, and the last step of the file)
    and ``"done"``. Per-step ``infos/*`` arrays go under ``"info"`` (and ``("next",
    "info")``); ``metadata/*`` values go to :attr:`metadata`.

    When the file has no ``next_observations``, the next observation of a step is the
    observation of the following step, and is zero at the last step of a trajectory. The
    true next observation of a truncated trajectory's last step is then unknown: with
    ``terminate_on_end=False`` (D4RL's convention) those steps are dropped.

    Args:
        dataset_id: the D4RL dataset name, e.g. ``"hopper-medium-v2"``.
        batch_size: the default batch size of :meth:`sample`.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in
            :class:`~tdrl.data.ReplayBuffer` (the writer refuses writes by default).
        split_trajs: store one row per trajectory (``[n_trajectories, max_length]``, padded
            with zeros, with a boolean ``"mask"`` of the real steps), so samples are whole
            trajectories.
        from_env: read the data through the ``d4rl`` package (``gym.make(dataset_id,
            **env_kwargs).get_dataset()``) instead of downloading the file.
        use_truncated_as_done: ``("next", "done")`` is ``terminated | truncated`` (True) or
            ``terminated`` only (False).
        direct_download: download the HDF5 file without the ``d4rl`` package (the default
            unless ``from_env``); ``direct_download=True`` with ``from_env=True`` is an error.
        terminate_on_end: keep the last step of truncated trajectories when the next
            observation has to be reconstructed (default False).
        download: True (download when missing), False (never download: the raw file or the
            built dataset must be on disk) or ``"force"`` (download and build again).
        root: where datasets are kept (default ``~/.cache/tdrl/d4rl``).
        **env_kwargs: passed to ``gym.make`` when ``from_env=True``.

    Examples:
        >>> import tempfile, h5py, numpy as np
        >>> from tdrl.data.datasets import D4RLExperienceReplay
        >>> root = tempfile.mkdtemp()
        >>> raw = D4RLExperienceReplay.raw_file("hopper-medium-v2", root)
        >>> raw.parent.mkdir(parents=True)
        >>> with h5py.File(raw, "w") as f:
        ...     f["observations"] = np.random.randn(20, 11).astype("float32")
        ...     f["actions"] = np.random.randn(20, 3).astype("float32")
        ...     f["rewards"] = np.ones(20, "float32")
        ...     f["terminals"] = np.zeros(20, bool)
        ...     f["timeouts"] = np.arange(20) % 10 == 9
        >>> data = D4RLExperienceReplay("hopper-medium-v2", batch_size=4, root=root,
        ...     download=False)
        >>> len(data), data.sample()["next", "observation"].shape  # 2 truncated ends dropped
        (18, torch.Size([4, 11]))
    """

    def __init__(
        self,
        dataset_id: str,
        batch_size: int,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        split_trajs: bool = False,
        from_env: bool = False,
        use_truncated_as_done: bool = True,
        direct_download: bool | None = None,
        terminate_on_end: bool | None = None,
        download: bool | str = True,
        root: str | os.PathLike | None = None,
        **env_kwargs: Any,
    ) -> None:
        if direct_download is None:
            direct_download = not from_env
        if direct_download == from_env:
            raise ValueError(
                "D4RL data comes either from the d4rl package (from_env=True) or from the "
                f"HDF5 file (direct_download=True), got from_env={from_env}, "
                f"direct_download={direct_download}"
            )
        if terminate_on_end is None:
            terminate_on_end = False
        if use_truncated_as_done and terminate_on_end:
            warnings.warn(
                "Using use_truncated_as_done=True with terminate_on_end=True: the last step of "
                "each truncated trajectory is kept and flagged done; when the file records no "
                "next observation, its next observation is zero",
                UserWarning,
                stacklevel=2,
            )
        self.dataset_id = dataset_id
        self.from_env = bool(from_env)
        self.split_trajs = bool(split_trajs)
        self.use_truncated_as_done = bool(use_truncated_as_done)
        self.terminate_on_end = bool(terminate_on_end)
        root = Path(root) if root is not None else _files.default_root("d4rl")
        self.__dict__["_root"] = root
        options = {
            "source": "env" if from_env else "hdf5",
            "split_trajs": self.split_trajs,
            "use_truncated_as_done": self.use_truncated_as_done,
            "terminate_on_end": self.terminate_on_end,
        }

        def build(folder: Path, allow_download: bool) -> tuple[TensorDictBase, dict]:
            return self._build(folder, root, download, allow_download, env_kwargs)

        path = root / dataset_id
        data, metadata = self._load_or_build(path, download, options, build)
        self._open_data(
            data,
            path,
            metadata,
            {
                "sampler": sampler,
                "writer": writer,
                "collate_fn": collate_fn,
                "pin_memory": pin_memory,
                "prefetch": prefetch,
                "transform": transform,
                "batch_size": batch_size,
            },
        )

    @classmethod
    def raw_file(cls, dataset_id: str, root: str | os.PathLike | None = None) -> Path:
        """Where the HDF5 file of ``dataset_id`` is downloaded (place it there to build offline)."""
        root = Path(root) if root is not None else _files.default_root("d4rl")
        return cls._raw_folder(root, dataset_id).with_suffix(".hdf5")

    # -- building -------------------------------------------------------------------------------
    def _build(
        self,
        folder: Path,
        root: Path,
        download: bool | str,
        allow_download: bool,
        env_kwargs: dict,
    ) -> tuple[TensorDictBase, dict]:
        if self.from_env:
            return self._convert(self._env_arrays(env_kwargs), folder)
        h5py = _files.require("h5py", "h5py", "D4RLExperienceReplay")
        raw = self.raw_file(self.dataset_id, root)
        if download == "force" or not raw.exists():
            if not allow_download:
                raise FileNotFoundError(
                    f"D4RL dataset {self.dataset_id!r}: no built dataset and no raw file at {raw} "
                    "(download=False); pass download=True or place the HDF5 file there"
                )
            _files.download_url(d4rl_url(self.dataset_id), raw)
        try:
            handle = h5py.File(raw, "r")
        except OSError as err:
            raise RuntimeError(
                f"D4RL dataset {self.dataset_id!r}: {raw} is not a readable HDF5 file ({err}); "
                "delete it or pass download='force'"
            ) from err
        with handle:
            return self._convert(_flatten_h5(handle), folder, source=raw)

    def _env_arrays(self, env_kwargs: dict) -> dict[str, Any]:
        gym = _files.require("gym", "gym", "D4RLExperienceReplay(from_env=True)")
        _files.require("d4rl", "d4rl", "D4RLExperienceReplay(from_env=True)")
        env = gym.make(self.dataset_id, **env_kwargs)
        try:
            return dict(env.get_dataset())
        finally:
            env.close()

    def _convert(
        self, arrays: Mapping[str, Any], folder: Path, source: Any = None
    ) -> tuple[TensorDictBase, dict]:
        where = source if source is not None else f"the d4rl dataset {self.dataset_id!r}"
        missing = [name for name in _REQUIRED if name not in arrays]
        if missing:
            raise RuntimeError(
                f"{where} is not a D4RL dataset: expected the entries {list(_REQUIRED)}, "
                f"missing {missing}"
            )
        length = arrays["observations"].shape[0]
        metadata = {
            name[len("metadata/") :]: _to_python(value)
            for name, value in arrays.items()
            if name.startswith("metadata/")
        }
        per_step = {
            name: value
            for name, value in arrays.items()
            if not name.startswith("metadata/") and getattr(value, "shape", ())[:1] == (length,)
        }
        odd = [
            f"{name} {tuple(value.shape)}"
            for name, value in arrays.items()
            if name in _REQUIRED and value.shape[:1] != (length,)
        ]
        if odd:
            raise RuntimeError(
                f"{where}: every per-step entry must have {length} rows (as observations), got {odd}"
            )
        terminated = np.asarray(arrays["terminals"][()]).reshape(length).astype(bool)
        timeouts = arrays.get("timeouts")
        truncated = (
            np.zeros(length, bool)
            if timeouts is None
            else np.asarray(timeouts[()]).reshape(length).astype(bool)
        )
        truncated &= ~terminated
        if length:
            truncated[-1] |= not terminated[-1]
        ends = terminated | truncated
        has_next = "next_observations" in per_step
        # without recorded next observations, the last step of a truncated trajectory has
        # none: D4RL's convention drops it (terminate_on_end=False)
        keep = None if has_next or self.terminate_on_end else ~truncated
        entries: dict[Any, tuple] = {}
        sources: dict[Any, Any] = {}
        for name, value in per_step.items():
            if name in ("terminals", "timeouts"):
                continue
            if name == "observations":
                key: tuple = ("observation",)
            elif name == "next_observations":
                key = ("next", "observation")
            elif name == "actions":
                key = ("action",)
            elif name == "rewards":
                key = ("next", "reward")
            else:
                key = _key_of(name)
            feature = (1,) if key == ("next", "reward") else tuple(value.shape[1:])
            entries[key] = ((length, *feature), torch_dtype(value.dtype))
            sources[key] = value
        shifted = [
            key
            for key in sources
            if (key == ("observation",) or key[0] == "info") and ("next", *key) not in sources
        ]
        for key in shifted:
            entries[("next", *key)] = entries[key]
        for name in DONE_NAMES:
            entries[(name,)] = ((length, 1), torch.bool)
            entries[("next", name)] = ((length, 1), torch.bool)
        entries[("episode",)] = ((length,), torch.int64)
        staged = keep is not None or self.split_trajs
        external = (
            [] if staged or source is None else self._map_in_place(folder, source, sources, entries)
        )
        mapped = {tuple(entry["key"]) for entry in external}
        data = _files.allocate(
            _files.stage(folder, staged),
            {key: spec for key, spec in entries.items() if key not in mapped},
            (length,),
        )
        for entry in external:
            data.set(tuple(entry["key"]), _files.map_bytes(folder, entry))
        for key, value in sources.items():
            if key not in mapped:
                fill(data.get(key), value)
        for key in shifted:
            shift_next(data.get(("next", *key)), data.get(key), ends)
        if keep is not None:
            ends = self._ends_after_drop(ends, keep)
            terminated = terminated[keep]
            truncated = ends & ~terminated
            data = data[torch.from_numpy(np.flatnonzero(keep))]
        done = terminated | truncated if self.use_truncated_as_done else terminated
        fill(data.get(("next", "terminated")), terminated)
        fill(data.get(("next", "truncated")), truncated)
        fill(data.get(("next", "done")), done)
        fill(data.get("episode"), episode_ids(ends))
        metadata = {"dataset_id": self.dataset_id, **metadata, _files.EXTERNAL: external}
        return _files.publish(data, folder, self.split_trajs), metadata

    @staticmethod
    def _map_in_place(folder: Path, raw: Path, sources: dict, entries: dict) -> list[dict]:
        """Entries read in place from the HDF5 file, hard-linked into ``folder`` (no copy).

        Only datasets stored contiguously, uncompressed and with the stored dtype qualify;
        when the file cannot be linked (another file system), nothing is mapped.
        """
        usable = {}
        for key, value in sources.items():
            shape, dtype = entries[key]
            offset = _ted.raw_offset(value, dtype)
            if offset is not None:
                usable[key] = (offset, shape, dtype)
        if not usable:
            return []
        name = _files.link_into(folder, raw, "source.hdf5")
        if name is None:
            return []
        return [
            {
                "key": list(key),
                "file": name,
                "offset": offset,
                "dtype": str(torch.empty(0, dtype=dtype).numpy().dtype),
                "shape": list(shape),
            }
            for key, (offset, shape, dtype) in usable.items()
        ]

    @staticmethod
    def _ends_after_drop(ends: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """Trajectory ends among kept steps: a step followed by a dropped step ends its trajectory."""
        following_dropped = np.zeros_like(keep)
        following_dropped[:-1] = ~keep[1:]
        return (ends | following_dropped)[keep]

    # -- specs ----------------------------------------------------------------------------------
    @property
    def specs(self) -> Any:
        """Specs of one stored step (a :class:`~tdrl.data.Composite`), built from the data."""
        from tdrl.data import make_composite_from_td

        data = self.__dict__["_data"]
        item = data[(0,) * data.batch_dims] if data.numel() else data
        return make_composite_from_td(item.to_tensordict())
