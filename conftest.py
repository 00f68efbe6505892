"""Doctest collection: examples of optional-backend wrappers run only where the backend is installed."""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")  # dm_control renders headless

#: Module of tdrl -> the import name of the optional backend its examples run.
DOCTEST_BACKENDS = {
    "tdrl.envs.custom.chess": "chess",
    "tdrl.envs.libs.dm_control": "dm_control",
    "tdrl.envs.libs.mo_gym": "mo_gymnasium",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the doctests of modules whose backend is missing (they run wherever it installs)."""
    for item in items:
        if not isinstance(item, pytest.DoctestItem):
            continue
        for module, backend in DOCTEST_BACKENDS.items():
            name = item.dtest.name
            if (name == module or name.startswith(module + ".")) and (
                importlib.util.find_spec(backend) is None
            ):
                item.add_marker(pytest.mark.skip(reason=f"{backend} is not installed"))
