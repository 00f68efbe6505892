""":class:`RolloutFromModel`: generate completions with a causal language model, as TED rollouts.

Works with ``transformers`` causal language models (``generate`` with
``output_scores=True, return_dict_in_generate=True``; a forward pass returning ``logits``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.data.llm.kl_controllers import KLControllerBase

__all__ = ["RolloutFromModel"]


def _field(batch: Any, name: str) -> torch.Tensor:
    value = batch.get(name)
    if value is None:
        raise KeyError(f"RolloutFromModel: the batch has no {name!r} entry")
    return value


def _logits(output: Any) -> torch.Tensor:
    if hasattr(output, "logits"):
        return output.logits
    return output[0] if isinstance(output, (tuple, list)) else output


def _compact(tokens: torch.Tensor, keep: torch.Tensor, fill: int, right: bool) -> torch.Tensor:
    """Move the ``keep`` tokens of each row to its start (``right=False``) or end, ``fill`` elsewhere."""
    order = keep.long().cumsum(-1) - 1
    count = keep.sum(-1, keepdim=True)
    length = tokens.shape[-1]
    position = order + (length - count) if right else order
    out = torch.full_like(tokens, fill)
    rows = torch.arange(tokens.shape[0], device=tokens.device).unsqueeze(-1).expand_as(tokens)
    out[rows[keep], position[keep]] = tokens[keep]
    return out


class RolloutFromModel:
    """Roll out a causal language model on prompts: one step per generated token.

    :meth:`rollout_from_data` generates ``max_new_tokens`` tokens for each prompt of a
    batch and returns a TED TensorDict of batch size ``[batch, max_new_tokens]``: at step
    ``t``, ``"input_ids"`` / ``"attention_mask"`` hold the prompt and the first ``t``
    generated tokens, ``"action"`` the next token and ``"sample_log_prob"`` its log-probability
    under ``model``; under ``"next"``, the sequence with that token, ``"reward"``,
    ``"done"`` and ``"terminated"``. The reward of each token is ``-kl_coef`` times the
    log-ratio between ``model`` and ``ref_model``; the last token also gets the score of
    ``reward_model``, clipped to ``[-score_clip, score_clip]``. A sequence ends at its
    end-of-sequence token or after ``max_new_tokens`` tokens; steps after its end repeat the
    end-of-sequence token with zero reward.

    Prompts are read from the batch's ``"input_ids"`` up to ``"prompt_rindex"`` tokens (as
    :class:`~tdrl.data.PromptData` holds them); the model's end-of-sequence token is used
    for padding.

    Args:
        model: the language model (``generate`` and forward; e.g. ``GPT2LMHeadModel``).
        ref_model: a frozen copy of the initial model, for the KL penalty.
        reward_model: maps ``input_ids`` and ``attention_mask`` to per-token rewards and
            ``end_scores`` (a module returning ``(rewards, end_scores)``, or a TensorDict
            module writing ``"end_scores"``).
        kl_coef: the initial KL coefficient.
        max_new_tokens: the number of tokens generated per prompt.
        score_clip: bound of the absolute reward-model score.
        kl_scheduler: a KL controller whose coefficient is used from :meth:`step_scheduler` on.
        num_steps: how many rollouts' mean KL values are kept for the scheduler.
    """

    def __init__(
        self,
        model: nn.Module,
        ref_model: nn.Module,
        reward_model: nn.Module,
        kl_coef: float = 0.1,
        max_new_tokens: int = 50,
        score_clip: float = 10.0,
        kl_scheduler: KLControllerBase | None = None,
        num_steps: int | None = None,
    ) -> None:
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens}")
        self.model = model
        self.ref_model = ref_model
        self.reward_model = reward_model
        self.kl_coef = float(kl_coef)
        self.max_new_tokens = int(max_new_tokens)
        self.score_clip = float(score_clip)
        self.kl_scheduler = kl_scheduler
        self._kl_values: deque = deque(maxlen=num_steps)

    # -- padding helpers ------------------------------------------------------------------------
    @staticmethod
    def _padded_right_to_left(tensor: torch.Tensor, *, eos_token_id: int) -> torch.Tensor:
        """Right-padded rows (``eos_token_id`` as padding) become left-padded rows."""
        return _compact(tensor, tensor != eos_token_id, eos_token_id, right=True)

    @staticmethod
    def _padded_left_to_right(
        tensor: torch.Tensor, *, sequence_length: int | None = None, eos_token_id: int
    ) -> torch.Tensor:
        """Rows padded with ``eos_token_id`` anywhere become right-padded rows.

        With ``sequence_length``, rows are padded (with ``eos_token_id``) to that length.
        """
        out = _compact(tensor, tensor != eos_token_id, eos_token_id, right=False)
        if sequence_length is not None and sequence_length > out.shape[-1]:
            out = nn.functional.pad(out, (0, sequence_length - out.shape[-1]), value=eos_token_id)
        return out

    @staticmethod
    def _get_scores(
        scores: Sequence[torch.Tensor],
        generated_tokens: torch.Tensor | None = None,
        use_max: bool = False,
        pad_token_id: int | None = None,
    ) -> torch.Tensor:
        """Log-probabilities ``[batch, steps, 1]`` of generated tokens from per-step scores.

        Args:
            scores: one ``[batch, vocab]`` score tensor per generated token.
            generated_tokens: the tokens ``[batch, steps]`` (broadcast over the batch).
            use_max: the log-probability of the most likely token instead.
            pad_token_id: tokens equal to it get a log-probability of 0.
        """
        log_probs = torch.stack(list(scores), 1).log_softmax(-1)
        if use_max:
            return log_probs.max(-1, keepdim=True).values
        if generated_tokens is None:
            raise ValueError("_get_scores needs generated_tokens unless use_max=True")
        tokens = generated_tokens.expand(log_probs.shape[:2]).unsqueeze(-1)
        out = log_probs.gather(-1, tokens)
        if pad_token_id is not None:
            out = out.masked_fill(tokens == pad_token_id, 0.0)
        return out

    # -- generation -----------------------------------------------------------------------------
    def _eos(self) -> int:
        config = getattr(self.model, "config", None)
        eos = getattr(config, "eos_token_id", None)
        if eos is None:
            eos = getattr(config, "pad_token_id", None)
        if eos is None:
            raise ValueError(
                "RolloutFromModel: the model's config has no eos_token_id (nor pad_token_id)"
            )
        return int(eos)

    @torch.no_grad()
    def generate(
        self, batch: Any, generation_config: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Generate ``max_new_tokens`` tokens after each prompt of ``batch``.

        Returns:
            the prompts followed by their completions, right-padded
            (``[batch, prompt_length + max_new_tokens]``); the log-probabilities of the
            generated tokens under ``model``, from its logits before any sampling filter
            (``[batch, max_new_tokens, 1]``); their
            log-ratio between ``model`` and ``ref_model`` (``[batch, max_new_tokens]``).
        """
        eos = self._eos()
        steps = self.max_new_tokens
        input_ids = _field(batch, "input_ids")
        width = input_ids.shape[-1]
        positions = torch.arange(width, device=input_ids.device)
        in_prompt = positions < _field(batch, "prompt_rindex").unsqueeze(-1)
        prompt = _compact(input_ids, in_prompt, eos, right=True)
        prompt_mask = _compact(in_prompt.long(), in_prompt, 0, right=True)
        out = self.model.generate(
            input_ids=prompt,
            attention_mask=prompt_mask,
            max_new_tokens=steps,
            do_sample=True,
            pad_token_id=eos,
            eos_token_id=eos,
            output_scores=True,
            output_logits=True,
            return_dict_in_generate=True,
            generation_config=generation_config,
        )
        # the raw logits (before sampling filters such as top-k) give the model's probabilities
        raw = getattr(out, "logits", None)
        sequences, scores = out.sequences, list(raw if raw is not None else out.scores)
        made = sequences.shape[-1] - width
        if made < steps:
            sequences = nn.functional.pad(sequences, (0, steps - made), value=eos)
            filler = torch.full_like(scores[-1], float("-inf"))
            filler[:, eos] = 0.0
            scores += [filler] * (steps - made)
        new_tokens = sequences[:, width:]
        log_probs = self._get_scores(scores, new_tokens)
        mask = torch.cat([prompt_mask, torch.ones_like(new_tokens)], -1)
        ref_logits = self._ref_logits(sequences, mask)
        ref_log_probs = (
            ref_logits[:, width - 1 : -1]
            .log_softmax(-1)
            .gather(-1, new_tokens.unsqueeze(-1))
            .squeeze(-1)
        )
        log_ratio = log_probs.squeeze(-1) - ref_log_probs
        generated = self._padded_left_to_right(sequences, eos_token_id=eos)
        return generated, log_probs, log_ratio

    def _ref_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        model = self.ref_model
        if isinstance(model, TensorDictModuleBase):
            data = TensorDict(
                {"input_ids": input_ids, "attention_mask": attention_mask},
                batch_size=input_ids.shape[:1],
            )
            return model(data).get("logits")
        # left-padded rows: positions count real tokens only, as during generation
        position_ids = (attention_mask.cumsum(-1) - 1).clamp_(min=0)
        return _logits(
            model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        )

    def _end_scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        model = self.reward_model
        if isinstance(model, TensorDictModuleBase):
            data = TensorDict(
                {"input_ids": input_ids, "attention_mask": attention_mask},
                batch_size=input_ids.shape[:1],
            )
            return model(data).get("end_scores")
        out = model(input_ids=input_ids, attention_mask=attention_mask)
        if hasattr(out, "end_scores"):
            return out.end_scores
        return out[1]

    @torch.no_grad()
    def create_rollout_td(
        self,
        batch: Any,
        generated: torch.Tensor,
        log_probs: torch.Tensor,
        log_ratio: torch.Tensor,
    ) -> TensorDict:
        """The TED rollout ``[batch, max_new_tokens]`` of sequences made by :meth:`generate`."""
        eos = self._eos()
        rows, steps = log_ratio.shape
        length = generated.shape[-1]
        start = _field(batch, "prompt_rindex").to(generated.device).long()
        step = torch.arange(steps, device=generated.device)
        token_at = (start.unsqueeze(-1) + step).clamp_(max=length - 1)
        action = generated.gather(-1, token_at)
        in_range = (start.unsqueeze(-1) + step) < length
        action = action.masked_fill(~in_range, eos)
        ended = (action == eos).long().cumsum(-1)
        alive = (ended == 0) | ((ended == 1) & (action == eos))  # up to and with the first eos
        done = (action == eos) | (step == steps - 1)
        done = done & alive | ~alive
        positions = torch.arange(length, device=generated.device)
        seen = start.view(rows, 1, 1) + step.view(1, steps, 1)
        attention = (positions.view(1, 1, length) < seen).long()
        next_attention = (positions.view(1, 1, length) < seen + 1).long()
        tokens = generated.unsqueeze(1).expand(rows, steps, length)
        input_ids = tokens.masked_fill(attention == 0, eos)
        next_input_ids = tokens.masked_fill(next_attention == 0, eos)
        kl_reward = -self.kl_coef * log_ratio * alive
        final_length = (start + alive.sum(-1)).clamp_(max=length)
        final_mask = (positions.unsqueeze(0) < final_length.unsqueeze(-1)).long()
        score = self._end_scores(generated.masked_fill(final_mask == 0, eos), final_mask)
        score = score.reshape(rows).clamp(-self.score_clip, self.score_clip)
        last = (alive.sum(-1) - 1).clamp_(min=0)
        reward = kl_reward.clone()
        reward[torch.arange(rows), last] += score.to(reward.dtype)
        kl = (log_ratio * alive).sum() / alive.sum().clamp(min=1)
        self._kl_values.append(float(kl))
        done = done.unsqueeze(-1)
        return TensorDict(
            {
                "input_ids": input_ids,
                "attention_mask": attention,
                "action": action,
                "sample_log_prob": log_probs.squeeze(-1) * alive,
                "next": {
                    "input_ids": next_input_ids,
                    "attention_mask": next_attention,
                    "reward": reward.unsqueeze(-1),
                    "done": done,
                    "terminated": done.clone(),
                },
            },
            batch_size=[rows, steps],
        )

    def rollout_from_data(self, batch: Any, generation_config: Any = None) -> TensorDict:
        """Generate completions for ``batch`` and return them as a TED rollout (see the class)."""
        generated, log_probs, log_ratio = self.generate(batch, generation_config)
        return self.create_rollout_td(batch, generated, log_probs, log_ratio)

    def step_scheduler(self) -> None:
        """Update the KL coefficient with the scheduler from the KL of the recent rollouts."""
        if self.kl_scheduler is None:
            return
        self.kl_coef = float(self.kl_scheduler.update(list(self._kl_values)))
        self._kl_values.clear()
