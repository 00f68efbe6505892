"""RolloutFromModel with tiny randomly initialised GPT-2 models, and the KL controllers."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.data import AdaptiveKLController, ConstantKLController, PromptData, RolloutFromModel

transformers = pytest.importorskip("transformers")

MAX_NEW = 5


class TinyRewardModel(nn.Module):
    """Per-token rewards from a GPT-2 backbone; the end score is the last real token's reward."""

    def __init__(self, config):
        super().__init__()
        self.backbone = transformers.GPT2Model(config)
        self.head = nn.Linear(config.n_embd, 1)

    def forward(self, input_ids, attention_mask):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        rewards = self.head(hidden).squeeze(-1)
        last = (attention_mask.sum(-1) - 1).clamp(min=0)
        return rewards, rewards[torch.arange(rewards.shape[0]), last]


@pytest.fixture(scope="module")
def models(tokenizer):
    torch.manual_seed(0)
    eos = tokenizer.eos_token_id
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=96,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    ref_model = transformers.GPT2LMHeadModel(config).eval()
    reward = TensorDictModule(
        TinyRewardModel(config),
        in_keys=["input_ids", "attention_mask"],
        out_keys=["rewards", "end_scores"],
    )
    return model, ref_model, reward, eos


@pytest.fixture(scope="module")
def batch(tokenizer):
    from tdrl.data import PromptTensorDictTokenizer
    from tests.data.llm.conftest import PROMPTS, SUMMARIES

    out = PromptTensorDictTokenizer(tokenizer, max_length=40)(
        {"prompt": PROMPTS[:3], "label": SUMMARIES[:3]}
    )
    return PromptData(
        input_ids=out["input_ids"],
        attention_mask=out["attention_mask"],
        prompt_rindex=out["prompt_rindex"],
        batch_size=[3],
    )


def test_padding_conversions():
    pad = 9
    right = torch.tensor([[1, 2, pad, pad], [3, 4, 5, pad], [6, pad, pad, pad]])
    left = RolloutFromModel._padded_right_to_left(right, eos_token_id=pad)
    assert left.tolist() == [[pad, pad, 1, 2], [pad, 3, 4, 5], [pad, pad, pad, 6]]
    back = RolloutFromModel._padded_left_to_right(left, eos_token_id=pad, sequence_length=6)
    assert back.tolist() == [[1, 2, pad, pad, pad, pad], [3, 4, 5, pad, pad, pad], [6] + [pad] * 5]
    both = torch.tensor([[pad, 7, 8, pad]])
    assert RolloutFromModel._padded_left_to_right(both, eos_token_id=pad).tolist() == [
        [7, 8, pad, pad]
    ]


def test_scores_of_generated_tokens():
    scores = torch.randn(2, 4, 6)
    tokens = torch.tensor([[0, 5, 2, 3], [1, 1, 4, 0]])
    out = RolloutFromModel._get_scores(scores.unbind(1), tokens)
    expected = scores.log_softmax(-1).gather(-1, tokens.unsqueeze(-1))
    assert out.shape == (2, 4, 1) and torch.allclose(out, expected)
    best = RolloutFromModel._get_scores(scores.unbind(1), use_max=True)
    assert torch.allclose(best.squeeze(-1), scores.log_softmax(-1).max(-1).values)
    padded = RolloutFromModel._get_scores(scores.unbind(1), tokens, pad_token_id=0)
    assert padded[0, 0] == 0 and padded[1, 3] == 0


def test_generate_shapes_and_log_ratio(models, batch):
    model, ref_model, reward, eos = models
    rollout = RolloutFromModel(model, ref_model, reward, max_new_tokens=MAX_NEW)
    generated, log_probs, log_ratio = rollout.generate(batch)
    assert generated.shape == (3, batch.input_ids.shape[1] + MAX_NEW)
    assert log_probs.shape == (3, MAX_NEW, 1) and (log_probs <= 0).all()
    assert log_ratio.shape == (3, MAX_NEW)
    for row in range(3):
        start = int(batch.prompt_rindex[row])
        assert generated[row, :start].tolist() == batch.input_ids[row, :start].tolist()
    # the same model as reference: no KL penalty
    same = RolloutFromModel(model, model, reward, max_new_tokens=MAX_NEW)
    assert same.generate(batch)[2].abs().max() < 1e-4


def test_rollout_from_data_is_ted(models, batch):
    model, ref_model, reward, eos = models
    rollout = RolloutFromModel(model, ref_model, reward, kl_coef=0.5, max_new_tokens=MAX_NEW)
    torch.manual_seed(1)
    td = rollout.rollout_from_data(batch)
    assert td.batch_size == (3, MAX_NEW)
    expected = {
        ("next", "attention_mask"),
        ("next", "done"),
        ("next", "terminated"),
        ("next", "input_ids"),
        ("next", "reward"),
        "action",
        "attention_mask",
        "input_ids",
        "sample_log_prob",
    }
    assert expected <= set(td.keys(True, True))
    # each step sees one more token than the previous one, and "next" one more again
    seen = td["attention_mask"].sum(-1)
    assert (seen[:, 1:] - seen[:, :-1] == 1).all()
    assert torch.equal(td["next", "attention_mask"].sum(-1), seen + 1)
    assert torch.equal(td["next", "input_ids"][:, :-1], td["input_ids"][:, 1:])
    assert td["next", "done"][:, -1].all()
    assert td["next", "reward"].shape == (3, MAX_NEW, 1)


def test_rewards_add_the_clipped_score_to_the_kl_penalty(models, batch):
    model, ref_model, reward, eos = models
    rollout = RolloutFromModel(
        model, ref_model, reward, kl_coef=0.5, max_new_tokens=MAX_NEW, score_clip=1e-3
    )
    generated, log_probs, log_ratio = rollout.generate(batch)
    td = rollout.create_rollout_td(batch, generated, log_probs, log_ratio)
    alive = td["action"] != eos
    alive[:, 0] = True
    rewards = td["next", "reward"].squeeze(-1)
    penalty = -0.5 * log_ratio
    # all steps but the last live one carry the KL penalty only
    for row in range(3):
        last = int(td["next", "done"][row].squeeze(-1).nonzero()[0])
        assert torch.allclose(rewards[row, :last], penalty[row, :last], atol=1e-6)
        assert (rewards[row, last] - penalty[row, last]).abs() <= 1e-3 + 1e-6


def test_kl_scheduler_sets_the_coefficient(models, batch):
    model, ref_model, reward, eos = models
    rollout = RolloutFromModel(
        model, ref_model, reward, kl_coef=0.2, max_new_tokens=MAX_NEW, num_steps=4
    )
    rollout.kl_scheduler = AdaptiveKLController(
        init_kl_coef=0.2, target=1e-6, horizon=2, model=rollout
    )
    rollout.rollout_from_data(batch)
    rollout.step_scheduler()
    assert rollout.kl_coef == pytest.approx(0.2 * 1.1)  # KL far above target: +20% * 1/2


def test_constant_and_adaptive_controllers():
    class Holder(nn.Module):
        kl_coef = 0.0

    holder = Holder()
    constant = ConstantKLController(kl_coef=0.3, model=holder)
    assert holder.kl_coef == 0.3 and constant.update([100.0]) == 0.3
    adaptive = AdaptiveKLController(init_kl_coef=1.0, target=2.0, horizon=4, model=holder)
    assert adaptive.update([1.0, 1.0]) == pytest.approx(1.0 - 0.2 * 2 / 4)  # below target
    assert holder.kl_coef == adaptive.coef
    assert adaptive.update(2.0) == pytest.approx(0.9)  # on target: unchanged
    with pytest.raises(AttributeError, match="must have a 'kl_coef' attribute"):
        ConstantKLController(kl_coef=0.1, model=nn.Linear(1, 1))
    with pytest.raises(ValueError, match="target must be a positive KL value"):
        AdaptiveKLController(init_kl_coef=1.0, target=0.0, horizon=1)
    with pytest.raises(ValueError, match="needs kl_coef"):
        ConstantKLController()
