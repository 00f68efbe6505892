"""``reset(tensordict, set_state=...)``: resetting an env *to* the state held by its input.

An env whose ``_reset`` can restore a given state declares ``_supports_set_state = True``
on its class and reads ``set_state`` from its keyword arguments: with
``set_state=True`` it restores the state entries of its input, otherwise it draws a
fresh state. :func:`reset_kwargs` checks the flag before ``_reset`` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tdrl.envs.common import EnvBase

__all__ = ["reset_kwargs"]

UNSUPPORTED = (
    "{cls}.reset(set_state=True): this env cannot reset to a given state (its class does "
    "not declare `_supports_set_state = True` with a _reset reading `set_state`)"
)


def reset_kwargs(env: EnvBase, kwargs: dict) -> dict:
    """The keyword arguments of ``env.reset`` to pass on to ``env._reset``.

    ``set_state=True`` on an env that cannot restore a state raises a
    ``NotImplementedError``; ``set_state=False`` is dropped for such an env (it draws a
    fresh state anyway, and its ``_reset`` need not accept the argument).
    """
    if "set_state" not in kwargs or env.supports_set_state:
        return kwargs
    if kwargs["set_state"]:
        raise NotImplementedError(UNSUPPORTED.format(cls=type(env).__name__))
    return {key: value for key, value in kwargs.items() if key != "set_state"}
