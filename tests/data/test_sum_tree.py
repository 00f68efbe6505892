import pickle

import pytest
import torch

from tdrl.data.replay_buffers.sum_tree import (
    MaxSegmentTree,
    MinSegmentTree,
    PriorityTree,
    SumSegmentTree,
)


@pytest.mark.parametrize("capacity", [1, 5, 64, 1000, 70_000])
def test_sum_tree_search_matches_cumsum(capacity):
    values = torch.rand(capacity, dtype=torch.float64)
    values[::3] = 0.0
    values[-1] = 0.5
    tree = SumSegmentTree(capacity, fanout=8, top_size=16)
    tree.update(torch.arange(capacity), values)
    assert float(tree.total()) == pytest.approx(float(values.sum()))
    mass = torch.rand(500, dtype=torch.float64) * values.sum()
    expected = torch.searchsorted(values.cumsum(0), mass, right=True).clamp(max=capacity - 1)
    assert torch.equal(tree.scan_lower_bound(mass), expected)


def test_trees_batch_update_with_duplicates():
    tree = MinSegmentTree(100, fanout=4, top_size=4)
    tree.update(torch.tensor([5, 5, 70]), torch.tensor([3.0, 3.0, 2.0]))
    assert float(tree.min()) == 2.0
    tree.update(torch.tensor([70]), 9.0)
    assert float(tree.min()) == 3.0
    top = MaxSegmentTree(100, fanout=4, top_size=4)
    top.update(torch.tensor([1, 99]), torch.tensor([4.0, 8.0]))
    assert float(top.max()) == 8.0
    assert float(top.query(0, 50)) == 4.0


def test_tree_query_ranges_and_fill():
    tree = SumSegmentTree(10)
    tree[torch.arange(10)] = torch.ones(10)
    assert float(tree.query(2, 5)) == 3.0
    assert float(tree.query()) == 10.0
    tree.fill_()
    assert float(tree.total()) == 0.0


def test_tree_index_out_of_range():
    tree = SumSegmentTree(10)
    with pytest.raises(IndexError, match="out of range"):
        tree.update(torch.tensor([10]), 1.0)


def test_tree_bad_arguments():
    with pytest.raises(ValueError, match="capacity"):
        SumSegmentTree(0)
    with pytest.raises(ValueError, match="fanout"):
        SumSegmentTree(10, fanout=1)


def test_priority_tree_matches_separate_trees():
    capacity = 5000
    tree = PriorityTree(capacity, fanout=16, top_size=32)
    sums = SumSegmentTree(capacity)
    mins = MinSegmentTree(capacity)
    written = torch.randperm(capacity)[:3000]
    values = torch.rand(3000, dtype=torch.float64) + 0.01
    for chunk in range(0, 3000, 256):
        index, value = written[chunk : chunk + 256], values[chunk : chunk + 256]
        tree.update(index, value)
        sums.update(index, value)
        mins.update(index, value)
    assert float(tree.total()) == pytest.approx(float(sums.total()))
    assert float(tree.min()) == float(mins.min())
    mass = torch.rand(1000, dtype=torch.float64) * sums.total()
    index, value = tree.scan_lower_bound(mass)
    assert torch.equal(index, sums.scan_lower_bound(mass))
    assert torch.equal(value, sums.leaves()[index])


def test_priority_tree_sample_and_load():
    tree = PriorityTree(8)
    tree.update(torch.arange(8), torch.tensor([0.0] * 7 + [1.0]))
    index, value = tree.sample(50, torch.Generator().manual_seed(0))
    assert index.eq(7).all() and value.eq(1.0).all()
    other = PriorityTree(8)
    other.load_leaves(tree.leaves().clone())
    assert float(other.total()) == 1.0 and float(other.min()) == 1.0
    other.fill_()
    assert float(other.min()) == float("inf")


def test_load_leaves_on_padded_levels():
    values = torch.rand(5000, dtype=torch.float64) + 0.5
    tree = PriorityTree(5000, fanout=16, top_size=32)
    tree.load_leaves(values)
    assert float(tree.total()) == pytest.approx(float(values.sum()))
    assert float(tree.min()) == float(values.min())
    index, _ = tree.scan_lower_bound(
        torch.tensor([0.1, float(values.sum()) - 1e-6], dtype=torch.float64)
    )
    assert index.tolist() == [0, 4999]
    index, _ = tree.scan_lower_bound(torch.tensor([1e9], dtype=torch.float64))
    assert 0 <= int(index) < 5000


def _naive_search(leaves, mass):
    return torch.searchsorted(leaves.cumsum(0), mass, right=True).clamp(max=leaves.numel() - 1)


@pytest.mark.parametrize(
    "capacity, fanout, top_size",
    [(1, 64, 16384), (100, 4, 4), (1000, 8, 16), (5000, 16, 32), (70_000, 64, 16384)],
)
def test_priority_tree_matches_naive_reference_after_batch_updates(capacity, fanout, top_size):
    generator = torch.Generator().manual_seed(capacity)
    tree = PriorityTree(capacity, fanout=fanout, top_size=top_size)
    reference = torch.zeros(capacity, dtype=torch.float64)
    for batch in (3, 256, 2000):
        # duplicates on purpose: the leaf keeps one value, the levels must agree with it
        index = torch.randint(capacity, (batch,), generator=generator)
        index[: batch // 3] = index[0]
        value = torch.rand(batch, dtype=torch.float64, generator=generator) + 0.01
        tree.update(index, value)
        previous, reference = reference, tree.leaves().clone()
        written = torch.zeros(capacity, dtype=torch.bool)
        written[index] = True
        assert torch.equal(reference[~written], previous[~written])
        assert torch.isin(reference[written], value).all()
        assert float(tree.total()) == pytest.approx(float(reference.sum()), rel=1e-12)
        assert float(tree.min()) == float(reference[reference > 0].min())
        mass = torch.rand(300, dtype=torch.float64, generator=generator) * reference.sum()
        index, found = tree.scan_lower_bound(mass)
        assert torch.equal(index, _naive_search(reference, mass))
        assert torch.equal(found, reference[index])
    drawn, found = tree.sample(500, generator)
    assert torch.equal(found, reference[drawn]) and bool((found > 0).all())


def test_priority_tree_zeroed_leaves_leave_the_minimum():
    tree = PriorityTree(300, fanout=8, top_size=8)
    tree.update(torch.arange(300), torch.arange(1, 301, dtype=torch.float64))
    tree.update(torch.tensor([0, 1, 299]), 0.0)
    assert float(tree.min()) == 3.0
    assert float(tree.total()) == pytest.approx(sum(range(1, 301)) - 1 - 2 - 300)
    index, _ = tree.sample(2000, torch.Generator().manual_seed(0))
    assert not torch.isin(index, torch.tensor([0, 1, 299])).any()
    tree.update(torch.tensor([1]), 0.5)
    assert float(tree.min()) == 0.5


def test_priority_tree_scratch_buffers_do_not_leak_into_results():
    tree = PriorityTree(1000, fanout=16)
    tree.update(torch.arange(1000), torch.rand(1000, dtype=torch.float64) + 0.1)
    first_index, first_value = tree.sample(64, torch.Generator().manual_seed(1))
    kept = first_index.clone(), first_value.clone()
    tree.sample(64, torch.Generator().manual_seed(2))
    tree.update(first_index, 5.0)
    assert torch.equal(first_index, kept[0]) and torch.equal(first_value, kept[1])
    big_index, _ = tree.sample(5000, torch.Generator().manual_seed(3))
    assert big_index.shape == (5000,) and int(big_index.max()) < 1000
    copied = pickle.loads(pickle.dumps(tree))
    assert torch.equal(copied.leaves(), tree.leaves())
    assert torch.equal(
        copied.scan_lower_bound(torch.tensor([10.0]))[0],
        tree.scan_lower_bound(torch.tensor([10.0]))[0],
    )
