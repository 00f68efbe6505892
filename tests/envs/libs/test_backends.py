from __future__ import annotations

import importlib

import pytest

from tdrl.envs.libs.backends import (
    BACKENDS,
    Backend,
    backend_status,
    make_backend_env,
    register_backend,
)


def test_every_builder_points_at_a_callable():
    for row in BACKENDS.values():
        if row.builder is None:
            continue
        module_name, _, attribute = row.builder.partition(":")
        assert callable(getattr(importlib.import_module(module_name), attribute)), row.name


def test_status_reports_installed_versions():
    status = {name: (found, version) for name, found, version, _ in backend_status()}
    assert status["gymnasium"][0] is True and status["gymnasium"][1]
    assert status["isaacgym"] == (False, None)


def test_register_backend_adds_and_replaces_rows():
    row = register_backend(Backend("fake_sim", "json", "fake-sim", "tdrl.envs.libs.gym:GymEnv"))
    try:
        assert BACKENDS["fake_sim"] is row and row.installed
        env = make_backend_env("fake_sim", "CartPole-v1")
        assert type(env).__name__ == "GymEnv"
        env.close()
        with pytest.raises(TypeError, match="expected a Backend"):
            register_backend("fake_sim")
    finally:
        del BACKENDS["fake_sim"]


def test_make_backend_env_errors_name_the_backend():
    with pytest.raises(ValueError, match="expected one of"):
        make_backend_env("no_such_backend", "x")
    with pytest.raises(ImportError, match="pip install isaacgym"):
        make_backend_env("isaacgym", "Ant")
    register_backend(Backend("no_builder", "json", "json"))
    try:
        with pytest.raises(ValueError, match="no env builder"):
            make_backend_env("no_builder", "x")
    finally:
        del BACKENDS["no_builder"]


def test_wrappers_give_their_backend_module_on_the_class():
    chess = pytest.importorskip("chess")
    from tdrl.envs import ChessEnv, MultiThreadedEnvWrapper

    assert ChessEnv.lib is chess
    envpool = pytest.importorskip("envpool")
    assert MultiThreadedEnvWrapper.lib is envpool
