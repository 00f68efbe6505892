"""Compose: a chain of transforms that acts as one transform."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.envs.transforms.transform import Transform, _as_transform

if TYPE_CHECKING:
    from tdrl.envs.transforms.transformed_env import TransformedEnv

__all__ = ["Compose"]


class Compose(Transform):
    """A chain of transforms applied in order (inverse path: in reverse order).

    Indexing with an int returns the transform itself (which keeps its parent);
    indexing with a slice returns a new, parentless Compose of clones.

    Args:
        *transforms: the transforms, or plain callables mapping a TensorDict to a TensorDict
            (a single list of them works too).

    Keyword Args:
        transforms: the list of transforms, instead of positional arguments.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs import Compose, DoubleToFloat, RenameTransform
        >>> t = Compose(
        ...     DoubleToFloat(in_keys=["x"]), RenameTransform(in_keys=["x"], out_keys=["y"])
        ... )
        >>> t(TensorDict({"x": torch.zeros(2, dtype=torch.float64)}, []))["y"].dtype
        torch.float32
        >>> len(t), type(t[-1]).__name__, t[1:].parent is None
        (2, 'RenameTransform', True)
    """

    def __init__(
        self,
        *transforms: Transform | Callable[[TensorDictBase], TensorDictBase],
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if "transforms" in kwargs:
            if transforms:
                raise TypeError(
                    "Compose: give the transforms either as positional arguments or as the "
                    "transforms keyword, got both"
                )
            transforms = (kwargs.pop("transforms"),)
        if kwargs:
            raise TypeError(f"Compose: unexpected keyword arguments {sorted(kwargs)}")
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = tuple(transforms[0])
        transforms = [_as_transform(t) for t in transforms]
        for transform in transforms:
            transform.set_container(self)
        self.transforms = nn.ModuleList(transforms)
        self._refresh_plan()

    def _refresh_plan(self) -> None:
        transforms = list(self.transforms)
        self.__dict__["_step_plan"] = transforms
        # the bound step methods, looked up once per chain change instead of once per step
        self.__dict__["_step_calls"] = tuple(t._step for t in transforms)
        self.__dict__["_inv_plan"] = [t for t in reversed(transforms) if t._needs_inverse()]

    # ------------------------------------------------------------ data paths
    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for transform in self.__dict__["_step_plan"]:
            next_tensordict = transform._call(next_tensordict)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Run each transform's ``forward`` in order."""
        for transform in self.__dict__["_step_plan"]:
            tensordict = transform(tensordict)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for step in self.__dict__["_step_calls"]:
            next_tensordict = step(tensordict, next_tensordict)
        return next_tensordict

    def _post_step_hooks(self) -> list:
        return [hook for t in self.transforms for hook in t._post_step_hooks()]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for transform in self.__dict__["_step_plan"]:
            tensordict_reset = transform._reset(tensordict, tensordict_reset)
        return tensordict_reset

    def _reset_env_preprocess(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        for transform in reversed(self.__dict__["_step_plan"]):
            tensordict = transform._reset_env_preprocess(tensordict)
        return tensordict

    def _reset_bypass(
        self, tensordict: TensorDictBase | None, done_template: Callable[[], TensorDictBase]
    ) -> TensorDictBase | None:
        for transform in self.__dict__["_step_plan"]:
            out = transform._reset_bypass(tensordict, done_template)
            if out is not None:
                return out
        return None

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for transform in self.__dict__["_inv_plan"]:
            if type(transform).inv is not Transform.inv and not isinstance(transform, Compose):
                tensordict = transform.inv(tensordict)
            else:
                tensordict = transform._inv_call(tensordict)
        return tensordict

    def _needs_inverse(self) -> bool:
        return bool(self.__dict__["_inv_plan"])

    def init(self, tensordict: TensorDictBase) -> None:
        """Run each transform's ``init``."""
        for transform in self.transforms:
            transform.init(tensordict)

    def dump(self, **kwargs: Any) -> None:
        """Run each transform's ``dump``."""
        for transform in self.transforms:
            transform.dump(**kwargs)

    def set_missing_tolerance(self, mode: bool = False) -> None:
        """Set the missing-key tolerance of every transform of the chain."""
        super().set_missing_tolerance(mode)
        for transform in self.transforms:
            transform.set_missing_tolerance(mode)

    # ------------------------------------------------------------ spec hooks
    def transform_output_spec(self, output_spec: Any) -> Any:
        """Chain the output spec through every transform."""
        for transform in self.transforms:
            output_spec = transform.transform_output_spec(output_spec)
        return output_spec

    def transform_input_spec(self, input_spec: Any) -> Any:
        """Chain the input spec through every transform, from the env outwards.

        The first transform maps the base env's input spec to what it accepts from the
        next one, and so on: the last transform gives the spec the outside world sees.
        """
        for transform in self.transforms:
            input_spec = transform.transform_input_spec(input_spec)
        self._refresh_plan()
        return input_spec

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        """Chain the observation spec through every transform."""
        for transform in self.transforms:
            observation_spec = transform.transform_observation_spec(observation_spec)
        return observation_spec

    def transform_reward_spec(self, reward_spec: Any) -> Any:
        """Chain the reward spec through every transform."""
        for transform in self.transforms:
            reward_spec = transform.transform_reward_spec(reward_spec)
        return reward_spec

    def transform_done_spec(self, done_spec: Any) -> Any:
        """Chain the done spec through every transform."""
        for transform in self.transforms:
            done_spec = transform.transform_done_spec(done_spec)
        return done_spec

    def transform_action_spec(self, action_spec: Any) -> Any:
        """Chain the action spec through every transform, from the env outwards."""
        for transform in self.transforms:
            action_spec = transform.transform_action_spec(action_spec)
        return action_spec

    def transform_state_spec(self, state_spec: Any) -> Any:
        """Chain the state spec through every transform, from the env outwards."""
        for transform in self.transforms:
            state_spec = transform.transform_state_spec(state_spec)
        return state_spec

    def transform_env_device(self, device: torch.device | None) -> torch.device | None:
        """Chain the env device through every transform."""
        for transform in self.transforms:
            device = transform.transform_env_device(device)
        return device

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        """Chain the env batch size through every transform."""
        for transform in self.transforms:
            batch_size = transform.transform_env_batch_size(batch_size)
        return batch_size

    # -------------------------------------------------------------- container
    def __getitem__(self, item: int | slice | list) -> Transform:
        if isinstance(item, int):
            return self.transforms[item]
        if isinstance(item, slice):
            return Compose(*[t.clone() for t in self.transforms[item]])
        if isinstance(item, (list, tuple)):
            return Compose(*[self.transforms[i].clone() for i in item])
        raise TypeError(f"Compose index: expected an int, a slice or a list of ints, got {item!r}")

    def __len__(self) -> int:
        return len(self.transforms)

    def __iter__(self) -> Iterator[Transform]:
        return iter(self.transforms)

    def append(self, transform: Transform | Callable[[TensorDictBase], TensorDictBase]) -> None:
        """Add a transform at the end of the chain."""
        transform = _as_transform(transform)
        transform.set_container(self)
        self.transforms.append(transform)
        self._refresh_plan()
        self._chain_changed_or_undo(len(self.transforms) - 1)

    def insert(
        self, index: int, transform: Transform | Callable[[TensorDictBase], TensorDictBase]
    ) -> None:
        """Insert a transform at ``index`` (negative indices count from the end)."""
        if not isinstance(index, int):
            raise TypeError(f"Compose.insert index: expected an int, got {type(index).__name__}")
        size = len(self.transforms)
        if not -size - 1 <= index <= size:
            raise IndexError(
                f"Compose.insert index: expected a value in [{-size - 1}, {size}], got {index}"
            )
        if index < 0:
            index += size + 1
        transform = _as_transform(transform)
        transform.set_container(self)
        self.transforms.insert(index, transform)
        self._refresh_plan()
        self._chain_changed_or_undo(index)

    def pop(self, index: int = -1) -> Transform:
        """Remove and return the transform at ``index``, without parent."""
        transform = self.transforms[index]
        del self.transforms[index]
        transform.reset_parent()
        self._refresh_plan()
        self._chain_changed()
        return transform

    def _chain_changed_or_undo(self, index: int) -> None:
        """Tell the env about a new transform at ``index``; take it out again if the env refuses it."""
        try:
            self._chain_changed()
        except Exception:
            transform = self.transforms[index]
            del self.transforms[index]
            transform.reset_parent()
            self._refresh_plan()
            self._chain_changed()
            raise

    def _chain_changed(self) -> None:
        self.empty_cache()
        container = self.__dict__["_container"]
        if container is not None:
            container._chain_changed()

    def empty_cache(self) -> None:
        """Drop the cached parents of this Compose and of all its transforms."""
        super().empty_cache()
        for transform in self.transforms:
            transform.empty_cache()

    def _rebuild_up_to(self, final: Transform) -> TransformedEnv | None:
        """A parent env made of everything that runs before ``final``."""
        from tdrl.envs.transforms.transformed_env import TransformedEnv

        container = self.__dict__["_container"]
        if container is None:
            return None
        if isinstance(container, Compose):
            out = container._rebuild_up_to(self)
            if out is None:
                return None
        elif isinstance(container, TransformedEnv):
            out = TransformedEnv(container.base_env)
        else:
            raise TypeError(
                f"Compose container: expected a Compose or a TransformedEnv, "
                f"got {type(container).__name__}"
            )
        for transform in self.transforms:
            if transform is final:
                break
            out.append_transform(transform.clone())
        return out

    def clone(self) -> Compose:
        """A parentless copy made of clones of every transform (buffers shared)."""
        new = super().clone()
        clones = [t.clone() for t in self.transforms]
        for transform in clones:
            transform.__dict__["_container"] = new
        new.__dict__["_modules"] = OrderedDict(self._modules)
        new.__dict__["_modules"]["transforms"] = nn.ModuleList(clones)
        new._refresh_plan()
        return new

    def to(self, *args: Any, **kwargs: Any) -> Compose:
        """Move every transform (see ``nn.Module.to``)."""
        super().to(*args, **kwargs)
        self._refresh_plan()
        return self

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(t) for t in self.transforms)
        return f"Compose(\n    {inner})" if inner else "Compose()"
