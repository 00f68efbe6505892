"""FiniteTensorDictCheck."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import FiniteTensorDictCheck, GymEnv, TransformedEnv, check_env_specs
from tests.mocks import CountingEnv


class NanEnv(CountingEnv):
    """A counting env whose observation turns nan after ``bad_step`` steps."""

    def __init__(self, bad_step: int = 2, **kwargs):
        super().__init__(max_steps=100, **kwargs)
        self.bad_step = bad_step

    def _step(self, tensordict):
        out = super()._step(tensordict)
        if int(self.count.max()) >= self.bad_step:
            out["observation"] = out["observation"] * float("nan")
        return out


def test_finite_check_on_gym():
    env = TransformedEnv(GymEnv("CartPole-v1"), FiniteTensorDictCheck())
    check_env_specs(env)
    assert env.rollout(5).shape[0] >= 1
    env.close()


def test_finite_check_raises_on_step_naming_the_key():
    env = TransformedEnv(NanEnv(bad_step=2), FiniteTensorDictCheck())
    td = env.rand_step(env.reset())
    assert torch.isfinite(td["next", "observation"]).all()
    with pytest.raises(
        ValueError, match=r"Encountered a non-finite tensor at key \('next', 'observation'\).*4 non"
    ):
        env.rollout(5)


def test_finite_check_on_reset_and_forward():
    check = FiniteTensorDictCheck()
    data = TensorDict(
        {
            "a": torch.ones(2),
            "nested": {"b": torch.tensor([1.0, float("inf")])},
            "i": torch.ones(2, dtype=torch.int64),
        },
        [2],
    )
    with pytest.raises(ValueError, match=r"\('nested', 'b'\)"):
        check(data)
    with pytest.raises(ValueError, match="'a'"):
        check._reset(TensorDict(), TensorDict({"a": torch.tensor([float("nan")])}))
    finite = TensorDict({"a": torch.ones(2), "flag": torch.zeros(2, dtype=torch.bool)}, [2])
    assert check(finite) is finite
