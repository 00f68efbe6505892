"""Pairwise comparison datasets (a preferred and a rejected completion) for reward models."""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import tensorclass

from tdrl.data.llm.dataset import TensorDictTokenizer, TokenizedDatasetLoader

__all__ = ["PairwiseDataset", "RewardData", "pre_tokenization_hook"]

DEFAULT_DATASET = "CarperAI/openai_summarize_comparisons"


@tensorclass
class RewardData:
    """Tokenized sequences scored by a reward model.

    Attributes:
        input_ids: tokens, ``[batch, length]``.
        attention_mask: 1 on real tokens, 0 on padding.
        rewards: per-token rewards of a reward model, when computed.
        end_scores: the reward of each sequence's last token, when computed.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rewards: torch.Tensor | None = None
    end_scores: torch.Tensor | None = None


@tensorclass
class PairwiseDataset:
    """Pairs of sequences sharing a prompt: the preferred one and the rejected one.

    Attributes:
        chosen_data: the preferred sequences (:class:`RewardData`).
        rejected_data: the rejected sequences, row by row (:class:`RewardData`).

    Examples:
        >>> import torch
        >>> pair = lambda: RewardData(input_ids=torch.zeros(3, 4, dtype=torch.long),
        ...     attention_mask=torch.ones(3, 4, dtype=torch.long), batch_size=[3])
        >>> data = PairwiseDataset(chosen_data=pair(), rejected_data=pair(), batch_size=[3])
        >>> data[:2].chosen_data.input_ids.shape
        torch.Size([2, 4])
    """

    chosen_data: RewardData
    rejected_data: RewardData

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
    ) -> PairwiseDataset:
        """Load, tokenize and cache a comparison dataset (``prompt``, ``chosen``, ``rejected``).

        The split goes through :func:`pre_tokenization_hook` (which keeps the pairs whose
        completions differ and lays each pair out as two consecutive texts) and
        :class:`~tdrl.data.TensorDictTokenizer`.

        Args:
            split: the split to load.
            dataset_name: the dataset (default ``"CarperAI/openai_summarize_comparisons"``).
            max_length: the sequence length.
            root_dir, from_disk, num_workers, tokenizer_model_name: see
                :class:`~tdrl.data.TokenizedDatasetLoader`.
        """
        loader = TokenizedDatasetLoader(
            split,
            max_length,
            dataset_name or DEFAULT_DATASET,
            TensorDictTokenizer,
            pre_tokenization_hook,
            root_dir=root_dir,
            from_disk=from_disk,
            num_workers=num_workers,
            tokenizer_model_name=tokenizer_model_name,
        )
        data = loader.load()
        if data.shape[0] % 2:
            raise RuntimeError(
                f"the tokenized comparisons at {loader.cache_path} hold an odd number of rows "
                f"({data.shape[0]}): expected chosen / rejected pairs"
            )
        pairs = data.shape[0] // 2
        chosen, rejected = data[0::2], data[1::2]
        return cls(
            chosen_data=RewardData(
                input_ids=chosen.get("input_ids"),
                attention_mask=chosen.get("attention_mask"),
                batch_size=[pairs],
            ),
            rejected_data=RewardData(
                input_ids=rejected.get("input_ids"),
                attention_mask=rejected.get("attention_mask"),
                batch_size=[pairs],
            ),
            batch_size=[pairs],
        )


def pre_tokenization_hook(dataset: Any, min_length: int = 5) -> Any:
    """Prepare a comparison split (``prompt``, ``chosen``, ``rejected``) for tokenization.

    Keeps the comparisons whose two completions differ and that are at least
    ``min_length`` characters long, and returns a dataset with one ``"text"`` column
    holding ``prompt + chosen`` and ``prompt + rejected`` one after the other (rows ``2i``
    and ``2i + 1``).
    """
    from datasets import Dataset

    missing = [
        name for name in ("prompt", "chosen", "rejected") if name not in dataset.column_names
    ]
    if missing:
        raise KeyError(
            f"pre_tokenization_hook: expected the columns 'prompt', 'chosen' and 'rejected', "
            f"missing {missing} (got {dataset.column_names})"
        )
    texts = []
    for prompt, chosen, rejected in zip(dataset["prompt"], dataset["chosen"], dataset["rejected"]):
        if chosen == rejected or len(chosen) < min_length or len(rejected) < min_length:
            continue
        texts.append(prompt + chosen)
        texts.append(prompt + rejected)
    return Dataset.from_dict({"text": texts})
