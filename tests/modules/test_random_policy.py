import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.data import Bounded
from tdrl.envs import PendulumEnv
from tdrl.envs.utils import RandomPolicy as EnvsRandomPolicy
from tdrl.modules import RandomPolicy


def test_same_class_from_every_import_path():
    assert EnvsRandomPolicy is RandomPolicy


def test_policy_without_spec_refuses_to_act():
    policy = RandomPolicy()
    assert policy.action_spec is None
    with pytest.raises(RuntimeError, match="action_spec is not set"):
        policy(TensorDict())


def test_spec_taken_from_env_once():
    env = PendulumEnv()
    policy = RandomPolicy()
    policy.set_action_spec_from_env(env)
    first = policy.action_spec
    assert first is env.full_action_spec
    policy.set_action_spec_from_env(PendulumEnv())
    assert policy.action_spec is first
    action = policy(TensorDict())["action"]
    assert env.action_spec.is_in(action)


def test_given_spec_is_not_replaced_by_env():
    spec = Bounded(-0.5, 0.5, (1,))
    policy = RandomPolicy(spec)
    policy.set_action_spec_from_env(PendulumEnv())
    assert policy.action_spec is spec
    assert policy(TensorDict())["action"].abs().max() <= 0.5


def test_collector_runs_a_spec_less_policy_after_setting_it():
    env = PendulumEnv()
    policy = RandomPolicy()
    policy.set_action_spec_from_env(env)
    collector = SyncDataCollector(env, policy, frames_per_batch=4, total_frames=4)
    batch = next(iter(collector))
    assert batch["action"].shape == (4, 1)
    assert torch.isfinite(batch["next", "reward"]).all()
    collector.shutdown()
