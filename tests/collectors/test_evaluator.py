"""Evaluator: whole-episode metrics, blocking and background runs, weights, process backend."""

from __future__ import annotations

import threading

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.collectors import Evaluator
from tests.mocks import CountingEnv


def counting_env():
    return CountingEnv(max_steps=4)


def reward_policy():
    # CountingEnv's reward is the action: a bias-only policy sets the return directly
    module = torch.nn.Linear(4, 1)
    torch.nn.init.zeros_(module.weight)
    torch.nn.init.constant_(module.bias, 0.5)
    return TensorDictModule(module, ["observation"], ["action"])


def test_evaluate_reports_whole_episode_metrics():
    evaluator = Evaluator(counting_env, reward_policy(), num_trajectories=3, frames_per_batch=5)
    first = evaluator.evaluate()
    assert first["eval/num_episodes"] == 3
    assert first["eval/episode_length"] == 4.0
    assert first["eval/reward"] == pytest.approx(2.0)  # 4 steps x 0.5
    assert first["eval/fps"] > 0 and first["eval/step"] == 1
    # every evaluation starts from fresh resets and counts its step
    second = evaluator.evaluate(step=10)
    assert second["eval/episode_length"] == 4.0 and second["eval/step"] == 10
    evaluator.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        evaluator.evaluate()


def test_max_steps_truncates_and_weights_are_applied():
    policy = reward_policy()
    evaluator = Evaluator(CountingEnv(max_steps=100), policy, max_steps=3, metric_prefix="test")
    assert evaluator.evaluate()["test/episode_length"] == 3.0
    new = reward_policy()
    torch.nn.init.constant_(new.module.bias, -1.0)
    assert evaluator.evaluate(weights=new)["test/reward"] == pytest.approx(-3.0)
    weights = TensorDict.from_module(new).data.clone().apply(torch.zeros_like)
    assert evaluator.evaluate(weights=weights)["test/reward"] == 0.0
    evaluator.shutdown()


def test_background_evaluation_poll_wait_and_busy_policy():
    gate = threading.Event()

    def slow_policy(td):
        gate.wait(10)
        return td.set("action", torch.ones(*td.batch_size, 1))

    evaluator = Evaluator(counting_env, slow_policy)
    assert evaluator.poll() is None  # nothing pending
    evaluator.trigger_eval()
    assert evaluator.poll() is None  # not ready: the policy waits
    with pytest.raises(RuntimeError, match="still running"):
        evaluator.trigger_eval()
    gate.set()
    result = evaluator.wait(timeout=30)
    assert result["eval/reward"] == pytest.approx(4.0)
    evaluator.shutdown()

    queued = Evaluator(counting_env, slow_policy, busy_policy="queue")
    queued.trigger_eval(step=1)
    queued.trigger_eval(step=2)
    assert [queued.wait(30)["eval/step"], queued.wait(30)["eval/step"]] == [1, 2]
    queued.shutdown()


def test_on_result_receives_a_flat_tensordict():
    seen = []
    evaluator = Evaluator(counting_env, reward_policy(), on_result=seen.append)
    evaluator.evaluate()
    evaluator.trigger_eval()
    evaluator.wait(30)
    evaluator.shutdown()
    assert len(seen) == 2
    assert seen[1]["eval/step"].item() == 2
    assert seen[0]["eval/reward"].item() == pytest.approx(2.0)


def test_process_backend_runs_in_a_worker():
    evaluator = Evaluator(counting_env, policy_factory=reward_policy, backend="process")
    try:
        result = evaluator.evaluate()
        assert result["eval/episode_length"] == 4.0
        assert result["eval/reward"] == pytest.approx(2.0)
    finally:
        evaluator.shutdown()


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend: expected one of"):
        Evaluator(counting_env, backend="ray")
    with pytest.raises(ValueError, match="busy_policy: expected one of"):
        Evaluator(counting_env, busy_policy="drop")
    with pytest.raises(ValueError, match="num_trajectories: expected a positive int, got 0"):
        Evaluator(counting_env, num_trajectories=0)
    with pytest.raises(TypeError, match="backend='process' needs a callable"):
        Evaluator(CountingEnv(), backend="process")
