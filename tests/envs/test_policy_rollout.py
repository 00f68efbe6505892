"""A policy rollout on the gym step plan's columnar path gives the generic loop's data, bit for bit."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs.libs.gym import GymEnv, GymWrapper
from tests.td_checks import assert_identical


class OneHotArgmax(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1])


def bench_policy() -> TensorDictModule:
    """The benchmark's policy: a 4-64-2 MLP writing the one-hot argmax action."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2), OneHotArgmax())
    return TensorDictModule(mlp, in_keys=["observation"], out_keys=["action"])


class ActionAndLogits(nn.Module):
    def __init__(self, action_first: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Linear(4, 2)
        self.action_first = action_first

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(observation)
        action = nn.functional.one_hot(logits.argmax(-1), 2)
        return (action, logits) if self.action_first else (logits, action)


class SampledActor(nn.Module):
    """Like a probabilistic actor: samples the action from its logits (global generator)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.net = nn.Linear(4, 2)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.net(observation)
        dist = torch.distributions.Categorical(logits=logits)
        sample = dist.sample()
        return logits, nn.functional.one_hot(sample, 2), dist.log_prob(sample)


class Counting(nn.Module):
    """Wraps a module and counts its calls."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.inner = module
        self.calls = 0

    def forward(self, *inputs: torch.Tensor):
        self.calls += 1
        return self.inner(*inputs)


def generic_rollout(env, steps, policy, monkeypatch, **kwargs):
    """The same rollout with the columnar path turned off."""
    with monkeypatch.context() as patch:
        patch.setattr(GymWrapper, "_policy_rollout", lambda self, *args: None)
        return env.rollout(steps, policy, **kwargs)


def both_paths(make_env, make_policy, steps, monkeypatch, seed=3, **kwargs):
    env = make_env()
    results = []
    for fast in (True, False):
        policy = make_policy()
        env.set_seed(seed)
        torch.manual_seed(seed)
        if fast:
            results.append(env.rollout(steps, policy, **kwargs))
        else:
            results.append(generic_rollout(env, steps, policy, monkeypatch, **kwargs))
    env.close()
    return results


def two_outputs(order):
    return lambda: TensorDictModule(
        ActionAndLogits(order[0] == "action"), in_keys=["observation"], out_keys=order
    )


def sampled_actor():
    return TensorDictModule(
        SampledActor(), in_keys=["observation"], out_keys=["logits", "action", "log_prob"]
    )


POLICIES = {
    "bench": bench_policy,
    "two_outputs": two_outputs(["action", "logits"]),
    "two_outputs_action_last": two_outputs(["logits", "action"]),
    "sampled": sampled_actor,
}
RUNS = [
    {"break_when_any_done": False},
    {},
    {"break_when_any_done": True, "set_truncated": True},
    {"break_when_any_done": False, "set_truncated": True},
]


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("kwargs", RUNS)
def test_policy_rollout_equals_generic_loop(policy, kwargs, columnar_results, monkeypatch):
    steps = 300
    fast, generic = both_paths(
        lambda: GymEnv("CartPole-v1"), POLICIES[policy], steps, monkeypatch, **kwargs
    )
    assert columnar_results == ["TensorDict"]
    assert_identical(fast, generic)
    ends = int(fast["next", "done"].sum())
    if kwargs.get("break_when_any_done", True):
        assert bool(fast["next", "done"][-1]) and ends == 1
    else:
        # several episodes end (and are reset) in the middle of the rollout
        assert len(fast) == steps and ends >= 2


def test_action_cast_to_the_spec_dtype_is_kept_as_written(columnar_results, monkeypatch):
    """A float64 action for a float32 Box: the step casts it, the data keeps the policy's."""

    def make_policy():
        torch.manual_seed(0)
        return TensorDictModule(
            nn.Sequential(nn.Linear(3, 1, dtype=torch.float64), nn.Tanh()),
            in_keys=["observation"],
            out_keys=["action"],
        )

    def policy_on_float32():
        policy = make_policy()
        module = policy.module
        return TensorDictModule(
            # quarters: float64 values a cast to float32 keeps
            lambda obs: torch.round(module(obs.double()) * 4) / 4,
            in_keys=["observation"],
            out_keys=["action"],
        )

    fast, generic = both_paths(
        lambda: GymEnv("Pendulum-v1"), policy_on_float32, 40, monkeypatch, break_when_any_done=False
    )
    assert columnar_results == ["TensorDict"]
    assert fast["action"].dtype == torch.float64
    assert_identical(fast, generic)


class NestedDictEnv(gymnasium.Env):
    """Nested Dict observations; an episode lasts 6 steps."""

    def __init__(self) -> None:
        box = gymnasium.spaces.Box
        self.observation_space = gymnasium.spaces.Dict(
            {
                "position": box(-10.0, 10.0, shape=(3,), dtype=np.float32),
                "sensors": gymnasium.spaces.Dict(
                    {"speed": box(-10.0, 10.0, shape=(2,), dtype=np.float32)}
                ),
            }
        )
        self.action_space = box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.t = 0

    def _obs(self):
        value = np.float32(self.t) + self.np_random.random(3).astype(np.float32)
        return {"position": value, "sensors": {"speed": value[:2] * 2}}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action.sum()), self.t % 6 == 0, False, {}


class Steer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.net = nn.Linear(5, 2)

    def forward(self, position: torch.Tensor, speed: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(torch.cat([position, speed], -1)))


@pytest.mark.parametrize("kwargs", RUNS)
def test_nested_observation_keys(kwargs, columnar_results, monkeypatch):
    def make_policy():
        return TensorDictModule(
            Steer(), in_keys=["position", ("sensors", "speed")], out_keys=["action"]
        )

    fast, generic = both_paths(
        lambda: GymWrapper(NestedDictEnv()), make_policy, 20, monkeypatch, **kwargs
    )
    assert columnar_results == ["TensorDict"]
    assert ("sensors", "speed") in fast.keys(True)
    assert_identical(fast, generic)


def test_given_initial_tensordict(columnar_results, monkeypatch):
    env = GymEnv("CartPole-v1")
    policy = bench_policy()
    env.set_seed(0)
    start = env.reset()
    fast = env.rollout(50, policy, auto_reset=False, tensordict=start.clone())
    env.set_seed(0)
    start = env.reset()
    generic = generic_rollout(env, 50, policy, monkeypatch, auto_reset=False, tensordict=start)
    assert columnar_results == ["TensorDict"]
    assert_identical(fast, generic)


@pytest.mark.parametrize(
    "case", ["extra_key", "reads_done", "callback", "lazy", "all_done", "non_module", "sequence"]
)
def test_generic_loop_runs_when_the_columns_would_differ(case, columnar_results):
    env = GymEnv("CartPole-v1")
    policy = bench_policy()
    kwargs = {"break_when_any_done": False}
    if case == "extra_key":
        start = env.reset()
        start.set("extra", torch.zeros(()))
        kwargs.update(auto_reset=False, tensordict=start)
    elif case == "reads_done":
        module = policy.module
        policy = TensorDictModule(
            lambda obs, done: module(obs), in_keys=["observation", "done"], out_keys=["action"]
        )
    elif case == "callback":
        kwargs["callback"] = lambda env, td: None
    elif case == "lazy":
        kwargs["return_contiguous"] = False
    elif case == "all_done":
        kwargs = {"break_when_all_done": True}
    elif case == "non_module":
        policy = env.rand_action
    elif case == "sequence":
        from tensordict.nn import TensorDictSequential

        policy = TensorDictSequential(policy)
    data = env.rollout(20, policy, **kwargs)
    assert columnar_results == []
    assert "extra" in data.keys() if case == "extra_key" else True
    env.close()


def test_step_override_on_the_class_runs(columnar_results):
    class Doubled(GymWrapper):
        def _step(self, tensordict):
            out = super()._step(tensordict)
            out.set("reward", out.get("reward") * 2)
            return out

    env = Doubled(gymnasium.make("CartPole-v1"))
    assert env.step_path.startswith("generic")
    data = env.rollout(20, bench_policy(), break_when_any_done=False)
    assert columnar_results == []
    assert set(data["next", "reward"].unique().tolist()) == {2.0}


def test_step_override_on_the_instance_runs(columnar_results):
    env = GymEnv("CartPole-v1")
    assert env.step_path == "fast"
    calls = []
    stock = env._step

    def traced(tensordict):
        calls.append(1)
        return stock(tensordict)

    env._step = traced
    assert env.step_path.startswith("generic")
    assert "generic" in repr(env)
    env.rollout(20, bench_policy(), break_when_any_done=False)
    assert columnar_results == []
    assert len(calls) == 20


def test_forward_pre_hook_runs(columnar_results, monkeypatch):
    seen = []

    def make_policy():
        policy = bench_policy()
        policy.register_forward_pre_hook(lambda module, args: seen.append(1))
        return policy

    fast, generic = both_paths(
        lambda: GymEnv("CartPole-v1"), make_policy, 30, monkeypatch, break_when_any_done=False
    )
    # handed to the generic loop before the first step
    assert columnar_results == ["Handover"]
    assert len(seen) == 60
    assert_identical(fast, generic)


class HookingMLP(nn.Module):
    """At its 8th call, registers a pre-hook on its policy that zeroes the observation."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.policy: list = []
        self.calls = 0
        self.hook_calls = 0

    def _hook(self, module, args):
        self.hook_calls += 1
        (tensordict,) = args
        tensordict.set("observation", tensordict.get("observation") * 0)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 8:
            self.policy[0].register_forward_pre_hook(self._hook)
        return self.inner(observation)


@pytest.mark.parametrize("steps", [12, 40])
def test_hook_registered_in_the_middle_of_a_rollout_runs(steps, columnar_results, monkeypatch):
    mlps = []

    def make_policy():
        mlp = HookingMLP(bench_policy().module)
        policy = TensorDictModule(mlp, in_keys=["observation"], out_keys=["action"])
        mlp.policy.append(policy)
        mlps.append(mlp)
        return policy

    fast, generic = both_paths(
        lambda: GymEnv("CartPole-v1"), make_policy, steps, monkeypatch, break_when_any_done=False
    )
    assert columnar_results == ["Handover"]
    assert [mlp.calls for mlp in mlps] == [steps, steps]
    assert [mlp.hook_calls for mlp in mlps] == [steps - 8, steps - 8]
    assert not fast["observation"][8:].any()
    assert_identical(fast, generic)


class DictOutputs(nn.Module):
    """Returns its output as a dict: the generic writer's case."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = bench_policy().module
        self.calls = 0

    def forward(self, observation: torch.Tensor) -> dict:
        self.calls += 1
        return {"action": self.mlp(observation)}


def test_outputs_other_than_tensors_are_written_generically(columnar_results, monkeypatch):
    modules = []

    def make_policy():
        modules.append(DictOutputs())
        return TensorDictModule(modules[-1], in_keys=["observation"], out_keys=["action"])

    fast, generic = both_paths(
        lambda: GymEnv("CartPole-v1"), make_policy, 25, monkeypatch, break_when_any_done=False
    )
    assert columnar_results == ["Handover"]
    # the module ran once per step on both paths
    assert [module.calls for module in modules] == [25, 25]
    assert_identical(fast, generic)


def test_error_of_the_module_carries_the_generic_context(columnar_results):
    class Failing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, observation):
            self.calls += 1
            if self.calls == 5:
                raise ValueError("bad observation")
            return torch.tensor([1, 0])

    env = GymEnv("CartPole-v1")
    policy = TensorDictModule(Failing(), in_keys=["observation"], out_keys=["action"])
    with pytest.raises(ValueError, match="bad observation") as info:
        env.rollout(20, policy, break_when_any_done=False)
    assert "TensorDictModule failed with operation" in str(info.value.__cause__)


def test_weights_changed_between_rollouts_are_used(columnar_results, monkeypatch):
    env = GymEnv("CartPole-v1")
    policy = bench_policy()
    env.set_seed(0)
    first = env.rollout(30, policy, break_when_any_done=False)
    with torch.no_grad():
        policy.module[2].bias.copy_(torch.tensor([5.0, -5.0]))
    env.set_seed(0)
    second = env.rollout(30, policy, break_when_any_done=False)
    env.set_seed(0)
    generic = generic_rollout(env, 30, policy, monkeypatch, break_when_any_done=False)
    assert columnar_results == ["TensorDict", "TensorDict"]
    assert not torch.equal(first["action"], second["action"])
    assert (second["action"][:, 0] == 1).all()
    assert_identical(second, generic)


def test_storing_device_applies(columnar_results):
    env = GymEnv("CartPole-v1")
    data = env.rollout(5, bench_policy(), storing_device="cpu")
    assert columnar_results == ["TensorDict"]
    assert data.device == torch.device("cpu")


@pytest.mark.parametrize("carried", [["logits"], ["action"], ["logits", "action"]])
def test_initial_tensordict_carrying_outputs_keeps_their_place(
    carried, columnar_results, monkeypatch
):
    """Outputs carried in the input keep their place in the root; the others follow."""
    env = GymEnv("CartPole-v1")
    make_policy = two_outputs(["action", "logits"])
    results = []
    for fast in (True, False):
        env.set_seed(1)
        start = env.reset()
        for key in carried:
            start.set(key, torch.zeros(2, dtype=torch.int64 if key == "action" else torch.float32))
        kwargs = {"auto_reset": False, "tensordict": start, "break_when_any_done": False}
        if fast:
            results.append(env.rollout(40, make_policy(), **kwargs))
        else:
            results.append(generic_rollout(env, 40, make_policy(), monkeypatch, **kwargs))
    assert columnar_results == ["TensorDict"]
    assert list(results[0].keys())[-2:] == [
        *carried,
        *(k for k in ["action", "logits"] if k not in carried),
    ]
    assert_identical(*results)


def test_random_rollout_stopped_by_a_done_step_is_not_marked_truncated(monkeypatch):
    env = GymEnv("CartPole-v1")
    env.set_seed(2)
    torch.manual_seed(2)
    fast = env.rollout(300, set_truncated=True)
    env.set_seed(2)
    torch.manual_seed(2)
    generic = env.rollout(300, lambda td: env.rand_action(td), set_truncated=True)
    assert len(fast) < 300
    assert not fast["next", "truncated"].any()
    assert_identical(fast, generic)


class HookingSteer(Steer):
    """At its 6th call (the last step of the first 6-step episode) registers a counting hook."""

    def __init__(self) -> None:
        super().__init__()
        self.policy: list = []
        self.calls = 0
        self.hook_calls = 0

    def _hook(self, module, args):
        self.hook_calls += 1

    def forward(self, position: torch.Tensor, speed: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 6:
            self.policy[0].register_forward_pre_hook(self._hook)
        return super().forward(position, speed)


def test_hand_over_right_after_a_reset(columnar_results, monkeypatch):
    """The generic loop takes over at the first step of an episode, after the reset."""
    modules = []

    def make_policy():
        module = HookingSteer()
        policy = TensorDictModule(
            module, in_keys=["position", ("sensors", "speed")], out_keys=["action"]
        )
        module.policy.append(policy)
        modules.append(module)
        return policy

    fast, generic = both_paths(
        lambda: GymWrapper(NestedDictEnv()), make_policy, 15, monkeypatch, break_when_any_done=False
    )
    assert columnar_results == ["Handover"]
    assert [module.hook_calls for module in modules] == [9, 9]
    assert bool(fast["next", "done"][5]) and not fast["done"].any()
    assert_identical(fast, generic)
