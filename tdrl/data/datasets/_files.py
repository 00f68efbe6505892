"""On-disk side of the offline datasets: memory-mapped TED folders built atomically, downloads.

A built dataset is a folder holding a memory-mapped TensorDict (tensordict's ``memmap``
layout: ``meta.json`` plus one ``.memmap`` file per entry) and a marker file,
:data:`MARKER`, written last. Entries whose bytes already sit, in the stored layout, in a raw
file (a contiguous HDF5 dataset) are not copied: the raw file is hard-linked into the folder
and those entries are memory-mapped from it at their byte offset (the marker lists them). A folder without the marker is an interrupted or damaged
build: loading it raises an error naming the folder. Builds happen in a temporary sibling
folder that is renamed into place once complete, so an interrupted build never leaves a
half-written dataset under the final name.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.replay_buffers import TensorStorage

MARKER = "tdrl_dataset.json"
FORMAT_VERSION = 1

DAMAGED_MSG = (
    "the dataset folder {path} is incomplete or damaged: {detail}. Delete it, or pass "
    "download='force' to rebuild it"
)


def default_root(family: str) -> Path:
    """The folder datasets of ``family`` are kept in: ``$XDG_CACHE_HOME/tdrl/<family>``.

    ``XDG_CACHE_HOME`` defaults to ``~/.cache``.
    """
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "tdrl" / family


def check_download(download: Any) -> bool | str:
    """Validate the ``download`` argument shared by every dataset: True, False or "force"."""
    if download is True or download is False or download == "force":
        return download
    raise ValueError(f"download must be True, False or 'force', got {download!r}")


def is_built(path: Path) -> bool:
    """Whether ``path`` holds a completely built dataset (its marker file exists)."""
    return (path / MARKER).is_file()


def remove_tree(path: Path) -> None:
    """Remove a folder (or file) if it exists."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def allocate(
    folder: Path, entries: Mapping[Any, tuple[tuple[int, ...], torch.dtype]], batch_size: tuple
) -> TensorDict:
    """Memory-mapped, uninitialised tensors for ``entries`` (key -> (shape, dtype)) in ``folder``.

    Shapes include the batch dims. No memory is touched until the tensors are written.
    """
    template = TensorDict(
        {
            key: torch.zeros((), dtype=dtype).expand(*shape)
            for key, (shape, dtype) in entries.items()
        },
        batch_size=batch_size,
    )
    return template.memmap_like(str(folder)).unlock_()


@contextmanager
def building(final: Path) -> Iterator[Path]:
    """A temporary folder to build ``final`` in; renamed to ``final`` when the block succeeds.

    An existing ``final`` is replaced only once the new build is complete. On error the
    temporary folder is removed and ``final`` is left as it was.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.building-", dir=final.parent))
    try:
        yield tmp
        if not is_built(tmp):
            raise RuntimeError(f"dataset build in {tmp} finished without writing {MARKER}")
        old = None
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            remove_tree(old)
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            remove_tree(old)
    finally:
        remove_tree(tmp)


EXTERNAL = "_external"


def link_into(folder: Path, source: str | os.PathLike, name: str) -> str | None:
    """Hard-link ``source`` into ``folder`` as ``name``; None when the file system refuses."""
    try:
        os.link(source, folder / name)
    except OSError:
        return None
    return name


def map_bytes(folder: Path, entry: Mapping[str, Any]) -> torch.Tensor:
    """A read-only view (copy-on-write mapping) of ``entry``'s bytes in a file of ``folder``.

    ``entry`` names the ``file``, the byte ``offset``, the ``dtype`` and the ``shape``.
    """
    array = np.memmap(
        folder / entry["file"],
        dtype=np.dtype(entry["dtype"]),
        mode="c",
        offset=int(entry["offset"]),
        shape=tuple(entry["shape"]),
    )
    return torch.from_numpy(array)


def write_marker(folder: Path, data: TensorDictBase, metadata: Mapping[str, Any]) -> None:
    """Record what was built (batch size, keys, metadata); written last, it marks completion.

    Entries mapped from a linked raw file are listed under ``metadata["_external"]``: a list
    of ``{"key", "file", "offset", "dtype", "shape"}`` records.
    """
    metadata = dict(metadata)
    external = metadata.pop(EXTERNAL, [])
    record = {
        "format_version": FORMAT_VERSION,
        "batch_size": list(data.batch_size),
        "keys": sorted(
            "/".join(key) if isinstance(key, tuple) else key
            for key in data.keys(include_nested=True, leaves_only=True)
        ),
        "metadata": metadata,
        "external": external,
    }
    (folder / MARKER).write_text(json.dumps(record, indent=1, default=str))


def save(data: TensorDictBase, folder: Path, metadata: Mapping[str, Any]) -> TensorDictBase:
    """Write ``data`` as a memory-mapped dataset in ``folder`` (via a temporary folder)."""
    with building(folder) as tmp:
        data.memmap_(str(tmp))
        write_marker(tmp, data, metadata)
    return load(folder)[0]


def load(folder: Path) -> tuple[TensorDictBase, dict[str, Any]]:
    """Open a built dataset: its memory-mapped data and its metadata.

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        RuntimeError: the folder is not a complete build, or its files do not match the record.
    """
    if not folder.is_dir():
        raise FileNotFoundError(f"no dataset found at {folder}")
    marker = folder / MARKER
    if not marker.is_file():
        raise RuntimeError(
            DAMAGED_MSG.format(path=folder, detail=f"expected the marker file {MARKER}, not found")
        )
    try:
        record = json.loads(marker.read_text())
        data = TensorDict.load_memmap(str(folder)).unlock_()
        for entry in record.get("external", []):
            data.set(tuple(entry["key"]), map_bytes(folder, entry))
    except Exception as err:  # any unreadable file makes the folder unusable
        raise RuntimeError(
            DAMAGED_MSG.format(path=folder, detail=f"cannot read it ({type(err).__name__}: {err})")
        ) from err
    if list(data.batch_size) != record.get("batch_size"):
        raise RuntimeError(
            DAMAGED_MSG.format(
                path=folder,
                detail=f"expected batch size {record.get('batch_size')}, got {list(data.batch_size)}",
            )
        )
    found = sorted(
        "/".join(key) if isinstance(key, tuple) else key
        for key in data.keys(include_nested=True, leaves_only=True)
    )
    if found != record.get("keys"):
        missing = sorted(set(record.get("keys", [])) - set(found))
        raise RuntimeError(
            DAMAGED_MSG.format(path=folder, detail=f"entries missing from the folder: {missing}")
        )
    return data, record.get("metadata", {})


def mark_full(storage: TensorStorage, data: TensorDictBase) -> TensorStorage:
    """Make every row of ``data`` (the content of ``storage``) count as filled."""
    rows = data.shape[0]
    if rows and len(storage) < rows:
        # the storage counts rows up to the furthest write: writing the last row back onto
        # itself marks all of them as filled without copying the others
        last = slice(rows - 1, rows)
        storage.set(last, data[last])
    return storage


def plain_view(data: TensorDictBase) -> TensorDictBase:
    """``data`` with its memory-mapped leaves seen as plain tensors (same memory).

    Indexing a plain tensor skips the subclass dispatch of ``MemoryMappedTensor``, which
    makes every gather of a sample cheaper.
    """
    return data.apply(
        lambda leaf: leaf if type(leaf) is torch.Tensor else leaf.as_subclass(torch.Tensor)
    )


def full_storage(data: TensorDictBase) -> TensorStorage:
    """A :class:`TensorStorage` over ``data`` (as plain tensors) whose every row counts as filled."""
    plain = plain_view(data)
    return mark_full(TensorStorage(plain), plain)


def download_url(url: str, dest: Path) -> Path:
    """Download ``url`` to ``dest`` (through ``dest.partial``, renamed when complete)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    try:
        with urllib.request.urlopen(url) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out, length=1 << 20)
    except OSError as err:
        remove_tree(partial)
        raise RuntimeError(
            f"download of {url} to {dest} failed ({type(err).__name__}: {err}); place the file "
            "there by hand to build the dataset without network access"
        ) from err
    os.replace(partial, dest)
    return dest


def require(module: str, pip_name: str, purpose: str) -> Any:
    """Import ``module`` or raise an ImportError naming the pip package to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{purpose} needs the {pip_name!r} package: pip install {pip_name}"
        ) from err


def hub_snapshot(
    repo_id: str, patterns: list[str], local_dir: Path, *, force: bool, purpose: str
) -> Path:
    """Download the files of a Hugging Face dataset repository matching ``patterns``."""
    hub = require("huggingface_hub", "huggingface_hub", purpose)
    local_dir.mkdir(parents=True, exist_ok=True)
    try:
        hub.snapshot_download(
            repo_id,
            repo_type="dataset",
            allow_patterns=patterns,
            local_dir=str(local_dir),
            force_download=force,
        )
    except Exception as err:  # network, authentication or missing-file errors of the hub
        raise RuntimeError(
            f"{purpose}: download of {patterns} from the Hugging Face dataset {repo_id!r} to "
            f"{local_dir} failed ({type(err).__name__}: {err}); place the files there by hand to "
            "build the dataset without network access"
        ) from err
    return local_dir


def hub_listing(repo_id: str, purpose: str) -> list[str]:
    """The file paths of a Hugging Face dataset repository."""
    hub = require("huggingface_hub", "huggingface_hub", purpose)
    try:
        return list(hub.list_repo_files(repo_id, repo_type="dataset"))
    except Exception as err:
        raise RuntimeError(
            f"{purpose}: cannot list the files of the Hugging Face dataset {repo_id!r} "
            f"({type(err).__name__}: {err})"
        ) from err


class HubDatasets:
    """A class attribute listing the dataset ids of a Hugging Face repository, on first access.

    A dataset id is the folder (relative to ``prefix``) of files ending in ``suffix``.
    """

    def __init__(self, repo_id: str, suffix: str | tuple[str, ...], prefix: str = "") -> None:
        self.repo_id = repo_id
        self.suffix = suffix
        self.prefix = prefix
        self._ids: list[str] | None = None

    def __get__(self, obj: Any, owner: type) -> list[str]:
        if self._ids is None:
            folders = {
                os.path.dirname(path)[len(self.prefix) :]
                for path in hub_listing(self.repo_id, f"{owner.__name__}.available_datasets")
                if path.endswith(self.suffix) and path.startswith(self.prefix)
            }
            self._ids = sorted(folder for folder in folders if folder)
        return list(self._ids)


STAGE = "_stage"


def stage(folder: Path, staged: bool) -> Path:
    """Where to allocate a dataset first: ``folder`` itself, or a scratch sub-folder of it."""
    return folder / STAGE if staged else folder


def publish(data: TensorDictBase, folder: Path, split_trajs: bool) -> TensorDictBase:
    """Lay ``data`` out as the dataset of ``folder`` (one row per trajectory when ``split_trajs``).

    Data allocated in the scratch sub-folder (see :func:`stage`) is written to ``folder``
    and the scratch copy removed.
    """
    if split_trajs:
        from tdrl.collectors.utils import split_trajectories

        data = split_trajectories(data, trajectory_key="episode")
    scratch = folder / STAGE
    if scratch.exists():
        data = data.memmap_(str(folder))
        remove_tree(scratch)
    return data
