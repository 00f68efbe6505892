"""EnvMetaData: a cheap, picklable description of an env (specs, batch size, device)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from tdrl.data import Composite

if TYPE_CHECKING:
    from tdrl.envs.common import EnvBase

__all__ = ["EnvMetaData"]


class EnvMetaData:
    """What a parent process needs to know about an env without holding it.

    Batched envs build their buffers from it; it pickles cheaply (specs and a
    zero-filled example tensordict, no simulator).

    Args:
        tensordict: a zero-filled example of one step (``env.fake_tensordict()``).
        specs: a Composite with ``input_spec`` and ``output_spec``.
        batch_size: the env batch size.
        env_str: a short description of the env (its repr).
        device: the env device.
        batch_locked: the env's ``batch_locked``.
        supports_set_state: the env's ``supports_set_state``.
        device_map: optional per-key devices.

    Examples:
        >>> import pickle
        >>> from tdrl.envs import PendulumEnv
        >>> meta = EnvMetaData.metadata_from_env(PendulumEnv())
        >>> meta2 = pickle.loads(pickle.dumps(meta))
        >>> meta2.batch_size, meta2.batch_locked
        (torch.Size([]), False)
        >>> meta.expand(4).batch_size
        torch.Size([4])
    """

    def __init__(
        self,
        *,
        tensordict: TensorDictBase,
        specs: Composite,
        batch_size: torch.Size,
        env_str: str = "",
        device: torch.device | None = None,
        batch_locked: bool = True,
        device_map: dict | None = None,
        supports_set_state: bool = False,
    ) -> None:
        self.tensordict = tensordict
        self.specs = specs
        self.batch_size = torch.Size(batch_size)
        self.env_str = env_str
        self.device = torch.device(device) if device is not None else None
        self.batch_locked = batch_locked
        self.device_map = device_map if device_map is not None else {}
        self.supports_set_state = supports_set_state

    @classmethod
    def metadata_from_env(cls, env: EnvBase) -> EnvMetaData:
        """Describe ``env`` (specs and example data are copied to CPU)."""
        return cls(
            tensordict=env.fake_tensordict().to("cpu"),
            specs=env.specs.to("cpu"),
            batch_size=env.batch_size,
            env_str=repr(env),
            device=env.device,
            batch_locked=env.batch_locked,
            supports_set_state=env.supports_set_state,
        )

    @property
    def input_spec(self) -> Composite:
        """The env's ``input_spec``."""
        return self.specs["input_spec"]

    @property
    def output_spec(self) -> Composite:
        """The env's ``output_spec``."""
        return self.specs["output_spec"]

    def expand(self, *shape: Any) -> EnvMetaData:
        """Metadata of a batch of such envs: ``shape`` is prepended to the batch size."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        shape = torch.Size(shape)
        full = shape + self.batch_size
        return EnvMetaData(
            tensordict=self.tensordict.expand(*full).clone(),
            specs=self.specs.expand(*full),
            batch_size=full,
            env_str=self.env_str,
            device=self.device,
            batch_locked=self.batch_locked,
            device_map=dict(self.device_map),
            supports_set_state=self.supports_set_state,
        )

    def to(self, device: Any) -> EnvMetaData:
        """A copy with the example data and specs on ``device``."""
        device = torch.device(device)
        return EnvMetaData(
            tensordict=self.tensordict.to(device),
            specs=self.specs.to(device),
            batch_size=self.batch_size,
            env_str=self.env_str,
            device=device,
            batch_locked=self.batch_locked,
            device_map=dict(self.device_map),
            supports_set_state=self.supports_set_state,
        )

    def __repr__(self) -> str:
        return (
            f"EnvMetaData(batch_size={self.batch_size}, device={self.device}, "
            f"batch_locked={self.batch_locked}, env_str={self.env_str.splitlines()[0]!r})"
        )
