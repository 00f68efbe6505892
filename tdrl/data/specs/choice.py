"""The :class:`Choice` spec: a value is one of several alternatives.

The alternatives are either specs of one kind (``Bounded(0, 1)`` or ``Bounded(10, 12)``),
or fixed non-tensor values (``NonTensorData("left")`` or ``NonTensorData("right")``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack

from tdrl.data.specs.base import TensorSpec, _checks_on
from tdrl.data.specs.errors import SpecValueError, _at
from tdrl.data.specs.shapes import DEVICE_TYPING, ShapeLike, _as_device, _ends_with

__all__ = ["Choice"]

_DATA = (NonTensorData, NonTensorStack)


def _shape_of(choice: Any) -> torch.Size:
    return choice.shape if isinstance(choice, TensorSpec) else choice.batch_size


def _same_data(a: Any, b: Any) -> bool:
    """Whether two non-tensor values hold the same objects in the same layout."""
    if not isinstance(a, _DATA) or not isinstance(b, _DATA):
        return False
    return a.batch_size == b.batch_size and a.tolist() == b.tolist()


def _validate(choices: Any) -> list:
    if not isinstance(choices, list):
        raise TypeError(f"Choice: choices must be a list, got {type(choices).__name__}")
    if not choices:
        raise ValueError("Choice: choices must not be empty")
    for i, choice in enumerate(choices):
        if not isinstance(choice, (TensorSpec, *_DATA)):
            raise TypeError(
                f"Choice: choice {i} must be either a TensorSpec, NonTensorData, or "
                f"NonTensorStack, got {type(choice).__name__}"
            )
    kinds = {type(c) for c in choices}
    if len(kinds) > 1:
        raise TypeError(
            f"Choice: choices must be the same type, got {sorted(k.__name__ for k in kinds)}"
        )
    shapes = {tuple(_shape_of(c)) for c in choices}
    if len(shapes) > 1:
        raise ValueError(f"Choice: choices must have the same shape, got {sorted(shapes)}")
    if isinstance(choices[0], TensorSpec):
        dtypes = {c.dtype for c in choices}
        if len(dtypes) > 1:
            raise ValueError(f"Choice: choices must have the same dtype, got {dtypes}")
    devices = {c.device for c in choices}
    if len(devices) > 1:
        raise ValueError(f"Choice: choices must have the same device, got {devices}")
    return list(choices)


class Choice(TensorSpec):
    """A value that is one of several alternatives.

    Args:
        choices: a list of specs of the same class, shape, dtype and device, or a list of
            ``NonTensorData`` / ``NonTensorStack`` values of the same batch shape.

    ``rand()`` picks one alternative uniformly (one pick for the whole sample) and
    returns a random value of that spec, or that non-tensor value. ``is_in`` accepts a
    value that is in one of the specs, or equal to one of the values. ``cardinality()``
    sums the alternatives' cardinalities (``inf`` for continuous specs) or counts the values.
    Shape operations (``expand``, indexing, ``unsqueeze``...) apply to every alternative.

    Examples:
        >>> import torch
        >>> from tdrl.data import Bounded
        >>> spec = Choice([Bounded(0.0, 1.0, shape=()), Bounded(10.0, 11.0, shape=())])
        >>> spec.is_in(torch.tensor(10.5)), spec.is_in(torch.tensor(5.0))
        (True, False)
        >>> from tensordict import NonTensorData
        >>> words = Choice([NonTensorData("left"), NonTensorData("right")])
        >>> words.cardinality(), words.rand().data in ("left", "right")
        (2, True)
    """

    _kind = "choice"

    def __init__(self, choices: list, device: DEVICE_TYPING | None = None) -> None:
        choices = _validate(choices)
        if device is not None:
            choices = [c.to(_as_device(device)) for c in choices]
        first = choices[0]
        is_spec = isinstance(first, TensorSpec)
        super().__init__(
            _shape_of(first),
            first.device,
            first.dtype if is_spec else None,
            first.domain if is_spec else "non_tensor",
        )
        self.choices = choices

    @property
    def _of_specs(self) -> bool:
        return isinstance(self.choices[0], TensorSpec)

    def _pick(self) -> Any:
        return self.choices[int(torch.randint(len(self.choices), ()))]

    def _map(self, fn: Callable[[Any], Any]) -> Choice:
        return Choice([fn(c) for c in self.choices])

    # ------------------------------------------------------------------ values
    def rand(self, shape: ShapeLike | None = None) -> Any:
        """A value of one alternative picked at random, with ``shape`` extra leading dims."""
        choice = self._pick()
        if self._of_specs:
            return choice.rand(shape)
        return self._data_with_shape(choice, shape)

    def zero(self, shape: ShapeLike | None = None) -> Any:
        """The zero of the first spec, or the first value."""
        first = self.choices[0]
        return first.zero(shape) if self._of_specs else self._data_with_shape(first, shape)

    def one(self, shape: ShapeLike | None = None) -> Any:
        """The one of the first spec, or the first value."""
        first = self.choices[0]
        return first.one(shape) if self._of_specs else self._data_with_shape(first, shape)

    def _data_with_shape(self, data: Any, shape: ShapeLike | None) -> Any:
        full = self._full_shape(shape)
        return data.clone() if full == data.batch_size else data.expand(full)

    def is_in(self, val: Any) -> bool:
        """Whether ``val`` is in one of the specs, or equal to one of the values."""
        if self._of_specs:
            return any(c.is_in(val) for c in self.choices)
        return any(_same_data(val, c) for c in self.choices)

    def _mismatch(self, val: Any, key: Any = None) -> Exception | None:
        if self.is_in(val):
            return None
        if self._of_specs:
            errors = [str(c._mismatch(val, key)) for c in self.choices]
            return SpecValueError(
                f"{_at('spec mismatch', key)}: the value is in none of the {len(errors)} "
                f"choices ({'; '.join(errors)})"
            )
        return SpecValueError(
            f"{_at('spec mismatch', key)}: expected one of "
            f"{[c.tolist() for c in self.choices]}, got {val!r}"
        )

    def type_check(self, value: Any, key: Any = None) -> None:
        """Check the type of ``value`` against the first alternative."""
        if self._of_specs:
            self.choices[0].type_check(value, key)

    def project(self, val: Any) -> Any:
        """``val`` when it is in one alternative, else its projection onto the first spec."""
        if self.is_in(val) or not self._of_specs:
            return val
        return self.choices[0].project(val)

    def encode(self, val: Any, *, ignore_device: bool = False) -> Any:
        """Encode with the first spec (all share dtype and shape), or wrap a non-tensor value."""
        if self._of_specs:
            return self.choices[0].encode(val, ignore_device=ignore_device)
        if isinstance(val, _DATA):
            return val
        device = None if ignore_device else self.device
        return NonTensorData(data=val, batch_size=self.shape, device=device)

    def memoize_encode(self, mode: bool = True) -> Choice:
        """Turn memoized encoding on (or off) in the spec alternatives; returns ``self``."""
        if self._of_specs:
            for choice in self.choices:
                choice.memoize_encode(mode)
        return self

    def erase_memoize_cache(self) -> Choice:
        """Forget the memoized encoding plans of the spec alternatives; returns ``self``."""
        if self._of_specs:
            for choice in self.choices:
                choice.erase_memoize_cache()
        return self

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """A numpy array for tensor values; the python objects of non-tensor values."""
        if safe or (safe is None and _checks_on()):
            self.assert_is_in(val)
        if isinstance(val, torch.Tensor):
            return val.detach().cpu().numpy()
        return val.tolist() if isinstance(val, _DATA) else val

    def cardinality(self) -> int | float:
        """Sum of the specs' cardinalities, or the number of values."""
        if self._of_specs:
            return sum(c.cardinality() for c in self.choices)
        return len(self.choices)

    def enumerate(self, use_mask: bool = False) -> Any:
        """The specs' enumerations, concatenated, or the values stacked along a new first dim."""
        if self._of_specs:
            return torch.cat([c.enumerate(use_mask) for c in self.choices], 0)
        return NonTensorStack(*[c.clone() for c in self.choices], stack_dim=0)

    # ------------------------------------------------------------------ shape ops
    def expand(self, *shape: int | ShapeLike) -> Choice:
        """Every alternative expanded."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        if not _ends_with(torch.Size(shape), self.shape) and len(shape) < self.ndim:
            raise ValueError(f"cannot expand a Choice of shape {tuple(self.shape)} to {shape}")
        return self._map(lambda c: c.expand(*shape))

    def unsqueeze(self, dim: int) -> Choice:
        """Every alternative with a singleton dim inserted."""
        return self._map(lambda c: c.unsqueeze(dim))

    def squeeze(self, dim: int | None = None) -> Choice:
        """Every alternative with singleton dims removed."""
        return self._map(lambda c: c.squeeze() if dim is None else c.squeeze(dim))

    def reshape(self, *shape: int | ShapeLike) -> Choice:
        """Every alternative reshaped."""
        return self._map(lambda c: c.reshape(*shape))

    view = reshape

    def __getitem__(self, index: Any) -> Choice:
        """Every alternative indexed."""
        return self._map(lambda c: c[index])

    def unbind(self, dim: int = 0) -> tuple[Choice, ...]:
        """The Choices of the slices along ``dim``."""
        pos = dim + self.ndim if dim < 0 else dim
        if not 0 <= pos < self.ndim:
            raise ValueError(f"cannot unbind a Choice of shape {tuple(self.shape)} along {dim}")
        prefix = (slice(None),) * pos
        return tuple(self[(*prefix, i)] for i in range(self.shape[pos]))

    def clone(self) -> Choice:
        """A copy with every alternative cloned."""
        return self._map(lambda c: c.clone())

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> Choice:
        """Every alternative moved (or, for specs, cast to a dtype)."""
        if isinstance(dest, torch.dtype) and not self._of_specs:
            return self
        return self._map(lambda c: c.to(dest))

    # ------------------------------------------------------------------ comparison
    def _same_attributes(self, other: TensorSpec) -> bool:
        if len(self.choices) != len(other.choices):
            return False
        if self._of_specs:
            return all(a == b for a, b in zip(self.choices, other.choices))
        return all(_same_data(a, b) for a, b in zip(self.choices, other.choices))

    def __repr__(self) -> str:
        inner = ",\n    ".join(
            repr(c) if isinstance(c, TensorSpec) else repr(c.tolist()) for c in self.choices
        )
        return f"Choice(\n    {inner},\n    shape={tuple(self.shape)}, device={self.device})"
