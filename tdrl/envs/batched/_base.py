"""BatchedEnvBase: what SerialEnv and ParallelEnv share (specs, masks, seeding, attributes).

A subclass provides ``_start`` / ``_shutdown`` and ``_run(command, payloads,
workers)``, which runs one command on some workers and returns their replies.
Everything else (stacking the specs, routing partial steps and resets,
building outputs from the buffers, attribute access) lives here.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import (
    LazyStackedTensorDict,
    NonTensorStack,
    TensorDictBase,
    is_non_tensor,
    is_tensorclass,
)

from tdrl._settings import rl_warnings
from tdrl.envs._checks import check_layout
from tdrl.envs._keys import as_tuple, empty_levels
from tdrl.envs._partial import is_data_leaf, merge_non_tensor
from tdrl.envs._step_mdp import attach_next, merge_next
from tdrl.envs._td_fast import all_true, fast_get, fast_set
from tdrl.envs.batched import _shared, _view
from tdrl.envs.batched._runner import CALLABLE, refuse_post_step_hooks
from tdrl.envs.batched._specs import stack_env_specs
from tdrl.envs.batched.env_creator import get_env_metadata
from tdrl.envs.common import EnvBase
from tdrl.envs.metadata import EnvMetaData

#: at most this many reset-row masks are kept (see BatchedEnvBase._rows_mask)
_ROWS_MASKS_CACHED = 64

DYNAMIC_WARNING = (
    "{cls}: the sub-env specs have dynamic dims (-1) or buffers were disabled; data is sent "
    "through pipes and stacked lazily at every step, which is much slower than shared buffers"
)


class BatchedEnvError(ValueError, RuntimeError):
    """Arguments or sub-envs of a batched env that do not fit together.

    For instance a per-worker list whose length is not the number of workers.

    A ``ValueError`` (a bad input); also a ``RuntimeError``, which is what other
    implementations of this API raise for it, so code catching either still works.

    Examples:
        >>> from tdrl.envs import SerialEnv, PendulumEnv
        >>> try:
        ...     SerialEnv(3, [PendulumEnv, PendulumEnv])
        ... except RuntimeError as err:
        ...     print(err)
        len(create_env_fn) and num_workers mismatch: expected one entry per worker (3), got 2
    """


def _as_list(value: Any, count: int, name: str, kind: type | tuple) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise BatchedEnvError(
                f"len({name}) and num_workers mismatch: expected one entry per worker "
                f"({count}), got {len(value)}"
            )
        items = list(value)
    else:
        items = [value] * count
    for item in items:
        if not isinstance(item, kind):
            raise TypeError(f"{name}: expected {kind}, got {type(item).__name__}")
    return items


class _RemoteMethod:
    """Calls a method on every sub-env and returns the list of results."""

    def __init__(self, env: BatchedEnvBase, name: str) -> None:
        self.env = env
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        return self.env._run("call", (self.name, args, kwargs))

    def __repr__(self) -> str:
        return f"<method {self.name!r} of the {self.env.num_workers} sub-envs>"


def _on_cpu(data: TensorDictBase) -> TensorDictBase:
    """``data`` with its tensors on the CPU, to send to a worker; a device-less input stays
    device-less (its worker's env would otherwise see a "cpu" device it does not have)."""
    if data.device is None:
        return data.apply(lambda tensor: tensor.cpu())
    return data.to("cpu")


class _WorkerValues(list):
    """The values of an attribute on every sub-env; reading an attribute of it reads it
    on the sub-envs' objects (``env.physics.timestep`` gives one value per sub-env).

    Attributes of ``list`` itself (``index``, ``count``...) keep their list meaning.
    """

    def __init__(self, values: list, env: BatchedEnvBase, path: str) -> None:
        super().__init__(values)
        self._env = env
        self._path = path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._env._remote_attribute(f"{self._path}.{name}")


class BatchedEnvBase(EnvBase):
    """Base class of SerialEnv and ParallelEnv: a batch of sub-envs seen as one env.

    The batch size is ``[num_workers, *sub_env.batch_size]``; the specs are the
    sub-env specs stacked along a new first dim (lazily stacked when the
    sub-envs differ). ``"_step"`` / ``"_reset"`` masks step or reset only the
    marked sub-envs. Reading an attribute that the batched env does not have
    returns one value per sub-env (attributes of those values can be read the same
    way: ``env.physics.timestep``); a method is called on every sub-env and returns
    the list of results.

    Args:
        num_workers: the number of sub-envs.
        create_env_fn: a callable returning an env, or one callable per worker.
        create_env_kwargs: keyword arguments for ``create_env_fn``: one dict, or one per worker.
        pin_memory: pin the outputs in page-locked memory before moving them to a CUDA device.
        share_individual_td: keep one buffer tensordict per worker (stacked lazily); by default
            only sub-envs with different specs get individual buffers.
        shared_memory: put the buffers in shared memory (required by ParallelEnv).
        policy_proxy: accepted for compatibility; unused.
        device: the device of the batched env's data (default: the sub-envs' device).
        num_threads: if given, the number of torch threads of the main process.
        num_sub_threads: the number of torch threads of each worker process.
        serial_for_single: with one worker, build a SerialEnv instead of a ParallelEnv.
        non_blocking: move outputs to ``device`` with non-blocking copies.
        mp_start_method: the start method of the worker processes (ParallelEnv).
        use_buffers: exchange data through preallocated buffers (default: unless the specs
            have dynamic dims).
        consolidate: without buffers, ParallelEnv workers pack each reply into a single
            storage before sending it (one buffer to pickle instead of one per entry).

    Examples:
        >>> import torch
        >>> from tdrl.envs import PendulumEnv, SerialEnv
        >>> env = SerialEnv(3, PendulumEnv)
        >>> isinstance(env, BatchedEnvBase), env.batch_size
        (True, torch.Size([3]))
        >>> data = env.reset()
        >>> data["_reset"] = torch.tensor([[True], [False], [False]])
        >>> env.reset(data).batch_size
        torch.Size([3])
        >>> env.close()
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        create_env_kwargs: dict | Sequence[dict] | None = None,
        *,
        pin_memory: bool = False,
        share_individual_td: bool | None = None,
        shared_memory: bool = True,
        policy_proxy: Callable | None = None,
        device: Any = None,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        serial_for_single: bool = False,
        non_blocking: bool = False,
        mp_start_method: str | None = None,
        use_buffers: bool | None = None,
        consolidate: bool = True,
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers: expected a positive int, got {num_workers!r}")
        fns = _as_list(create_env_fn, num_workers, "create_env_fn", object)
        for fn in fns:
            if not callable(fn):
                raise TypeError(f"create_env_fn: expected a callable, got {type(fn).__name__}")
        kwargs = [
            dict(kw)
            for kw in _as_list(create_env_kwargs or {}, num_workers, "create_env_kwargs", dict)
        ]
        self.__dict__["_ready"] = False
        metas = self._collect_metadata(fns, kwargs)
        sub_batch = metas[0].batch_size
        for i, meta in enumerate(metas):
            if meta.batch_size != sub_batch:
                raise ValueError(
                    f"sub-env batch sizes differ: worker 0 has {tuple(sub_batch)}, "
                    f"worker {i} has {tuple(meta.batch_size)}"
                )
        empty = [
            (name, *as_tuple(key))
            for specs in (metas[0].output_spec, metas[0].input_spec)
            for name, spec in specs.items()
            for key in empty_levels(spec)
        ]
        if empty:
            raise BatchedEnvError(
                f"The environment passed to {type(self).__name__} has empty specs (Composites "
                f"without entries) at {empty}: their entries cannot be stacked across workers; "
                "remove them in each sub-env with TransformedEnv(env, RemoveEmptySpecs())"
            )
        if device is None:
            devices = {meta.device for meta in metas}
            if len(devices) > 1:
                raise ValueError(
                    f"sub-envs live on different devices {sorted(map(str, devices))}; "
                    "pass device= to choose the batched env's device"
                )
            device = metas[0].device
        super().__init__(device=device, batch_size=torch.Size([num_workers, *sub_batch]))
        self.num_workers = num_workers
        self.create_env_fn = fns
        self.create_env_kwargs = kwargs
        self.pin_memory = pin_memory
        self.shared_memory = shared_memory
        self.policy_proxy = policy_proxy
        self.num_threads = num_threads
        self.num_sub_threads = num_sub_threads
        self.serial_for_single = serial_for_single
        self.non_blocking = non_blocking
        self.consolidate = consolidate
        self.meta_data = metas
        # the batch restores given states at reset (set_state=True) if every sub-env does
        self.__dict__["_supports_set_state"] = all(m.supports_set_state for m in metas)
        homogeneous = self._set_specs(metas) and not share_individual_td
        self._data_classes = _shared.data_classes(self.output_spec)
        self.share_individual_td = not homogeneous
        per_worker = [_shared.region_specs(m.output_spec, m.input_spec) for m in metas]
        dynamic = any(_shared.is_dynamic(specs) for specs in per_worker)
        if use_buffers is None:
            use_buffers = not dynamic
        elif use_buffers and dynamic:
            raise ValueError(
                "use_buffers=True is impossible: the sub-env specs have dynamic (-1) dims"
            )
        if not use_buffers and rl_warnings():
            warnings.warn(DYNAMIC_WARNING.format(cls=type(self).__name__), stacklevel=2)
        self._use_buffers = use_buffers
        self._layout = (
            _shared.plan_layout(
                per_worker,
                homogeneous,
                sub_batch,
                [_shared.group_shapes(m.output_spec, m.input_spec) for m in metas],
            )
            if use_buffers
            else None
        )
        self._input_keys = [key for key, _, _ in per_worker[0]["input"]]
        self._state_keys = [key for key, _, optional in per_worker[0]["input"] if optional]
        self._arena: torch.Tensor | None = None
        self._views: dict | None = None
        self._missing: dict[str, list] = {"root": [], "next": []}
        self._extras: dict[str, list] = {"root": [None] * num_workers, "next": [None] * num_workers}
        self._last: dict[str, list] = {"root": [None] * num_workers, "next": [None] * num_workers}
        self.is_closed = True
        self.__dict__["_ready"] = True

    # ---------------------------------------------------------------- set-up
    def _collect_metadata(self, fns: list, kwargs: list) -> list[EnvMetaData]:
        metas: list[EnvMetaData] = []
        known: list[tuple[Any, dict, EnvMetaData]] = []
        for fn, kw in zip(fns, kwargs):
            meta = next((m for f, k, m in known if f is fn and k == kw), None)
            if meta is None:
                meta = get_env_metadata(fn, kw, refuse_post_step_hooks)
                known.append((fn, kw, meta))
            metas.append(meta)
        return metas

    def _set_specs(self, metas: list[EnvMetaData]) -> bool:
        """Stack the sub-env specs; return whether they are all identical."""
        first = metas[0]
        if all(m is first for m in metas):
            specs, homogeneous = first.specs.expand(self.num_workers, *first.batch_size), True
        else:
            specs, homogeneous = stack_env_specs([m.specs for m in metas])
        self.output_spec = specs["output_spec"]
        self.input_spec = specs["input_spec"]
        return homogeneous

    def update_kwargs(self, kwargs: dict | Sequence[dict]) -> None:
        """Update the keyword arguments of the env constructors (one dict, or one per worker).

        The new arguments are used the next time the sub-envs are built (after
        :meth:`close`, or at the first :meth:`start`).
        """
        updates = _as_list(kwargs, self.num_workers, "kwargs", dict)
        for current, update in zip(self.create_env_kwargs, updates):
            current.update(update)

    # ------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Build the sub-envs (start the workers); a no-op when already started."""
        if not self.is_closed:
            return
        if self._use_buffers and self._arena is None:
            self._arena = _shared.allocate(self._layout, self.shared_memory)
            cpu = self.device if self.device is not None and self.device.type == "cpu" else None
            self._views = _shared.parent_views(self._arena, self._layout, cpu)
            self._input_views = self._views["input"]
            self._input_pairs = list(self._input_views[0].items(True, True))
            self.__dict__["_fast_inputs"] = not self.non_blocking
            self._root_pairs = list(self._views["root"][0].items(True, True))
        self._all_workers = list(range(self.num_workers))
        self._start()
        self.is_closed = False
        self.__dict__["_closed_by_user"] = False

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the sub-envs and stop the workers. Closing twice is a no-op."""
        if self.__dict__.get("is_closed", True):
            return
        self.is_closed = True
        self.__dict__["_closed_by_user"] = True  # its indexed views refuse to restart it
        self._shutdown()

    def __getitem__(self, index: Any) -> BatchedEnvBase:
        """A view over some workers: ``env[1:]``, ``env[[0, 2]]``, ``env[torch.tensor([1])]``.

        The view is an env of the same class sharing this env's workers: stepping or
        resetting it steps or resets the selected sub-envs only, and reading an
        attribute returns the selected sub-envs' values. Closing the view leaves this
        env running; closing this env makes its views unusable. Boolean masks are not
        accepted (pass their indices).
        """
        return _view.make_view(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}[{index!r}] = ...: replacing a sub-env (a snapshot "
            "writeback of its state into a worker) is not supported; build a new batched env"
        )

    # --------------------------------------------------------------- state
    def state_dict(
        self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False
    ) -> dict:
        """The ``state_dict()`` of every sub-env, under ``"worker0"``, ``"worker1"``...

        A ParallelEnv returns copies of its workers' tensors, taken when called.
        """
        self._ensure_started()
        states = self._run("call", ("state_dict", (), {"keep_vars": keep_vars}))
        destination = OrderedDict() if destination is None else destination
        for w, state in enumerate(states):
            destination[f"{prefix}worker{w}"] = state
        return destination

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> None:
        """Load ``state_dict["workerN"]`` into sub-env ``N`` (as returned by :meth:`state_dict`).

        Raises:
            KeyError: with ``strict``, when a worker's entry is missing or an entry names no
                worker.
        """
        names = [f"worker{w}" for w in range(self.num_workers)]
        if strict:
            missing = [name for name in names if name not in state_dict]
            unexpected = [key for key in state_dict if key not in names]
            if missing or unexpected:
                raise KeyError(
                    f"{type(self).__name__}.load_state_dict: expected the keys {names}; "
                    f"missing {missing}, unexpected {unexpected}"
                )
        self._ensure_started()
        for w, name in enumerate(names):
            if name in state_dict:
                kwargs = {"strict": strict, "assign": assign}
                self._run("call", ("load_state_dict", (state_dict[name],), kwargs), [w])

    def __enter__(self) -> BatchedEnvBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _ensure_started(self) -> None:
        if self.is_closed:
            self.start()

    def _start(self) -> None:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError

    def _run(
        self,
        command: str,
        payload: Any = None,
        workers: list[int] | None = None,
        payloads: list | None = None,
    ) -> list:
        raise NotImplementedError

    # ------------------------------------------------------------- data path
    def _write_inputs(
        self, tensordict: TensorDictBase, workers: list[int], required: bool = True
    ) -> list | None:
        """Copy actions (and state entries) into the input buffers; return per-worker payloads."""
        if not self._use_buffers:
            # select, not get: a heterogeneous input cannot be read as one tensor
            keys = self._input_keys
            return [_on_cpu(tensordict[w].select(*keys, strict=False)) for w in workers]
        views = self._input_views
        if len(views) == 1:
            pairs = self._input_pairs
            values = [fast_get(tensordict, key) for key, _ in pairs]
            if (
                pairs  # an env without action nor state entries has nothing to copy
                and required
                and self.__dict__["_fast_inputs"]
                and all(
                    v is not None and v.shape == b.shape and v.dtype == b.dtype
                    for v, (_, b) in zip(values, pairs)
                )
            ):
                torch._foreach_copy_([b for _, b in pairs], values)
            else:
                for (key, buffer), value in zip(pairs, values):
                    self._copy_in(key, buffer, value, required)
        else:
            for w in workers:
                sub = tensordict[w]
                for key, value in views[w].items(True, True):
                    self._copy_in(key, value, sub.get(key, None), required)
        pipe = self._layout.pipe_keys[0]["input"]
        if not pipe:
            return None
        out = []
        for w in workers:
            values = {}
            for key in pipe:
                value = tensordict[w].get(key, None)
                values[key] = getattr(value, "data", value)
            out.append(values)
        return out

    def _copy_in(
        self, key: Any, buffer: torch.Tensor, value: torch.Tensor | None, required: bool
    ) -> None:
        if value is None:
            if not required or key in self._state_keys:
                return
            raise KeyError(
                f"{type(self).__name__}.step: the input has no entry for the key {key!r}"
            )
        # no broadcast, no lossy cast: an action of another layout is an error, not a guess
        value = check_layout("action", key, value, buffer.shape, buffer.dtype)
        buffer.copy_(value, non_blocking=self.non_blocking)

    def _read(self, region: str, replies: list, workers: list[int]) -> TensorDictBase:
        """Build the output of a reset (``"root"``) or a step (``"next"``) from the workers."""
        if not self._use_buffers:
            last = self._last[region]
            for w, reply in zip(workers, replies):
                last[w] = reply
            for w in range(self.num_workers):
                if last[w] is None:
                    # a worker left out of a partial step or reset before sending any data:
                    # zeros, as the buffers of the buffered path hold before the first write
                    last[w] = self._zero_region(region, w, replies)
            parts = [td.clone() for td in last]
            if len({td.device for td in parts}) > 1:
                # workers' latest data need not agree on a device (one step input had
                # one, the next had none): the stack is then device-less
                parts = [td.clear_device_() for td in parts]
            out = LazyStackedTensorDict.lazy_stack(parts, 0)
            if self._data_classes:
                _shared.restore_classes(out, self._data_classes)
            return self._to_device(out)
        missing = self._missing[region]
        extras = self._extras[region]
        has_extra = False
        for w, reply in zip(workers, replies):
            if reply is not None:
                absent, extra = reply
                for key in absent:
                    if key not in missing:
                        missing.append(key)
                extras[w] = extra
                has_extra = has_extra or extra is not None
        out = _shared.read_region(self._views[region], missing)
        if has_extra or any(extra is not None for extra in extras):
            # the keys of every worker: one left out of a partial step has sent none yet
            keys = dict.fromkeys(key for extra in extras if extra for key in extra)
            for key in keys:
                values = [extra.get(key) if extra else None for extra in extras]
                out.set(key, NonTensorStack.from_list(values))
        if self._data_classes:
            _shared.restore_classes(out, self._data_classes)
        return self._to_device(out)

    def _zero_region(self, region: str, worker: int, replies: list) -> TensorDictBase:
        """Zeros with the layout of a worker's reset (``"root"``) or step (``"next"``) output,
        on the device of the replies received (device-less when they are)."""
        output_spec = self.meta_data[worker].output_spec
        names = ["full_observation_spec", "full_done_spec"]
        if region == "next":
            names.append("full_reward_spec")
        data = output_spec[names[0]].zero()
        for name in names[1:]:
            data.update(output_spec[name].zero())
        data = data.to("cpu")
        if replies and replies[0].device is None:
            data.clear_device_()
        return data

    def _to_device(self, out: TensorDictBase) -> TensorDictBase:
        device = self.device
        if device is None or device.type == "cpu":
            return out
        if self.pin_memory and torch.cuda.is_available():
            out = out.pin_memory()
        return out.to(device, non_blocking=self.non_blocking)

    # --------------------------------------------------------- step / reset
    def _worker_mask(self, mask: torch.Tensor) -> torch.Tensor:
        return mask.reshape(self.num_workers, -1).any(-1)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._ensure_started()
        mask = tensordict.get("_step", None)
        workers = list(range(self.num_workers))
        sub_masks = None
        if mask is not None:
            per_worker = mask.reshape(self.num_workers, -1)
            workers = per_worker.any(-1).nonzero().squeeze(-1).tolist()
            if self.batch_size[1:] and not bool(per_worker[workers].all()):
                sub_masks = [mask[w].reshape(self.batch_size[1:]) for w in workers]
        inputs = self._write_inputs(tensordict, workers)
        payloads = None
        if inputs is not None or sub_masks is not None:
            payloads = [
                (inputs[i] if inputs else None, sub_masks[i] if sub_masks else None)
                for i in range(len(workers))
            ]
        replies = self._run("step", None, workers, payloads) if workers else []
        out = self._read("next", replies, workers)
        if len(workers) < self.num_workers:
            skipped = sorted(set(range(self.num_workers)) - set(workers))
            self._fill_skipped(out, tensordict, skipped)
        return out

    def _can_fuse(self, tensordict: TensorDictBase) -> bool:
        cache = self._cache
        fusable = cache.derived.get("batched_fusable")
        if fusable is None:
            fusable = cache.derived["batched_fusable"] = (
                self._use_buffers
                and not self.share_individual_td
                and not self.batch_size[1:]
                and cache.reset_keys == ["_reset"]
                and "done" in cache.done_keys
                and not self._layout.pipe_keys[0]["input"]
            )
        return (
            fusable
            and self._auto_reset_handler is None
            and not self.run_type_checks
            and tensordict.batch_size == self.batch_size
            and fast_get(tensordict, "_step") is None
        )

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then reset the sub-envs that are done, in one round trip to the workers.

        Same result as stepping, moving ``"next"`` to the root and resetting the
        done sub-envs (see :meth:`EnvBase.step_and_maybe_reset`); each worker resets
        its env right after the step when the env's ``"done"`` is set.
        """
        if not self._can_fuse(tensordict):
            return super().step_and_maybe_reset(tensordict)
        self._ensure_started()
        workers = self._all_workers
        self._write_inputs(tensordict, workers)
        replies = self._run("step_reset", None, workers)
        step_replies = None
        resets = None
        for w, reply in enumerate(replies):
            if reply is None:
                continue
            if step_replies is None:
                step_replies = [None] * len(replies)
            step_replies[w] = reply[0]
            if reply[2]:
                resets = resets or []
                resets.append((w, reply[1]))
        if step_replies is None:
            nxt = _shared.read_region(self._views["next"], self._missing["next"])
            if self._data_classes:
                _shared.restore_classes(nxt, self._data_classes)
            nxt = self._to_device(nxt)
        else:
            nxt = self._read("next", step_replies, workers)
        preset = fast_get(tensordict, "next")
        attach_next(tensordict, self._finish_step(tensordict, nxt), preset)
        tensordict_ = merge_next(tensordict, self._cache.mdp_excluded, True, keep_empty=True)
        if resets:
            self._merge_resets(tensordict_, resets)
        return tensordict, tensordict_

    def _merge_resets(self, tensordict_: TensorDictBase, resets: list) -> None:
        """Put the reset outputs of the workers in ``resets`` in the rows of ``tensordict_``."""
        workers = tuple(w for w, _ in resets)
        replies = [reply for _, reply in resets]
        on_cpu = self.device is None or self.device.type == "cpu"
        if any(reply is not None for reply in replies) or not on_cpu:
            root = self._read("root", replies, list(workers))
            keys = root.keys(True, True, is_leaf=is_data_leaf)
            pairs = [(key, root.get(key)) for key in keys]
        else:
            # the reset rows are read straight from the buffers
            pairs = self._root_pairs
        for head in {key[0] for key, _ in pairs if type(key) is tuple}:
            container = fast_get(tensordict_, head)
            if is_tensorclass(container):
                # merge_next keeps a tensorclass whole, shared with the step's "next": give
                # the new root its own before writing reset rows into it
                fast_set(tensordict_, head, container.copy())
        reset = None
        for key, value in pairs:
            current = fast_get(tensordict_, key)
            if type(current) is torch.Tensor and current.shape == value.shape:
                if on_cpu and not value.is_cuda:
                    mask = self._rows_mask(workers, value.ndim)
                else:
                    if reset is None:
                        reset = self._rows_mask(workers, 1).to(value.device)
                    mask = reset.reshape(-1, *([1] * (value.ndim - 1)))
                fast_set(tensordict_, key, torch.where(mask, value, current))
            elif is_non_tensor(current) and is_non_tensor(value):
                rows = self._rows_mask(workers, 1)
                tensordict_.set(key, merge_non_tensor(value, current, rows))
            elif len(workers) == self.num_workers:
                tensordict_.set(key, value.clone())
            else:
                raise RuntimeError(
                    f"{type(self).__name__}.step_and_maybe_reset: the reset output has the key "
                    f"{key!r}, which the step output lacks"
                )

    def _rows_mask(self, workers: tuple, ndim: int) -> torch.Tensor:
        """A CPU bool mask ``[num_workers, 1, ...]`` (``ndim`` dims), True on ``workers``' rows.

        Masks are cached (one per set of workers and number of dims; read-only by contract:
        ``torch.where`` only reads them).
        """
        cache = self.__dict__.setdefault("_rows_masks", {})
        mask = cache.get((workers, ndim))
        if mask is None:
            flags = torch.zeros(self.num_workers, dtype=torch.bool)
            flags[list(workers)] = True
            mask = flags.reshape(-1, *([1] * (ndim - 1)))
            if len(cache) < _ROWS_MASKS_CACHED:
                cache[(workers, ndim)] = mask
        return mask

    def _fill_skipped(self, out: TensorDictBase, tensordict: TensorDictBase, skipped: list) -> None:
        """Non-stepped sub-envs keep the input's values (zeros where the input has none)."""
        for w in skipped:
            target = out[w]
            source = tensordict[w]
            for key, value in target.items(True, True):
                if not isinstance(value, torch.Tensor):
                    continue
                previous = source.get(key, None)
                if isinstance(previous, torch.Tensor) and previous.shape == value.shape:
                    value.copy_(previous)
                else:
                    value.zero_()
        # non-tensor entries (strings...) of the skipped sub-envs keep the input's values too
        stepped = torch.ones(self.num_workers, dtype=torch.bool)
        stepped[skipped] = False
        for key, value in list(out.items(True, True, is_leaf=is_data_leaf)):
            previous = tensordict.get(key, None)
            if is_non_tensor(value) and is_non_tensor(previous):
                shape = value.batch_size
                mask = stepped.reshape(-1, *([1] * (len(shape) - 1))).expand(shape)
                out.set(key, merge_non_tensor(value, previous, mask))

    def _reset_workers(self, masks: list) -> tuple[list[int], list[int]]:
        """The workers with an element to reset, and those of them resetting only some."""
        if len(masks) == 1:
            rows = masks[0][1].reshape(self.num_workers, -1)
            if rows.shape[1] == 1:
                # one element per worker: a worker is reset whole or not at all
                flags = rows.reshape(-1).tolist()
                return [w for w, flag in enumerate(flags) if flag], []
        need = torch.zeros(self.num_workers, dtype=torch.bool)
        for _, mask in masks:
            need |= self._worker_mask(mask).cpu()
        workers = need.nonzero().squeeze(-1).tolist()
        partial = [w for w in workers if not all(all_true(mask[w]) for _, mask in masks)]
        return workers, partial

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        self._ensure_started()
        workers = list(range(self.num_workers))
        entries: list = [None] * self.num_workers
        use_state = False
        if tensordict is not None:
            masks = [(key, tensordict.get(key, None)) for key in self.reset_keys]
            masks = [(key, m) for key, m in masks if m is not None]
            if masks:
                workers, partial = self._reset_workers(masks)
                for w in partial:
                    entries[w] = _on_cpu(tensordict[w].select(*[key for key, _ in masks]))
            present = [k for k in self._state_keys if tensordict.get(k, None) is not None]
            if present and self._use_buffers:
                self._write_inputs(tensordict.select(*present), workers, required=False)
                use_state = True
            elif present:
                for w in workers:
                    state = _on_cpu(tensordict[w].select(*present))
                    entries[w] = state if entries[w] is None else entries[w].update(state)
        if not workers:
            return self._read("root", [], [])
        if kwargs or use_state or any(entries[w] is not None for w in workers):
            payloads = [(kwargs, entries[w], use_state) for w in workers]
        else:
            payloads = None
        replies = self._run("reset", None, workers, payloads)
        return self._read("root", replies, workers)

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed the sub-envs one after the other, each with the seed the previous one returned.

        Returns the seed following the last sub-env's, so equal seeds give equal data
        whatever the batched env class.
        """
        self._ensure_started()
        for w in range(self.num_workers):
            seed = self._run("seed", (seed, static_seed), [w])[0]
        return seed

    # ---------------------------------------------------------- attributes
    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or not self.__dict__.get("_ready", False):
                raise
        self._ensure_started()
        return self._remote_attribute(name)

    def _remote_attribute(self, path: str) -> Any:
        """The attribute ``path`` (dotted for nested objects) of every sub-env."""
        values = self._run("getattr", path)
        if all(isinstance(v, str) and v == CALLABLE for v in values):
            return _RemoteMethod(self, path)
        return _WorkerValues(values, self, path)

    def __repr__(self) -> str:
        body = super().__repr__().split("(", 1)[1]
        return f"{type(self).__name__}(\n    num_workers={self.num_workers}, {body.lstrip()}"
