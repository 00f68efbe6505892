"""Ensembles: sample from several replay buffers (e.g. datasets) at once.

A :class:`ReplayBufferEnsemble` holds sub-buffers, each with its own storage, sampler,
writer and transforms. A batch of ``batch_size`` items is made of ``num_buffer_sampled``
sub-batches of equal size, each drawn from a sub-buffer chosen with probabilities ``p``
(or from every sub-buffer with ``sample_from_all=True``). Sub-batches are transformed by
their buffer's transforms, stacked along a new leading dim, then passed through the
ensemble's transform. Writes go to the sub-buffers: ``ensemble[i].extend(data)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from tdrl.data.replay_buffers.replay_buffers import ReplayBuffer
from tdrl.data.replay_buffers.samplers import Sampler
from tdrl.data.replay_buffers.storages import Storage
from tdrl.data.replay_buffers.writers import Writer

__all__ = ["ReplayBufferEnsemble", "SamplerEnsemble", "StorageEnsemble", "WriterEnsemble"]

_WRITE_MSG = (
    "an ensemble is not written to directly: extend its sub-buffers instead "
    "(ensemble[i].extend(data))"
)


class StorageEnsemble(Storage):
    """A read-only view over several storages.

    ``ensemble[i]`` is the ``i``-th storage; :meth:`get` takes ``(buffer_ids, indices)``
    where ``indices`` holds one index per selected storage.

    Args:
        *storages: the storages.
        transforms: optional per-storage callables applied to the data :meth:`get` returns.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage
        >>> ensemble = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> ensemble[1].set(slice(0, 2), torch.tensor([5, 6]))
        >>> len(ensemble), ensemble.get(([1], [torch.tensor([1])]))
        (2, [tensor([6])])
    """

    def __init__(self, *storages: Storage, transforms: Sequence[Callable] | None = None) -> None:
        if not storages:
            raise ValueError("StorageEnsemble needs at least one storage")
        for position, storage in enumerate(storages):
            if not isinstance(storage, Storage):
                raise TypeError(
                    f"StorageEnsemble expects storages, got {type(storage).__name__} at position {position}"
                )
        if transforms is not None and len(transforms) != len(storages):
            raise ValueError(
                f"expected one transform per storage ({len(storages)}), got {len(transforms)}"
            )
        super().__init__(sum(storage.max_size for storage in storages))
        self._storages = list(storages)
        self._transforms = list(transforms) if transforms is not None else None

    def __getitem__(self, index: int) -> Storage:
        return self._storages[index]

    @property
    def storages(self) -> tuple[Storage, ...]:
        """The storages of the ensemble, in order."""
        return tuple(self._storages)

    def get(self, index: Any) -> list:
        """Read ``(buffer_ids, indices)``: a list with the data of each selected storage."""
        if isinstance(index, int):
            return self._storages[index]
        buffer_ids, indices = index
        out = []
        for buffer_id, sub_index in zip(torch.as_tensor(buffer_ids).tolist(), indices):
            data = self._storages[buffer_id].get(sub_index)
            if self._transforms is not None and self._transforms[buffer_id] is not None:
                data = self._transforms[buffer_id](data)
            out.append(data)
        return out

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Refuse the write (write through the sub-storages)."""
        raise RuntimeError(_WRITE_MSG)

    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register ``hook`` on every storage of the ensemble (each is saved on its own)."""
        for storage in self._storages:
            storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register ``hook`` on every storage of the ensemble."""
        for storage in self._storages:
            storage.register_load_hook(hook)

    def __len__(self) -> int:
        return sum(len(storage) for storage in self._storages)

    def empty(self) -> None:
        """Empty every storage of the ensemble."""
        for storage in self._storages:
            storage.empty()

    def state_dict(self) -> dict[str, Any]:
        """The states of the storages."""
        return {"_storages": [storage.state_dict() for storage in self._storages]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the states of the storages."""
        states = state_dict["_storages"]
        if len(states) != len(self._storages):
            raise ValueError(
                f"storage count mismatch: expected {len(self._storages)} states, got {len(states)}"
            )
        for storage, state in zip(self._storages, states):
            storage.load_state_dict(state)

    def dumps(self, path: str | os.PathLike) -> None:
        """Save every storage under ``path`` (see :class:`StorageEnsembleCheckpointer`)."""
        from tdrl.data.replay_buffers.checkpointers import default_checkpointer

        default_checkpointer(self).dumps(self, path)

    def loads(self, path: str | os.PathLike) -> None:
        """Load every storage from ``path``."""
        from tdrl.data.replay_buffers.checkpointers import default_checkpointer

        default_checkpointer(self).loads(self, path)

    def __repr__(self) -> str:
        return f"StorageEnsemble(storages={self._storages!r})"


def _check_p(p: Any, count: int) -> torch.Tensor | None:
    if p is None:
        return None
    p = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
    if p.numel() != count:
        raise ValueError(f"p must hold one probability per buffer ({count}), got {p.numel()}")
    if (p < 0).any() or not torch.isfinite(p).all() or float(p.sum()) <= 0:
        raise ValueError(
            f"p must hold non-negative finite weights with a positive sum, got {p.tolist()}"
        )
    return p / p.sum()


class SamplerEnsemble(Sampler):
    """Picks which sub-buffers a batch comes from, then samples each with its own sampler.

    Args:
        *samplers: one sampler per storage of the ensemble.
        p: probabilities of the sub-buffers (uniform when omitted).
        sample_from_all: draw an equal share from every sub-buffer instead.
        num_buffer_sampled: how many sub-batches (with replacement) make a batch; defaults
            to the number of samplers.

    Examples:
        >>> import torch
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, RandomSampler
        >>> storages = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> for storage in storages._storages:
        ...     storage.set(slice(0, 4), torch.arange(4))
        >>> sampler = SamplerEnsemble(RandomSampler(), RandomSampler(), sample_from_all=True)
        >>> (buffer_ids, indices), info = sampler.sample(storages, 6)
        >>> buffer_ids.tolist(), [index.shape for index in indices]
        ([0, 1], [torch.Size([3]), torch.Size([3])])
    """

    def __init__(
        self,
        *samplers: Sampler,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
    ) -> None:
        super().__init__()
        if not samplers:
            raise ValueError("SamplerEnsemble needs at least one sampler")
        if sample_from_all and p is not None:
            raise ValueError("p cannot be combined with sample_from_all=True")
        if sample_from_all and num_buffer_sampled is not None:
            raise ValueError("num_buffer_sampled cannot be combined with sample_from_all=True")
        if num_buffer_sampled is not None and int(num_buffer_sampled) < 1:
            raise ValueError(
                f"num_buffer_sampled must be a positive integer, got {num_buffer_sampled}"
            )
        self._samplers = list(samplers)
        self.p = _check_p(p, len(samplers))
        self.sample_from_all = bool(sample_from_all)
        self.num_buffer_sampled = (
            len(samplers) if num_buffer_sampled is None else int(num_buffer_sampled)
        )

    def __getitem__(self, index: int) -> Sampler:
        return self._samplers[index]

    def buffer_ids(self) -> torch.Tensor:
        """The sub-buffers the next batch comes from, one per sub-batch."""
        count = len(self._samplers)
        if self.sample_from_all:
            return torch.arange(count)
        if self.p is None:
            return torch.randint(count, (self.num_buffer_sampled,), generator=self._rng)
        return torch.multinomial(self.p, self.num_buffer_sampled, True, generator=self._rng)

    def sub_batch_size(self, batch_size: int, count: int) -> int:
        """The size of each of ``count`` sub-batches of a ``batch_size`` batch."""
        if batch_size % count:
            raise ValueError(
                f"batch_size must be a multiple of the number of sub-batches ({count}), got {batch_size}"
            )
        return batch_size // count

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Returns ``((buffer_ids, indices), info)`` with one index (and info) per sub-batch."""
        if not isinstance(storage, StorageEnsemble):
            raise TypeError(
                f"SamplerEnsemble samples StorageEnsembles, got {type(storage).__name__}"
            )
        buffer_ids = self.buffer_ids()
        sub = self.sub_batch_size(batch_size, buffer_ids.numel())
        indices, infos = [], []
        for buffer_id in buffer_ids.tolist():
            index, info = self._samplers[buffer_id].sample(storage[buffer_id], sub)
            indices.append(index)
            infos.append(info)
        return (buffer_ids, indices), {"buffer_ids": buffer_ids, "infos": infos}

    def _empty(self) -> None:
        for sampler in self._samplers:
            sampler._empty()

    def state_dict(self) -> dict[str, Any]:
        """The states of the samplers."""
        return {"_samplers": [sampler.state_dict() for sampler in self._samplers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the states of the samplers."""
        for sampler, state in zip(self._samplers, state_dict["_samplers"]):
            sampler.load_state_dict(state)

    def __repr__(self) -> str:
        return f"SamplerEnsemble(samplers={self._samplers!r}, p={self.p}, sample_from_all={self.sample_from_all})"


class WriterEnsemble(Writer):
    """The writers of an ensemble's sub-buffers; writing to the ensemble itself is refused.

    Examples:
        >>> from tdrl.data.replay_buffers import RoundRobinWriter
        >>> writers = WriterEnsemble(RoundRobinWriter(), RoundRobinWriter())
        >>> writers.extend([1])
        Traceback (most recent call last):
        ...
        RuntimeError: an ensemble is not written to directly: extend its sub-buffers instead (ensemble[i].extend(data))
    """

    def __init__(self, *writers: Writer) -> None:
        super().__init__()
        self._writers = list(writers)

    def __getitem__(self, index: int) -> Writer:
        return self._writers[index]

    def add(self, data: Any) -> Any:
        """Refuse the write."""
        raise RuntimeError(_WRITE_MSG)

    def extend(self, data: Any) -> torch.Tensor:
        """Refuse the write."""
        raise RuntimeError(_WRITE_MSG)

    def _empty(self) -> None:
        for writer in self._writers:
            writer._empty()

    def state_dict(self) -> dict[str, Any]:
        """The states of the writers."""
        return {"_writers": [writer.state_dict() for writer in self._writers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the states of the writers."""
        for writer, state in zip(self._writers, state_dict["_writers"]):
            writer.load_state_dict(state)


def _stack(samples: list) -> Any:
    first = samples[0]
    if isinstance(first, TensorDictBase):
        return LazyStackedTensorDict.maybe_dense_stack(samples)
    if isinstance(first, torch.Tensor):
        if all(sample.shape == first.shape for sample in samples):
            return torch.stack(samples)
        return torch.nested.nested_tensor(samples)
    return samples


class ReplayBufferEnsemble(ReplayBuffer):
    """Samples from several replay buffers at once (see the module docs).

    Args:
        *rbs: the sub-buffers; alternatively give ``storages`` (and optionally ``samplers``,
            ``writers``) to build them.
        storages, samplers, writers: per-buffer components used when ``rbs`` is empty.
        transform: applied to the stacked batch.
        batch_size: the default batch size.
        collate_fn: stacks the sub-batches (default: a dense stack when the sub-batches
            match, else a lazy stack).
        collate_fns: per-buffer collate functions used when building sub-buffers.
        p: probabilities of the sub-buffers.
        sample_from_all: draw an equal share from every sub-buffer.
        num_buffer_sampled: how many sub-batches make a batch.
        generator: a ``torch.Generator`` for the choice of sub-buffers.
        shared, compilable: accepted for API compatibility.

    Batches of TensorDicts say which sub-buffer each item came from: in
    ``("index", "buffer_ids")``, or in ``"buffer_ids"`` next to the ``"index"`` tensor that
    TensorDict sub-buffers write.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb0 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> rb1 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> ensemble = ReplayBufferEnsemble(rb0, rb1, p=[0.5, 0.5], batch_size=10)
        >>> _ = ensemble[0].extend(TensorDict({"x": torch.zeros(10, 3)}, [10]))
        >>> _ = ensemble[1].extend(TensorDict({"x": torch.ones(10, 3)}, [10]))
        >>> sample = ensemble.sample()
        >>> sample["x"].shape, sample["buffer_ids"].shape
        (torch.Size([2, 5, 3]), torch.Size([2, 5]))
    """

    def __init__(
        self,
        *rbs: ReplayBuffer,
        storages: Sequence[Storage] | None = None,
        samplers: Sequence[Sampler] | None = None,
        writers: Sequence[Writer] | None = None,
        transform: Any = None,
        batch_size: int | None = None,
        collate_fn: Callable | None = None,
        collate_fns: Sequence[Callable] | None = None,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if rbs and storages is not None:
            raise ValueError("give either replay buffers or storages, not both")
        if not rbs:
            if storages is None:
                raise ValueError("ReplayBufferEnsemble needs replay buffers or storages")
            count = len(storages)
            samplers = list(samplers) if samplers is not None else [None] * count
            writers = list(writers) if writers is not None else [None] * count
            collate_fns = list(collate_fns) if collate_fns is not None else [None] * count
            if not len(samplers) == len(writers) == len(collate_fns) == count:
                raise ValueError(
                    "storages, samplers, writers and collate_fns must have the same length"
                )
            rbs = tuple(
                ReplayBuffer(storage=s, sampler=sm, writer=w, collate_fn=c)
                for s, sm, w, c in zip(storages, samplers, writers, collate_fns)
            )
        for position, rb in enumerate(rbs):
            if not isinstance(rb, ReplayBuffer):
                raise TypeError(
                    f"ReplayBufferEnsemble expects replay buffers, got {type(rb).__name__} at position {position}"
                )
        self._rbs = list(rbs)
        super().__init__(
            storage=StorageEnsemble(*(rb.storage for rb in rbs)),
            sampler=SamplerEnsemble(
                *(rb.sampler for rb in rbs),
                p=p,
                sample_from_all=sample_from_all,
                num_buffer_sampled=num_buffer_sampled,
            ),
            writer=WriterEnsemble(*(rb.writer for rb in rbs)),
            collate_fn=collate_fn if collate_fn is not None else _stack,
            transform=transform,
            batch_size=batch_size,
            generator=generator,
        )

    def __getitem__(self, index: Any) -> Any:
        """``ensemble[i]`` is the ``i``-th sub-buffer."""
        if isinstance(index, int):
            return self._rbs[index]
        raise TypeError(
            f"ReplayBufferEnsemble indices are sub-buffer numbers (int), got {type(index).__name__}"
        )

    def __len__(self) -> int:
        return sum(len(rb) for rb in self._rbs)

    def add(self, data: Any) -> int:
        """Refuse the write (use a sub-buffer)."""
        raise RuntimeError(_WRITE_MSG)

    def extend(self, data: Any) -> torch.Tensor:
        """Refuse the write (use a sub-buffer)."""
        raise RuntimeError(_WRITE_MSG)

    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        sampler = self._sampler
        buffer_ids = sampler.buffer_ids()
        sub = sampler.sub_batch_size(batch_size, buffer_ids.numel())
        samples, infos = [], []
        for buffer_id in buffer_ids.tolist():
            data, info = self._rbs[buffer_id].sample(sub, return_info=True)
            if isinstance(data, TensorDictBase):
                ids = torch.full(data.shape, buffer_id, dtype=torch.long)
                index = data.get("index", None)
                if index is None or isinstance(index, TensorDictBase):
                    data.set(("index", "buffer_ids"), ids)
                else:  # next to the sub-buffer's index tensor
                    data.set("buffer_ids", ids)
            samples.append(data)
            infos.append(info)
        data = self._collate_fn(samples)
        if len(self._transform):
            data = self._transform(data)
        return data, {"buffer_ids": buffer_ids, "infos": infos}

    def empty(self) -> None:
        """Empty every sub-buffer."""
        for rb in self._rbs:
            rb.empty()

    def update_priority(self, index: Any, priority: Any) -> None:
        """Priorities live in the sub-buffers: call ``ensemble[i].update_priority``."""
        raise RuntimeError(
            "update priorities through the sub-buffers: ensemble[i].update_priority(index, priority)"
        )

    def state_dict(self) -> dict[str, Any]:
        """The states of the sub-buffers."""
        return {"_rbs": [rb.state_dict() for rb in self._rbs], "_batch_size": self._batch_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the states of the sub-buffers."""
        states = state_dict["_rbs"]
        if len(states) != len(self._rbs):
            raise ValueError(
                f"buffer count mismatch: expected {len(self._rbs)} states, got {len(states)}"
            )
        for rb, state in zip(self._rbs, states):
            rb.load_state_dict(state)
        self._batch_size = state_dict.get("_batch_size", self._batch_size)

    def dumps(self, path: str | os.PathLike) -> None:
        """Save every sub-buffer under ``path/buffer_<i>`` (atomically as a whole)."""
        from tdrl.data.replay_buffers.checkpointers import atomic_folder, dump_buffer, write_marker

        with atomic_folder(path) as folder:
            for number, rb in enumerate(self._rbs):
                dump_buffer(rb, os.path.join(folder, f"buffer_{number}"))
            write_marker(folder, "tdrl.ReplayBufferEnsemble", count=len(self._rbs))

    def loads(self, path: str | os.PathLike) -> None:
        """Load every sub-buffer saved by :meth:`dumps`."""
        from tdrl.data.replay_buffers.checkpointers import (
            checkpoint_folder,
            load_buffer,
            read_metadata,
        )

        folder = checkpoint_folder(path)
        meta = read_metadata(folder, "tdrl.ReplayBufferEnsemble")
        if int(meta["count"]) != len(self._rbs):
            raise ValueError(
                f"buffer count mismatch: the ensemble has {len(self._rbs)} buffers, the checkpoint holds {meta['count']}"
            )
        for number, rb in enumerate(self._rbs):
            load_buffer(rb, os.path.join(folder, f"buffer_{number}"))

    def __repr__(self) -> str:
        return f"ReplayBufferEnsemble(buffers={self._rbs!r}, sampler={self._sampler!r})"
