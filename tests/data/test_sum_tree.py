import pickle

import pytest
import torch

from tdrl.data.replay_buffers.sum_tree import (
    MaxSegmentTree,
    MinSegmentTree,
    PriorityTree,
    SumSegmentTree,
    WideTree,
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


def _rebuilt(tree):
    other = PriorityTree(tree.capacity, fanout=tree.fanout, top_size=tree._top_store.numel() - 1)
    other.load_leaves(tree.leaves().clone())
    return other


def _naive_min(tree):
    leaves = tree.leaves()
    positive = leaves[leaves > 0]
    return float(positive.min()) if positive.numel() else float("inf")


@pytest.mark.parametrize("capacity, fanout, top_size", [(5000, 16, 32), (70_000, 64, 16384)])
def test_priority_tree_stays_exact_after_many_updates(capacity, fanout, top_size):
    generator = torch.Generator().manual_seed(7)
    tree = PriorityTree(capacity, fanout=fanout, top_size=top_size)
    tree.update(torch.arange(capacity), 1.0)
    for step in range(300):
        if step % 3 == 0:
            # the usual loop: update exactly the leaves just drawn
            index, _ = tree.sample(256, generator)
        else:
            index = torch.randint(capacity, (256,), generator=generator)
        value = torch.rand(256, dtype=torch.float64, generator=generator) * 10 + 0.01
        tree.update(index, value)
        assert tree.min_value() == _naive_min(tree)
    rebuilt = _rebuilt(tree)
    # every level is bit-identical to a fresh rebuild from the leaves
    for ours, fresh in zip(tree._levels, rebuilt._levels):
        assert torch.equal(ours, fresh)
    assert torch.equal(tree.total(), rebuilt.total())


def test_priority_tree_minimum_after_its_leaf_is_raised_emptied_or_undercut():
    tree = PriorityTree(10_000, fanout=16, top_size=64)
    values = torch.rand(10_000, dtype=torch.float64) + 1.0
    tree.update(torch.arange(10_000), values)
    holder = int(values.argmin())
    assert tree.min_value() == float(values.min())
    # the holder is raised: the next minimum comes from a rescan
    tree.update(torch.tensor([holder]), 5.0)
    assert tree.min_value() == _naive_min(tree)
    # a written value undercuts it, then that leaf is emptied
    tree.update(torch.tensor([3, 4]), torch.tensor([0.25, 0.5], dtype=torch.float64))
    assert tree.min_value() == 0.25
    tree.update(torch.tensor([3]), 0.0)
    assert tree.min_value() == 0.5
    # a duplicated index whose lower value is overwritten does not count
    tree.update(torch.tensor([9, 9]), torch.tensor([0.125, 2.0], dtype=torch.float64))
    assert tree.leaves()[9] == 2.0 and tree.min_value() == 0.5
    # large writes, then emptying everything
    tree.update(torch.arange(2000, 10_000), torch.full((8000,), 0.375, dtype=torch.float64))
    assert tree.min_value() == 0.375
    tree.update(torch.arange(10_000), 0.0)
    assert tree.min_value() == float("inf") and float(tree.min()) == float("inf")
    tree.update(torch.tensor([123]), 4.0)
    assert tree.min_value() == 4.0
    copied = pickle.loads(pickle.dumps(tree))
    assert copied.min_value() == 4.0


@pytest.mark.parametrize("count", [256, 40_000])
def test_priority_tree_duplicate_indices_keep_the_last_value(count):
    tree = PriorityTree(1000, fanout=16, top_size=64)
    index = torch.randint(1000, (count,), generator=torch.Generator().manual_seed(count))
    index[-3:] = torch.tensor([5, 5, 5])
    value = torch.arange(1, count + 1, dtype=torch.float64)
    tree.update(index, value)
    last = torch.zeros(1000, dtype=torch.float64)
    for position, leaf in enumerate(index.tolist()):
        last[leaf] = value[position]
    assert torch.equal(tree.leaves(), last)
    assert tree.leaves()[5] == float(count)
    for ours, fresh in zip(tree._levels, _rebuilt(tree)._levels):
        assert torch.equal(ours, fresh)


def test_priority_tree_update_of_a_draw_changed_in_place_is_still_exact():
    tree = PriorityTree(4096, fanout=64)
    tree.update(torch.arange(4096), torch.rand(4096, dtype=torch.float64) + 0.5)
    generator = torch.Generator().manual_seed(0)
    index, _ = tree.sample(128, generator)
    # the drawn index tensor is modified before the update: its blocks changed too
    index.copy_(torch.randint(4096, (128,), generator=generator))
    tree.update(index, 9.0)
    drawn, _ = tree.sample(128, generator)
    tree.update(drawn, 3.0)
    for ours, fresh in zip(tree._levels, _rebuilt(tree)._levels):
        assert torch.equal(ours, fresh)


def test_priority_tree_draws_stay_below_the_limit():
    tree = PriorityTree(1000, fanout=16, top_size=64)
    tree.update(torch.arange(600), torch.rand(600, dtype=torch.float64) + 0.1)
    index, value = tree.sample(5000, torch.Generator().manual_seed(0), limit=600)
    assert int(index.max()) < 600 and torch.equal(value, tree.leaves()[index])
    # masses at or past the total still give valid leaves, and their own values
    index, value = tree.scan_lower_bound(torch.tensor([1e9, float(tree.total())]))
    assert int(index.max()) < 1000 and torch.equal(value, tree.leaves()[index])


def test_segment_trees_share_one_design():
    # the public trees are views over the same levels: one update and search code path
    assert issubclass(SumSegmentTree, PriorityTree)
    for cls in (SumSegmentTree, MinSegmentTree, MaxSegmentTree, PriorityTree):
        assert issubclass(cls, WideTree)


@pytest.mark.parametrize("count", [7, 3000])
def test_min_max_trees_match_the_leaves_after_batch_and_large_writes(count):
    generator = torch.Generator().manual_seed(3)
    mins, maxs = (
        MinSegmentTree(5000, fanout=8, top_size=8),
        MaxSegmentTree(5000, fanout=8, top_size=8),
    )
    for _ in range(5):
        index = torch.randint(5000, (count,), generator=generator)
        value = torch.randn(count, dtype=torch.float64, generator=generator)
        mins.update(index, value)
        maxs.update(index, value)
        assert float(mins.min()) == float(mins.leaves().min())
        assert float(maxs.max()) == float(maxs.leaves().max())
        assert float(mins.query(100, 2000)) == float(mins.leaves()[100:2000].min())


def test_sum_tree_fill_with_a_value_and_other_dtypes():
    tree = SumSegmentTree(10, dtype=torch.float32)
    tree.fill_(2.0)
    assert float(tree.total()) == 20.0 and tree.leaves().dtype == torch.float32
    assert tree.scan_lower_bound(torch.tensor([3.0, 19.5])).tolist() == [1, 9]
    tree.update(3, 0.0)
    assert float(tree.query(0, 5)) == 8.0
    with pytest.raises(TypeError, match="floating point"):
        SumSegmentTree(10, dtype=torch.int64)


def test_priority_tree_write_is_update_without_conversions():
    a, b = PriorityTree(100, fanout=4, top_size=4), PriorityTree(100, fanout=4, top_size=4)
    index = torch.tensor([5, 7, 5, 99])
    value = torch.tensor([1.0, 2.0, 3.0, 0.5], dtype=torch.float64)
    a.write(index, value)
    b.update(index.tolist(), value.float())
    assert torch.equal(a.leaves(), b.leaves()) and float(a.total()) == 5.5
    assert a.min_value() == b.min_value() == 0.5
