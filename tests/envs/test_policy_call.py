"""The policy call of the step loops gives exactly the data of ``policy(tensordict)``."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, assert_close
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
    set_skip_existing,
)
from torch import nn

from tdrl.collectors import SyncDataCollector
from tdrl.envs import SerialEnv
from tdrl.envs._policy_call import ModuleCall, policy_caller
from tdrl.envs.libs.gym import GymEnv


class OneHotArgmax(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1])


class ActionAndLogits(nn.Module):
    """Returns two outputs: the one-hot action and the logits it came from."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(observation)
        return nn.functional.one_hot(logits.argmax(-1), 2), logits


class ShiftedForward(TensorDictModule):
    """A subclass whose forward adds an entry after the generic call."""

    def forward(self, tensordict, *args, **kwargs):
        out = super().forward(tensordict, *args, **kwargs)
        out.set("shifted", out.get("action").float() + 1)
        return out


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2), OneHotArgmax())


def plain_policy() -> TensorDictModule:
    return TensorDictModule(mlp(), in_keys=["observation"], out_keys=["action"])


def generic(policy):
    """The same policy behind a plain function: the step loops call it as ``policy(td)``."""
    return lambda td: policy(td)


def cartpole_rollout(policy, steps=60, batched=False):
    env = SerialEnv(2, lambda: GymEnv("CartPole-v1")) if batched else GymEnv("CartPole-v1")
    env.set_seed(3)
    data = env.rollout(steps, policy, break_when_any_done=False)
    env.close()
    return data


def assert_same(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a.get(key), b.get(key)), key
        assert a.get(key).dtype == b.get(key).dtype, key


def probabilistic_actor():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(
            in_keys=["logits"],
            out_keys=["action"],
            distribution_class=torch.distributions.OneHotCategorical,
            return_log_prob=True,
        ),
    )


def test_a_plain_module_gets_the_direct_call():
    assert type(policy_caller(plain_policy())) is ModuleCall


@pytest.mark.parametrize(
    "make",
    [
        lambda: ShiftedForward(mlp(), in_keys=["observation"], out_keys=["action"]),
        lambda: TensorDictSequential(plain_policy()),
        probabilistic_actor,
        lambda: TensorDictModule(mlp(), in_keys={"observation": "observation"}, out_keys="action"),
        lambda: TensorDictModule(
            mlp(), in_keys=["observation"], out_keys=["action"], inplace=False
        ),
        lambda: TensorDictModule(
            ActionAndLogits(), ["observation"], ["action", "logits"]
        ).select_out_keys("action"),
        lambda: TensorDictModule(mlp(), in_keys=["observation"], out_keys=["_"]),
    ],
    ids=[
        "subclass-forward",
        "sequential",
        "probabilistic",
        "dict-in-keys",
        "not-inplace",
        "selected-out-keys",
        "ignored-output",
    ],
)
def test_other_policies_are_called_as_they_are(make):
    policy = make()
    assert policy_caller(policy) is policy


def test_an_instance_forward_override_keeps_the_generic_call():
    policy = plain_policy()
    policy.forward = lambda td: td.set("action", torch.zeros(2, dtype=torch.long))
    assert policy_caller(policy) is policy


@pytest.mark.parametrize("batched", [False, True], ids=["single", "serial"])
def test_the_direct_call_rollout_equals_the_generic_call_bit_for_bit(batched):
    policy = plain_policy()
    assert_same(
        cartpole_rollout(policy, batched=batched),
        cartpole_rollout(generic(policy), batched=batched),
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: TensorDictModule(ActionAndLogits(), ["observation"], ["action", "logits"]),
        lambda: TensorDictModule(
            ActionAndLogits(), ["observation"], ["action", ("extra", "logits")]
        ),
        lambda: ShiftedForward(mlp(), in_keys=["observation"], out_keys=["action"]),
        lambda: TensorDictSequential(plain_policy()),
    ],
    ids=["two-outputs", "nested-out-key", "subclass-forward", "sequential"],
)
def test_rollouts_of_other_modules_equal_the_generic_call(make):
    torch.manual_seed(1)
    policy = make()
    assert_same(cartpole_rollout(policy), cartpole_rollout(generic(policy)))


def test_a_probabilistic_actor_rollout_equals_the_generic_call():
    policy = probabilistic_actor()
    with set_interaction_type(InteractionType.RANDOM):
        torch.manual_seed(5)
        fast = cartpole_rollout(policy)
        torch.manual_seed(5)
        slow = cartpole_rollout(generic(policy))
    assert_same(fast, slow)
    assert "sample_log_prob" in fast.keys() or "action_log_prob" in fast.keys()


def test_nested_input_keys_are_read_like_the_generic_call():
    policy = TensorDictModule(
        nn.Linear(3, 2), in_keys=[("agent", "obs")], out_keys=[("agent", "act")]
    )
    call = policy_caller(policy)
    assert type(call) is ModuleCall
    td = TensorDict(agent=TensorDict(obs=torch.randn(5, 3), batch_size=[5]), batch_size=[5])
    assert_same(call(td.clone()), policy(td.clone()))


def test_a_hook_registered_after_the_choice_still_runs():
    policy = plain_policy()
    call = policy_caller(policy)
    calls = []

    def add_one(module, args, output):
        calls.append(1)
        output.set("action", output.get("action") + 1)
        return output

    policy.register_forward_hook(add_one)
    td = call(TensorDict(observation=torch.zeros(4)))
    assert calls == [1]
    expected = policy(TensorDict(observation=torch.zeros(4)))
    assert calls == [1, 1]
    assert_same(td, expected)


def test_a_policy_hook_runs_at_every_rollout_step():
    policy = plain_policy()
    seen = []
    policy.register_forward_pre_hook(lambda module, args: seen.append(args[0]["observation"]))
    data = cartpole_rollout(policy, steps=25)
    assert len(seen) == 25
    assert torch.equal(torch.stack(seen), data["observation"])


def test_a_global_module_hook_runs():
    policy = plain_policy()
    call = policy_caller(policy)
    seen = []
    handle = nn.modules.module.register_module_forward_hook(
        lambda module, args, output: seen.append(type(module).__name__)
    )
    try:
        call(TensorDict(observation=torch.zeros(4)))
    finally:
        handle.remove()
    assert "TensorDictModule" in seen


def test_skip_existing_is_honoured():
    policy = plain_policy()
    call = policy_caller(policy)
    action = torch.tensor([7, 7])
    td = TensorDict(observation=torch.zeros(4), action=action)
    with set_skip_existing(True):
        out = call(td)
    assert out["action"] is action


def test_errors_are_those_of_the_generic_call():
    policy = plain_policy()
    call = policy_caller(policy)
    with pytest.raises(RuntimeError) as fast:
        call(TensorDict(observation=torch.zeros(5)))
    with pytest.raises(RuntimeError) as slow:
        policy(TensorDict(observation=torch.zeros(5)))
    assert str(fast.value) == str(slow.value)
    assert str(fast.value.__cause__) == str(slow.value.__cause__)
    with pytest.raises(KeyError) as fast_missing:
        call(TensorDict(other=torch.zeros(4)))
    with pytest.raises(KeyError) as slow_missing:
        policy(TensorDict(other=torch.zeros(4)))
    assert str(fast_missing.value) == str(slow_missing.value)


@pytest.mark.parametrize("reset_when_done", [True, False])
def test_the_collector_data_equals_the_generic_call(reset_when_done):
    def collect(policy):
        env = GymEnv("CartPole-v1")
        env.set_seed(0)
        collector = SyncDataCollector(
            env,
            policy,
            frames_per_batch=50,
            total_frames=150,
            reset_when_done=reset_when_done,
        )
        batches = [batch.clone() for batch in collector]
        collector.shutdown()
        return torch.cat(batches)

    policy = plain_policy()
    assert_same(collect(policy), collect(generic(policy)))


def test_an_instance_step_override_runs_with_the_direct_call():
    env = GymEnv("CartPole-v1")

    def failing(tensordict):
        raise RuntimeError("instance-level _step ran")

    env._step = failing
    with pytest.raises(RuntimeError, match="instance-level _step ran"):
        env.rollout(5, plain_policy())


def test_assert_close_of_the_two_paths_on_a_batch():
    policy = plain_policy()
    td = TensorDict(observation=torch.randn(8, 4), batch_size=[8])
    assert_close(policy_caller(policy)(td.clone()), policy(td.clone()))
