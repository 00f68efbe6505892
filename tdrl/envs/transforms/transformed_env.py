""":class:`TransformedEnv`: an environment seen through a chain of transforms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl._settings import auto_unwrap_transformed_env
from tdrl.envs import _partial
from tdrl.envs._done import complete_done_spec
from tdrl.envs._td_fast import all_true, any_true, fast_get
from tdrl.envs.common import EnvBase
from tdrl.envs.transforms.compose import Compose
from tdrl.envs.transforms.transform import Transform, _as_transform

__all__ = ["TransformedEnv"]

READ_ONLY_SPEC_ERROR = (
    "the specs of a TransformedEnv are computed from its base env and its transforms; "
    "cannot set {name} directly: set it on the base env or add a transform instead"
)


_TRANSFORM = "transform."
_BASE_ENV = "base_env."


# The state of a TransformedEnv is its transform's state, keys as the transform names them
# ("transforms.1._extra_state" for the second transform of a Compose), next to the base env's
# own state under "base_env.". These two hooks map those keys to and from the module tree.
def _transform_keys_at_top(module: Any, state: dict, prefix: str, local_metadata: Any) -> None:
    inner = prefix + _TRANSFORM
    for key in [key for key in state if key.startswith(inner)]:
        state[prefix + key[len(inner) :]] = state.pop(key)


def _transform_keys_under_transform(
    module: Any, state: dict, prefix: str, *args: Any, **kwargs: Any
) -> None:
    # the env's own entries (parameters, buffers, other submodules of a subclass) stay
    own = {name for name, _ in module.named_parameters(recurse=False)}
    own.update(name for name, _ in module.named_buffers(recurse=False))
    own.update(name for name, _ in module.named_children() if name != "transform")
    for key in [key for key in state if key.startswith(prefix)]:
        if key[len(prefix) :].split(".", 1)[0] not in own:
            state[prefix + _TRANSFORM + key[len(prefix) :]] = state.pop(key)


def _select(tensordict: TensorDictBase, keys: tuple) -> TensorDictBase:
    """``tensordict.select(*keys, strict=False)``, built at once when every key names a tensor."""
    if type(tensordict) is TensorDict and tensordict._td_dim_names is None:
        source = tensordict._tensordict
        selected = {}
        for key in keys:
            value = source.get(key) if type(key) is str else tensordict
            if value is None:
                continue
            if type(value) is not torch.Tensor:
                # a nested key or a nested entry: the generic select copies the structure
                break
            selected[key] = value
        else:
            return TensorDict._new_unsafe(
                selected, batch_size=tensordict.batch_size, device=tensordict.device, nested=False
            )
    return tensordict.select(*keys, strict=False)


class TransformedEnv(EnvBase):
    """An environment whose inputs and outputs go through a transform.

    ``step`` runs ``transform.inv`` on the input (actions, states), the base env's
    step, then ``transform._step`` on the output; ``reset`` runs the base reset
    then ``transform._reset``. The specs are computed once from the base env's specs
    through the transform's spec hooks, and again whenever the transform chain
    changes (``append_transform``, ``insert_transform``, ``Compose.append``...).
    Attributes that the transformed env lacks are looked up on the base env.
    The transforms run in eval mode until ``env.train()``.
    Its ``state_dict()`` holds the transform's state under the transform's own key names
    and the base env's state under ``"base_env."``.

    Args:
        base_env: the env to transform.
        transform: a :class:`Transform` (often a :class:`Compose`) or a plain callable
            mapping a TensorDict to a TensorDict. None starts with an empty Compose.
        cache_specs: keep the computed specs until the chain changes (default). With
            False, ``output_spec`` / ``input_spec`` and every reset recompute them, for
            transforms whose specs change over time.

    Keyword Args:
        auto_unwrap: when ``base_env`` is itself a TransformedEnv, fold its transforms
            (cloned) and this one into a single env over its base env. None (default)
            follows :func:`tdrl.auto_unwrap_transformed_env` (False unless set).
        device: move the env (base env and transforms) to this device.
        spec_locked: lock the computed specs against in-place edits (default).

    Raises:
        RuntimeError: when ``transform`` already belongs to another env
            (use ``transform.clone()``).

    Examples:
        >>> from tdrl.envs import PendulumEnv, StepCounter, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=5))
        >>> check_env_specs(env)
        >>> rollout = env.rollout(10)
        >>> rollout["next", "step_count"].squeeze(-1)
        tensor([1, 2, 3, 4, 5])
        >>> env.transform.parent is not None
        True
    """

    def __init__(
        self,
        base_env: EnvBase,
        transform: Transform | Callable[[TensorDictBase], TensorDictBase] | None = None,
        cache_specs: bool = True,
        *,
        auto_unwrap: bool | None = None,
        device: torch.device | str | None = None,
        spec_locked: bool = True,
    ) -> None:
        if not isinstance(base_env, EnvBase):
            raise TypeError(
                f"TransformedEnv base_env: expected an EnvBase instance, got {type(base_env).__name__}"
            )
        if auto_unwrap is None:
            auto_unwrap = auto_unwrap_transformed_env()
        if auto_unwrap and isinstance(base_env, TransformedEnv):
            inner = base_env.transform.clone()
            transform = Compose(inner) if transform is None else Compose(inner, transform)
            base_env = base_env.base_env
        transform = Compose() if transform is None else _as_transform(transform)
        self.__dict__["_base_env"] = base_env
        self.__dict__["_transform"] = None
        self.__dict__["_cache_specs"] = bool(cache_specs)
        self.__dict__["_needs_inverse"] = False
        super().__init__(
            device=base_env.device,
            batch_size=base_env.batch_size,
            allow_done_after_reset=base_env.allow_done_after_reset,
            spec_locked=spec_locked,
        )
        self._modules["base_env"] = base_env
        # transforms run in eval mode until env.train() (the base env keeps its own modes)
        self.training = False
        self.register_state_dict_post_hook(_transform_keys_at_top)
        self.register_load_state_dict_pre_hook(_transform_keys_under_transform)
        self._set_transform(transform)
        if device is not None and torch.device(device) != self.device:
            self.to(device)

    # --------------------------------------------------------------- plumbing
    @property
    def base_env(self) -> EnvBase:
        """The wrapped env."""
        return self.__dict__["_base_env"]

    @property
    def transform(self) -> Transform:
        """The transform (a single transform or a Compose)."""
        return self.__dict__["_transform"]

    @transform.setter
    def transform(self, transform: Transform | Callable[[TensorDictBase], TensorDictBase]) -> None:
        previous = self.__dict__["_transform"]
        if previous is not None:
            previous.reset_parent()
        self._set_transform(_as_transform(transform))

    def _set_transform(self, transform: Transform) -> None:
        transform.set_container(self)
        transform.train(self.training)
        self.__dict__["_transform"] = transform
        self._modules["transform"] = transform
        self._compute_specs()

    def _chain_changed(self) -> None:
        transform = self.__dict__["_transform"]
        if transform is not None:
            transform.empty_cache()
            self._compute_specs()

    def _compute_specs(self) -> None:
        """Derive batch size, device and specs from the base env through the transform."""
        base = self.__dict__["_base_env"]
        transform = self.__dict__["_transform"]
        self.__dict__["_batch_size"] = transform.transform_env_batch_size(base.batch_size)
        self.__dict__["_device"] = transform.transform_env_device(base.device)
        output_spec = transform.transform_output_spec(base.output_spec.clone())
        input_spec = transform.transform_input_spec(base.input_spec.clone())
        completions = []
        if not set(output_spec["full_done_spec"].keys(True, True)) <= set(base.done_keys):
            # a transform added done entries: complete their levels. Entries a transform
            # removed (ExcludeTransform("done"), SelectTransform(keep_dones=False)) stay
            # removed; the base env completes its own.
            done_spec, completions = complete_done_spec(output_spec["full_done_spec"])
            output_spec["full_done_spec"] = done_spec
        self.__dict__["_done_completions"] = completions
        self.__dict__["_output_spec"] = output_spec
        self.__dict__["_input_spec"] = input_spec
        self.__dict__["_default_done"] = False
        # some transforms only know their inverse keys once they have seen the specs
        self.__dict__["_needs_inverse"] = transform._needs_inverse()
        self.__dict__["_post_hooks"] = (*base._post_step_hooks(), *transform._post_step_hooks())
        self._refresh()
        self.__dict__["_reset_inputs"] = None

    def _complete_done_levels(self, output_spec: Any) -> None:
        """Nothing: :meth:`_compute_specs` completes only the done entries transforms add."""

    def _reset_input_keys(self) -> tuple:
        """The entries a reset passes on to the base env and the transforms, in a stable order.

        Kept until the specs of this env or of the base env change.
        """
        base = self.__dict__["_base_env"]
        own_cache, base_cache = self._cache, base._cache
        cached = self.__dict__["_reset_inputs"]
        if cached is None or cached[0] is not own_cache or cached[1] is not base_cache:
            keys = (*self.reset_keys, *base.reset_keys, *self.state_keys, *base.state_keys)
            cached = (own_cache, base_cache, tuple(dict.fromkeys(keys)))
            self.__dict__["_reset_inputs"] = cached
        return cached[2]

    def _post_step_hooks(self) -> tuple:
        return self.__dict__.get("_post_hooks", ())

    def _set_entry(self, parent_name: str, name: str, spec: Any) -> None:
        raise RuntimeError(READ_ONLY_SPEC_ERROR.format(name=name))

    @property
    def input_spec(self) -> Any:
        """Locked Composite with the transformed ``full_action_spec`` and ``full_state_spec``."""
        if not self.__dict__["_cache_specs"]:
            self._compute_specs()
        return self.__dict__["_input_spec"]

    @input_spec.setter
    def input_spec(self, value: Any) -> None:
        raise RuntimeError(READ_ONLY_SPEC_ERROR.format(name="input_spec"))

    @property
    def output_spec(self) -> Any:
        """Locked Composite with the transformed observation, reward and done specs."""
        if not self.__dict__["_cache_specs"]:
            self._compute_specs()
        return self.__dict__["_output_spec"]

    @output_spec.setter
    def output_spec(self, value: Any) -> None:
        raise RuntimeError(READ_ONLY_SPEC_ERROR.format(name="output_spec"))

    @property
    def batch_size(self) -> torch.Size:
        """The batch size of the base env, as changed by the transforms."""
        return self.__dict__["_batch_size"]

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        raise RuntimeError(READ_ONLY_SPEC_ERROR.format(name="batch_size"))

    @property
    def _batch_locked(self) -> bool:
        return self.__dict__["_base_env"]._batch_locked

    @property
    def batch_locked(self) -> bool:
        """Whether inputs must have exactly the env batch size; follows the base env."""
        return self.__dict__["_base_env"].batch_locked

    @batch_locked.setter
    def batch_locked(self, value: bool) -> None:
        raise RuntimeError(
            "batch_locked is a read-only property of a TransformedEnv: it follows the base env; "
            "set it on the base env instead"
        )

    @property
    def auto_reset(self) -> bool:
        """Whether the base env resets done elements inside its step."""
        return self.__dict__["_base_env"].auto_reset

    # ---------------------------------------------------------------- protocol
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        env_dict = self.__dict__
        transform = env_dict["_transform"]
        base = env_dict["_base_env"]
        tensordict_in = transform.inv(tensordict) if env_dict["_needs_inverse"] else tensordict
        partial = fast_get(tensordict_in, "_step")
        if partial is not None:
            return self._partial_step_through(tensordict, tensordict_in, partial)
        next_tensordict = base._checked_step(tensordict_in)
        return transform._step(tensordict, next_tensordict)

    def _skip_tensordict(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The output of a skipped step: the input's observations and dones, zero rewards."""
        output_keys = [
            (key, spec[key])
            for spec, keys in (
                (self.full_observation_spec, self.observation_keys),
                (self.full_reward_spec, self.reward_keys),
                (self.full_done_spec, self.done_keys),
            )
            for key in keys
        ]
        ndim = len(self.batch_size)
        spec_ndim = 0 if tensordict.batch_dims != ndim else ndim
        out = _partial.fill_from_input(tensordict, output_keys, tensordict.batch_size, spec_ndim)
        device = self.device
        # the output of a skipped step lives on the env's device, as a stepped one does
        return out if device is None or out.device == device else out.to(device)

    def _partial_step_through(
        self, tensordict: TensorDictBase, tensordict_in: TensorDictBase, partial: torch.Tensor
    ) -> TensorDictBase:
        """Step only the elements whose ``"_step"`` entry is True (see ConditionalSkip)."""
        base = self.__dict__["_base_env"]
        transform = self.__dict__["_transform"]
        tensordict_in = tensordict_in.exclude("_step")
        batch_size = tensordict_in.batch_size
        if partial.numel() != batch_size.numel():
            raise ValueError(
                f"'_step' mask: expected {batch_size.numel()} elements (batch size "
                f"{tuple(batch_size)}), got shape {tuple(partial.shape)}"
            )
        mask = partial.reshape(batch_size)
        if all_true(mask):
            next_tensordict = base._checked_step(tensordict_in)
            return transform._step(tensordict, next_tensordict)
        skipped = self._skip_tensordict(tensordict)
        if not any_true(mask):
            return skipped
        if base.batch_locked:
            tensordict_in.set("_step", mask)
            next_tensordict = base._checked_step(tensordict_in)
            next_tensordict.pop("_step", None)
        else:
            sub = base._checked_step(tensordict_in[mask])
            next_tensordict = _partial.merge_partial_step(tensordict_in, sub, mask)
        next_tensordict = transform._step(tensordict, next_tensordict)
        for key, value in skipped.items(include_nested=True, leaves_only=True):
            stepped = next_tensordict.get(key, None)
            if not isinstance(stepped, torch.Tensor) or stepped.shape != value.shape:
                continue
            aligned = _partial.align_mask(mask, value.shape, "_step", "_step", key)
            next_tensordict.set(key, torch.where(aligned, stepped, value.to(stepped.dtype)))
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if not self.__dict__["_cache_specs"]:
            self._compute_specs()
        base = self.__dict__["_base_env"]
        transform = self.__dict__["_transform"]
        if tensordict is not None:
            tensordict = _select(tensordict, self._reset_input_keys())
        tensordict = transform._reset_env_preprocess(tensordict)

        def done_template() -> TensorDictBase:
            return base.full_done_spec.zero(base._rand_shape(tensordict))

        tensordict_reset = transform._reset_bypass(tensordict, done_template)
        if tensordict_reset is None:
            handler = base.__dict__.get("_auto_reset_handler")
            if (
                handler is not None
                and tensordict is not None
                and handler.has_stash()
                and _partial.collect_reset_masks(tensordict, base.reset_keys)
            ):
                tensordict_reset = handler.on_reset(done_template())
            else:
                tensordict_reset = base._reset(tensordict, **kwargs)
        tensordict_reset = base._post_process(tensordict_reset)
        if tensordict is None:
            tensordict = tensordict_reset.empty()
        return transform._reset(tensordict, tensordict_reset)

    def _set_seed(self, seed: int | None) -> None:
        self.__dict__["_base_env"]._set_seed(seed)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed the base env and return the next seed (see :meth:`EnvBase.set_seed`)."""
        return self.__dict__["_base_env"].set_seed(seed, static_seed=static_seed)

    # ------------------------------------------------------------- transforms
    def append_transform(
        self, transform: Transform | Callable[[TensorDictBase], TensorDictBase]
    ) -> TransformedEnv:
        """Add a transform at the end of the chain; returns this env.

        The transform takes the env's mode (eval until :meth:`train`). The transforms of a
        free :class:`Compose` join the chain one by one.
        """
        transform = _as_transform(transform)
        added = [transform]
        if type(transform) is Compose and transform.container is None:
            added = list(transform)
            for child in added:
                child.reset_parent()
        current = self.__dict__["_transform"]
        if not isinstance(current, Compose):
            current.reset_parent()
            self._set_transform(Compose(current, *added))
        else:
            for child in added:
                child.train(self.training)
                current.append(child)
        return self

    def insert_transform(
        self, index: int, transform: Transform | Callable[[TensorDictBase], TensorDictBase]
    ) -> TransformedEnv:
        """Insert a transform at ``index`` of the chain; returns this env."""
        transform = _as_transform(transform)
        transform.train(self.training)
        current = self.__dict__["_transform"]
        if not isinstance(current, Compose):
            current.reset_parent()
            compose = Compose(current)
            compose.insert(index, transform)
            self._set_transform(compose)
        else:
            current.insert(index, transform)
        return self

    # ------------------------------------------------------------------ misc
    def to(self, *args: Any, **kwargs: Any) -> TransformedEnv:
        """Move the base env and the transforms, then recompute the specs."""
        self.__dict__["_base_env"].to(*args, **kwargs)
        self.__dict__["_transform"].to(*args, **kwargs)
        self._compute_specs()
        return self

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the base env."""
        self.__dict__["_base_env"].close(raise_if_closed=raise_if_closed)
        self.is_closed = True

    def empty_cache(self) -> None:
        """Recompute the specs and cached keys (after editing the base env's specs)."""
        self.__dict__["_transform"].empty_cache()
        self._compute_specs()

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "transform":
            # nn.Module would store a submodule directly; go through the property instead
            type(self).transform.fset(self, value)
            return
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            base = self.__dict__.get("_base_env")
            if base is None or name.startswith("__"):
                raise
            return getattr(base, name)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(\n    env={self.base_env!r},\n    transform={self.transform!r})"
        )
