"""ModelBasedEnvBase: an environment whose dynamics are a learned world model."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.data import Composite
from tdrl.envs._done import fill_missing_done
from tdrl.envs._keys import as_tuple
from tdrl.envs.common import EnvBase

__all__ = ["ModelBasedEnvBase"]

PARAMS_TYPE_ERROR = (
    "{owner} {name}: expected None, a TensorDict or a mapping of parameter names to tensors, "
    "got {got}"
)
SEED_WARNING = (
    "{owner}: seeding a model based env has no effect; its dynamics come from the world "
    "model and its randomness from the global torch generator"
)
_COMPLETED = ("done", "terminated")


def _check_functional(owner: str, name: str, value: Any) -> None:
    if value is not None and not isinstance(value, (TensorDictBase, Mapping)):
        raise TypeError(PARAMS_TYPE_ERROR.format(owner=owner, name=name, got=type(value).__name__))


def _names_params_and_buffers(module: nn.Module) -> tuple[bool, bool]:
    """Whether ``module.forward`` names ``params`` / ``buffers`` arguments explicitly."""
    try:
        parameters = inspect.signature(getattr(module, "forward", module)).parameters
    except (TypeError, ValueError):
        return False, False
    named = {
        name
        for name, p in parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    return "params" in named, "buffers" in named


def _as_flat_dict(source: TensorDictBase | Mapping) -> dict:
    if isinstance(source, TensorDictBase):
        return dict(source.flatten_keys(".").items())
    return dict(source)


def _rebatch(spec: Composite, source: torch.Size, target: torch.Size) -> Composite:
    """Replace the leading ``source`` batch dims of ``spec`` by ``target``."""
    if source == target:
        return spec
    if source:
        spec = spec[(0,) * len(source)]
    if target:
        spec = spec.expand(target)
    return spec


class ModelBasedEnvBase(EnvBase):
    """Base class of environments whose transitions come from a world model.

    The world model is any module mapping a TensorDict to a TensorDict (a
    :class:`tensordict.nn.TensorDictModule`, a
    :class:`tensordict.nn.TensorDictSequential`, or a plain ``nn.Module`` with that
    signature). ``step`` runs it on a shallow copy of its input (the input is never
    modified) and keeps the observation, reward and done entries of the specs;
    done entries the model does not write are False (the done flags of the input are
    never carried over). The env is batch-unlocked: the batch size of the data
    given to ``reset`` / ``step`` decides the batch size.

    Subclasses set the specs (directly or with :meth:`set_specs_from_env`) and
    implement ``_reset``, which returns the first (latent) state.

    With ``params`` / ``buffers``, the world model runs with these weights instead
    of its own: they are passed as ``params=`` / ``buffers=`` keyword arguments when
    its ``forward`` names them, swapped in with ``TensorDict.to_module`` when they
    are TensorDicts (as built by ``TensorDict.from_module``), and applied with
    :func:`torch.func.functional_call` when they are mappings of parameter names
    (``"0.weight"``) to tensors.

    Args:
        world_model: the module computing the next state, reward (and optionally done).
        params: weights to run the world model with (None: its own).
        buffers: buffers to run the world model with (None: its own).
        device: the device of the env; the world model is moved there.
        batch_size: the env batch size (leading dims of every spec).
        run_type_checks: check actions and outputs against the specs at each step.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from tdrl.data import Composite, Unbounded
        >>> from tdrl.envs import ModelBasedEnvBase
        >>> class MyMBEnv(ModelBasedEnvBase):
        ...     def __init__(self, world_model, device="cpu", batch_size=None):
        ...         super().__init__(world_model, device=device, batch_size=batch_size)
        ...         self.observation_spec = Composite(hidden_observation=Unbounded((4,)))
        ...         self.state_spec = Composite(hidden_observation=Unbounded((4,)))
        ...         self.action_spec = Unbounded((1,))
        ...         self.reward_spec = Unbounded((1,))
        ...     def _reset(self, tensordict=None):
        ...         shape = self.batch_size if tensordict is None else tensordict.batch_size
        ...         data = TensorDict(batch_size=shape, device=self.device)
        ...         data.update(self.state_spec.rand(shape))
        ...         data.update(self.observation_spec.rand(shape))
        ...         return data
        >>> world_model = TensorDictSequential(
        ...     TensorDictModule(
        ...         nn.Bilinear(4, 1, 4),
        ...         in_keys=["hidden_observation", "action"],
        ...         out_keys=["hidden_observation"],
        ...     ),
        ...     TensorDictModule(nn.Linear(4, 1), in_keys=["hidden_observation"], out_keys=["reward"]),
        ... )
        >>> env = MyMBEnv(world_model)
        >>> rollout = env.rollout(max_steps=10)
        >>> rollout.batch_size
        torch.Size([10])
        >>> sorted(rollout["next"].keys())
        ['done', 'hidden_observation', 'reward', 'terminated']
        >>> env.rollout(3, tensordict=TensorDict(batch_size=[2])).batch_size
        torch.Size([2, 3])
    """

    _batch_locked = False

    def __init__(
        self,
        world_model: nn.Module,
        params: TensorDictBase | Mapping[str, torch.Tensor] | None = None,
        buffers: TensorDictBase | Mapping[str, torch.Tensor] | None = None,
        device: Any = "cpu",
        batch_size: Any = None,
        run_type_checks: bool = False,
    ) -> None:
        owner = type(self).__name__
        if not callable(world_model):
            raise TypeError(
                f"{owner} world_model: expected a module mapping a TensorDict to a TensorDict, "
                f"got {type(world_model).__name__}"
            )
        _check_functional(owner, "params", params)
        _check_functional(owner, "buffers", buffers)
        super().__init__(device=device, batch_size=batch_size, run_type_checks=run_type_checks)
        if self.device is not None and isinstance(world_model, nn.Module):
            world_model = world_model.to(self.device)
        self.world_model = world_model
        self.world_model_params = params
        self.world_model_buffers = buffers
        self.__dict__["_step_plan"] = (None, [], [])
        self.__dict__["_kwargs_support"] = (None, (False, False))

    # ------------------------------------------------------------------ specs
    def set_specs_from_env(self, env: EnvBase) -> None:
        """Use the output and input specs of ``env`` (moved to this env's device).

        When the two envs have different batch sizes, the batch dims of ``env`` are
        dropped (keeping the spec of its first element) and replaced by this env's.
        """
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"{type(self).__name__}.set_specs_from_env: expected an EnvBase, "
                f"got {type(env).__name__}"
            )
        source = env.batch_size
        self.output_spec = _rebatch(env.output_spec.clone(), source, self.batch_size)
        self.input_spec = _rebatch(env.input_spec.clone(), source, self.batch_size)

    # --------------------------------------------------------------- protocol
    def _plan(self) -> tuple[list, list]:
        """The keys ``_step`` keeps and the done groups it completes (cached per spec change)."""
        cache = self._cache
        plan = self.__dict__["_step_plan"]
        if plan[0] is cache:
            return plan[1], plan[2]
        keys = [*cache.observation_keys, *cache.reward_keys, *cache.done_keys]
        groups = []
        for group in cache.done_keys_groups:
            others = [key for key in group if as_tuple(key)[-1] not in _COMPLETED]
            groups.append((group, others))
        self.__dict__["_step_plan"] = (cache, keys, groups)
        return keys, groups

    def _run_world_model(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Run the world model on ``tensordict`` with the env's params / buffers, if any."""
        world_model = self.world_model
        params = self.world_model_params
        buffers = self.world_model_buffers
        if params is None and buffers is None:
            return world_model(tensordict)
        module, support = self.__dict__["_kwargs_support"]
        if module is not world_model:
            support = _names_params_and_buffers(world_model)
            self.__dict__["_kwargs_support"] = (world_model, support)
        takes_params, takes_buffers = support
        if takes_params and (buffers is None or takes_buffers):
            kwargs = {"params": params}
            if buffers is not None:
                kwargs["buffers"] = buffers
            return world_model(tensordict, **kwargs)
        sources = [s for s in (params, buffers) if s is not None]
        if all(isinstance(s, TensorDictBase) for s in sources):
            with sources[0].to_module(world_model):
                if len(sources) == 1:
                    return world_model(tensordict)
                with sources[1].to_module(world_model):
                    return world_model(tensordict)
        return torch.func.functional_call(
            world_model, tuple(_as_flat_dict(s) for s in sources), (tensordict,)
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        keys, groups = self._plan()
        out = self._run_world_model(tensordict.copy())
        next_tensordict = out.select(*keys, strict=False)
        for group, others in groups:
            present = False
            for key in group:
                value = next_tensordict.get(key, None)
                if value is None:
                    continue
                if value is tensordict.get(key, None):
                    # the input's flag (from the previous step) passed through: not written
                    del next_tensordict[key]
                else:
                    present = True
            # with some flags written, done / terminated are completed by ``step``
            missing = others if present else group
            if missing:
                fill_missing_done(
                    next_tensordict, missing, self.full_done_spec, len(self.batch_size)
                )
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        raise NotImplementedError(
            f"{type(self).__name__} must implement _reset: a model-based env cannot know its "
            "initial (latent) state; return it from _reset (e.g. sampled from the state spec)"
        )

    def _set_seed(self, seed: int | None) -> int | None:
        warnings.warn(SEED_WARNING.format(owner=type(self).__name__), UserWarning, stacklevel=3)
        return seed

    def to(self, *args: Any, **kwargs: Any) -> ModelBasedEnvBase:
        """Move the env, its world model and its params / buffers to a device."""
        super().to(*args, **kwargs)
        device = self.device
        if device is not None:
            for name in ("world_model_params", "world_model_buffers"):
                value = getattr(self, name)
                if isinstance(value, TensorDictBase):
                    setattr(self, name, value.to(device))
                elif value is not None:
                    setattr(self, name, {k: v.to(device) for k, v in value.items()})
        return self
