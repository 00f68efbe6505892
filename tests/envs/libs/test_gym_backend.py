from __future__ import annotations

import subprocess
import sys

import pytest

from tdrl import _utils
from tdrl._utils import implement_for
from tdrl.envs.libs.gym import GymEnv, gym_backend, set_gym_backend

gymnasium = pytest.importorskip("gymnasium")


def test_gym_backend_defaults_to_gymnasium():
    assert gym_backend() is gymnasium
    assert gym_backend("wrappers") is gymnasium.wrappers
    assert gym_backend("spaces").__name__ == "gymnasium.spaces"


def test_set_gym_backend_context_manager_by_module_and_name():
    with set_gym_backend(gymnasium):
        assert gym_backend() is gymnasium
        env = GymEnv("Pendulum-v1")
        assert type(env.unwrapped).__module__.startswith("gymnasium")
    with set_gym_backend("gymnasium") as setter:
        assert setter.backend is gymnasium
        assert gym_backend() is gymnasium


def test_set_gym_backend_restores_previous_backend_on_exit(monkeypatch):
    import tdrl.envs.libs._gym_backend as backend_module

    sentinel = type(sys)("fake_gym")
    with set_gym_backend(sentinel):
        assert gym_backend() is sentinel
        with set_gym_backend(gymnasium):
            assert gym_backend() is gymnasium
        assert gym_backend() is sentinel
    assert backend_module._current_backend is None
    assert gym_backend() is gymnasium


def test_set_gym_backend_as_decorator():
    sentinel = type(sys)("fake_gym")

    @set_gym_backend(sentinel)
    def current():
        return gym_backend()

    assert current() is sentinel
    assert gym_backend() is gymnasium


def test_set_gym_backend_set_makes_choice_global():
    import tdrl.envs.libs._gym_backend as backend_module

    try:
        set_gym_backend("gymnasium").set()
        assert backend_module._current_backend is gymnasium
        assert _utils._PREFERRED_MODULES[-1] == "gymnasium"
    finally:
        backend_module._set_current(None)
    assert "gymnasium" not in _utils._PREFERRED_MODULES


def test_set_gym_backend_errors():
    with pytest.raises(TypeError, match="expected a module, a module name or a callable"):
        set_gym_backend(3)
    with pytest.raises(ModuleNotFoundError, match="not installed"):
        with set_gym_backend("surely_not_a_gym_library"):
            pass
    with pytest.raises(TypeError, match="submodule: expected a str"):
        gym_backend(3)


def test_gymnasium_is_not_imported_with_tdrl():
    code = "import sys, tdrl, tdrl.envs; print('gymnasium' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "False"


# --------------------------------------------------------------------------- implement_for


def test_implement_for_picks_version_range():
    version = _utils._installed_version("gymnasium")

    @implement_for("gymnasium", None, "0.1")
    def fun():
        return "old"

    @implement_for("gymnasium", "0.1", None)
    def fun():  # noqa: F811
        return "new"

    @implement_for("surely_not_installed_pkg")
    def fun():  # noqa: F811
        return "missing"

    assert version is not None
    assert fun() == "new"
    assert fun.__name__ == "fun"


def test_implement_for_upper_bound_is_exclusive():
    version = _utils._installed_version("gymnasium")

    @implement_for("gymnasium", None, version)
    def bounded():
        return "below"

    @implement_for("gymnasium", version, None)
    def bounded():  # noqa: F811
        return "at or above"

    assert bounded() == "at or above"


def test_implement_for_no_match_raises_import_error():
    @implement_for("gymnasium", None, "0.0.1")
    def ancient():
        return 0

    with pytest.raises(ImportError, match=r"no implementation of .*ancient"):
        ancient()


def test_implement_for_methods_and_preferred_module():
    class Thing:
        @implement_for("torch")
        def which(self):
            return "torch"

        @implement_for("numpy")
        def which(self):  # noqa: F811
            return "numpy"

    assert Thing().which() == "numpy"
    _utils._PREFERRED_MODULES.append("torch")
    try:
        assert Thing().which() == "torch"
    finally:
        _utils._PREFERRED_MODULES.remove("torch")
    assert Thing().which() == "numpy"


def test_implement_for_validates_arguments():
    with pytest.raises(TypeError, match="module_name: expected a str"):
        implement_for(3)
    with pytest.raises(ValueError, match="cannot parse version"):
        implement_for("gymnasium", "abc")


def test_parse_version():
    assert _utils._parse_version("0.26.2") == (0, 26, 2)
    assert _utils._parse_version("1.0.0a1") == (1,)
    assert _utils._parse_version("1.1") > _utils._parse_version("1.0.9")
