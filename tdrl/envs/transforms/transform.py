"""The transform protocol: :class:`Transform` and :class:`ObservationTransform`.

A transform sits between an environment and the outside world. Data coming out
of the env (``reset`` / ``step`` outputs) goes through :meth:`Transform._reset` and
:meth:`Transform._step`; data going into it (actions, states) goes through
:meth:`Transform.inv`. The same object also works on data that does not come from
an env: a replay buffer calls ``transform(td)`` (:meth:`Transform.forward`) on the
samples it returns and :meth:`Transform.inv` on the data it stores.

The spec hooks (``transform_observation_spec`` and friends) describe what the
transform does to the env's specs. They always receive a clone of the parent's
specs, so a transform can edit its argument freely and return it.
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase, unravel_key
from torch import nn

from tdrl.data import Composite

if TYPE_CHECKING:
    from tdrl.envs.transforms.transformed_env import TransformedEnv

__all__ = ["ObservationTransform", "Transform"]

#: message of the transforms that only work inside an env, formatted with the transform's type
FORWARD_NOT_IMPLEMENTED = (
    "The forward method of {} is not implemented: the transform only works inside an "
    "environment, on the data of its steps and resets"
)

NestedKey = Any

MISSING_KEY_ERROR = (
    "{owner}: expected key {key!r} in the tensordict, got keys {keys}. "
    "Call set_missing_tolerance(True) to skip missing keys."
)
PARENT_SET_ERROR = (
    "{owner} already belongs to an environment ({env}); a transform can only have one parent. "
    "Use transform.clone() to get a copy without a parent."
)


def _normalize_keys(keys: Any, name: str) -> list:
    """Turn ``None`` / a key / a sequence of keys into a list of unravelled keys."""
    if keys is None or keys == ():
        return []
    if isinstance(keys, (str, tuple)):
        keys = [keys]
    out = []
    for key in keys:
        try:
            out.append(unravel_key(key))
        except Exception as err:
            raise TypeError(
                f"{name}: expected str keys or tuples of str, got {key!r} ({type(key).__name__})"
            ) from err
    return out


def _key_list(td: TensorDictBase) -> list:
    return list(td.keys(include_nested=True, leaves_only=True))


_ENV_BASE: list = []


def _env_base_class() -> type:
    # imported lazily: tdrl.envs.common imports nothing from here, but packages may load either first
    if not _ENV_BASE:
        from tdrl.envs.common import EnvBase

        _ENV_BASE.append(EnvBase)
    return _ENV_BASE[0]


def _owner(transform: Transform) -> str:
    return type(transform).__name__


class Transform(nn.Module):
    """Base class of environment transforms.

    Subclasses override the pieces they need (all optional):

    * ``_apply_transform(value)``: maps one entry; the default ``_call`` applies it to
      every ``in_keys`` entry and writes the result under the matching ``out_keys``.
    * ``_call(next_tensordict)``: the env-output path, run by the default ``_step``.
    * ``_step(tensordict, next_tensordict)``: called after each env step with the step
      input and its output (the ``"next"`` data); returns the transformed output.
    * ``_reset(tensordict, tensordict_reset)``: called after each reset with the reset
      input (``"_reset"`` masks, previous values) and the reset output. The default
      returns the output unchanged; :class:`ObservationTransform` applies ``_call`` to it.
    * ``_inv_apply_transform(value)`` / ``_inv_call(tensordict)``: the env-input path;
      reads ``out_keys_inv`` (names the outside world uses) and writes ``in_keys_inv``
      (names the inner env uses).
    * ``forward(tensordict)``: the path used on data that does not come from an env
      (replay buffer samples, module outputs). Defaults to ``_call``.
    * ``_post_step_mdp(tensordict, next_input)``: called by the env's step loops
      (``rollout``, ``step_and_maybe_reset``, collectors) once per step, after
      ``step_mdp`` built ``next_input`` (None when the loop stops after that step);
      may edit both in place. Transforms that do not override it cost the loop nothing.
    * ``transform_observation_spec`` / ``_reward_spec`` / ``_done_spec`` /
      ``_action_spec`` / ``_state_spec`` / ``_input_spec`` / ``_output_spec``.

    Args:
        in_keys: keys read on the forward path.
        out_keys: keys written on the forward path; default to ``in_keys``.
        in_keys_inv: keys written (inner-env side) on the inverse path.
        out_keys_inv: keys read (outside side) on the inverse path; default to ``in_keys_inv``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import Transform
        >>> class Double(Transform):
        ...     def _apply_transform(self, value):
        ...         return value * 2
        >>> td = TensorDict({"obs": torch.ones(2)}, [])
        >>> Double(in_keys=["obs"], out_keys=["obs2"])(td)["obs2"]
        tensor([2., 2.])
    """

    #: whether ``_inv_apply_transform`` must be implemented when ``in_keys_inv`` is set
    invertible: bool = False
    #: whether the inverse path also runs on the input of ``reset``
    enable_inv_on_reset: bool = False

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
    ) -> None:
        super().__init__()
        self.__dict__["_container"] = None
        self.__dict__["_parent"] = None
        self.__dict__["_missing_tolerance"] = False
        self.in_keys = in_keys
        self.out_keys = out_keys
        self.in_keys_inv = in_keys_inv
        self.out_keys_inv = out_keys_inv

    # ------------------------------------------------------------------ keys
    @property
    def in_keys(self) -> list:
        """Keys read on the forward (env output / buffer sample) path."""
        return self.__dict__["_in_keys"]

    @in_keys.setter
    def in_keys(self, keys: Any) -> None:
        self.__dict__["_in_keys"] = _normalize_keys(keys, f"{_owner(self)} in_keys")

    @property
    def out_keys(self) -> list:
        """Keys written on the forward path (``in_keys`` when not given)."""
        out_keys = self.__dict__["_out_keys"]
        return self.in_keys if out_keys is None else out_keys

    @out_keys.setter
    def out_keys(self, keys: Any) -> None:
        self.__dict__["_out_keys"] = (
            None if keys is None else _normalize_keys(keys, f"{_owner(self)} out_keys")
        )

    @property
    def in_keys_inv(self) -> list:
        """Inner-env keys written on the inverse (env input) path."""
        return self.__dict__["_in_keys_inv"]

    @in_keys_inv.setter
    def in_keys_inv(self, keys: Any) -> None:
        self.__dict__["_in_keys_inv"] = _normalize_keys(keys, f"{_owner(self)} in_keys_inv")

    @property
    def out_keys_inv(self) -> list:
        """Outside keys read on the inverse path (``in_keys_inv`` when not given)."""
        out_keys_inv = self.__dict__["_out_keys_inv"]
        return self.in_keys_inv if out_keys_inv is None else out_keys_inv

    @out_keys_inv.setter
    def out_keys_inv(self, keys: Any) -> None:
        self.__dict__["_out_keys_inv"] = (
            None if keys is None else _normalize_keys(keys, f"{_owner(self)} out_keys_inv")
        )

    @property
    def missing_tolerance(self) -> bool:
        """Whether missing ``in_keys`` are skipped (True) or raise ``KeyError`` (False)."""
        return self.__dict__["_missing_tolerance"]

    def set_missing_tolerance(self, mode: bool = False) -> None:
        """Skip (``True``) or refuse (``False``) inputs that lack some ``in_keys``."""
        self.__dict__["_missing_tolerance"] = bool(mode)

    # ------------------------------------------------------------ data paths
    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        """Map one entry on the forward path; subclasses that use ``in_keys`` override it."""
        raise NotImplementedError(
            f"{_owner(self)} reads in_keys {self.in_keys} but does not implement _apply_transform"
        )

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        """Map one entry on the inverse path; the identity unless the transform is invertible."""
        if self.invertible:
            raise NotImplementedError(
                f"{_owner(self)} is invertible but does not implement _inv_apply_transform"
            )
        return value

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Apply ``_apply_transform`` to each ``in_keys`` entry, writing ``out_keys``."""
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = next_tensordict.get(in_key, None)
            if value is None:
                if not self.__dict__["_missing_tolerance"]:
                    raise KeyError(
                        MISSING_KEY_ERROR.format(
                            owner=_owner(self), key=in_key, keys=_key_list(next_tensordict)
                        )
                    )
                continue
            next_tensordict.set(out_key, self._apply_transform(value))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Transform data that does not come from an env (buffer samples, module outputs)."""
        return self._call(tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Transform the output of an env step; ``tensordict`` is the step's input."""
        return self._call(next_tensordict)

    def _post_step_mdp(self, tensordict: TensorDictBase, next_input: TensorDictBase | None) -> None:
        """Edit a stepped tensordict once the next input was built from it (see the class doc)."""

    def _post_step_hooks(self) -> list:
        """The ``_post_step_mdp`` methods this transform (or its children) override."""
        if type(self)._post_step_mdp is Transform._post_step_mdp:
            return []
        return [self._post_step_mdp]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        """Transform the output of a reset; stateful transforms reset themselves here."""
        return tensordict_reset

    def _reset_env_preprocess(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        """Prepare the input of the base env's reset (the inverse path when enabled)."""
        if self.enable_inv_on_reset and tensordict is not None:
            tolerance = self.__dict__["_missing_tolerance"]
            self.__dict__["_missing_tolerance"] = True
            try:
                tensordict = self._inv_call(tensordict)
            finally:
                self.__dict__["_missing_tolerance"] = tolerance
        return tensordict

    def _reset_bypass(
        self, tensordict: TensorDictBase | None, done_template: Callable[[], TensorDictBase]
    ) -> TensorDictBase | None:
        """A reset output that replaces the base env's reset, or None (the default)."""
        return None

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Apply ``_inv_apply_transform`` to each ``out_keys_inv`` entry, writing ``in_keys_inv``."""
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            value = tensordict.get(out_key, None)
            if value is None:
                if not self.__dict__["_missing_tolerance"]:
                    raise KeyError(
                        MISSING_KEY_ERROR.format(
                            owner=_owner(self), key=out_key, keys=_key_list(tensordict)
                        )
                    )
                continue
            tensordict.set(in_key, self._inv_apply_transform(value))
        return tensordict

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Map outside data to what the inner env (or storage) expects.

        The input is not modified: the result is a shallow copy carrying the new entries.
        """
        return self._inv_call(tensordict.clone(False))

    def _needs_inverse(self) -> bool:
        """Whether the inverse path can change data (lets envs skip it when it cannot)."""
        cls = type(self)
        return (
            bool(self.in_keys_inv)
            or cls._inv_call is not Transform._inv_call
            or cls.inv is not Transform.inv
        )

    def init(self, tensordict: TensorDictBase) -> None:
        """Hook run once on the first data a collector sees; does nothing by default."""

    def dump(self, **kwargs: Any) -> None:
        """Flush what the transform accumulated (recorders); does nothing by default."""

    # ------------------------------------------------------------ spec hooks
    def transform_output_spec(self, output_spec: Any) -> Any:
        """Return the output spec (observation, reward, done) seen after this transform."""
        output_spec = _unlocked_clone(output_spec)
        output_spec["full_observation_spec"] = self.transform_observation_spec(
            output_spec["full_observation_spec"]
        )
        if "full_reward_spec" in output_spec.keys():
            output_spec["full_reward_spec"] = self.transform_reward_spec(
                output_spec["full_reward_spec"]
            )
        if "full_done_spec" in output_spec.keys():
            output_spec["full_done_spec"] = self.transform_done_spec(output_spec["full_done_spec"])
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Return the input spec (action, state) seen from outside this transform."""
        input_spec = _unlocked_clone(input_spec)
        if "full_state_spec" in input_spec.keys():
            input_spec["full_state_spec"] = self.transform_state_spec(input_spec["full_state_spec"])
        if "full_action_spec" in input_spec.keys():
            input_spec["full_action_spec"] = self.transform_action_spec(
                input_spec["full_action_spec"]
            )
        return input_spec

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Return the observation spec after the transform (identity by default)."""
        return observation_spec

    def transform_reward_spec(self, reward_spec: Any) -> Any:
        """Return the reward spec after the transform (identity by default)."""
        return reward_spec

    def transform_done_spec(self, done_spec: Any) -> Any:
        """Return the done spec after the transform (identity by default)."""
        return done_spec

    def transform_action_spec(self, action_spec: Any) -> Any:
        """Return the action spec seen from outside the transform (identity by default)."""
        return action_spec

    def transform_state_spec(self, state_spec: Any) -> Any:
        """Return the state spec seen from outside the transform (identity by default)."""
        return state_spec

    def transform_env_device(self, device: torch.device | None) -> torch.device | None:
        """Return the device of the env seen after this transform (unchanged by default)."""
        return device

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        """Return the batch size of the env seen after this transform (unchanged by default)."""
        return batch_size

    # ------------------------------------------------------------- parenthood
    @property
    def container(self) -> Any:
        """The environment holding this transform (through any Compose), or None."""
        env_cls = _env_base_class()
        container = self.__dict__["_container"]
        while container is not None and not isinstance(container, env_cls):
            container = container.__dict__.get("_container")
        return container

    @property
    def parent(self) -> TransformedEnv | None:
        """The env as seen by this transform: the base env and the transforms before it.

        Built from clones of the preceding transforms (which share their buffers with
        the originals) and cached until the chain changes. None without an env.
        """
        parent = self.__dict__["_parent"]
        if parent is None:
            parent = self._build_parent()
            self.__dict__["_parent"] = parent
        return parent

    def _build_parent(self) -> TransformedEnv | None:
        from tdrl.envs.transforms.compose import Compose
        from tdrl.envs.transforms.transformed_env import TransformedEnv

        container = self.__dict__["_container"]
        if container is None:
            return None
        if isinstance(container, Compose):
            return container._rebuild_up_to(self)
        if isinstance(container, TransformedEnv):
            return TransformedEnv(container.base_env)
        raise TypeError(
            f"{_owner(self)} container: expected a Compose or a TransformedEnv, "
            f"got {type(container).__name__}"
        )

    def set_container(self, container: Transform | Any) -> None:
        """Register the Compose or env holding this transform (done by the holders)."""
        current = self.__dict__["_container"]
        if current is not None and current is not container:
            env = self.container
            if env is not None:
                raise RuntimeError(
                    PARENT_SET_ERROR.format(owner=_owner(self), env=type(env).__name__)
                )
        self.__dict__["_container"] = container
        self.empty_cache()

    def reset_parent(self) -> None:
        """Forget the container and the cached parent."""
        self.__dict__["_container"] = None
        self.empty_cache()

    def empty_cache(self) -> None:
        """Drop the cached parent env (rebuilt on next access)."""
        self.__dict__["_parent"] = None

    def _chain_changed(self) -> None:
        """Tell the enclosing env that the transform chain changed."""
        container = self.__dict__["_container"]
        if container is not None:
            container._chain_changed()

    def clone(self) -> Transform:
        """A copy without a parent; tensors registered as buffers are shared, not copied."""
        new = copy.copy(self)
        new.__dict__["_parameters"] = OrderedDict(self._parameters)
        new.__dict__["_buffers"] = OrderedDict(self._buffers)
        new.__dict__["_modules"] = OrderedDict(self._modules)
        new.__dict__["_container"] = None
        new.__dict__["_parent"] = None
        return new

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_parent"] = None
        return state

    def __repr__(self) -> str:
        parts = [f"in_keys={self.in_keys}"]
        if self.out_keys != self.in_keys:
            parts.append(f"out_keys={self.out_keys}")
        if self.in_keys_inv:
            parts.append(f"in_keys_inv={self.in_keys_inv}")
            if self.out_keys_inv != self.in_keys_inv:
                parts.append(f"out_keys_inv={self.out_keys_inv}")
        return f"{type(self).__name__}({', '.join(parts)})"


class ObservationTransform(Transform):
    """Base class of transforms acting on observations, at reset as well as at each step.

    Examples:
        >>> import torch
        >>> from tdrl.envs import ObservationTransform, PendulumEnv, TransformedEnv
        >>> class Negate(ObservationTransform):
        ...     def _apply_transform(self, value):
        ...         return -value
        >>> env = TransformedEnv(PendulumEnv(), Negate(in_keys=["th"], out_keys=["neg_th"]))
        >>> td = env.reset()
        >>> bool((td["neg_th"] == -td["th"]).all())
        True
    """

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        tolerance = self.__dict__["_missing_tolerance"]
        self.__dict__["_missing_tolerance"] = True
        try:
            return self._call(tensordict_reset)
        finally:
            self.__dict__["_missing_tolerance"] = tolerance

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Apply :meth:`_transform_spec` to each ``in_keys`` leaf, stored under ``out_keys``."""
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec.keys(True):
                observation_spec[out_key] = self._transform_spec(observation_spec[in_key].clone())
        return observation_spec

    def _transform_spec(self, spec: Any) -> Any:
        """Map one leaf spec; the identity unless the transform changes shapes or dtypes."""
        return spec


class _CallableTransform(Transform):
    """Wraps a plain ``Callable[[TensorDictBase], TensorDictBase]`` as a transform."""

    def __init__(self, func: Callable[[TensorDictBase], TensorDictBase]) -> None:
        super().__init__()
        self.func = func

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        out = self.func(next_tensordict)
        return next_tensordict if out is None else out

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.func!r})"


def _apply_to_composite(
    function: Callable[[Any, Any], Any],
) -> Callable[[Any, Any], Any]:
    """Lift a spec hook written for one leaf spec to a hook that takes a Composite.

    The decorated method receives the leaf spec of one ``in_keys`` entry and returns
    the spec of the matching ``out_keys`` entry. Given a Composite, the wrapper calls it
    for every ``in_keys`` entry the Composite holds and stores the results under the
    ``out_keys``; given a leaf spec, it simply calls it.

    Examples:
        >>> import torch
        >>> from tdrl.data import Bounded, Composite, Unbounded
        >>> from tdrl.envs.transforms.transforms import Transform, _apply_to_composite
        >>> class Sin(Transform):
        ...     def _apply_transform(self, value):
        ...         return value.sin()
        ...     @_apply_to_composite
        ...     def transform_observation_spec(self, spec):
        ...         return Bounded(-1, 1, shape=spec.shape, dtype=spec.dtype)
        >>> spec = Sin(in_keys=["th"], out_keys=["sin"]).transform_observation_spec(
        ...     Composite(th=Unbounded(()))
        ... )
        >>> type(spec["sin"]).__name__, type(spec["th"]).__name__
        ('Bounded', 'Unbounded')
    """

    @functools.wraps(function)
    def wrapper(self: Any, spec: Any) -> Any:
        if not isinstance(spec, Composite):
            return function(self, spec)
        keys = set(spec.keys(True, True))
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in keys:
                spec[out_key] = function(self, spec[in_key].clone())
        return spec

    return wrapper


def _as_transform(transform: Any) -> Transform:
    if isinstance(transform, Transform):
        return transform
    if callable(transform):
        return _CallableTransform(transform)
    raise TypeError(
        f"transform: expected a Transform or a callable taking and returning a TensorDict, "
        f"got {type(transform).__name__}"
    )


def _unlocked_clone(spec: Any) -> Any:
    spec = spec.clone()
    if getattr(spec, "is_locked", False):
        spec.unlock_()
    return spec


OUTPUT_ENTRIES = ("full_observation_spec", "full_reward_spec", "full_done_spec")
INPUT_ENTRIES = ("full_action_spec", "full_state_spec")
SPEC_KEY_ERROR = "{owner}: key {key!r} is not in the env {kind} specs; available keys: {keys}"


def locate_spec(parent: Any, entries: tuple, key: NestedKey) -> Any:
    """The sub-Composite of ``parent`` (among ``entries``) that holds ``key``, or None."""
    for name in entries:
        sub = parent.get(name, None)
        if sub is not None and key in sub.keys(True):
            return sub
    return None


def _spec_keys(parent: Any, entries: tuple) -> list:
    keys: list = []
    for name in entries:
        sub = parent.get(name, None)
        if sub is not None:
            keys.extend(sub.keys(True, True))
    return keys


def map_output_specs(
    owner: Transform,
    output_spec: Any,
    in_keys: list,
    out_keys: list,
    fn: Callable[[Any], Any],
) -> Any:
    """Write ``fn(spec[in_key])`` under each ``out_key``, next to its ``in_key``.

    The entry is looked up in the observation, reward and done specs, in this order.
    """
    for in_key, out_key in zip(in_keys, out_keys):
        sub = locate_spec(output_spec, OUTPUT_ENTRIES, in_key)
        if sub is None:
            _warn_missing_key(owner, in_key, "output", _spec_keys(output_spec, OUTPUT_ENTRIES))
            continue
        sub[out_key] = fn(sub[in_key].clone())
    return output_spec


def _warn_missing_key(owner: Any, key: NestedKey, kind: str, available: list) -> None:
    # An absent key leaves the specs (and the data) as they are, as the reference API does,
    # so one transform can be reused across envs; the warning says which key was not found.
    warnings.warn(
        SPEC_KEY_ERROR.format(owner=_owner(owner), key=key, kind=kind, keys=available)
        + "; the transform leaves this key out",
        UserWarning,
        stacklevel=4,
    )


def map_input_specs(
    owner: Transform,
    input_spec: Any,
    in_keys_inv: list,
    out_keys_inv: list,
    fn: Callable[[Any], Any],
) -> Any:
    """Replace each inner ``in_keys_inv`` entry by ``fn(spec)`` under its outside ``out_keys_inv``."""
    for in_key, out_key in zip(in_keys_inv, out_keys_inv):
        sub = locate_spec(input_spec, INPUT_ENTRIES, in_key)
        if sub is None:
            raise KeyError(
                SPEC_KEY_ERROR.format(
                    owner=_owner(owner),
                    key=in_key,
                    kind="input",
                    keys=_spec_keys(input_spec, INPUT_ENTRIES),
                )
            )
        spec = fn(sub[in_key].clone())
        if out_key != in_key:
            del sub[in_key]
        sub[out_key] = spec
    return input_spec


def __getattr__(name: str) -> Any:
    # Compose and TransformedEnv live in their own modules; they are reachable from here too.
    if name == "Compose":
        from tdrl.envs.transforms.compose import Compose

        return Compose
    if name == "TransformedEnv":
        from tdrl.envs.transforms.transformed_env import TransformedEnv

        return TransformedEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
