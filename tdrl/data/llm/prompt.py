"""Prompt datasets (prompt + reference completion) for fine-tuning language models."""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import tensorclass

from tdrl.data.llm.dataset import TensorDictTokenizer, TokenizedDatasetLoader, _as_tensordict

__all__ = ["PromptData", "PromptTensorDictTokenizer"]

DEFAULT_DATASET = "CarperAI/openai_summarize_tldr"


@tensorclass
class PromptData:
    """A batch of tokenized prompts followed by their reference completions.

    Attributes:
        input_ids: prompt and completion tokens, right-padded, ``[batch, length]``.
        attention_mask: 1 on real tokens, 0 on padding.
        prompt_rindex: the number of prompt tokens of each row (the completion starts there).
        labels: the targets of language-model training (``input_ids`` by default).
        logits: the model's logits, when computed.
        loss: the model's loss, when computed.

    Examples:
        >>> import torch
        >>> data = PromptData(input_ids=torch.tensor([[5, 6, 7, 0]]),
        ...     attention_mask=torch.tensor([[1, 1, 1, 0]]), prompt_rindex=torch.tensor([2]),
        ...     batch_size=[1])
        >>> data.mask_label(pad_token_id=0).input_ids
        tensor([[5, 6, 0, 0]])
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_rindex: torch.Tensor
    labels: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    loss: torch.Tensor | None = None

    def mask_label(self, pad_token_id: int = 50256) -> PromptData:
        """The prompts alone: completion tokens replaced by ``pad_token_id`` and unattended."""
        length = self.input_ids.shape[-1]
        positions = torch.arange(length, device=self.input_ids.device)
        prompt = (positions < self.prompt_rindex.unsqueeze(-1)).to(self.attention_mask.dtype)
        input_ids = torch.where(prompt.bool(), self.input_ids, pad_token_id)
        return type(self)(
            input_ids=input_ids,
            attention_mask=prompt,
            prompt_rindex=self.prompt_rindex,
            loss=self.loss,
            batch_size=self.batch_size,
        )

    @classmethod
    def from_dataset(
        cls,
        split: str,
        dataset_name: str | None = None,
        max_length: int = 550,
        root_dir: str | os.PathLike | None = None,
        from_disk: bool = False,
        num_workers: int | None = None,
        tokenizer_model_name: str | None = None,
    ) -> PromptData:
        """Load, tokenize (with :class:`PromptTensorDictTokenizer`) and cache a prompt dataset.

        Args:
            split: the split to load.
            dataset_name: the dataset (default ``"CarperAI/openai_summarize_tldr"``), with
                ``"prompt"`` and ``"label"`` text columns.
            max_length: the sequence length.
            root_dir, from_disk, num_workers, tokenizer_model_name: see
                :class:`~tdrl.data.TokenizedDatasetLoader`.

        Returns:
            memory-mapped :class:`PromptData` with ``labels`` equal to ``input_ids``.
        """
        loader = TokenizedDatasetLoader(
            split,
            max_length,
            dataset_name or DEFAULT_DATASET,
            PromptTensorDictTokenizer,
            root_dir=root_dir,
            from_disk=from_disk,
            num_workers=num_workers,
            tokenizer_model_name=tokenizer_model_name,
        )
        data = loader.load()
        return cls(
            input_ids=data.get("input_ids"),
            attention_mask=data.get("attention_mask"),
            prompt_rindex=data.get("prompt_rindex"),
            labels=data.get("input_ids"),
            batch_size=data.batch_size,
        )


class PromptTensorDictTokenizer(TensorDictTokenizer):
    """Tokenizes prompts followed by their completions, recording where each prompt ends.

    For examples holding a prompt under ``key`` and its completion under ``"label"``, the
    prompt and the completion are tokenized together into ``"input_ids"`` and
    ``"attention_mask"`` (padded / truncated to ``max_length``); ``"prompt_rindex"`` is the
    number of prompt tokens and ``"valid_sample"`` tells whether the whole example fits in
    ``max_length`` tokens (:class:`~tdrl.data.TokenizedDatasetLoader` drops the others).

    Args:
        tokenizer: a ``transformers`` tokenizer.
        max_length: the sequence length.
        key: the entry holding the prompt (the completion is read from ``"label"``).
        padding, truncation, return_tensordict, device: as in :class:`TensorDictTokenizer`.

    Examples:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> vocab = {"[PAD]": 0, "[UNK]": 1, "say": 2, "hi": 3, "there": 4}
        >>> backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        >>> backend.pre_tokenizer = pre_tokenizers.Whitespace()
        >>> tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]")
        >>> out = PromptTensorDictTokenizer(tokenizer, max_length=5)(
        ...     {"prompt": ["say hi"], "label": [" there"]})
        >>> out["input_ids"], out["prompt_rindex"], out["valid_sample"]
        (tensor([[2, 3, 4, 0, 0]]), tensor([2]), tensor([True]))
    """

    def __init__(
        self,
        tokenizer: Any,
        max_length: int,
        key: str = "prompt",
        padding: str | bool = "max_length",
        truncation: bool = True,
        return_tensordict: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(tokenizer, max_length, key, padding, truncation, return_tensordict, device)

    def __call__(self, sample: Any) -> Any:
        """Tokenize ``sample[key] + sample["label"]``."""
        prompts = self._text(sample)
        labels = sample["label"] if "label" in sample else [""] * len(prompts)
        single = isinstance(prompts, str)
        if single:
            prompts, labels = [prompts], [labels]
        prompt_tokens = self.tokenizer(list(prompts))["input_ids"]
        texts = [prompt + label for prompt, label in zip(prompts, labels)]
        full = self.tokenizer(texts)["input_ids"]
        encoded = dict(
            self.tokenizer(
                texts, max_length=self.max_length, padding=self.padding, truncation=self.truncation
            )
        )
        encoded = {name: encoded[name] for name in ("input_ids", "attention_mask")}
        encoded["prompt_rindex"] = [min(len(tokens), self.max_length) for tokens in prompt_tokens]
        encoded["valid_sample"] = [len(tokens) <= self.max_length for tokens in full]
        if single:
            encoded = {name: value[0] for name, value in encoded.items()}
        if not self.return_tensordict:
            return encoded
        return _as_tensordict(encoded, not single, self.device)
