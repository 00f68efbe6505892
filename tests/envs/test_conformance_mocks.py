import pytest
from tensordict import TensorDict

from tdrl.envs import AutoResetEnv
from tests.envs.conformance import EnvConformance
from tests.mocks import (
    AutoResettingCountingEnv,
    CountingEnv,
    EnvWithDynamicSpec,
    MultiAgentCountingEnv,
    StatelessCountingEnv,
    ZeroResetEnv,
)


class TestCountingEnv(EnvConformance):
    seeded = False

    def make_env(self):
        return CountingEnv()


class TestBatchedCountingEnv(EnvConformance):
    seeded = False

    def make_env(self):
        return CountingEnv(batch_size=(3,))


class TestStatelessCountingEnv(EnvConformance):
    seeded = False

    def make_env(self):
        return StatelessCountingEnv()

    def reset_input(self, env):
        return TensorDict(batch_size=[4])


class TestMultiAgentCountingEnv(EnvConformance):
    seeded = False

    def make_env(self):
        return MultiAgentCountingEnv(batch_size=(2,))


class TestZeroResetEnv(EnvConformance):
    seeded = False

    def make_env(self):
        return ZeroResetEnv()


class TestDynamicSpecEnv(EnvConformance):
    seeded = False
    contiguous = False

    def make_env(self):
        return EnvWithDynamicSpec()


class TestAutoResetEnv(EnvConformance):
    seeded = False

    def make_env(self):
        return AutoResetEnv(AutoResettingCountingEnv(max_steps=3, batch_size=(2,)))


@pytest.mark.parametrize("cls", [CountingEnv, ZeroResetEnv])
def test_mixin_requires_make_env(cls):
    class Incomplete(EnvConformance):
        pass

    with pytest.raises(NotImplementedError, match="make_env"):
        Incomplete().make_env()
