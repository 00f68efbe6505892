"""Offline language-data fixtures: a byte-level BPE tokenizer trained here, tiny text datasets."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# no tqdm monitor thread (started by any progress bar, even a disabled one): it would outlive
# these tests and make the batched-env tests see another thread running
tqdm = pytest.importorskip("tqdm")
tqdm.tqdm.monitor_interval = 0
datasets.disable_progress_bars()

PROMPTS = [
    "SUBREDDIT: r/cats POST: my cat sleeps all day on the keyboard",
    "SUBREDDIT: r/cooking POST: the bread did not rise at all this time",
    "SUBREDDIT: r/running POST: first marathon next week and I am nervous",
    "SUBREDDIT: r/books POST: looking for a long novel to read this winter",
    "SUBREDDIT: r/garden POST: tomatoes are turning yellow before they ripen",
    "SUBREDDIT: r/music POST: learning the guitar at forty, any advice",
    "SUBREDDIT: r/travel POST: lost my passport two days before the flight",
    "SUBREDDIT: r/diy POST: the shelf I built leans to the left",
]
SUMMARIES = [
    " TL;DR: cat likes the keyboard",
    " TL;DR: bread failed",
    " TL;DR: nervous about a marathon",
    " TL;DR: want a long book",
    " TL;DR: yellow tomatoes",
    " TL;DR: late guitar learner",
    " TL;DR: passport lost",
    " TL;DR: crooked shelf",
]


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A GPT-2-like byte-level BPE tokenizer (end-of-text token as padding) saved locally."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    backend = ByteLevelBPETokenizer()
    backend.train_from_iterator(
        PROMPTS + SUMMARIES, vocab_size=400, min_frequency=1, special_tokens=["<|endoftext|>"]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend._tokenizer,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    folder = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tokenizer_dir)
    loaded.pad_token = loaded.eos_token
    return loaded


@pytest.fixture(scope="session")
def tldr_dir(tmp_path_factory):
    """A prompt dataset (``prompt``, ``label``) in the layout of ``DatasetDict.save_to_disk``."""
    from datasets import Dataset, DatasetDict

    rows = {"prompt": PROMPTS, "label": SUMMARIES}
    folder = tmp_path_factory.mktemp("tldr") / "summarize_tldr"
    DatasetDict({"train": Dataset.from_dict(rows), "valid": Dataset.from_dict(rows)}).save_to_disk(
        str(folder)
    )
    return str(folder)


@pytest.fixture(scope="session")
def comparisons_dir(tmp_path_factory):
    """A comparison dataset (``prompt``, ``chosen``, ``rejected``) saved with ``save_to_disk``."""
    from datasets import Dataset, DatasetDict

    rows = {
        "prompt": PROMPTS,
        "chosen": SUMMARIES,
        "rejected": [" TL;DR: something else entirely"] * 7 + [SUMMARIES[-1]],
    }
    folder = tmp_path_factory.mktemp("comparisons") / "summarize_comparisons"
    DatasetDict({"train": Dataset.from_dict(rows), "valid1": Dataset.from_dict(rows)}).save_to_disk(
        str(folder)
    )
    return str(folder)
