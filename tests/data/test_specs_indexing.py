"""Spec indexing (index_select, negative steps, dynamic dims), unsqueeze, enumerate and cardinality."""

from __future__ import annotations

import pytest
import torch

from tdrl.data import (
    Binary,
    Bounded,
    BoundedDiscrete,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
)


def test_index_select_along_batch_dims_keeps_bounds_and_masks():
    low = torch.arange(5.0).unsqueeze(-1).expand(5, 2)
    spec = Bounded(low, low + 1, shape=(5, 2))
    index = torch.tensor([0, 3])
    picked = torch.index_select(spec, 0, index)
    assert picked.shape == (2, 2) and picked.low[:, 0].tolist() == [0.0, 3.0]
    assert torch.index_select(spec, dim=1, index=torch.tensor([1])).shape == (5, 1)
    mask = torch.tensor([[True, False, True], [False, True, True], [True, True, False]])
    for masked in (Categorical(3, shape=(3,), mask=mask), OneHot(3, shape=(3, 3), mask=mask)):
        selected = masked.index_select(0, torch.tensor([2, 0]))
        assert torch.equal(selected.mask, mask[[2, 0]])
    empty = Unbounded((5, 4)).index_select(0, torch.tensor([], dtype=torch.long))
    assert empty.shape == (0, 4)


def test_index_select_on_composites_and_errors():
    spec = Composite(obs=Bounded(0.0, 1.0, shape=(5, 3)), act=OneHot(4, shape=(5, 4)), shape=(5,))
    picked = torch.index_select(spec, 0, torch.tensor([0, 2, 4]))
    assert picked.shape == (3,) and picked["act"].shape == (3, 4)
    assert picked.rand()["obs"].shape == (3, 3)
    with pytest.raises(ValueError, match="Cannot index_select along the last dimension"):
        torch.index_select(OneHot(3, shape=(5, 3)), -1, torch.tensor([0, 1]))
    with pytest.raises(IndexError):
        torch.index_select(Categorical(4, shape=(5,)), 0, torch.tensor([10]))
    with pytest.raises(TypeError, match="1-D integer index"):
        Unbounded((5,)).index_select(0, torch.tensor([0.5]))


def test_negative_step_slices_index_like_reversed_tensors():
    spec = Unbounded((5, 3))
    assert spec[10:1:-1].shape == (3, 3) and spec[::-2].shape == (3, 3)
    bounds = torch.arange(5.0).unsqueeze(-1).expand(5, 3)
    bounded = Bounded(bounds, bounds + 1)
    assert bounded[::-2].low[:, 0].tolist() == [4.0, 2.0, 0.0]
    assert bounded[3:0:-1].low[:, 0].tolist() == [3.0, 2.0, 1.0]
    assert Composite(a=Unbounded((5, 2)), shape=(5,))[4:1:-1]["a"].shape == (3, 2)


def test_composites_index_with_tuples_of_positions():
    spec = Composite(k=Unbounded((5, 3, 4)), shape=(5, 3, 4))
    assert spec[(0, 1), (0, 1)].shape == (2, 4)
    assert Composite(k=Unbounded(())).__getitem__(None).shape == (1,)


def test_dynamic_dims_only_take_full_slices():
    leaf = Categorical(4, shape=(1, 1, 2)).expand(1, -1, 2)
    assert leaf.shape == (1, -1, 2)  # expanding a singleton dim to -1 makes it dynamic
    assert leaf[0].shape == (-1, 2) and leaf[:, :, 0].shape == (1, -1)
    with pytest.raises(IndexError, match="dynamic"):
        leaf[0, 1:2]
    assert Unbounded((3,)).expand(2, -1).shape == (2, 3)  # -1 keeps a non-singleton dim
    composite = Composite(action=Categorical(4, shape=(1, 2)), shape=(1,))
    composite = composite.unsqueeze(1).expand(1, -1)
    assert composite[0].shape == (-1,) and composite[0]["action"].shape == (-1, 2)


def test_unsqueeze_after_singleton_value_dims():
    done = Binary(1, shape=(3, 1), dtype=torch.bool)
    assert done.unsqueeze(-1).shape == (3, 1, 1)
    assert done.unsqueeze(-1).is_in(torch.zeros(3, 1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="outside the value dims"):
        Binary(3, shape=(2, 3)).unsqueeze(-1)


def test_enumerate_lists_every_value_and_matches_cardinality():
    categorical = Categorical(5, shape=(3,))
    assert categorical.enumerate().tolist() == [[i] * 3 for i in range(5)]
    one_hot = OneHot(3, shape=(2, 3))
    assert one_hot.enumerate().shape == (3, 2, 3) and one_hot.is_in(one_hot.enumerate())
    binary = Binary(3, shape=(2, 3))
    assert binary.cardinality() == len(binary.enumerate()) == 8
    multi = MultiCategorical([3, 4, 5], shape=(2, 3))
    assert multi.enumerate().shape == (60, 2, 3) and multi.is_in(multi.enumerate())
    multi_one_hot = MultiOneHot([3, 4, 5], shape=(2, 12))
    assert multi_one_hot.enumerate().shape == (60, 2, 12)
    assert multi_one_hot.is_in(multi_one_hot.enumerate())
    assert BoundedDiscrete(-1, 2, shape=(2,)).enumerate().tolist() == [
        [-1] * 2,
        [0] * 2,
        [1] * 2,
        [2] * 2,
    ]
    assert Unbounded((2,), dtype=torch.bool).enumerate().shape == (2, 2)


def test_enumerate_with_a_mask_keeps_allowed_values():
    mask = torch.tensor([True, False, True, True])
    assert Categorical(4, mask=mask).enumerate(use_mask=True).tolist() == [0, 2, 3]
    assert OneHot(4, mask=mask).enumerate(use_mask=True).shape == (3, 4)


def test_composite_enumerate_is_the_product_of_its_leaves():
    spec = Composite(
        {"a": OneHot(5, shape=(3, 5)), ("b", "c"): Categorical(4, shape=(3,))}, shape=(3,)
    )
    values = spec.enumerate()
    assert values.shape == (20, 3) and values["b", "c"].shape == (20, 3)
    assert spec.cardinality() == 20 and spec.is_in(values)
    pairs = {
        (int(a.long().argmax()), int(c)) for a, c in zip(values["a"][:, 0], values["b", "c"][:, 0])
    }
    assert len(pairs) == 20


def test_specs_without_finite_values_refuse_to_enumerate():
    assert Bounded(0.0, 1.0, shape=(2,)).cardinality() == float("inf")
    with pytest.raises(RuntimeError, match="Cannot enumerate a Bounded"):
        Bounded(0.0, 1.0, shape=(2,)).enumerate()
    with pytest.raises(RuntimeError, match="Cannot enumerate a NonTensor"):
        NonTensor(shape=(2,)).cardinality()
    with pytest.raises(RuntimeError, match="too many"):
        Binary(40).enumerate()
