"""LLMHashingEnv with a byte-level BPE tokenizer trained here (no hub access)."""

from __future__ import annotations

import random

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.envs import (
    LLMHashingEnv,
    ParallelEnv,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.custom.llm_hashing import TokenChainHash
from tests.envs.conformance import EnvConformance

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the sun is bright today"] * 4


def make_tokenizer():
    backend = tokenizers.ByteLevelBPETokenizer()
    backend.train_from_iterator(
        CORPUS, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend._tokenizer, eos_token="<|endoftext|>"
    )


TOKENIZER = make_tokenizer()


def make_env():
    return LLMHashingEnv(tokenizer=TOKENIZER)


class TestLLMHashingConformance(EnvConformance):
    seeded = False

    def make_env(self):
        return make_env()


class TestLLMHashingBatchedConformance(EnvConformance):
    seeded = False

    def make_env(self):
        return make_env()

    def reset_input(self, env):
        return env.make_tensordict(["the cat", "a dog ran"])


def test_observation_identifies_the_token_chain():
    env = make_env()
    assert env.vocab_size == len(TOKENIZER)
    start = env.reset(env.make_tensordict("the cat"))
    tokens = TOKENIZER.encode(" sat on")
    td = start
    for token in tokens:
        td = env.step(td.set("action", torch.tensor(token)))["next"]
    assert td["text"] == "the cat sat on"
    # the same chain reached from another prompt split has the same hash
    assert td["observation"] == env.make_tensordict("the cat sat on")["observation"]
    assert td["observation"] != env.make_tensordict("the cat sat in")["observation"]


def test_reset_without_a_prompt_starts_from_the_empty_chain():
    env = make_env()
    td = env.reset()
    assert td["text"] == "" and td["observation"] == 0
    batch = env.reset(TensorDict(batch_size=[3]))
    assert batch["observation"].shape == (3,) and batch.get("text").tolist() == ["", "", ""]


def test_custom_tokenizer_and_hashing_module():
    vocab_size = 5

    class Tokenizer:
        def encode(self, text):
            return [len(word) % vocab_size for word in text.split(" ")]

        def decode(self, ids):
            return " ".join(random.choice(["apple", "banana"]) for _ in ids)

        def batch_decode(self, ids):
            return [self.decode(row) for row in ids]

    seen = []

    def hashing(rows):
        seen.append(rows.shape)
        return rows.sum(-1) * 31

    env = LLMHashingEnv(vocab_size=vocab_size, tokenizer=Tokenizer(), hashing_module=hashing)
    td = env.make_tensordict("some sentence")
    env.check_env_specs(tensordict=td)
    assert seen and all(shape[-1] == 2 for shape in seen)


def test_text_output_off_and_errors():
    env = LLMHashingEnv(vocab_size=10, text_output=False)
    check_env_specs(env)
    assert "text" not in env.reset().keys()
    with pytest.raises(ValueError, match="needs vocab_size, or a tokenizer"):
        LLMHashingEnv()
    with pytest.raises(ValueError, match="text_output=True needs a tokenizer"):
        LLMHashingEnv(vocab_size=10)
    with pytest.raises(ValueError, match="make_tensordict needs a tokenizer"):
        env.make_tensordict("hello")


def test_default_hash_is_stable_across_calls():
    rows = torch.tensor([[3, 4], [3, 4], [4, 3]])
    first, second = TokenChainHash()(rows), TokenChainHash()(rows)
    assert torch.equal(first, second) and first[0] == first[1] != first[2]
    assert first.dtype == torch.int64


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_in_batched_envs_and_a_collector(batched):
    env = batched(
        2, lambda: TransformedEnv(LLMHashingEnv(vocab_size=50, text_output=False), StepCounter(4))
    )
    try:
        check_env_specs(env)
        collector = SyncDataCollector(env, None, frames_per_batch=8, total_frames=16)
        batches = list(collector)
        assert len(batches) == 2 and batches[0].numel() == 8
        assert batches[0]["next", "observation"].dtype == torch.int64
        collector.shutdown()
    finally:
        env.close()
