"""A skipped step (ConditionalSkip) carries tensorclass entries over with their class."""

from __future__ import annotations

import torch
from tensordict import tensorclass

from tdrl.data import Composite, NonTensor
from tdrl.envs import ConditionalSkip, StepCounter, Transform, TransformedEnv
from tests.mocks import CountingEnv


@tensorclass
class Message:
    role: str
    content: str


class AppendMessage(Transform):
    """Keeps a growing list of messages under "history"; each step appends one."""

    def transform_observation_spec(self, observation_spec):
        observation_spec["history"] = Composite(
            role=NonTensor(example_data="user", shape=(-1,)),
            content=NonTensor(example_data="0", shape=(-1,)),
            shape=(-1,),
            data_cls=Message,
        )
        return observation_spec

    def _reset(self, tensordict, tensordict_reset):
        tensordict_reset["history"] = torch.stack([Message(role="system", content="0")])
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        history = tensordict["history"]
        # reading an attribute of the class fails if the entry lost it
        count = int(history.content[-1]) + 1
        new = Message(role="user", content=str(count))
        next_tensordict["history"] = torch.stack([*history.unbind(0), new])
        return next_tensordict


def _skipping_env():
    env = CountingEnv(max_steps=20).append_transform(AppendMessage())
    env = env.append_transform(ConditionalSkip(lambda td: (td["step_count"] % 3) == 2))
    return TransformedEnv(env, StepCounter())


def test_skipped_step_keeps_the_tensorclass_of_the_input():
    env = _skipping_env()
    data = env.rollout(9)
    assert data.batch_size == (9,)
    for t in range(9):
        assert isinstance(data[t]["next", "history"], Message)
    # a skipped step repeats the history; the others append one message
    lengths = [len(data[t]["next", "history"].content) for t in range(9)]
    assert lengths == [2, 3, 3, 4, 5, 5, 6, 7, 7]


def test_skipping_env_passes_its_spec_check():
    _skipping_env().check_env_specs()
