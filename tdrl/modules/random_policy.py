"""RandomPolicy: a policy that writes a random sample of an action spec."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.data import Composite

__all__ = ["RandomPolicy"]

NO_SPEC_ERROR = (
    "RandomPolicy: action_spec is not set; pass one to the constructor or call "
    "set_action_spec_from_env(env) first"
)


class RandomPolicy:
    """A policy that writes a random sample of an action spec.

    The spec is kept by reference, not copied: later in-place changes (such as an
    action mask updated by the env at each step) are seen by the next sample. A
    policy built without a spec takes the env's full action spec the first time
    :meth:`set_action_spec_from_env` is called (collectors do this).

    Args:
        action_spec: a leaf spec or a Composite of actions (None: set it later).
        action_key: where a leaf spec's sample is written.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import Bounded
        >>> policy = RandomPolicy(Bounded(-1.0, 1.0, (2,)))
        >>> policy(TensorDict())["action"].shape
        torch.Size([2])
    """

    def __init__(self, action_spec: Any = None, action_key: Any = "action") -> None:
        self.action_spec = action_spec
        self.action_key = action_key

    def set_action_spec_from_env(self, env: Any) -> None:
        """Use ``env.full_action_spec`` when no spec is set yet (a no-op otherwise)."""
        if self.action_spec is None:
            self.action_spec = env.full_action_spec

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        """Write a random action into ``td`` and return it."""
        spec = self.action_spec
        if spec is None:
            raise RuntimeError(NO_SPEC_ERROR)
        if isinstance(spec, Composite):
            return td.update(spec.rand())
        return td.set(self.action_key, spec.rand())
