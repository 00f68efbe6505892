"""Gym / gymnasium spaces <-> tdrl specs, with the matching data converters.

Each supported space type has one handler, found by walking the space's class MRO and looking
the class *name* up in a table, so both ``gymnasium.spaces`` and ``gym.spaces`` classes (and
their subclasses) dispatch without importing either library here. A handler returns a
:class:`SpaceCodec`: the spec, a reader (simulator data -> tensor) and a writer (tensor ->
simulator data). Readers and writers are built once, when the specs are made, so the step path
only calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from tdrl.data.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    TensorSpec,
    Unbounded,
)

__all__ = [
    "SpaceCodec",
    "gym_space_to_spec",
    "is_dict_space",
    "make_space_codec",
    "spec_to_gym_space",
]

_NUMPY_TO_TORCH = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
}
_TORCH_TO_NUMPY = {value: key for key, value in _NUMPY_TO_TORCH.items()}

Reader = Callable[[Any], Any]
Writer = Callable[[Any], Any]


@dataclass
class SpaceCodec:
    """A space's spec (batch dims included) and its data converters.

    Attributes:
        spec: the tdrl spec of the space, with the env's batch dims leading.
        read: simulator data (numpy / python) -> tensor, TensorDict or non-tensor data.
        write: tensor (or TensorDict) -> simulator data, for action spaces.
        read_into: where simple, ``read`` written into a numpy view of a buffer (same values).
        write_numpy: where simple, ``write`` of a numpy view of the tensor (same result).
    """

    spec: TensorSpec
    read: Reader
    write: Writer
    read_into: Callable[[np.ndarray, Any], None] | None = None
    write_numpy: Callable[[np.ndarray], Any] | None = None


def _torch_dtype(space: Any) -> torch.dtype:
    dtype = np.dtype(space.dtype)
    try:
        return _NUMPY_TO_TORCH[dtype]
    except KeyError as err:
        raise TypeError(
            f"{type(space).__name__} space: expected a numeric numpy dtype, got {dtype}"
        ) from err


def _to_tensor(value: Any) -> torch.Tensor:
    """Numpy -> torch sharing memory where possible (a read-only array is copied first)."""
    if type(value) is np.ndarray:
        if not value.flags.writeable:
            value = value.copy()
        return torch.from_numpy(value)
    return torch.as_tensor(np.asarray(value))


def _tensor_to_numpy(value: torch.Tensor) -> np.ndarray:
    try:
        return value.numpy()
    except (RuntimeError, TypeError):
        # a tensor that requires grad, or lives on an accelerator
        return value.detach().cpu().numpy()


# --------------------------------------------------------------------------- handlers

_HANDLERS: dict[str, Callable[..., SpaceCodec]] = {}


def _handles(*class_names: str) -> Callable:
    def register(fn: Callable[..., SpaceCodec]) -> Callable[..., SpaceCodec]:
        for name in class_names:
            _HANDLERS[name] = fn
        return fn

    return register


def _handler_for(space: Any) -> Callable[..., SpaceCodec]:
    for klass in type(space).__mro__:
        handler = _HANDLERS.get(klass.__name__)
        if handler is not None:
            return handler
    raise TypeError(
        "unsupported gym space: expected one of "
        f"{sorted(_HANDLERS)}, got {type(space).__module__}.{type(space).__name__}"
    )


@_handles("Box")
def _box(space: Any, batch: tuple, categorical: bool, device: torch.device) -> SpaceCodec:
    dtype = _torch_dtype(space)
    event = tuple(space.shape) or (1,)
    full = torch.Size(batch + event)
    low = torch.tensor(np.broadcast_to(space.low, space.shape), dtype=dtype).reshape(event)
    high = torch.tensor(np.broadcast_to(space.high, space.shape), dtype=dtype).reshape(event)
    unbounded = dtype.is_floating_point and bool(torch.isinf(low).all() and torch.isinf(high).all())
    if unbounded:
        spec = Unbounded(event, device=device, dtype=dtype)
    else:
        spec = Bounded(low, high, event, device=device, dtype=dtype)
    np_dtype = np.dtype(space.dtype)

    def read(value: Any) -> torch.Tensor:
        tensor = _to_tensor(value)
        if tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        if tensor.shape != full:
            tensor = tensor.reshape(full)
        return tensor

    event_shape = batch + tuple(space.shape)

    def write_numpy(array: np.ndarray) -> np.ndarray:
        if array.dtype != np_dtype:
            array = array.astype(np_dtype)
        return array if array.shape == event_shape else array.reshape(event_shape)

    def write(value: torch.Tensor) -> np.ndarray:
        return write_numpy(_tensor_to_numpy(value))

    def read_into(out: np.ndarray, value: Any) -> None:
        value = np.asarray(value)
        out[...] = value if value.shape == out.shape else value.reshape(out.shape)

    return SpaceCodec(spec.expand(*full) if batch else spec, read, write, read_into, write_numpy)


@_handles("Discrete")
def _discrete(space: Any, batch: tuple, categorical: bool, device: torch.device) -> SpaceCodec:
    n = int(space.n)
    start = int(getattr(space, "start", 0))
    np_dtype = np.dtype(space.dtype)
    dtype = _torch_dtype(space)
    if categorical:
        spec = Categorical(n, shape=(), device=device, dtype=dtype)
        if batch:

            def read(value: Any) -> torch.Tensor:
                array = np.asarray(value, dtype=np_dtype)
                return torch.from_numpy(array - start if start else array.copy())

            def write(value: torch.Tensor) -> np.ndarray:
                array = _tensor_to_numpy(value).astype(np_dtype, copy=False)
                return array + start if start else array
        else:

            def read(value: Any) -> torch.Tensor:
                return torch.tensor(int(value) - start, dtype=dtype)

            def write(value: torch.Tensor) -> int:
                return int(value) + start

        return SpaceCodec(spec.expand(*batch) if batch else spec, read, write)
    spec = OneHot(n, device=device, dtype=dtype)
    eye = torch.eye(n, dtype=dtype)
    if batch:

        def read(value: Any) -> torch.Tensor:
            index = torch.from_numpy(np.asarray(value, dtype=np.int64) - start)
            return eye[index]

        def write(value: torch.Tensor) -> np.ndarray:
            return _tensor_to_numpy(value).argmax(-1).astype(np_dtype) + start
    else:

        def read(value: Any) -> torch.Tensor:
            return eye[int(value) - start]

        def write_numpy(array: np.ndarray) -> int:
            return int(array.argmax()) + start

        def write(value: torch.Tensor) -> int:
            return write_numpy(_tensor_to_numpy(value))

        return SpaceCodec(spec, read, write, write_numpy=write_numpy)

    return SpaceCodec(spec.expand(*batch, n), read, write)


@_handles("MultiDiscrete")
def _multi_discrete(
    space: Any, batch: tuple, categorical: bool, device: torch.device
) -> SpaceCodec:
    nvec = np.asarray(space.nvec)
    start = np.asarray(getattr(space, "start", np.zeros_like(nvec)))
    np_dtype = np.dtype(space.dtype)
    dtype = _torch_dtype(space)
    shift = bool(start.any())
    if categorical or nvec.ndim > 1:
        spec = MultiCategorical(torch.as_tensor(nvec), shape=nvec.shape, device=device, dtype=dtype)
        full = torch.Size(batch + nvec.shape)

        def read(value: Any) -> torch.Tensor:
            array = np.asarray(value, dtype=np_dtype)
            tensor = torch.from_numpy(array - start if shift else array.copy())
            return tensor.reshape(full)

        def write(value: torch.Tensor) -> np.ndarray:
            array = _tensor_to_numpy(value).astype(np_dtype, copy=False)
            return array + start if shift else array

        return SpaceCodec(spec.expand(*full) if batch else spec, read, write)
    total = int(nvec.sum())
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]]).astype(np.int64)
    spec = MultiOneHot(torch.as_tensor(nvec), device=device, dtype=dtype)

    def read(value: Any) -> torch.Tensor:
        index = np.asarray(value, dtype=np.int64) - start + offsets
        out = np.zeros((*batch, total), dtype=np.dtype(_TORCH_TO_NUMPY[dtype]))
        np.put_along_axis(out, index.reshape(*batch, len(nvec)), 1, axis=-1)
        return torch.from_numpy(out)

    bounds = np.cumsum(nvec)[:-1]

    def write(value: torch.Tensor) -> np.ndarray:
        array = _tensor_to_numpy(value)
        parts = np.split(array, bounds, axis=-1)
        index = np.stack([part.argmax(-1) for part in parts], axis=-1)
        return (index + start).astype(np_dtype)

    return SpaceCodec(spec.expand(*batch, total) if batch else spec, read, write)


@_handles("MultiBinary")
def _multi_binary(space: Any, batch: tuple, categorical: bool, device: torch.device) -> SpaceCodec:
    shape = tuple(np.atleast_1d(space.n).tolist()) if np.ndim(space.n) else (int(space.n),)
    dtype = _torch_dtype(space)
    np_dtype = np.dtype(space.dtype)
    spec = Binary(shape[-1], shape=shape, device=device, dtype=dtype)
    full = torch.Size(batch + shape)

    def read(value: Any) -> torch.Tensor:
        tensor = _to_tensor(np.asarray(value, dtype=np_dtype))
        return tensor.reshape(full)

    def write(value: torch.Tensor) -> np.ndarray:
        return _tensor_to_numpy(value).astype(np_dtype, copy=False)

    return SpaceCodec(spec.expand(*full) if batch else spec, read, write)


def _non_tensor_codec(batch: tuple, device: torch.device, example: Any = None) -> SpaceCodec:
    spec = NonTensor(shape=batch, device=device, example_data=example)
    if batch:

        def read(value: Any) -> Any:
            return NonTensorStack(*(NonTensorData(data=item) for item in value))
    else:

        def read(value: Any) -> Any:
            return NonTensorData(data=value)

    def write(value: Any) -> Any:
        if isinstance(value, NonTensorStack):
            return value.tolist()
        if isinstance(value, NonTensorData):
            return value.data
        return value

    return SpaceCodec(spec, read, write)


@_handles("Text")
def _text(space: Any, batch: tuple, categorical: bool, device: torch.device) -> SpaceCodec:
    return _non_tensor_codec(batch, device, example="")


@_handles("Sequence", "Graph", "OneOf")
def _sequence(space: Any, batch: tuple, categorical: bool, device: torch.device) -> SpaceCodec:
    return _non_tensor_codec(batch, device)


@_handles("Dict")
def _dict(space: Any, batch: tuple, categorical: bool, device: torch.device) -> SpaceCodec:
    codecs = {
        str(key): make_space_codec(sub, batch, categorical, device)
        for key, sub in space.spaces.items()
    }
    return _composite_codec(codecs, batch, device, from_tuple=False)


@_handles("Tuple")
def _tuple(space: Any, batch: tuple, categorical: bool, device: torch.device) -> SpaceCodec:
    subs = list(space.spaces)
    codecs = [make_space_codec(sub, batch, categorical, device) for sub in subs]
    homogeneous = bool(codecs) and all(
        type(sub) is type(subs[0]) and sub == subs[0] and not isinstance(codec.spec, Composite)
        for sub, codec in zip(subs, codecs)
    )
    if not homogeneous:
        by_index = {str(i): codec for i, codec in enumerate(codecs)}
        return _composite_codec(by_index, batch, device, from_tuple=True)
    first = codecs[0]
    dim = len(batch)
    spec = first.spec.unsqueeze(dim).expand(*batch, len(codecs), *first.spec.shape[dim:])

    def read(value: Any) -> torch.Tensor:
        return torch.stack([first.read(item) for item in value], dim)

    def write(value: torch.Tensor) -> tuple:
        return tuple(first.write(item) for item in value.unbind(dim))

    return SpaceCodec(spec, read, write)


def _composite_codec(
    codecs: Mapping[str, SpaceCodec], batch: tuple, device: torch.device, from_tuple: bool
) -> SpaceCodec:
    spec = Composite({key: codec.spec for key, codec in codecs.items()}, shape=batch, device=device)
    items = [
        (int(key) if from_tuple else key, key, codec.read, codec.write)
        for key, codec in codecs.items()
    ]
    batch_size = torch.Size(batch)

    def read(value: Any) -> TensorDict:
        return TensorDict._new_unsafe(
            {key: reader(value[index]) for index, key, reader, _ in items},
            batch_size=batch_size,
        )

    def write(value: Any) -> Any:
        if from_tuple:
            return tuple(writer(value.get(key)) for _, key, _, writer in items)
        return {key: writer(value.get(key)) for _, key, _, writer in items}

    return SpaceCodec(spec, read, write)


def is_dict_space(space: Any) -> bool:
    """Whether ``space`` is a ``Dict`` space (of gymnasium or gym)."""
    return any(klass.__name__ == "Dict" for klass in type(space).__mro__)


def make_space_codec(
    space: Any,
    batch_size: tuple | torch.Size = (),
    categorical_action_encoding: bool = False,
    device: torch.device | str | None = None,
) -> SpaceCodec:
    """Builds the spec and converters of a gym space.

    Args:
        space: a ``gymnasium.spaces`` (or ``gym.spaces``) instance; for a vector env, pass its
            ``single_observation_space`` / ``single_action_space``.
        batch_size: leading batch dims of the data (``(num_envs,)`` for a vector env).
        categorical_action_encoding: when True, ``Discrete`` becomes :class:`Categorical`
            (integers) and ``MultiDiscrete`` :class:`MultiCategorical`; otherwise one-hot specs.
        device: the device of the specs.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    return _handler_for(space)(space, tuple(batch_size), categorical_action_encoding, device)


def gym_space_to_spec(
    space: Any,
    categorical_action_encoding: bool = False,
    device: torch.device | str | None = None,
    batch_size: tuple | torch.Size = (),
) -> TensorSpec:
    """Converts a gym / gymnasium space to the matching tdrl spec.

    ``Box`` gives :class:`Bounded` (or :class:`Unbounded` when no bound is finite) with the
    space's dtype (a scalar box gets shape ``(1,)``); ``Discrete`` gives :class:`OneHot`, or
    :class:`Categorical` with ``categorical_action_encoding=True``; ``MultiDiscrete`` gives
    :class:`MultiOneHot` or :class:`MultiCategorical`; ``MultiBinary`` gives :class:`Binary`;
    ``Dict`` gives a (nested) :class:`Composite`; a ``Tuple`` of identical spaces gives their spec
    stacked along a new leading dim, and a mixed ``Tuple`` a Composite keyed ``"0"``, ``"1"``...;
    ``Text``, ``Sequence`` and ``Graph`` give :class:`NonTensor`.

    Examples:
        >>> import gymnasium
        >>> from tdrl.envs.libs.gym import gym_space_to_spec
        >>> spec = gym_space_to_spec(gymnasium.spaces.Discrete(3), categorical_action_encoding=True)
        >>> type(spec).__name__, spec.n
        ('Categorical', 3)
    """
    return make_space_codec(space, batch_size, categorical_action_encoding, device).spec


# --------------------------------------------------------------------------- spec -> space


def _spec_box(spec: TensorSpec, spaces: Any) -> Any:
    dtype = _TORCH_TO_NUMPY.get(spec.dtype, np.dtype(np.float32))
    low = getattr(spec, "low", None)
    if low is None:
        return spaces.Box(-np.inf, np.inf, shape=tuple(spec.shape), dtype=dtype)
    return spaces.Box(
        low=spec.low.cpu().numpy().astype(dtype),
        high=spec.high.cpu().numpy().astype(dtype),
        shape=tuple(spec.shape),
        dtype=dtype,
    )


def _spec_discrete(spec: TensorSpec, spaces: Any) -> Any:
    return spaces.Discrete(int(spec.n))


def _spec_multi_discrete(spec: TensorSpec, spaces: Any) -> Any:
    return spaces.MultiDiscrete(torch.as_tensor(spec.nvec).cpu().numpy().astype(np.int64))


def _spec_binary(spec: TensorSpec, spaces: Any) -> Any:
    return spaces.MultiBinary(list(spec.shape) if len(spec.shape) > 1 else int(spec.shape[-1]))


def _spec_non_tensor(spec: TensorSpec, spaces: Any) -> Any:
    return spaces.Text(max_length=1024)


def _spec_composite(spec: TensorSpec, spaces: Any) -> Any:
    return spaces.Dict(
        {key: spec_to_gym_space(sub, spaces) for key, sub in spec.items() if sub is not None}
    )


_SPEC_TO_SPACE: dict[str, Callable[[TensorSpec, Any], Any]] = {
    "Unbounded": _spec_box,
    "Bounded": _spec_box,
    "Categorical": _spec_discrete,
    "OneHot": _spec_discrete,
    "MultiCategorical": _spec_multi_discrete,
    "MultiOneHot": _spec_multi_discrete,
    "Binary": _spec_binary,
    "NonTensor": _spec_non_tensor,
    "Composite": _spec_composite,
}


def spec_to_gym_space(spec: TensorSpec, spaces: Any = None) -> Any:
    """Converts a tdrl spec to the matching gym / gymnasium space (the inverse of the above).

    Args:
        spec: the spec to convert.
        spaces: the ``spaces`` module of the backend; defaults to the current gym backend's.

    Examples:
        >>> from tdrl.data import Categorical
        >>> from tdrl.envs.libs.gym import spec_to_gym_space
        >>> spec_to_gym_space(Categorical(4))
        Discrete(4)
    """
    if spaces is None:
        from tdrl.envs.libs._gym_backend import gym_backend

        spaces = gym_backend("spaces")
    for klass in type(spec).__mro__:
        handler = _SPEC_TO_SPACE.get(klass.__name__)
        if handler is not None:
            return handler(spec, spaces)
    raise TypeError(
        f"spec_to_gym_space: expected one of {sorted(_SPEC_TO_SPACE)}, got {type(spec).__name__}"
    )
