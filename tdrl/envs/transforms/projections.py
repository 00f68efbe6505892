"""Action-space projections: ActionDiscretizer, DiscreteActionProjection, gSDENoise."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase, unravel_key

from tdrl.data import (
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)
from tdrl.envs.transforms.resets import TensorDictPrimer
from tdrl.envs.transforms.transform import INPUT_ENTRIES, NestedKey, Transform, locate_spec

__all__ = ["ActionDiscretizer", "DiscreteActionProjection", "gSDENoise"]

MISSING_ACTION_ERROR = (
    "{owner}: action key {key!r} is not in the action spec; available keys: {keys}"
)


def _action_leaf(owner: str, input_spec: Any, key: NestedKey) -> Any:
    sub = locate_spec(input_spec, INPUT_ENTRIES, key)
    if sub is None:
        keys = list(input_spec["full_action_spec"].keys(True, True))
        raise KeyError(MISSING_ACTION_ERROR.format(owner=owner, key=key, keys=keys))
    return sub[key]


class ActionDiscretizer(Transform):
    """Exposes a discrete action space over an env with a continuous (``Bounded``) one.

    Each element ``i`` of the continuous action is split into ``num_intervals[i]``
    equal bins of ``[low_i, high_i]``; the discrete action picks a bin per element,
    and the base env receives a point of that bin chosen by ``sampling``: its centre
    (``MEDIAN``, default), its lower or upper edge (``LOW`` / ``HIGH``) or a uniform
    draw inside it (``RANDOM``).

    Args:
        num_intervals: the number of bins, one int for every element or a tensor with
            one entry per element of the action's last dim.
        action_key: the continuous action of the base env.
        out_action_key: where the discrete action is read (default: ``action_key``).
            When it differs, the continuous action moves to the state spec and is
            written next to the discrete one in the step data.
        sampling: a :class:`ActionDiscretizer.SamplingStrategy` (or its name).
        categorical: bin indices (``Categorical`` / ``MultiCategorical`` spec) when
            True, one-hot vectors (``OneHot`` / ``MultiOneHot``) otherwise.

    Examples:
        >>> import torch
        >>> from tdrl.envs import ActionDiscretizer, GymEnv, TransformedEnv, check_env_specs
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), ActionDiscretizer(num_intervals=5))
        >>> env.action_spec
        Categorical(shape=(1,), n=5, device=cpu, dtype=torch.int64, domain=discrete)
        >>> check_env_specs(env)
        >>> td = env.transform.inv(env.reset().set("action", torch.tensor([4])))
        >>> td["action"]
        tensor([1.6000])
    """

    class SamplingStrategy(IntEnum):
        """Which point of the chosen bin the base env receives."""

        MEDIAN = 0
        LOW = 1
        HIGH = 2
        RANDOM = 3

    def __init__(
        self,
        num_intervals: int | torch.Tensor,
        action_key: NestedKey = "action",
        out_action_key: NestedKey | None = None,
        sampling: SamplingStrategy | str | None = None,
        categorical: bool = True,
    ) -> None:
        if isinstance(num_intervals, torch.Tensor):
            intervals = num_intervals.reshape(-1).long()
        elif isinstance(num_intervals, int) and not isinstance(num_intervals, bool):
            intervals = torch.tensor([num_intervals])
        else:
            raise TypeError(
                "ActionDiscretizer num_intervals: expected an int or a tensor, "
                f"got {type(num_intervals).__name__}"
            )
        if intervals.numel() == 0 or bool((intervals < 1).any()):
            raise ValueError(
                "ActionDiscretizer num_intervals: expected positive counts, "
                f"got {intervals.tolist()}"
            )
        if sampling is None:
            sampling = self.SamplingStrategy.MEDIAN
        elif isinstance(sampling, str):
            try:
                sampling = self.SamplingStrategy[sampling.upper()]
            except KeyError as err:
                raise ValueError(
                    "ActionDiscretizer sampling: expected one of "
                    f"{[s.name for s in self.SamplingStrategy]}, got {sampling!r}"
                ) from err
        else:
            sampling = self.SamplingStrategy(sampling)
        action_key = unravel_key(action_key)
        out_action_key = action_key if out_action_key is None else unravel_key(out_action_key)
        super().__init__(in_keys_inv=[action_key], out_keys_inv=[out_action_key])
        self.num_intervals = num_intervals
        self.action_key = action_key
        self.out_action_key = out_action_key
        self.sampling = sampling
        self.categorical = categorical
        self._intervals = intervals
        self._nvec: torch.Tensor | None = None
        self._scalar = False
        self._low: torch.Tensor | None = None
        self._width: torch.Tensor | None = None
        self._dtype = torch.get_default_dtype()

    # ----------------------------------------------------------------- specs
    def _discrete_spec(self, spec: Any, batch_dims: int = 0) -> Any:
        """The discrete spec over ``spec`` (whose first ``batch_dims`` dims are env batch dims).

        Also records the bins. A spec without feature dims (a scalar action per env)
        is split into ``num_intervals`` bins as a single element.
        """
        if not isinstance(spec, Bounded) or spec.domain != "continuous":
            raise TypeError(
                f"ActionDiscretizer: expected a continuous Bounded spec at {self.action_key!r}, "
                f"got {type(spec).__name__} ({spec.dtype})"
            )
        scalar = spec.ndim <= batch_dims
        size = 1 if scalar else spec.shape[-1]
        intervals = self._intervals.to(spec.device)
        if intervals.numel() == 1:
            intervals = intervals.expand(size)
        elif intervals.numel() != size:
            raise ValueError(
                f"ActionDiscretizer num_intervals: expected 1 or {size} counts (the last dim "
                f"of the action spec at {self.action_key!r}), got {intervals.numel()}"
            )
        self._scalar = scalar
        self._nvec = intervals
        self._low = spec.low
        width = (spec.high - spec.low) / (intervals[0] if scalar else intervals).to(spec.dtype)
        self._width = width
        self._dtype = spec.dtype
        nvec = intervals.tolist()
        uniform = len(set(nvec)) == 1
        if scalar:
            if self.categorical:
                return Categorical(nvec[0], shape=spec.shape, device=spec.device)
            return OneHot(nvec[0], shape=(*spec.shape, nvec[0]), device=spec.device)
        lead = spec.shape[:-1]
        if self.categorical:
            if uniform:
                return Categorical(nvec[0], shape=spec.shape, device=spec.device)
            return MultiCategorical(nvec, shape=spec.shape, device=spec.device)
        if size == 1:
            return OneHot(nvec[0], shape=(*lead, nvec[0]), device=spec.device)
        return MultiOneHot(nvec, shape=(*lead, sum(nvec)), device=spec.device)

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Replace the continuous action spec with the discrete one."""
        input_spec = super().transform_input_spec(input_spec)
        spec = _action_leaf("ActionDiscretizer", input_spec, self.action_key)
        discrete = self._discrete_spec(spec, len(input_spec.shape))
        action_spec = input_spec["full_action_spec"]
        if self.out_action_key != self.action_key:
            del action_spec[self.action_key]
            input_spec["full_state_spec"][self.action_key] = spec
        action_spec[self.out_action_key] = discrete
        return input_spec

    def _init(self) -> None:
        """Compute the bins from the continuous action spec of the env before this transform."""
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "Cannot execute transform ActionDiscretizer without a parent env: the bins are "
                "computed from the env's continuous action spec"
            )
        spec = parent.full_action_spec.get(self.action_key, None)
        if spec is None:
            spec = parent.full_state_spec[self.action_key]
        self._discrete_spec(spec, len(parent.batch_size))

    # ------------------------------------------------------------- data paths
    def _indices(self, value: torch.Tensor) -> torch.Tensor:
        if self.categorical:
            return value.long()
        nvec = self._nvec.tolist()
        if value.dtype == torch.bool:
            value = value.to(torch.uint8)
        if self._scalar:
            return value.argmax(-1)
        if len(nvec) == 1:
            return value.argmax(-1, keepdim=True)
        return torch.stack([part.argmax(-1) for part in value.split(nvec, -1)], -1)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self._nvec is None:
            self._init()
        index = self._indices(value).to(self._dtype)
        strategy = self.sampling
        if strategy == self.SamplingStrategy.MEDIAN:
            index = index + 0.5
        elif strategy == self.SamplingStrategy.HIGH:
            index = index + 1.0
        elif strategy == self.SamplingStrategy.RANDOM:
            index = index + torch.rand_like(index)
        return torch.addcmul(self._low, index, self._width)

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write the continuous action the base env needs (see the class docstring)."""
        if self.out_action_key == self.action_key:
            tensordict = tensordict.clone(False)
        value = tensordict.get(self.out_action_key, None)
        if value is None:
            if self.missing_tolerance:
                return tensordict
            raise KeyError(
                f"ActionDiscretizer: expected the discrete action {self.out_action_key!r}, "
                f"got keys {list(tensordict.keys(True, True))}"
            )
        action = self._inv_apply_transform(value)
        self.__dict__["_last_action"] = action
        return tensordict.set(self.action_key, action)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.inv(tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.out_action_key != self.action_key:
            action = self.__dict__.get("_last_action")
            if action is not None:
                tensordict.set(self.action_key, action)
        return next_tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Data that does not come from an env is left unchanged."""
        return tensordict

    def __repr__(self) -> str:
        return (
            f"ActionDiscretizer(num_intervals={self._intervals.tolist()}, "
            f"action_key={self.action_key!r}, out_action_key={self.out_action_key!r}, "
            f"sampling={self.sampling.name}, categorical={self.categorical})"
        )


class DiscreteActionProjection(Transform):
    """Lets a policy over ``max_actions`` one-hot actions drive an env with fewer actions.

    On the way in (``inv``), a one-hot action of size ``max_actions`` whose index is
    at least ``num_actions_effective`` is replaced by a uniformly drawn valid action,
    and the result is a one-hot vector of size ``num_actions_effective``. On data that
    does not come from an env (``transform(td)``, with ``include_forward``), actions
    of size ``num_actions_effective`` are padded with zeros to ``max_actions``.

    Args:
        num_actions_effective: the number of actions of the base env.
        max_actions: the number of actions the policy picks from.
        action_key: the action entry.
        include_forward: pad actions on the forward path too.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import DiscreteActionProjection
        >>> t = DiscreteActionProjection(num_actions_effective=2, max_actions=4)
        >>> t.inv(TensorDict({"action": torch.tensor([0, 1, 0, 0])}, []))["action"]
        tensor([0, 1])
        >>> t(TensorDict({"action": torch.tensor([1, 0])}, []))["action"]
        tensor([1, 0, 0, 0])
    """

    def __init__(
        self,
        num_actions_effective: int,
        max_actions: int,
        action_key: NestedKey = "action",
        include_forward: bool = True,
    ) -> None:
        for name, value in (
            ("num_actions_effective", num_actions_effective),
            ("max_actions", max_actions),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"DiscreteActionProjection {name}: expected a positive int, got {value!r}"
                )
        if max_actions < num_actions_effective:
            raise ValueError(
                "DiscreteActionProjection: expected max_actions >= num_actions_effective, got "
                f"max_actions={max_actions} and num_actions_effective={num_actions_effective}"
            )
        super().__init__(in_keys=[action_key], in_keys_inv=[action_key])
        self.num_actions_effective = num_actions_effective
        self.max_actions = max_actions
        self.action_key = self.in_keys[0]
        self.include_forward = include_forward

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape[-1] != self.max_actions:
            raise ValueError(
                f"DiscreteActionProjection: expected a one-hot action of size {self.max_actions} "
                f"at {self.action_key!r}, got shape {tuple(value.shape)}"
            )
        index = (value.to(torch.uint8) if value.dtype == torch.bool else value).argmax(-1)
        invalid = index >= self.num_actions_effective
        if bool(invalid.any()):
            drawn = torch.randint_like(index, self.num_actions_effective)
            index = torch.where(invalid, drawn, index)
        return F.one_hot(index, self.num_actions_effective).to(value.dtype)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape[-1] != self.num_actions_effective:
            raise ValueError(
                f"DiscreteActionProjection: expected a one-hot action of size "
                f"{self.num_actions_effective} at {self.action_key!r}, got shape "
                f"{tuple(value.shape)}"
            )
        return F.pad(value, (0, self.max_actions - self.num_actions_effective))

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Pad the actions to ``max_actions`` (when ``include_forward``)."""
        if not self.include_forward:
            return tensordict
        return super()._call(tensordict)

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Expose a ``OneHot(max_actions)`` action spec."""
        input_spec = super().transform_input_spec(input_spec)
        spec = _action_leaf("DiscreteActionProjection", input_spec, self.action_key)
        if not isinstance(spec, OneHot) or spec.shape[-1] != self.num_actions_effective:
            raise ValueError(
                f"DiscreteActionProjection: expected a OneHot({self.num_actions_effective}) "
                f"action spec at {self.action_key!r}, got {type(spec).__name__} of shape "
                f"{tuple(spec.shape)}"
            )
        input_spec["full_action_spec"][self.action_key] = OneHot(
            self.max_actions,
            shape=(*spec.shape[:-1], self.max_actions),
            device=spec.device,
            dtype=spec.dtype,
        )
        return input_spec

    def __repr__(self) -> str:
        return (
            f"DiscreteActionProjection(num_actions_effective={self.num_actions_effective}, "
            f"max_actions={self.max_actions}, action_key={self.action_key!r})"
        )


class gSDENoise(TensorDictPrimer):
    """Primes the ``"_eps_gSDE"`` noise entry read by gSDE exploration modules.

    With ``state_dim`` and ``action_dim``, the entry has shape
    ``(*shape, action_dim, state_dim)`` and is drawn from a standard normal at each
    reset; without them it is a ``(*shape, 1)`` zero stand-in that the gSDE module
    replaces with its own draw.

    Args:
        state_dim: the size of the features the noise multiplies.
        action_dim: the size of the action.
        shape: leading dims of the entry (e.g. the env batch size).
        **kwargs: passed to :class:`~tdrl.envs.TensorDictPrimer`.

    Examples:
        >>> from tdrl.envs import GymEnv, TransformedEnv, check_env_specs, gSDENoise
        >>> env = TransformedEnv(GymEnv("Pendulum-v1"), gSDENoise(state_dim=3, action_dim=1))
        >>> check_env_specs(env)
        >>> env.reset()["_eps_gSDE"].shape
        torch.Size([1, 3])
    """

    def __init__(
        self,
        state_dim: int | None = None,
        action_dim: int | None = None,
        shape: tuple | torch.Size | None = None,
        **kwargs: Any,
    ) -> None:
        sized = state_dim is not None and action_dim is not None
        tail = (action_dim, state_dim) if sized else (1,)
        lead = () if shape is None else tuple(shape)
        kwargs.setdefault("random", sized)
        primers = Composite(_eps_gSDE=Unbounded(shape=(*lead, *tail)), shape=lead)
        super().__init__(primers=primers, **kwargs)
        self.state_dim = state_dim
        self.action_dim = action_dim

    def __repr__(self) -> str:
        return f"gSDENoise(state_dim={self.state_dim}, action_dim={self.action_dim})"
