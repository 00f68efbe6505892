"""Sampler variants: replacement=False dispatch, PromptGroupSampler, StalenessAwareSampler."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from tdrl.data.replay_buffers import (
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.samplers import PromptGroupSampler, StalenessAwareSampler


def test_random_sampler_without_replacement_is_the_variant():
    assert type(RandomSampler()) is RandomSampler
    assert type(RandomSampler(replacement=True)) is RandomSampler
    sampler = RandomSampler(replacement=False, drop_last=True, shuffle=False)
    assert type(sampler) is SamplerWithoutReplacement
    assert sampler.drop_last and not sampler.shuffle
    rb = ReplayBuffer(
        storage=LazyTensorStorage(11), sampler=RandomSampler(replacement=False), batch_size=3
    )
    rb.extend(torch.arange(11))
    assert sorted(torch.cat([rb.sample() for _ in range(4)]).tolist()) == list(range(11))
    # pickling goes through __new__ without arguments
    assert type(pickle.loads(pickle.dumps(sampler))) is SamplerWithoutReplacement


def test_replacement_argument_errors():
    with pytest.raises(TypeError, match="PrioritizedSampler has no without-replacement variant"):
        PrioritizedSampler(10, 0.5, 0.5, replacement=False)
    with pytest.raises(ValueError, match="replacement must be False"):
        SamplerWithoutReplacement(replacement=True)


def _prompts(*values: int) -> TensorDict:
    return TensorDict(
        {"prompt": torch.tensor(values), "id": torch.arange(len(values))}, [len(values)]
    )


def _group_rb(sampler: PromptGroupSampler, batch_size: int, max_size: int = 100) -> ReplayBuffer:
    return ReplayBuffer(storage=LazyStackStorage(max_size), sampler=sampler, batch_size=batch_size)


@pytest.mark.parametrize(
    "kwargs", [{"num_groups": 2}, {"samples_per_group": 4}], ids=["groups", "per_group"]
)
def test_prompt_groups_are_whole(kwargs):
    torch.manual_seed(0)
    rb = _group_rb(PromptGroupSampler(group_key="prompt", **kwargs), batch_size=8)
    rb.extend(_prompts(*[0] * 4, *[1] * 4, *[2] * 4))
    for _ in range(10):
        sample = rb.sample()
        values, counts = sample["prompt"].unique(return_counts=True)
        assert values.numel() == 2 and counts.tolist() == [4, 4]
        # each group is contiguous in the batch and has distinct items
        assert sample["prompt"][:4].unique().numel() == 1
        assert sample["id"][:4].unique().numel() == 4


def test_prompt_groups_with_strings_nested_keys_and_tensor_storage():
    rb = _group_rb(PromptGroupSampler(num_groups=2, group_key="q"), batch_size=4)
    rb.extend(TensorDict({"q": NonTensorStack(*"aaabbbccc"), "v": torch.arange(9)}, [9]))
    assert len(set(rb.sample()["q"])) == 2
    rb = ReplayBuffer(
        storage=LazyTensorStorage(6),
        sampler=PromptGroupSampler(num_groups=2, group_key=("text", "prompt")),
        batch_size=4,
    )
    rb.extend(TensorDict({"text": {"prompt": torch.tensor([0, 0, 1, 1, 2, 2])}}, [6]))
    assert rb.sample()["text", "prompt"].unique().numel() == 2


def test_prompt_group_strategies():
    recent = _group_rb(
        PromptGroupSampler(samples_per_group=2, group_key="prompt", strategy="recency"),
        batch_size=2,
        max_size=4,
    )
    recent.extend(_prompts(0, 0, 0, 0))
    recent.add(TensorDict({"prompt": 0, "id": 4}, []))
    assert sorted(recent.sample()["id"].tolist()) == [3, 4]
    rewards = TensorDict(
        {
            "prompt": torch.tensor([0, 0, 0, 1, 1, 1]),
            "next": {"reward": torch.tensor([1.0, 2.0, 3.0, 9.0, 8.0, 7.0])},
        },
        [6],
    )
    best = _group_rb(
        PromptGroupSampler(samples_per_group=2, group_key="prompt", strategy="reward"),
        batch_size=4,
    )
    best.extend(rewards)
    assert sorted(best.sample()["next", "reward"].tolist()) == [2.0, 3.0, 8.0, 9.0]
    spread = _group_rb(
        PromptGroupSampler(num_groups=1, group_key="prompt", strategy="variance"), batch_size=3
    )
    spread.extend(
        TensorDict(
            {
                "prompt": torch.zeros(4, dtype=torch.long),
                "next": {"reward": torch.tensor([2.0, -7.0, 10.0, 1.0])},
            },
            [4],
        )
    )
    # the highest, the lowest, then the second highest
    assert sorted(spread.sample()["next", "reward"].tolist()) == [-7.0, 2.0, 10.0]


def test_prompt_group_index_follows_writes_from_any_buffer():
    storage = LazyTensorStorage(6)
    reader = ReplayBuffer(
        storage=storage,
        sampler=PromptGroupSampler(num_groups=2, group_key="prompt"),
        batch_size=4,
    )
    writer = ReplayBuffer(storage=storage)
    writer.extend(TensorDict({"prompt": torch.tensor([0, 0, 0, 1, 1, 1])}, [6]))
    reader.sample()
    writer.add(TensorDict({"prompt": 1}, []))  # slot 0 moves from group 0 to group 1
    _, counts = reader.sample()["prompt"].unique(return_counts=True)
    assert counts.tolist() == [2, 2]


def test_prompt_group_cache_is_reused_between_writes(monkeypatch):
    sampler = PromptGroupSampler(num_groups=1, group_key="prompt")
    rb = _group_rb(sampler, batch_size=2)
    rb.extend(_prompts(0, 0, 1, 1))
    sampler.sample(rb.storage, 2)
    calls = []
    monkeypatch.setattr(rb.storage, "get", lambda index: calls.append(index))
    sampler.sample(rb.storage, 2)
    assert not calls
    assert pickle.loads(pickle.dumps(sampler))._group_index is None


def test_prompt_group_small_group_and_errors():
    rb = _group_rb(PromptGroupSampler(samples_per_group=4, group_key="prompt"), batch_size=4)
    rb.extend(_prompts(3, 3))
    with pytest.warns(UserWarning, match="with replacement"):
        assert rb.sample().shape == (4,)
    rb = _group_rb(PromptGroupSampler(num_groups=3, group_key="prompt"), batch_size=8)
    rb.extend(_prompts(0, 0, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="divisible by num_groups=3"):
        rb.sample()
    rb = _group_rb(PromptGroupSampler(num_groups=4, group_key="prompt"), batch_size=8)
    rb.extend(_prompts(0, 1))
    with pytest.raises(ValueError, match="holds 2 distinct values"):
        rb.sample()
    plain = ReplayBuffer(
        storage=ListStorage(4),
        sampler=PromptGroupSampler(num_groups=1, group_key="prompt"),
        batch_size=2,
    )
    plain.extend(_prompts(0, 0))
    with pytest.raises(TypeError, match="Plain ListStorage is not supported"):
        plain.sample()
    multi = ReplayBuffer(
        storage=LazyTensorStorage(20, ndim=2),
        sampler=PromptGroupSampler(num_groups=1, group_key="prompt"),
        batch_size=2,
    )
    multi.extend(TensorDict({"prompt": torch.zeros(2, 5, dtype=torch.long)}, [2, 5]))
    with pytest.raises(NotImplementedError, match="ndim=2"):
        multi.sample()
    text_reward = _group_rb(
        PromptGroupSampler(num_groups=1, group_key="prompt", strategy="reward", reward_key="r"),
        batch_size=2,
    )
    text_reward.extend(
        TensorDict({"prompt": torch.tensor([0, 0]), "r": NonTensorStack("x", "y")}, [2])
    )
    with pytest.raises(TypeError, match="requires reward_key 'r'"):
        text_reward.sample()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"num_groups": 2, "samples_per_group": 2}, ValueError),
        ({}, ValueError),
        ({"num_groups": 2, "strategy": "bogus"}, ValueError),
        ({"num_groups": 0}, ValueError),
        ({"num_groups": True}, TypeError),
        ({"num_groups": 1.5}, TypeError),
    ],
)
def test_prompt_group_construction_errors(kwargs, error):
    with pytest.raises(error):
        PromptGroupSampler(group_key="prompt", **kwargs)


def test_prompt_group_state_is_empty_and_restores():
    sampler = PromptGroupSampler(num_groups=1, group_key="prompt")
    assert sampler.state_dict() == {}
    sampler.load_state_dict({"unknown": 1})
    assert not hasattr(sampler, "unknown")


def _versions(*values: float) -> TensorDict:
    n = len(values)
    return TensorDict({"policy_version": torch.tensor(values), "slot": torch.arange(n)}, [n])


def test_staleness_weights_favour_fresh_items():
    torch.manual_seed(0)
    sampler = StalenessAwareSampler()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(200), sampler=sampler, batch_size=64)
    rb.extend(_versions(*[0.0] * 100, *[9.0] * 100))
    sampler.consumer_version = 10
    fresh = sum(int((rb.sample()["policy_version"] == 9.0).sum()) for _ in range(50))
    # weights 1/1 against 1/10: about 91% of draws are fresh
    assert 0.85 < fresh / (50 * 64) < 0.96


def test_staleness_limit_and_info():
    sampler = StalenessAwareSampler(max_staleness=3)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sampler=sampler, batch_size=16)
    rb.extend(_versions(*[0.0] * 10, *[8.0] * 10))
    sampler.consumer_version = 10
    sample, info = rb.sample(return_info=True)
    assert (sample["policy_version"] == 8.0).all()
    assert (info["staleness"] == 2.0).all()
    sampler.consumer_version = 100
    with pytest.raises(RuntimeError, match="max_staleness=3"):
        rb.sample()


def test_staleness_version_and_state():
    sampler = StalenessAwareSampler(max_staleness=7)
    assert sampler.consumer_version == 0
    assert sampler.increment_consumer_version() == 1
    sampler.consumer_version = 42
    other = StalenessAwareSampler()
    other.load_state_dict(sampler.state_dict())
    assert (other.consumer_version, other.max_staleness) == (42, 7)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(5), sampler=other, batch_size=2)
    rb.extend(TensorDict({"obs": torch.zeros(5)}, [5]))
    with pytest.raises(KeyError, match="policy_version"):
        rb.sample()
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessAwareSampler(max_staleness=-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "consumer_version=42" in repr(sampler)
