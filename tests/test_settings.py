import os
import subprocess
import sys
import warnings

import pytest

import tdrl
from tdrl import _settings, _utils
from tdrl.envs import PendulumEnv, RewardScaling, SerialEnv, StepCounter, TransformedEnv
from tests.mocks import EnvWithDynamicSpec

VAR = "AUTO_UNWRAP_TRANSFORMED_ENV"


@pytest.fixture
def no_unwrap_setting(monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    monkeypatch.setattr(_settings, "_AUTO_UNWRAP", None)


def _nested():
    inner = TransformedEnv(PendulumEnv(), RewardScaling(0.0, 2.0))
    return inner, TransformedEnv(inner, StepCounter())


def test_names_are_exported_where_users_import_them():
    assert tdrl.set_auto_unwrap_transformed_env is _settings.set_auto_unwrap_transformed_env
    assert _utils.set_auto_unwrap_transformed_env is _settings.set_auto_unwrap_transformed_env
    assert _utils.auto_unwrap_transformed_env is _settings.auto_unwrap_transformed_env
    assert _utils.rl_warnings is _settings.rl_warnings
    assert isinstance(_utils.RL_WARNINGS, bool)


def test_default_keeps_nested_transformed_envs(no_unwrap_setting):
    assert tdrl.auto_unwrap_transformed_env() is False
    assert tdrl.auto_unwrap_transformed_env(allow_none=True) is None
    inner, env = _nested()
    assert env.base_env is inner


def test_context_manager_folds_and_restores(no_unwrap_setting):
    inner, _ = _nested()
    with tdrl.set_auto_unwrap_transformed_env(True):
        assert os.environ[VAR] == "True"
        env = TransformedEnv(inner, StepCounter())
        with tdrl.set_auto_unwrap_transformed_env(False):
            assert tdrl.auto_unwrap_transformed_env() is False
            assert os.environ[VAR] == "False"
        assert tdrl.auto_unwrap_transformed_env() is True
    assert VAR not in os.environ
    assert tdrl.auto_unwrap_transformed_env(allow_none=True) is None
    assert isinstance(env.base_env, PendulumEnv)
    assert [type(t).__name__ for t in env.transform] == ["RewardScaling", "StepCounter"]
    # the folded transforms are copies: the inner env keeps its own
    assert env.transform[0] is not inner.transform


def test_explicit_argument_beats_the_setting(no_unwrap_setting):
    inner, _ = _nested()
    with tdrl.set_auto_unwrap_transformed_env(True):
        assert TransformedEnv(inner, StepCounter(), auto_unwrap=False).base_env is inner


def test_decorator_form(no_unwrap_setting):
    @tdrl.set_auto_unwrap_transformed_env(True)
    def build():
        return tdrl.auto_unwrap_transformed_env()

    assert build() is True
    assert build() is True  # reusable
    assert tdrl.auto_unwrap_transformed_env(allow_none=True) is None


def test_previous_variable_value_is_restored(monkeypatch):
    monkeypatch.setattr(_settings, "_AUTO_UNWRAP", None)
    monkeypatch.setenv(VAR, "1")
    assert tdrl.auto_unwrap_transformed_env() is True
    with tdrl.set_auto_unwrap_transformed_env(False):
        pass
    assert os.environ[VAR] == "1"


def test_variable_reaches_child_processes(no_unwrap_setting):
    code = "import tdrl; print(tdrl.auto_unwrap_transformed_env())"
    with tdrl.set_auto_unwrap_transformed_env(True):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_bad_values_are_named(monkeypatch):
    with pytest.raises(TypeError, match="mode: expected a bool, got str"):
        tdrl.set_auto_unwrap_transformed_env("yes")
    monkeypatch.setattr(_settings, "_AUTO_UNWRAP", None)
    monkeypatch.setenv(VAR, "maybe")
    with pytest.raises(ValueError, match=f"{VAR}: expected a boolean.*got 'maybe'"):
        tdrl.auto_unwrap_transformed_env()


@pytest.mark.parametrize(("text", "expected"), [("0", False), ("off", False), ("TRUE", True)])
def test_rl_warnings_reads_the_variable(monkeypatch, text, expected):
    monkeypatch.setenv("RL_WARNINGS", text)
    assert _utils.rl_warnings() is expected


def test_rl_warnings_off_silences_advisory_warnings(monkeypatch):
    monkeypatch.setenv("RL_WARNINGS", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = SerialEnv(2, EnvWithDynamicSpec)
    env.close()
    monkeypatch.setenv("RL_WARNINGS", "1")
    with pytest.warns(UserWarning, match="dynamic"):
        env = SerialEnv(2, EnvWithDynamicSpec)
    env.close()
