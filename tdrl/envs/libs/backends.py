"""The table of simulator backends tdrl wraps: what to import, what to install, how to build an env.

``tdrl info`` lists every row with whether its library is installed, and
``tdrl check-env --lib NAME ENV_ID`` builds ``ENV_ID`` with the row's builder. A wrapper module
that adds a backend registers it with :func:`register_backend`; nothing here imports a backend.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendModule",
    "backend_status",
    "make_backend_env",
    "register_backend",
]


class BackendModule:
    """Class (and instance) attribute giving a backend's module, imported when first read.

    Examples:
        >>> class Wrapper:
        ...     lib = BackendModule("json")
        >>> Wrapper.lib.__name__, Wrapper().lib.__name__
        ('json', 'json')
    """

    def __init__(self, module: str) -> None:
        self.module = module

    def __get__(self, instance: Any, owner: type) -> Any:
        return importlib.import_module(self.module)


@dataclass(frozen=True)
class Backend:
    """One simulator backend: its command-line name, import name, pip package and env builder.

    Args:
        name: the name given to ``tdrl check-env --lib``.
        module: the top-level module whose presence says the backend is installed.
        package: the pip distribution that provides ``module``.
        builder: ``"module:attribute"`` of a callable taking the env id (and keyword
            arguments) and returning a tdrl env; None when no wrapper exists yet.
        env_id_help: what an env id looks like for this backend, for error messages.

    Examples:
        >>> row = Backend("chess", "chess", "chess", "tdrl.envs.custom.chess:_make_from_id")
        >>> row.installed in (True, False)
        True
    """

    name: str
    module: str
    package: str
    builder: str | None = None
    env_id_help: str = ""

    @property
    def installed(self) -> bool:
        """Whether the backend's module can be imported (it is not imported)."""
        return importlib.util.find_spec(self.module) is not None

    @property
    def version(self) -> str | None:
        """The installed version of :attr:`package`, or None."""
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return None

    def build(self, env_id: str, **kwargs: Any) -> Any:
        """Build the env ``env_id`` with this backend's wrapper."""
        if self.builder is None:
            raise ValueError(f"backend {self.name!r}: tdrl has no env builder for it yet")
        module_name, _, attribute = self.builder.partition(":")
        builder: Callable[..., Any] = getattr(importlib.import_module(module_name), attribute)
        return builder(env_id, **kwargs)


#: Every backend by command-line name, in the order ``tdrl info`` lists them.
BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Add ``backend`` to :data:`BACKENDS` (replacing a row of the same name) and return it.

    Examples:
        >>> row = register_backend(Backend("my_sim", "my_sim", "my-sim"))
        >>> BACKENDS["my_sim"].package
        'my-sim'
        >>> del BACKENDS["my_sim"]
    """
    if not isinstance(backend, Backend):
        raise TypeError(f"register_backend: expected a Backend, got {type(backend).__name__}")
    BACKENDS[backend.name] = backend
    return backend


def backend_status() -> list[tuple[str, bool, str | None, str]]:
    """``(name, installed, version, pip package)`` for every registered backend.

    Examples:
        >>> ("gymnasium", True) in [(name, found) for name, found, _, _ in backend_status()]
        True
    """
    return [
        (row.name, row.installed, row.version if row.installed else None, row.package)
        for row in BACKENDS.values()
    ]


def make_backend_env(name: str, env_id: str, **kwargs: Any) -> Any:
    """Build ``env_id`` with the backend ``name`` (see :data:`BACKENDS`).

    Raises:
        ValueError: ``name`` is not a registered backend.
        ImportError: the backend's library is not installed.
    """
    row = BACKENDS.get(name)
    if row is None:
        raise ValueError(f"--lib: expected one of {sorted(BACKENDS)}, got {name!r}")
    if not row.installed:
        raise ImportError(
            f"backend {name!r} needs the {row.module!r} module (pip install {row.package})"
        )
    return row.build(env_id, **kwargs)


def _old_gym_env(env_id: str, **kwargs: Any) -> Any:
    """``GymEnv(env_id)`` built with the pre-gymnasium ``gym`` package."""
    from tdrl.envs.libs.gym import GymEnv, set_gym_backend

    with set_gym_backend("gym"):
        return GymEnv(env_id, **kwargs)


_LIBS = "tdrl.envs.libs"
for _row in (
    Backend("gymnasium", "gymnasium", "gymnasium", f"{_LIBS}.gym:GymEnv", "a registered id"),
    Backend("gym", "gym", "gym", f"{_LIBS}.backends:_old_gym_env", "a registered id"),
    Backend(
        "dm_control",
        "dm_control",
        "dm_control",
        f"{_LIBS}.dm_control:_make_from_id",
        "DOMAIN/TASK, e.g. cheetah/run",
    ),
    Backend("mujoco", "mujoco", "mujoco", f"{_LIBS}.gym:GymEnv", "a gymnasium MuJoCo id"),
    Backend("mo_gymnasium", "mo_gymnasium", "mo-gymnasium", f"{_LIBS}.mo_gym:MOGymEnv"),
    Backend("envpool", "envpool", "envpool", f"{_LIBS}.envpool:_make_from_id"),
    Backend("jumanji", "jumanji", "jumanji", f"{_LIBS}.jumanji:JumanjiEnv", "e.g. Snake-v1"),
    Backend("brax", "brax", "brax", f"{_LIBS}.brax:BraxEnv", "e.g. fast, ant"),
    Backend("pettingzoo", "pettingzoo", "pettingzoo"),
    Backend("mpe2", "mpe2", "mpe2"),
    Backend("vmas", "vmas", "vmas"),
    Backend("open_spiel", "pyspiel", "open_spiel"),
    Backend("meltingpot", "meltingpot", "dm-meltingpot"),
    Backend("smacv2", "smacv2", "smacv2"),
    Backend("isaacgym", "isaacgym", "isaacgym", f"{_LIBS}.isaacgym:IsaacGymEnv", "a task name"),
    Backend("isaaclab", "isaaclab", "isaaclab", f"{_LIBS}.isaac_lab:_make_from_id"),
    Backend("habitat", "habitat", "habitat-lab", f"{_LIBS}.habitat:HabitatEnv"),
    Backend(
        "unity_mlagents",
        "mlagents_envs",
        "mlagents-envs",
        f"{_LIBS}.unity_mlagents:_make_from_id",
        "a registered name, e.g. 3DBall",
    ),
    Backend("robohive", "robohive", "robohive", f"{_LIBS}.robohive:RoboHiveEnv"),
    Backend("openml", "sklearn", "scikit-learn", f"{_LIBS}.openml:OpenMLEnv", "e.g. adult_num"),
    Backend("chess", "chess", "chess", "tdrl.envs.custom.chess:_make_from_id", "chess"),
):
    register_backend(_row)
del _row
