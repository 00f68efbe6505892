""":class:`BaseDatasetExperienceReplay`: the read-only replay buffer every offline dataset is."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.datasets import _files
from tdrl.data.replay_buffers import (
    ImmutableDatasetWriter,
    Sampler,
    TensorDictReplayBuffer,
    TensorStorage,
    Writer,
)

__all__ = ["BaseDatasetExperienceReplay"]

#: builds a dataset in a folder: ``build(folder, allow_download) -> (data, metadata)``
Builder = Callable[[Path, bool], tuple[TensorDictBase, dict]]

OPTIONS_MISMATCH = (
    "the dataset at {path} was built with {stored}, but {requested} was asked for: pass "
    "download='force' to rebuild it with the new options, or another root"
)


def _check_dest(dest: Path) -> None:
    if dest.exists() and not (dest.is_dir() and (_files.is_built(dest) or not any(dest.iterdir()))):
        raise ValueError(
            f"dest {dest} exists and is neither empty nor a built dataset: refusing to replace it"
        )


class BaseDatasetExperienceReplay(TensorDictReplayBuffer):
    """A read-only replay buffer over an offline dataset kept in memory-mapped files.

    Subclasses find (or download) a dataset's raw files, convert them once into the TED
    layout (what belongs to step ``t`` at the root, what belongs to ``t + 1`` under
    ``"next"``) in a memory-mapped folder under ``root``, and open that folder on later
    uses. Samples are gathered from the memory-mapped files without loading the dataset.

    Writes are refused (the default writer is an :class:`ImmutableDatasetWriter`); the data
    can be rewritten once with :meth:`preprocess`.

    Args:
        storage: the storage over the dataset (built by the subclass).
        sampler: as in :class:`~tdrl.data.ReplayBuffer` (uniform by default); a
            :class:`~tdrl.data.SliceSampler` reads the ``"episode"`` entry every dataset has.
        writer: defaults to :class:`ImmutableDatasetWriter`.
        collate_fn, pin_memory, prefetch, transform, batch_size: as in
            :class:`~tdrl.data.ReplayBuffer`.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.datasets import BaseDatasetExperienceReplay
        >>> data = TensorDict({"observation": torch.arange(10.0), "episode": torch.zeros(10)}, [10])
        >>> folder = tempfile.mkdtemp()
        >>> dataset = BaseDatasetExperienceReplay.from_tensordict(data, folder, batch_size=4)
        >>> len(dataset), dataset.sample().shape
        (10, torch.Size([4]))
    """

    def __init__(
        self,
        *,
        storage: TensorStorage,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
        batch_size: int | None = None,
    ) -> None:
        self._buffer_kwargs = {
            "sampler": sampler,
            "writer": writer if writer is not None else ImmutableDatasetWriter(),
            "collate_fn": collate_fn,
            "pin_memory": pin_memory,
            "prefetch": prefetch,
            "batch_size": batch_size,
        }
        super().__init__(storage=storage, transform=transform, **self._buffer_kwargs)
        self.__dict__.setdefault("_metadata", {})
        self.__dict__.setdefault("_data_path", None)

    # -- building and opening ---------------------------------------------------------------------
    @classmethod
    def from_tensordict(
        cls,
        data: TensorDictBase,
        path: str | os.PathLike,
        metadata: dict | None = None,
        **kwargs: Any,
    ) -> BaseDatasetExperienceReplay:
        """Write ``data`` as a memory-mapped dataset at ``path`` and open it.

        ``path`` is replaced when it holds a built dataset; ``kwargs`` go to the constructor.
        """
        path = Path(path)
        _check_dest(path)
        stored = _files.save(data, path, metadata or {})
        self = cls.__new__(cls)
        self._open_data(stored, path, metadata or {}, kwargs)
        return self

    def _open_data(
        self, data: TensorDictBase, path: Path | None, metadata: dict, kwargs: dict
    ) -> None:
        self.__dict__["_data"] = data
        self.__dict__["_data_path"] = path
        self.__dict__["_metadata"] = metadata
        BaseDatasetExperienceReplay.__init__(self, storage=_files.full_storage(data), **kwargs)

    @staticmethod
    def _load_or_build(
        path: Path, download: bool | str, options: dict, build: Builder
    ) -> tuple[TensorDictBase, dict]:
        """Open the dataset built at ``path``, building it first when needed.

        ``download=False`` still builds from raw files already present (``build`` gets
        ``allow_download=False`` and must not use the network); ``"force"`` rebuilds.
        """
        download = _files.check_download(download)
        if download != "force" and path.exists():
            data, metadata = _files.load(path)
            stored = metadata.get("options", {})
            if stored != options:
                raise ValueError(
                    OPTIONS_MISMATCH.format(path=path, stored=stored, requested=options)
                )
            return data, metadata
        with _files.building(path) as tmp:
            data, metadata = build(tmp, download is not False)
            metadata = {**metadata, "options": options}
            _files.write_marker(tmp, data, metadata)
        return _files.load(path)

    @staticmethod
    def _raw_folder(root: Path, dataset_id: str) -> Path:
        return root / "raw" / dataset_id

    # -- properties -----------------------------------------------------------------------------
    @property
    def data_path(self) -> Path | None:
        """The folder holding the built dataset."""
        return self.__dict__.get("_data_path")

    @property
    def data_path_root(self) -> Path | None:
        """The folder holding the datasets of this family (``root``)."""
        path = self.data_path
        return None if path is None else Path(self.__dict__.get("_root", path.parent))

    @property
    def metadata(self) -> dict:
        """What the dataset's files say about it (and the options it was built with)."""
        return self.__dict__.get("_metadata", {})

    def delete(self) -> None:
        """Remove the built dataset from disk (the raw downloaded files are kept)."""
        path = self.data_path
        if path is not None:
            _files.remove_tree(path)

    # -- preprocessing --------------------------------------------------------------------------
    def preprocess(
        self,
        fn: Callable[[TensorDictBase], TensorDictBase],
        dim: int = 0,
        num_workers: int | None = None,
        *,
        chunksize: int | None = None,
        num_chunks: int | None = None,
        pool: Any = None,
        generator: torch.Generator | None = None,
        max_tasks_per_child: int | None = None,
        worker_threads: int = 1,
        index_with_generator: bool = False,
        pbar: bool = False,
        mp_start_method: str | None = None,
        num_frames: int | None = None,
        dest: str | os.PathLike | None = None,
    ) -> TensorStorage:
        """Apply ``fn`` to every chunk of the dataset and store the result as a new dataset.

        ``fn`` takes and returns a TensorDict of a chunk of items (along ``dim``); it may add,
        remove or reshape entries but must keep the chunk's size along ``dim``. The work is
        spread over ``num_workers`` processes by :meth:`tensordict.TensorDictBase.map`
        (``chunksize``, ``num_chunks``, ``pool``, ``generator``, ``max_tasks_per_child``,
        ``worker_threads``, ``index_with_generator``, ``pbar`` and ``mp_start_method`` are
        passed to it).

        Args:
            fn: the per-chunk transformation.
            dim: the dimension chunks are taken along.
            num_workers: number of worker processes.
            num_frames: only the first ``num_frames`` items are processed and kept.
            dest: where to write the result. By default the dataset itself is replaced (on
                disk too, so opening it again gives the transformed data); with ``dest``
                the dataset is left unchanged.
            chunksize, num_chunks, pool, generator, max_tasks_per_child, worker_threads,
                index_with_generator, pbar, mp_start_method: see ``TensorDictBase.map``.

        Returns:
            a storage over the new data (the one this buffer now uses when ``dest`` is None).
        """
        data = self.__dict__.get("_data")
        if data is None:
            raise RuntimeError(f"{type(self).__name__} has no dataset to preprocess")
        if dim < 0:
            dim += data.batch_dims
        if not 0 <= dim < data.batch_dims:
            raise ValueError(
                f"dim must index a batch dim of the data {tuple(data.shape)}, got {dim}"
            )
        if num_frames is not None:
            if int(num_frames) < 1:
                raise ValueError(f"num_frames must be a positive integer, got {num_frames}")
            data = data[(slice(None),) * dim + (slice(0, int(num_frames)),)]
        target = Path(dest) if dest is not None else self.data_path
        if target is None:
            raise ValueError("this dataset has no folder: pass dest")
        if dest is not None:
            _check_dest(target)
        first = data[(slice(None),) * dim + (slice(0, 1),)].clone()
        template = fn(first)
        template = first if template is None else template
        if not isinstance(template, TensorDictBase):
            raise TypeError(f"fn must return a TensorDict, got {type(template).__name__}")
        if template.batch_dims <= dim or template.shape[dim] != 1:
            raise ValueError(
                f"fn must keep the chunk size along dim {dim}: a chunk of batch size "
                f"{tuple(first.shape)} gave {tuple(template.shape)}"
            )
        shape = list(template.shape)
        shape[dim] = data.shape[dim]
        single = template[(slice(None),) * dim + (0,)]
        if generator is None:
            generator = torch.Generator()
        with _files.building(target) as tmp:
            out = single.unsqueeze(dim).expand(*shape).memmap_like(str(tmp))
            data.map(
                fn,
                dim=dim,
                num_workers=num_workers,
                out=out,
                chunksize=chunksize,
                num_chunks=num_chunks,
                pool=pool,
                generator=generator,
                max_tasks_per_child=max_tasks_per_child,
                worker_threads=worker_threads,
                index_with_generator=index_with_generator,
                pbar=pbar,
                mp_start_method=mp_start_method,
            )
            _files.write_marker(tmp, out, self.metadata)
        new_data, metadata = _files.load(target)
        if dest is not None:
            return _files.full_storage(new_data)
        transforms = list(self.transform)
        self.empty()
        kwargs = {**self._buffer_kwargs, "transform": transforms}
        self._open_data(new_data, target, metadata, kwargs)
        return self.storage

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={self.data_path}, items={len(self)}, "
            f"sampler={self.sampler!r}, batch_size={self.batch_size})"
        )
