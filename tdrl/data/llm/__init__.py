"""Data utilities for RLHF with language models: tokenized datasets, loaders, rollouts, KL control.

``datasets``, ``transformers`` and ``tokenizers`` are imported only when data is loaded,
tokenized or generated.
"""

from __future__ import annotations

from tdrl.data.llm.dataset import (
    TensorDictTokenizer,
    TokenizedDatasetLoader,
    create_infinite_iterator,
    get_dataloader,
)
from tdrl.data.llm.kl_controllers import AdaptiveKLController, ConstantKLController
from tdrl.data.llm.prompt import PromptData, PromptTensorDictTokenizer
from tdrl.data.llm.reward import PairwiseDataset, RewardData
from tdrl.data.llm.rollout import RolloutFromModel

__all__ = [
    "AdaptiveKLController",
    "ConstantKLController",
    "PairwiseDataset",
    "PromptData",
    "PromptTensorDictTokenizer",
    "RewardData",
    "RolloutFromModel",
    "TensorDictTokenizer",
    "TokenizedDatasetLoader",
    "create_infinite_iterator",
    "get_dataloader",
]
