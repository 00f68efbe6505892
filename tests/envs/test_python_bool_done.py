"""A step that gives its done entries as python bools gets them in the spec's shape."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Categorical, Composite, Unbounded
from tdrl.envs import EnvBase, SerialEnv, StepCounter, TransformedEnv, check_env_specs


class PythonBoolDoneEnv(EnvBase):
    """Returns ``done`` / ``terminated`` as python bools (0-d tensors in a TensorDict)."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded((3,)))
        self.action_spec = Categorical(2, (1,), dtype=torch.bool)
        self.done_spec = Categorical(2, (1,), dtype=torch.bool)
        self.reward_spec = Unbounded((1,))
        self.steps = 0

    def _reset(self, tensordict=None):
        self.steps = 0
        return self.observation_spec.zero()

    def _step(self, tensordict):
        self.steps += 1
        ended = self.steps % 3 == 0
        return TensorDict(
            {
                "observation": torch.full((3,), float(self.steps)),
                "done": ended,
                "terminated": ended,
                "reward": torch.ones(1),
            }
        )

    def _set_seed(self, seed):
        pass


@pytest.mark.parametrize(
    "make",
    [
        PythonBoolDoneEnv,
        lambda: TransformedEnv(PythonBoolDoneEnv(), StepCounter()),
        lambda: SerialEnv(2, PythonBoolDoneEnv),
    ],
    ids=["plain", "transformed", "serial"],
)
def test_python_bool_done_entries_take_the_spec_shape(make):
    env = make()
    data = env.rollout(7, break_when_any_done=False)
    shape = (*env.batch_size, 7, 1)
    for key in ("done", "terminated"):
        assert data["next", key].shape == shape
        assert data["next", key].dtype == torch.bool
    # the flags kept their values: every third step ends an episode
    assert data["next", "done"].flatten().tolist()[:7] == [False, False, True] * 2 + [False]
    step = env.step(env.rand_action(env.reset()))
    assert step["next", "done"].shape == (*env.batch_size, 1)


class TruncatedDeclaredEnv(EnvBase):
    """Declares ``truncated`` in its constructor but never writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded(3))
        self.action_spec = Unbounded(1)
        self.done_spec = Categorical(2, (1,), dtype=torch.bool)
        self.full_done_spec["truncated"] = self.full_done_spec["terminated"].clone()
        self.reward_spec = Unbounded(1)

    def _reset(self, tensordict):
        return self.observation_spec.zero()

    def _step(self, tensordict):
        return TensorDict(
            {
                "observation": torch.ones(3),
                "done": False,
                "terminated": False,
                "reward": torch.ones(1),
            }
        )

    def _set_seed(self, seed):
        return seed


def test_a_declared_truncated_entry_the_env_does_not_write_reads_false():
    env = TruncatedDeclaredEnv()
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["next", "truncated"].shape == (3, 1)
    assert not rollout["next", "truncated"].any() and not rollout["truncated"].any()
