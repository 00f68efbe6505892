"""SyncDataCollector batches collected on the gym step plan's columnar path equal the generic ones."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.collectors import SyncDataCollector
from tdrl.envs.libs.gym import GymEnv, GymWrapper
from tdrl.envs.utils import ExplorationType
from tests.td_checks import assert_identical


class OneHotArgmax(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1])


class SampledActor(nn.Module):
    """Samples its action from its logits with the global generator; writes two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(observation)
        sample = torch.distributions.Categorical(logits=logits).sample()
        return nn.functional.one_hot(sample, 2), logits


def argmax_policy() -> TensorDictModule:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2), OneHotArgmax())
    return TensorDictModule(mlp, in_keys=["observation"], out_keys=["action"])


def sampled_policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(SampledActor(), in_keys=["observation"], out_keys=["action", "logits"])


def collect(make_policy, fast: bool, monkeypatch, between=None, **kwargs) -> list:
    """All batches of a collection, on the columnar path or with it turned off."""
    env = GymEnv("CartPole-v1")
    env.set_seed(5)
    torch.manual_seed(5)
    policy = make_policy()
    collector = SyncDataCollector(env, policy, **kwargs)
    batches = []
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(GymWrapper, "_policy_rollout", lambda self, *args: None)
        for index, batch in enumerate(collector):
            batches.append(batch)
            if between is not None:
                between(index, collector, policy)
    collector.shutdown()
    return batches


def assert_same_batches(make_policy, monkeypatch, results, between=None, **kwargs) -> list:
    fast = collect(make_policy, True, monkeypatch, between, **kwargs)
    calls = list(results)
    generic = collect(make_policy, False, monkeypatch, between, **kwargs)
    assert len(fast) == len(generic)
    for got, expected in zip(fast, generic):
        assert_identical(got, expected)
    return calls


@pytest.mark.parametrize("make_policy", [argmax_policy, sampled_policy], ids=["argmax", "sampled"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"split_trajs": True},
        {"reset_at_each_iter": True},
        {"set_truncated": True},
        {"exploration_type": ExplorationType.DETERMINISTIC},
    ],
    ids=["plain", "split_trajs", "reset_each_iter", "set_truncated", "exploration"],
)
def test_batches_equal_the_generic_loop(make_policy, options, columnar_results, monkeypatch):
    calls = assert_same_batches(
        make_policy,
        monkeypatch,
        columnar_results,
        frames_per_batch=70,
        total_frames=420,
        **options,
    )
    assert calls == ["TensorDict"] * 6


def test_trajectories_span_batch_boundaries(columnar_results, monkeypatch):
    batches = collect(argmax_policy, True, monkeypatch, frames_per_batch=30, total_frames=300)
    assert columnar_results == ["TensorDict"] * 10
    ids = torch.cat([batch["collector", "traj_ids"] for batch in batches])
    done = torch.cat([batch["next", "done"] for batch in batches]).squeeze(-1)
    # several episodes, some cut by a batch end: the id goes on in the next batch
    assert int(done.sum()) >= 2
    crossing = [
        index
        for index in range(1, len(batches))
        if batches[index]["collector", "traj_ids"][0]
        == batches[index - 1]["collector", "traj_ids"][-1]
    ]
    assert crossing
    # a new id after each done step, and only there
    starts = ids[1:] != ids[:-1]
    assert torch.equal(starts, done[:-1])


def test_init_random_frames_then_policy(columnar_results, monkeypatch):
    calls = assert_same_batches(
        sampled_policy,
        monkeypatch,
        columnar_results,
        frames_per_batch=50,
        total_frames=250,
        init_random_frames=100,
    )
    # the random batches take the generic loop; the policy's batches the columns
    assert calls == ["TensorDict"] * 3


def test_weight_updates_between_batches(columnar_results, monkeypatch):
    def update(index, collector, policy):
        weights = TensorDict.from_module(policy).clone()
        weights["module", "2", "bias"] = torch.tensor([3.0, -3.0]) * (-1) ** index
        collector.update_policy_weights_(weights)

    calls = assert_same_batches(
        argmax_policy,
        monkeypatch,
        columnar_results,
        between=update,
        frames_per_batch=40,
        total_frames=160,
    )
    assert calls == ["TensorDict"] * 4


def test_hooked_policy_runs_its_hook(columnar_results, monkeypatch):
    counts = []

    def hooked():
        policy = argmax_policy()
        counts.append(0)
        index = len(counts) - 1

        def hook(module, args):
            counts[index] += 1

        policy.register_forward_pre_hook(hook)
        return policy

    calls = assert_same_batches(
        hooked, monkeypatch, columnar_results, frames_per_batch=40, total_frames=120
    )
    assert calls == ["Handover"] * 3
    assert counts == [120, 120]
