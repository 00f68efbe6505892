"""EnvBase.auto_specs_: specs inferred from one reset and one step."""

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Composite, NonTensor
from tdrl.envs import EnvBase, check_env_specs


class UnspecifiedEnv(EnvBase):
    """Declares no specs: a float position, an int counter and a text label."""

    def __init__(self, batch_size=(), done=True):
        super().__init__(batch_size=batch_size)
        self.with_done = done

    def _reset(self, tensordict=None):
        shape = self.batch_size
        return TensorDict(
            position=torch.zeros(*shape, 3),
            counter=torch.zeros(*shape, 1, dtype=torch.int64),
            batch_size=shape,
        ).set_non_tensor("label", "start")

    def _step(self, tensordict):
        shape = self.batch_size
        out = TensorDict(
            position=tensordict["position"] + tensordict["push"].sum(-1, keepdim=True),
            counter=tensordict["counter"] + 1,
            reward=torch.ones(*shape, 1),
            batch_size=shape,
        ).set_non_tensor("label", "moved")
        if self.with_done:
            out["done"] = out["counter"] >= 3
        return out

    def _set_seed(self, seed):
        pass


def _push(data):
    return data.set("push", torch.full((*data.batch_size, 2), 0.5))


@pytest.mark.parametrize("batch_size", [(), (4,)])
def test_specs_are_inferred_and_pass_the_checks(batch_size):
    env = UnspecifiedEnv(batch_size)
    env.auto_specs_(_push, action_key="push", observation_key=["position", "counter", "label"])
    assert env.action_keys == ["push"] and env.action_spec.shape == (*batch_size, 2)
    assert env.observation_spec["counter"].dtype == torch.int64
    assert isinstance(env.observation_spec["label"], NonTensor)
    assert env.reward_spec.shape == (*batch_size, 1)
    assert env.done_keys == ["done", "terminated"]  # "terminated" completed from "done"
    check_env_specs(env)
    data = env.rollout(5, _push)
    assert data.batch_size == (*batch_size, 3)  # done after 3 steps


def test_an_env_without_done_entries_gets_a_done_pair():
    env = UnspecifiedEnv(done=False)
    env.auto_specs_(_push, action_key="push", observation_key="position")
    assert isinstance(env.full_done_spec, Composite)
    assert env.done_keys == ["done", "terminated"]
    assert env.rollout(4, _push, break_when_any_done=False).batch_size == (4,)


def test_a_missing_key_is_named():
    env = UnspecifiedEnv()
    with pytest.raises(KeyError, match=r"observation keys \['speed'\]"):
        env.auto_specs_(_push, action_key="push", observation_key="speed")
