"""Version-dependent pieces of the gym wrappers, chosen with :class:`~tdrl._utils.implement_for`.

gymnasium (>= 0.29) and gym (>= 0.26) share the five-value ``step`` API; they differ in how
vector envs are made and how those report the last observation of an episode.
"""

from __future__ import annotations

from typing import Any

from tdrl._utils import implement_for
from tdrl.envs.libs._gym_backend import gym_backend

__all__ = [
    "AUTORESET_NEXT_STEP",
    "AUTORESET_SAME_STEP",
    "FINAL_OBS_KEYS",
    "autoreset_mode",
    "make_single_env",
    "make_vector_env",
]

AUTORESET_NEXT_STEP = "NextStep"
AUTORESET_SAME_STEP = "SameStep"
AUTORESET_DISABLED = "Disabled"

_OLD_GYM = (
    "gym versions before 0.26 use the four-value step API, which tdrl does not support: "
    "expected gym>=0.26 or gymnasium>=0.29"
)


@implement_for("gym", None, "0.26.0")
def make_single_env(env_name: str, **kwargs: Any) -> Any:
    raise ImportError(_OLD_GYM)


@implement_for("gym", "0.26.0", None)
def make_single_env(env_name: str, **kwargs: Any) -> Any:  # noqa: F811
    # gym 0.26's passive env checker calls numpy aliases removed in numpy 2.
    kwargs.setdefault("disable_env_checker", True)
    return gym_backend().make(env_name, **kwargs)


@implement_for("gymnasium", "0.29.0", None)
def make_single_env(env_name: str, **kwargs: Any) -> Any:  # noqa: F811
    return gym_backend().make(env_name, **kwargs)


@implement_for("gym", None, "0.26.0")
def make_vector_env(env_name: str, num_envs: int, same_step: bool, **kwargs: Any) -> Any:
    raise ImportError(_OLD_GYM)


@implement_for("gym", "0.26.0", None)
def make_vector_env(env_name: str, num_envs: int, same_step: bool, **kwargs: Any) -> Any:  # noqa: F811
    kwargs.setdefault("disable_env_checker", True)
    mode = kwargs.pop("vectorization_mode", "async")
    return gym_backend("vector").make(
        env_name, num_envs=num_envs, asynchronous=mode == "async", **kwargs
    )


@implement_for("gymnasium", "0.29.0", "1.0.0")
def make_vector_env(env_name: str, num_envs: int, same_step: bool, **kwargs: Any) -> Any:  # noqa: F811
    mode = kwargs.pop("vectorization_mode", "async")
    return gym_backend("vector").make(
        env_name, num_envs=num_envs, asynchronous=mode == "async", **kwargs
    )


@implement_for("gymnasium", "1.0.0", "1.1.0")
def make_vector_env(env_name: str, num_envs: int, same_step: bool, **kwargs: Any) -> Any:  # noqa: F811
    raise ImportError(
        "gymnasium 1.0 vector envs can neither auto-reset in the same step nor reset a subset "
        "of their envs, which tdrl needs for correct episode boundaries: expected "
        "gymnasium>=1.1 or gymnasium<1.0"
    )


@implement_for("gymnasium", "1.1.0", None)
def make_vector_env(env_name: str, num_envs: int, same_step: bool, **kwargs: Any) -> Any:  # noqa: F811
    gymnasium = gym_backend()
    mode = gymnasium.vector.AutoresetMode.SAME_STEP if same_step else None
    vector_kwargs = dict(kwargs.pop("vector_kwargs", None) or {})
    if mode is not None:
        vector_kwargs.setdefault("autoreset_mode", mode)
    else:
        vector_kwargs.setdefault("autoreset_mode", gymnasium.vector.AutoresetMode.NEXT_STEP)
    kwargs.setdefault("vectorization_mode", "async")
    return gymnasium.make_vec(env_name, num_envs=num_envs, vector_kwargs=vector_kwargs, **kwargs)


#: Info keys of the last observation (and its mask) in SameStep mode: gymnasium >= 1.0 first,
#: then gymnasium < 1.0 and gym.
FINAL_OBS_KEYS = (("final_obs", "_final_obs"), ("final_observation", "_final_observation"))


@implement_for("gym", "0.26.0", None)
def _default_autoreset_mode() -> str:
    return AUTORESET_SAME_STEP


@implement_for("gymnasium", "0.29.0", "1.0.0")
def _default_autoreset_mode() -> str:  # noqa: F811
    return AUTORESET_SAME_STEP


@implement_for("gymnasium", "1.0.0", None)
def _default_autoreset_mode() -> str:  # noqa: F811
    return AUTORESET_NEXT_STEP


def autoreset_mode(vector_env: Any) -> str:
    """The auto-reset mode of a vector env: ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``."""
    mode = getattr(vector_env, "metadata", {}).get("autoreset_mode")
    if mode is not None:
        return str(getattr(mode, "value", mode))
    library = type(getattr(vector_env, "unwrapped", vector_env)).__module__.split(".")[0]
    if library == "gym":
        # gym vector envs always reset in the step that ends an episode
        return AUTORESET_SAME_STEP
    return _default_autoreset_mode()


def supports_reset_mask(vector_env: Any) -> bool:
    """Whether ``reset(options={"reset_mask": mask})`` resets only the masked envs."""
    if "autoreset_mode" not in getattr(vector_env, "metadata", {}):
        return False
    unwrapped = getattr(vector_env, "unwrapped", vector_env)
    vector = gym_backend("vector")
    return isinstance(unwrapped, (vector.SyncVectorEnv, vector.AsyncVectorEnv))
