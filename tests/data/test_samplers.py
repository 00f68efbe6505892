import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
)


def _filled(n=10, capacity=10):
    storage = LazyTensorStorage(capacity)
    storage.set(slice(0, n), torch.arange(n))
    return storage


def test_random_sampler_covers_stored_items_only():
    storage = _filled(6, capacity=20)
    index, info = RandomSampler().sample(storage, 1000)
    assert info == {}
    assert set(index.tolist()) == set(range(6))


def test_without_replacement_epochs_and_shuffle():
    storage = _filled(10)
    sampler = SamplerWithoutReplacement(shuffle=False)
    first = [sampler.sample(storage, 4)[0].tolist() for _ in range(3)]
    assert first == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert sampler.ran_out
    assert sampler.sample(storage, 4)[0].tolist() == [0, 1, 2, 3]
    assert not sampler.ran_out
    shuffled = SamplerWithoutReplacement()
    seen = torch.cat([shuffled.sample(storage, 3)[0] for _ in range(4)])
    assert sorted(seen.tolist()) == list(range(10))


def test_without_replacement_items_written_during_an_epoch_join_it():
    storage = _filled(4, capacity=10)
    sampler = SamplerWithoutReplacement(shuffle=False)
    assert sampler.sample(storage, 2)[0].tolist() == [0, 1]
    storage.set(slice(4, 6), torch.tensor([4, 5]))
    assert sampler.sample(storage, 6)[0].tolist() == [2, 3, 4, 5]
    assert sampler.ran_out
    # the next epoch is drawn at once, over every stored item
    assert sampler._sample_list.tolist() == [0, 1, 2, 3, 4, 5]


def test_without_replacement_restarts_when_storage_shrinks():
    storage = _filled(6, capacity=10)
    sampler = SamplerWithoutReplacement(shuffle=False)
    sampler.sample(storage, 2)
    storage._empty()
    storage.set(slice(0, 3), torch.tensor([7, 8, 9]))
    assert sampler.sample(storage, 5)[0].tolist() == [0, 1, 2]


def test_without_replacement_epochs_never_leave_an_empty_list():
    storage = _filled(10)
    for drop_last in (False, True):
        sampler = SamplerWithoutReplacement(drop_last=drop_last)
        sizes = [sampler.sample(storage, 4)[0].numel() for _ in range(6)]
        assert sizes == ([4, 4, 2] * 2 if not drop_last else [4] * 6)
        assert sampler._sample_list.numel() > 0


def test_without_replacement_state_dict_copies():
    storage = _filled(10)
    sampler = SamplerWithoutReplacement()
    sampler.sample(storage, 4)
    state = sampler.state_dict()
    other = SamplerWithoutReplacement()
    other.load_state_dict(state)
    before = other._sample_list.clone()
    state["_sample_list"].fill_(-1)
    assert torch.equal(other._sample_list, before) and other.len_storage == 10


def test_without_replacement_batch_larger_than_storage_with_drop_last():
    with pytest.raises(
        ValueError, match="The batch size \\(4\\) is greater than the storage capacity"
    ):
        SamplerWithoutReplacement(drop_last=True).sample(_filled(3), 4)


def test_without_replacement_drop_last_too_few_items():
    with pytest.raises(ValueError, match="drop_last"):
        SamplerWithoutReplacement(drop_last=True).sample(_filled(3), 4)


def test_without_replacement_state_dict():
    storage = _filled(10)
    sampler = SamplerWithoutReplacement()
    sampler.sample(storage, 3)
    other = SamplerWithoutReplacement()
    other.load_state_dict(sampler.state_dict())
    assert torch.equal(other.sample(storage, 3)[0], sampler.sample(storage, 3)[0])


def _prioritized(n=8, alpha=1.0, beta=1.0, **kwargs):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(n),
        sampler=PrioritizedSampler(n, alpha=alpha, beta=beta, eps=0.0, **kwargs),
    )
    rb.extend(torch.arange(n))
    return rb


def test_prioritized_frequencies_follow_priorities():
    rb = _prioritized(4, alpha=1.0)
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    data = rb.sample(40000)
    freq = torch.bincount(data, minlength=4).float() / 40000
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.015)


def test_prioritized_alpha_zero_is_uniform():
    rb = _prioritized(4, alpha=0.0)
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 100.0, 1.0, 1.0]))
    freq = torch.bincount(rb.sample(20000), minlength=4).float() / 20000
    assert torch.allclose(freq, torch.full((4,), 0.25), atol=0.02)


def test_importance_weights_normalised_by_largest():
    rb = _prioritized(4, alpha=1.0, beta=0.5)
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 4.0, 16.0, 4.0]))
    data, info = rb.sample(2000, return_info=True)
    weights = info["priority_weight"]
    expected = (torch.tensor([1.0, 4.0, 16.0, 4.0])[data] / 1.0) ** -0.5
    assert torch.allclose(weights, expected)
    assert weights.max() <= 1.0 and weights.dtype == torch.float32
    assert torch.equal(info["index"], data)


def test_new_items_get_max_priority():
    rb = _prioritized(8)
    rb.empty()
    rb.extend(torch.arange(4))
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 50.0]))
    rb.extend(torch.tensor([4]))
    leaves = rb.sampler._tree.leaves()
    assert leaves[4] == 50.0
    assert rb.sampler.max_priority == 50.0


def test_max_priority_within_buffer():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(2),
        sampler=PrioritizedSampler(2, 1.0, 1.0, eps=0.0, max_priority_within_buffer=True),
    )
    rb.extend(torch.arange(2))
    rb.update_priority(torch.arange(2), torch.tensor([9.0, 2.0]))
    rb.extend(torch.tensor([5]))
    assert rb.sampler._tree.leaves()[0] == 2.0
    assert rb.sampler.max_priority == pytest.approx(2.0)


@pytest.mark.parametrize(
    "bad, match",
    [
        (0.0, "a priority of 0 needs eps > 0.*eps=0"),
        (-1.0, ">= 0, got -1.0"),
        (float("nan"), "NaN"),
        (float("inf"), "inf"),
    ],
)
def test_bad_priorities_raise(bad, match):
    rb = _prioritized(4)  # eps=0
    before = rb.sampler._tree.leaves().clone()
    with pytest.raises(ValueError, match=match):
        rb.update_priority(torch.arange(2), torch.tensor([1.0, bad]))
    assert torch.equal(before, rb.sampler._tree.leaves())


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_priorities_raise_with_eps(bad):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4), sampler=PrioritizedSampler(4, alpha=0.7, beta=0.5)
    )
    rb.extend(torch.arange(4))
    with pytest.raises(ValueError, match="finite and >= 0"):
        rb.update_priority(torch.arange(2), torch.tensor([0.0, bad]))


def test_zero_priority_accepted_when_eps_positive():
    eps = 1e-3
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4),
        sampler=PrioritizedSampler(4, alpha=0.5, beta=1.0, eps=eps),
    )
    rb.extend(torch.arange(4))
    rb.update_priority(torch.tensor([0, 1]), torch.tensor([0.0, 1.0]))
    leaves = rb.sampler._tree.leaves()
    assert leaves[0].item() == pytest.approx(eps**0.5)
    assert leaves[1].item() == pytest.approx((1 + eps) ** 0.5)
    _, info = rb.sample(64, return_info=True)
    assert torch.isfinite(info["priority_weight"]).all()
    rb.update_priority(torch.arange(4), 0.0)  # a scalar 0 for all
    assert torch.allclose(
        rb.sampler._tree.leaves()[:4], torch.full((4,), eps**0.5, dtype=torch.float64)
    )


def test_zero_td_error_updates_tensordict_priority():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(10), batch_size=4
    )
    rb.extend(TensorDict({"a": torch.arange(10), "td_error": torch.ones(10)}, [10]))
    sample = rb.sample()
    sample["td_error"] = torch.zeros(4)
    rb.update_tensordict_priority(sample)
    leaves = rb.sampler._tree.leaves()
    expected = torch.full((4,), 1e-8**0.7, dtype=torch.float64)
    assert torch.allclose(leaves[sample["index"]], expected)
    # written data carrying zero priorities is accepted too
    rb.extend(TensorDict({"a": torch.arange(2), "td_error": torch.zeros(2)}, [2]))


def test_zero_priority_underflowing_tree_value_raises():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4),
        sampler=PrioritizedSampler(4, alpha=100.0, beta=1.0, eps=1e-8),
    )
    rb.extend(torch.arange(4))
    with pytest.raises(ValueError, match="underflows"):
        rb.update_priority(torch.tensor([0]), torch.tensor([0.0]))


def test_priority_index_out_of_range():
    rb = _prioritized(4)
    with pytest.raises(IndexError, match="out of range"):
        rb.update_priority(torch.tensor([7]), torch.tensor([1.0]))


def test_priority_shapes_and_reduction():
    rb = _prioritized(4)
    rb.update_priority(torch.arange(4), 3.0)
    assert torch.equal(rb.sampler._tree.leaves(), torch.full((4,), 3.0, dtype=torch.float64))
    rb.update_priority(torch.arange(2), torch.tensor([[1.0, 5.0], [2.0, 3.0]]))
    assert rb.sampler._tree.leaves()[:2].tolist() == [5.0, 3.0]
    mean = _prioritized(4, reduction="mean")
    mean.update_priority(torch.arange(2), torch.tensor([[1.0, 5.0], [2.0, 4.0]]))
    assert mean.sampler._tree.leaves()[:2].tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match="shape mismatch"):
        rb.update_priority(torch.arange(3), torch.ones(2))
    with pytest.raises(ValueError, match="reduction"):
        PrioritizedSampler(4, 1.0, 1.0, reduction="bad")


def test_prioritized_sampler_state_dict():
    rb = _prioritized(6)
    rb.update_priority(torch.arange(6), torch.arange(1.0, 7.0))
    sampler = PrioritizedSampler(6, 1.0, 1.0)
    sampler.load_state_dict(rb.sampler.state_dict())
    assert torch.equal(sampler._tree.leaves(), rb.sampler._tree.leaves())
    assert float(sampler._tree.min()) == 1.0


def test_mark_update_on_setitem_resets_priority():
    rb = _prioritized(4)
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 20.0]))
    rb.update_priority(torch.tensor([3]), torch.tensor([1.0]))
    rb[0] = torch.tensor(100)
    assert rb.sampler._tree.leaves()[0] == 20.0


def test_tensordict_prioritized_buffer_priority_key_on_extend():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, eps=0.0, storage=LazyTensorStorage(10), batch_size=5000
    )
    data = TensorDict({"obs": torch.arange(4), "td_error": torch.tensor([1.0, 1.0, 1.0, 7.0])}, [4])
    rb.extend(data)
    assert data["index"].tolist() == [0, 1, 2, 3]
    freq = torch.bincount(rb.sample()["obs"], minlength=4).float() / 5000
    assert freq[3] == pytest.approx(0.7, abs=0.03)


def test_update_tensordict_priority_after_extend_index():
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(10))
    data = TensorDict({"obs": torch.arange(3)}, [3])
    rb.extend(data)
    data["td_error"] = torch.tensor([1.0, 2.0, 3.0])
    rb.update_tensordict_priority(data)
    assert rb.sampler._tree.leaves()[:3].tolist() == pytest.approx([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="td_error"):
        rb.update_tensordict_priority(TensorDict({"index": torch.arange(2)}, [2]))


def test_prioritized_buffer_with_list_storage():
    rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5)
    rb.extend([torch.ones(2) * i for i in range(5)])
    data, info = rb.sample(3, return_info=True)
    assert data.shape == (3, 2) and info["priority_weight"].shape == (3,)
    rb.update_priority(info["index"], torch.tensor([0.5, 1.0, 2.0]))


def test_beta_setter():
    sampler = PrioritizedSampler(4, 0.5, 0.4)
    sampler.beta = 1.0
    assert sampler.beta == 1.0 and sampler.alpha == 0.5


def test_update_priority_duplicate_indices_last_value_wins():
    rb = _prioritized(4)
    rb.update_priority(torch.tensor([1, 1, 2, 1]), torch.tensor([5.0, 7.0, 3.0, 2.0]))
    assert rb.sampler._tree.leaves().tolist() == [1.0, 2.0, 3.0, 1.0]
    assert rb.sampler.max_priority == 7.0
    assert float(rb.sampler._tree.min()) == 1.0


def test_priorities_and_weights_stay_exact_after_many_updates():
    n, alpha, beta, eps = 3000, 0.7, 0.5, 1e-8
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=alpha, beta=beta, eps=eps, storage=LazyTensorStorage(n), batch_size=64
    )
    rb.extend(TensorDict({"obs": torch.arange(n)}, [n]))
    generator = torch.Generator().manual_seed(0)
    latest = torch.ones(n)
    for _ in range(200):
        sample = rb.sample()
        priority = torch.rand(64, generator=generator) * 5 + 0.001
        rb.update_priority(sample["index"], priority)
        for position, item in enumerate(sample["index"].tolist()):
            latest[item] = priority[position]
    leaves = rb.sampler._tree.leaves()
    expected = (latest.double() + eps) ** alpha
    assert torch.allclose(leaves, expected, rtol=1e-14, atol=0)
    assert rb.sampler._tree.min_value() == float(leaves.min())
    sample = rb.sample(4000)
    value = leaves[sample["index"]]
    weights = (value / leaves.min()) ** -beta
    assert torch.allclose(sample["priority_weight"].double(), weights, rtol=1e-6)
    assert torch.equal(sample["obs"], sample["index"])


def test_weights_follow_the_minimum_when_its_item_is_raised():
    rb = _prioritized(4, alpha=1.0, beta=1.0)
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 4.0, 8.0]))
    data, info = rb.sample(2000, return_info=True)
    assert torch.allclose(info["priority_weight"], 1.0 / torch.tensor([1.0, 2.0, 4.0, 8.0])[data])
    rb.update_priority(torch.tensor([0]), torch.tensor([16.0]))
    data, info = rb.sample(2000, return_info=True)
    expected = 2.0 / torch.tensor([16.0, 2.0, 4.0, 8.0])[data]
    assert torch.allclose(info["priority_weight"], expected)
    assert info["priority_weight"].max() <= 1.0


def test_prioritized_draws_stay_among_stored_items():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100), sampler=PrioritizedSampler(100, alpha=0.7, beta=0.5)
    )
    rb.extend(torch.arange(10))
    rb.update_priority(torch.arange(10), torch.rand(10) + 0.1)
    data, info = rb.sample(5000, return_info=True)
    assert int(data.max()) < 10 and torch.equal(info["index"], data)
    assert bool((info["priority_weight"] > 0).all()) and info["priority_weight"].max() <= 1.0
