"""SafeModule: a TensorDictModule that knows the spec of its outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, dispatch
from tensordict.utils import NestedKey

from tdrl.data import Composite

__all__ = ["SafeModule"]


def _output_spec(spec: Any, out_keys: list) -> Composite:
    """The Composite of output specs, keyed by output key."""
    if spec is None:
        return Composite()
    if not isinstance(spec, Composite):
        if len(out_keys) != 1:
            raise ValueError(
                f"SafeModule spec: a single {type(spec).__name__} spec needs exactly one "
                f"out_key, got out_keys={out_keys}; pass a Composite keyed by out_key instead"
            )
        return Composite({out_keys[0]: spec})
    unknown = [key for key in spec.keys(True, True) if key not in out_keys]
    if unknown:
        raise KeyError(f"SafeModule spec: keys {unknown} are not among the out_keys {out_keys}")
    return spec


class SafeModule(TensorDictModule):
    """A :class:`~tensordict.nn.TensorDictModule` with a spec for its outputs.

    The spec documents what the module writes (an env's action spec for a policy,
    say). With ``safe=True`` every output that leaves its spec's domain is projected
    back into it (``spec.project``), e.g. an action clipped to its bounds.

    Args:
        module: the callable reading the ``in_keys`` tensors and returning the outputs.
        in_keys: the keys read from the input tensordict.
        out_keys: the keys the outputs are written to.
        spec: the spec of the output (one out key) or a Composite keyed by out key;
            out keys it does not name are left unconstrained.
        safe: project outputs outside their spec onto it.
        **kwargs: passed to :class:`~tensordict.nn.TensorDictModule` (``inplace``...).

    Raises:
        ValueError: when ``safe`` is True without a spec, or a leaf spec is given for
            several out keys.
        KeyError: when the spec names keys that are not out keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.data import Bounded
        >>> module = SafeModule(
        ...     torch.nn.Linear(3, 2), in_keys=["observation"], out_keys=["action"],
        ...     spec=Bounded(-1.0, 1.0, (2,)), safe=True,
        ... )
        >>> data = module(TensorDict(observation=torch.full((3,), 100.0)))
        >>> bool((data["action"].abs() <= 1).all())
        True
    """

    def __init__(
        self,
        module: Callable,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey],
        spec: Any = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(module, in_keys=in_keys, out_keys=out_keys, **kwargs)
        if safe and spec is None:
            raise ValueError("SafeModule: safe=True needs a spec to project the outputs onto")
        self.spec = _output_spec(spec, list(self.out_keys))
        self.safe = safe

    @dispatch(auto_batch_size=False)
    def forward(
        self,
        tensordict: TensorDictBase,
        *args: Any,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Run the module; with ``safe``, project the outputs onto their specs."""
        result = super().forward(tensordict, *args, tensordict_out=tensordict_out, **kwargs)
        if self.safe:
            for key in self.spec.keys(True, True):
                spec = self.spec[key]
                value = result.get(key, None)
                if value is not None and not spec.is_in(value):
                    result.set(key, spec.project(value))
        return result
