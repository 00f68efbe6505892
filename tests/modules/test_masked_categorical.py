"""MaskedCategorical, alone and in the masked-actions policy of the docs."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
)
from torch import nn

from tdrl.envs import ActionMask, TicTacToeEnv, TransformedEnv
from tdrl.modules import MaskedCategorical


def test_masked_outcomes_are_never_sampled():
    mask = torch.tensor([[True, False, True, False], [False, False, False, True]])
    dist = MaskedCategorical(logits=torch.randn(2, 4), mask=mask)
    sample = dist.sample((500,))
    assert mask.gather(-1, sample.T).all()
    assert dist.mode.tolist() == [dist.mode[0].item(), 3] and mask[0, dist.mode[0]]
    assert torch.equal(dist.deterministic_sample, dist.mode)


def test_log_prob_and_entropy_ignore_masked_outcomes():
    mask = torch.tensor([True, True, False])
    dist = MaskedCategorical(logits=torch.zeros(3), mask=mask)
    assert torch.allclose(dist.log_prob(torch.tensor(0)), torch.log(torch.tensor(0.5)))
    assert dist.log_prob(torch.tensor(2)).item() == float("-inf")
    assert torch.allclose(dist.entropy(), torch.log(torch.tensor(2.0)))
    batched = MaskedCategorical(logits=torch.zeros(2, 3), mask=mask.expand(2, 3))
    assert torch.allclose(batched.log_prob(torch.tensor([0, 1])), torch.log(torch.tensor(0.5)))
    plain = MaskedCategorical(
        logits=torch.zeros(2, 3), mask=mask.expand(2, 3), use_cross_entropy=False
    )
    assert torch.allclose(
        plain.log_prob(torch.tensor([0, 1])), batched.log_prob(torch.tensor([0, 1]))
    )


def test_probs_indices_and_padding():
    dist = MaskedCategorical(
        probs=torch.tensor([0.2, 0.3, 0.5]), mask=torch.tensor([True, False, True])
    )
    assert torch.allclose(dist.probs, torch.tensor([0.2 / 0.7, 0.0, 0.5 / 0.7]))
    sparse = MaskedCategorical(
        logits=torch.zeros(2, 4), indices=torch.tensor([[0, 2], [3, -1]]), padding_value=-1
    )
    assert sparse.mask.tolist() == [[True, False, True, False], [False, False, False, True]]


def test_gradients_flow_through_logits():
    logits = torch.zeros(3, requires_grad=True)
    dist = MaskedCategorical(logits=logits, mask=torch.tensor([True, True, False]))
    dist.log_prob(torch.tensor(1)).backward()
    assert logits.grad[2].item() == 0.0 and logits.grad[1].item() > 0


def test_errors_are_clear():
    with pytest.raises(ValueError, match="logits"):
        MaskedCategorical(mask=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        MaskedCategorical(logits=torch.zeros(2))
    with pytest.raises(ValueError, match="at least one"):
        MaskedCategorical(logits=torch.zeros(2), mask=torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="last dim"):
        MaskedCategorical(logits=torch.zeros(3), mask=torch.ones(2, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        MaskedCategorical(logits=torch.zeros(2), mask=torch.ones(2))


def test_policy_example_on_masked_env():
    env = TransformedEnv(TicTacToeEnv(), ActionMask())
    module = TensorDictModule(nn.Linear(9, 9), in_keys=["observation_flat"], out_keys=["logits"])
    dist = ProbabilisticTensorDictModule(
        in_keys={"logits": "logits", "mask": "action_mask"},
        out_keys=["action"],
        distribution_class=MaskedCategorical,
        return_log_prob=True,
    )
    actor = TensorDictSequential(
        TensorDictModule(
            lambda board: board.reshape(-1).float(),
            in_keys=["board"],
            out_keys=["observation_flat"],
        ),
        module,
        dist,
    )
    with set_interaction_type(InteractionType.RANDOM):
        td = actor(env.reset())
    assert td["action_mask"][td["action"]]
    assert torch.isfinite(td["action_log_prob"])
    with set_interaction_type(InteractionType.DETERMINISTIC):
        td = actor(env.reset())
    assert td["action_mask"][td["action"]]
