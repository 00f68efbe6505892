"""Partial steps of batched envs with non-tensor entries: skipped sub-envs keep their input."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData

from tdrl.data import NonTensor
from tdrl.envs import (
    ConditionalSkip,
    ParallelEnv,
    SerialEnv,
    StepCounter,
    Transform,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import CountingEnv


class _Describe(Transform):
    """Writes the observation as text under ``"text"``."""

    def _apply_transform(self, observation):
        return NonTensorData(f"at {int(observation[0])}")

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        observation_spec["text"] = NonTensor(example_data="at 0", shape=observation_spec.shape)
        return observation_spec


def _make():
    return TransformedEnv(
        CountingEnv(max_steps=100), _Describe(in_keys=["observation"], out_keys=["text"])
    )


@pytest.fixture(params=["serial", "parallel"])
def batched(request):
    cls = SerialEnv if request.param == "serial" else ParallelEnv
    env = cls(2, [_make, _make])
    yield env
    env.close(raise_if_closed=False)


@pytest.mark.parametrize("skipped", [0, 1])
def test_a_skipped_sub_env_keeps_its_non_tensor_input(batched, skipped):
    data = batched.reset()
    data["action"] = torch.ones(2, 1)
    mask = torch.ones(2, dtype=torch.bool)
    mask[skipped] = False
    data["_step"] = mask
    out = batched.step(data)["next"]
    # the key is there even when the first sub-env (whose keys used to be read) was skipped
    assert out["text"][skipped] == "at 0"
    assert out["text"][1 - skipped] == "at 1"


def test_conditional_skip_over_a_batched_env_keeps_text_and_data_aligned(batched):
    def odd_rows_on_even_steps(data):
        return (data["step_count"].squeeze(-1) + torch.tensor([0, 1])) % 2 == 0

    env = TransformedEnv(batched, ConditionalSkip(odd_rows_on_even_steps))
    env = TransformedEnv(env, StepCounter(), auto_unwrap=False)
    check_env_specs(env)
    policy = lambda data: data.set("action", torch.ones(2, 1))  # noqa: E731
    rollout = env.rollout(6, policy, break_when_any_done=False)
    for row in range(2):
        for t in range(6):
            for prefix in ((), ("next",)):
                value = int(rollout[(*prefix, "observation")][row, t, 0])
                assert rollout[(*prefix, "text")][row][t] == f"at {value}"
    # each sub-env moved on every other step
    assert rollout["next", "observation"][:, -1, 0].tolist() == [3, 3]
