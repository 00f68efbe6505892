"""MacroPrimitiveTransform and the macro-action builders."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Categorical, Composite
from tdrl.envs import (
    Compose,
    HumanoidMacroAction,
    MacroPrimitive,
    MacroPrimitiveTransform,
    MultiAction,
    StepCounter,
    TargetMacroAction,
    TransformedEnv,
    check_env_specs,
)
from tests.mocks import CountingEnv


def _expand(transform, action, **entries):
    batch = action.batch_size if isinstance(action, TensorDict) else action.shape[:-1]
    return transform.inv(TensorDict({"action": action, **entries}, batch))["action"]


def test_move_interpolates_from_zero_and_settles():
    t = MacroPrimitiveTransform(action_dim=3, macro_steps=4, settle_steps=2)
    target = torch.arange(3.0).view(1, 3)
    sequence = _expand(t, TargetMacroAction.move(target, steps=4, settle_steps=2))
    assert sequence.shape == (1, 6, 3)
    torch.testing.assert_close(sequence[:, 0], target / 4)
    for step in (3, 4, 5):
        torch.testing.assert_close(sequence[:, step], target)
    # a plain tensor is a move with the transform's own counts
    raw = _expand(t, torch.ones(2, 3))
    assert raw.shape == (2, 6, 3) and raw[:, 0].tolist() == [[0.25] * 3] * 2


def test_wait_holds_the_current_action_and_modes_mix():
    t = MacroPrimitiveTransform(action_dim=2, macro_steps=2, current_action_key="qpos")
    wait = TargetMacroAction.wait(action_dim=2, steps=2, batch_size=[1])
    assert torch.equal(_expand(t, wait), torch.zeros(1, 2, 2))
    current = torch.tensor([[1.0, 2.0]])
    assert torch.equal(_expand(t, wait, qpos=current), current.unsqueeze(1).expand(1, 2, 2))
    mixed = TensorDict(
        {
            "mode": torch.tensor([[int(MacroPrimitive.MOVE)], [int(MacroPrimitive.WAIT)]]),
            "target": torch.full((2, 2), 4.0),
            "steps": torch.tensor([[2], [2]]),
        },
        [2],
    )
    sequence = _expand(t, mixed, qpos=torch.zeros(2, 2))
    assert sequence[0].tolist() == [[2.0, 2.0], [4.0, 4.0]]
    assert sequence[1].tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_action_counts_override_the_defaults_and_nested_keys():
    t = MacroPrimitiveTransform(action_dim=4, macro_steps=2, action_key=("agent", "action"))
    action = HumanoidMacroAction.reach_control(torch.ones(1, 4), steps=3, settle_steps=1)
    out = t.inv(TensorDict({("agent", "action"): action}, [1]))["agent", "action"]
    assert out.shape == (1, 4, 4)
    assert torch.equal(out[:, 2], torch.ones(1, 4)) and torch.equal(out[:, 3], torch.ones(1, 4))


def test_input_spec_exposes_mode_and_target():
    t = MacroPrimitiveTransform(action_dim=5, macro_steps=2)
    spec = t.transform_input_spec(Composite(shape=(1,)))["full_action_spec"]
    assert spec["action", "mode"] == Categorical(2, (1, 1))
    assert spec["action", "target"].shape == (1, 5)
    modes = {int(spec["action", "mode"].rand().item()) for _ in range(100)}
    assert modes == {int(MacroPrimitive.WAIT), int(MacroPrimitive.MOVE)}


def test_macro_actions_run_through_multi_action():
    env = TransformedEnv(
        CountingEnv(max_steps=100),
        Compose(
            StepCounter(step_count_key="base_steps"), MultiAction(), MacroPrimitiveTransform(1)
        ),
    )
    assert set(env.full_action_spec["action"].keys()) == {"mode", "target"}
    assert env.full_action_spec["action", "target"].shape == (1,)
    check_env_specs(env)

    def policy(td):
        return td.set("action", TargetMacroAction.move(torch.ones(1), steps=3))

    rollout = env.rollout(2, policy)
    assert rollout["next", "base_steps"].reshape(-1).tolist() == [3, 6]
    # CountingEnv rewards its action: the interpolated 1/3, 2/3, 1
    torch.testing.assert_close(
        rollout["next", "reward"][0].reshape(-1), torch.tensor([1 / 3, 2 / 3, 1.0])
    )


def test_macro_errors():
    t = MacroPrimitiveTransform(action_dim=3)
    with pytest.raises(RuntimeError, match="no action"):
        t.inv(TensorDict(batch_size=[1]))
    with pytest.raises(ValueError, match="action_dim"):
        MacroPrimitiveTransform(action_dim=0)
    uneven = TensorDict({"target": torch.zeros(2, 3), "steps": torch.tensor([[1], [2]])}, [2])
    with pytest.raises(ValueError, match="same steps"):
        _expand(t, uneven)
