"""Tokenizers, the tokenized-dataset loader and the data loaders, with a locally trained tokenizer."""

from __future__ import annotations

import gc
import json
import threading

import pytest
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase

from tdrl.data import (
    PairwiseDataset,
    PromptData,
    PromptTensorDictTokenizer,
    TensorDictTokenizer,
    TokenizedDatasetLoader,
    create_infinite_iterator,
    get_dataloader,
)
from tdrl.data.llm.reward import pre_tokenization_hook
from tests.data.llm.conftest import PROMPTS, SUMMARIES

TEXTS = ["Knock, knock.", "Who's there?", "Lettuce.", "Lettuce in, it's cold out here!"]


@pytest.mark.parametrize("key", ["text", "other"])
def test_tensordict_tokenizer_pads_and_truncates(tokenizer, key):
    process = TensorDictTokenizer(tokenizer, max_length=6, key=key)
    out = process({key: TEXTS})
    assert isinstance(out, TensorDictBase) and out.batch_size == (4,)
    assert out["input_ids"].shape == (4, 6)
    assert out["attention_mask"].sum(-1).tolist() == [
        min(len(tokenizer(text)["input_ids"]), 6) for text in TEXTS
    ]
    single = process({key: "Lettuce."})
    assert single.batch_size == () and single["input_ids"].shape == (6,)


def test_tensordict_tokenizer_without_truncation_or_tensordict(tokenizer):
    ragged = TensorDictTokenizer(tokenizer, max_length=4, truncation=False, padding=False)
    out = ragged({"text": TEXTS})
    lengths = [len(tokenizer(text)["input_ids"]) for text in TEXTS]
    assert [row["input_ids"].numel() for row in out.unbind(0)] == lengths
    raw = TensorDictTokenizer(tokenizer, max_length=4, return_tensordict=False)({"text": TEXTS})
    assert all(len(row) == 4 for row in raw["input_ids"])
    with pytest.raises(
        KeyError, match="expected the text under key 'text', got keys \\['prompt'\\]"
    ):
        TensorDictTokenizer(tokenizer, max_length=4)({"prompt": TEXTS})
    with pytest.raises(ValueError, match="max_length must be a positive integer"):
        TensorDictTokenizer(tokenizer, max_length=0)


def test_prompt_tokenizer_records_where_prompts_end(tokenizer):
    process = PromptTensorDictTokenizer(tokenizer, max_length=40)
    out = process({"prompt": PROMPTS[:3], "label": SUMMARIES[:3]})
    assert out["input_ids"].shape == (3, 40)
    for row, prompt in enumerate(PROMPTS[:3]):
        prompt_ids = tokenizer(prompt)["input_ids"]
        assert out["prompt_rindex"][row] == len(prompt_ids)
        assert out["input_ids"][row, : len(prompt_ids)].tolist() == prompt_ids
    assert out["valid_sample"].all()
    short = PromptTensorDictTokenizer(tokenizer, max_length=4)(
        {"prompt": PROMPTS[:2], "label": SUMMARIES[:2]}
    )
    assert not short["valid_sample"].any() and (short["prompt_rindex"] == 4).all()


def test_loader_tokenizes_once_then_reads_the_cache(tldr_dir, tokenizer_dir, tmp_path, monkeypatch):
    def loader():
        return TokenizedDatasetLoader(
            "train",
            48,
            tldr_dir,
            PromptTensorDictTokenizer,
            from_disk=True,
            root_dir=tmp_path,
            tokenizer_model_name=tokenizer_dir,
        )

    first = loader().load()
    assert first.batch_size == (len(PROMPTS),)
    assert isinstance(first["input_ids"], MemoryMappedTensor)
    assert first["input_ids"].shape == (len(PROMPTS), 48)
    assert set(first.keys()) == {"input_ids", "attention_mask", "prompt_rindex"}
    calls = []
    original = TensorDict.load_memmap

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(TensorDict, "load_memmap", counting)
    monkeypatch.setattr(TokenizedDatasetLoader, "_tokenize", lambda *a: pytest.fail("re-tokenized"))
    again = loader().load()
    assert len(calls) == 1
    assert torch.equal(again["input_ids"], first["input_ids"])


def test_loader_drops_examples_that_do_not_fit(tldr_dir, tokenizer, tokenizer_dir, tmp_path):
    lengths = [
        len(tokenizer(prompt + label)["input_ids"])
        for prompt, label in zip(PROMPTS[:5], SUMMARIES[:5])
    ]
    max_length = sorted(lengths)[2]  # some of the first 5 examples fit, some do not
    data = TokenizedDatasetLoader(
        "valid",
        max_length,
        tldr_dir,
        PromptTensorDictTokenizer,
        from_disk=True,
        root_dir=tmp_path,
        valid_size=5,
        tokenizer_model_name=tokenizer_dir,
    ).load()
    assert data.shape[0] == sum(length <= max_length for length in lengths) < 5


def test_loader_reads_json_files_with_load_dataset(tokenizer_dir, tmp_path):
    folder = tmp_path / "json_data"
    folder.mkdir()
    with open(folder / "train.jsonl", "w") as f:
        for text in TEXTS:
            f.write(json.dumps({"text": text}) + "\n")
    data = TokenizedDatasetLoader(
        "train",
        8,
        str(folder),
        TensorDictTokenizer,
        root_dir=tmp_path / "cache",
        tokenizer_model_name=tokenizer_dir,
    ).load()
    assert data["input_ids"].shape == (len(TEXTS), 8)


def test_dataset_to_tensordict_under_a_prefix(tmp_path):
    from datasets import Dataset

    dataset = Dataset.from_dict({"a": [0.0] * 10, "b": [1.0] * 10})
    td = TokenizedDatasetLoader.dataset_to_tensordict(dataset, tmp_path, prefix=("c", "d"))
    assert isinstance(td.get(("c", "d", "a")), MemoryMappedTensor)
    assert td.get(("c", "d", "b")).sum() == 10


def test_pre_tokenization_hook_pairs_texts(comparisons_dir):
    from datasets import load_from_disk

    split = load_from_disk(comparisons_dir)["train"]
    out = pre_tokenization_hook(split)
    # the last comparison has identical completions: dropped
    assert len(out) == 2 * (len(PROMPTS) - 1)
    assert out["text"][0] == PROMPTS[0] + SUMMARIES[0]
    assert out["text"][1].startswith(PROMPTS[0]) and "something else" in out["text"][1]
    with pytest.raises(KeyError, match="missing \\['chosen', 'rejected'\\]"):
        pre_tokenization_hook(split.remove_columns(["chosen", "rejected"]))


def test_prompt_data_and_pairwise_dataset_from_dataset(
    tldr_dir, comparisons_dir, tokenizer_dir, tmp_path
):
    prompts = PromptData.from_dataset(
        "train",
        tldr_dir,
        max_length=48,
        root_dir=tmp_path,
        from_disk=True,
        tokenizer_model_name=tokenizer_dir,
    )
    assert prompts.batch_size == (len(PROMPTS),)
    assert torch.equal(prompts.labels, prompts.input_ids)
    masked = prompts[:2].mask_label(pad_token_id=0)
    assert (masked.attention_mask.sum(-1) == prompts[:2].prompt_rindex).all()
    pairs = PairwiseDataset.from_dataset(
        "train",
        comparisons_dir,
        max_length=32,
        root_dir=tmp_path,
        from_disk=True,
        tokenizer_model_name=tokenizer_dir,
    )
    assert pairs.batch_size == (len(PROMPTS) - 1,)
    assert pairs.chosen_data.input_ids.shape == (len(PROMPTS) - 1, 32)
    assert not torch.equal(pairs.chosen_data.input_ids, pairs.rejected_data.input_ids)
    assert pairs.chosen_data.rewards is None


@pytest.mark.parametrize("infinite", [True, False])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_get_dataloader(tldr_dir, tokenizer_dir, tmp_path, infinite, prefetch):
    loader = get_dataloader(
        3,
        40,
        PromptData,
        "cpu",
        dataset_name=tldr_dir,
        infinite=infinite,
        prefetch=prefetch,
        root_dir=tmp_path,
        from_disk=True,
        tokenizer_model_name=tokenizer_dir,
    )
    if infinite:
        batches = [next(loader) for _ in range(5)]  # more than one epoch of 2 batches
    else:
        batches = list(loader)
        assert len(batches) == len(PROMPTS) // 3
        seen = torch.cat([batch.prompt_rindex for batch in batches])
        assert seen.numel() == 6
    for batch in batches:
        assert isinstance(batch, PromptData) and batch.batch_size == (3,)
        assert batch.input_ids.shape == (3, 40)
        assert batch.device == torch.device("cpu")


def test_prefetching_thread_stops_with_its_consumer(tldr_dir, tokenizer_dir, tmp_path):
    before = threading.active_count()
    loader = get_dataloader(
        2,
        40,
        PromptData,
        "cpu",
        dataset_name=tldr_dir,
        prefetch=1,
        root_dir=tmp_path,
        from_disk=True,
        tokenizer_model_name=tokenizer_dir,
    )
    next(loader)
    assert threading.active_count() == before + 1
    del loader
    gc.collect()
    assert threading.active_count() == before


def test_dataloader_errors(tldr_dir, tokenizer_dir, tmp_path):
    with pytest.raises(ValueError, match="fewer than batch_size=64"):
        get_dataloader(
            64,
            40,
            PromptData,
            "cpu",
            dataset_name=tldr_dir,
            root_dir=tmp_path,
            from_disk=True,
            tokenizer_model_name=tokenizer_dir,
        )
    with pytest.raises(FileNotFoundError, match="no dataset saved with save_to_disk at"):
        TokenizedDatasetLoader(
            "train",
            8,
            str(tmp_path / "nothing"),
            TensorDictTokenizer,
            from_disk=True,
            root_dir=tmp_path,
        ).load()
    with pytest.raises(KeyError, match="has no split 'test'; splits: \\['train', 'valid'\\]"):
        TokenizedDatasetLoader(
            "test", 8, tldr_dir, TensorDictTokenizer, from_disk=True, root_dir=tmp_path
        )._load_dataset()


def test_create_infinite_iterator_restarts_and_rejects_empty():
    it = create_infinite_iterator(range(3))
    assert [next(it) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(RuntimeError, match="yields nothing"):
        next(create_infinite_iterator([]))
