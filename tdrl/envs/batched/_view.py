"""Indexed views of batched envs: ``env[1:]`` is a batched env over some of the workers.

A view shares the parent's workers (no new process, no copy of the sub-envs): stepping
or resetting it steps or resets the selected sub-envs of the parent, through the
parent's masked (``"_step"`` / ``"_reset"``) step and reset. It is an instance of the
parent's class, so code written for a ``ParallelEnv`` accepts a view of one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.common import EnvBase

if TYPE_CHECKING:
    from tdrl.envs.batched._base import BatchedEnvBase

CLOSED_VIEW = "cannot use a closed indexed view of {cls} (close() was called on the view)"
CLOSED_PARENT = "cannot use this indexed view of {cls}: its parent environment has been closed"
BOOL_INDEX = (
    "Boolean masks are not supported to index a batched env: pass the indices "
    "(mask.nonzero()) or a slice, got a {kind} of dtype {dtype}"
)


def worker_indices(index: Any, num_workers: int) -> list[int]:
    """The worker indices selected by ``index`` (int, slice, sequence, array or tensor)."""
    if isinstance(index, (bool, np.bool_)):
        raise NotImplementedError(BOOL_INDEX.format(kind="bool", dtype="bool"))
    if isinstance(index, (int, np.integer)):
        position = int(index) + num_workers if index < 0 else int(index)
        if not 0 <= position < num_workers:
            raise IndexError(f"worker index {index} out of range for {num_workers} workers")
        return [position]
    if isinstance(index, slice):
        return list(range(num_workers))[index]
    if isinstance(index, (torch.Tensor, np.ndarray)):
        if index.dtype in (torch.bool, np.bool_):
            raise NotImplementedError(
                BOOL_INDEX.format(kind=type(index).__name__, dtype=index.dtype)
            )
        if index.ndim > 1:
            raise IndexError(f"expected a 1-dim index of workers, got shape {tuple(index.shape)}")
        index = index.tolist()
    if isinstance(index, (list, tuple)):
        if any(isinstance(i, (bool, np.bool_)) for i in index):
            raise NotImplementedError(BOOL_INDEX.format(kind="list", dtype="bool"))
        return [worker_indices(int(i), num_workers)[0] for i in index]
    raise TypeError(
        f"batched env index: expected an int, slice, sequence or 1-dim tensor of workers, "
        f"got {type(index).__name__}"
    )


class IndexedView:
    """Mixin placed before a batched env class to make the views of that class."""

    _view_parent: BatchedEnvBase
    _view_workers: list[int]

    def _parent(self) -> BatchedEnvBase:
        """The parent env, after checking that the view and its parent can be used."""
        parent = self.__dict__["_view_parent"]
        if self.__dict__.get("_view_closed", False):
            raise RuntimeError(CLOSED_VIEW.format(cls=type(parent).__name__))
        if parent.__dict__.get("_closed_by_user", False):
            raise RuntimeError(CLOSED_PARENT.format(cls=type(parent).__name__))
        return parent

    def _ensure_started(self) -> None:
        self._parent()._ensure_started()

    def start(self) -> None:
        """Start the parent's workers (a view has none of its own)."""
        self._ensure_started()

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the view only: the parent and its workers keep running."""
        self.__dict__["_view_closed"] = True
        self.is_closed = True

    def _run(
        self,
        command: str,
        payload: Any = None,
        workers: list[int] | None = None,
        payloads: list | None = None,
    ) -> list:
        selected = self.__dict__["_view_workers"]
        mapped = selected if workers is None else [selected[w] for w in workers]
        return self._parent()._run(command, payload, mapped, payloads)

    def _rows(self) -> torch.Tensor:
        return torch.tensor(self.__dict__["_view_workers"], dtype=torch.long)

    def _to_parent(self, parent: BatchedEnvBase, tensordict: TensorDictBase) -> TensorDictBase:
        """The view's data in the parent's batch (other workers' rows are zeros)."""
        rows = self._rows()
        full = TensorDict({}, batch_size=parent.batch_size, device=tensordict.device)
        for key, value in tensordict.items(True, True):
            if isinstance(value, torch.Tensor):
                buffer = value.new_zeros((parent.num_workers, *value.shape[1:]))
                buffer[rows] = value
                full.set(key, buffer)
        return full

    def _row_mask(self, parent: BatchedEnvBase, shape: torch.Size) -> torch.Tensor:
        mask = torch.zeros(shape, dtype=torch.bool)
        mask[self._rows()] = True
        return mask

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        parent = self._parent()
        full = self._to_parent(parent, tensordict)
        if full.get("_step", None) is None:
            full.set("_step", self._row_mask(parent, parent.batch_size))
        return parent._step(full)[self._rows()]

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        parent = self._parent()
        if tensordict is None:
            full = TensorDict({}, batch_size=parent.batch_size)
        else:
            full = self._to_parent(parent, tensordict)
        if not any(full.get(key, None) is not None for key in parent.reset_keys):
            for reset_key, flag_key in zip(parent.reset_keys, parent._cache.done_flag_keys):
                full.set(reset_key, self._row_mask(parent, parent.full_done_spec[flag_key].shape))
        return parent._reset(full, **kwargs)[self._rows()]

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then reset the done sub-envs (through the parent's masked step and reset)."""
        return EnvBase.step_and_maybe_reset(self, tensordict)  # type: ignore[arg-type]

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed the selected sub-envs one after the other (see the parent's ``set_seed``)."""
        for position in range(len(self.__dict__["_view_workers"])):
            seed = self._run("seed", (seed, static_seed), [position])[0]
        return seed


@functools.cache
def view_class(cls: type) -> type:
    """The class of the views of ``cls`` (a subclass of it, so ``isinstance`` holds)."""
    return type(f"{cls.__name__}View", (IndexedView, cls), {"__module__": cls.__module__})


def make_view(parent: BatchedEnvBase, index: Any) -> BatchedEnvBase:
    """A view of ``parent`` over the workers selected by ``index``."""
    root = parent.__dict__.get("_view_parent", parent)
    selected = worker_indices(index, parent.num_workers)
    if root is not parent:
        selected = [parent.__dict__["_view_workers"][w] for w in selected]
    if not selected:
        raise IndexError(f"batched env index {index!r} selects no worker")
    cls = view_class(type(root))
    view = cls.__new__(cls)
    EnvBase.__init__(
        view, device=root.device, batch_size=torch.Size([len(selected), *root.batch_size[1:]])
    )
    view.output_spec = root.output_spec[selected]
    view.input_spec = root.input_spec[selected]
    view.__dict__.update(
        _view_parent=root,
        _view_workers=selected,
        _ready=True,
        num_workers=len(selected),
        meta_data=[root.meta_data[w] for w in selected],
    )
    return view
