"""Construction variants of the leaf kinds, their spaces, and equality across kinds."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack

from tdrl.data import (
    Binary,
    BinaryBox,
    Bounded,
    BoxList,
    Categorical,
    CategoricalBox,
    ContinuousBox,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
)


def test_discrete_specs_accept_float_dtypes():
    spec = Categorical(5, shape=(2,), dtype=torch.float16)
    value = spec.rand()
    assert value.dtype == torch.float16 and spec.is_in(value)
    assert not spec.is_in(torch.tensor([0.5, 1.0], dtype=torch.float16))  # whole values only
    multi = MultiCategorical([2, 3], dtype=torch.float32)
    assert multi.is_in(multi.rand()) and multi.project(torch.tensor([5.0, -2.0])).tolist() == [
        1.0,
        0.0,
    ]
    with pytest.raises(TypeError, match="expected an integer or float dtype"):
        MultiCategorical([2, 3], dtype=torch.bool)


def test_scalar_nvec_gives_one_index_per_element():
    spec = MultiCategorical(5)
    assert spec.shape == () and spec.rand((3,)).shape == (3,)
    assert spec.is_in(torch.tensor(4)) and not spec.is_in(torch.tensor(5))
    assert spec.cardinality() == 5 and spec.enumerate().tolist() == [0, 1, 2, 3, 4]
    assert spec.to_one_hot(torch.tensor(2)).tolist() == [False, False, True, False, False]
    assert spec.to_one_hot_spec() == MultiOneHot([5])
    masked = MultiCategorical(3, mask=torch.tensor([False, True, False]))
    assert masked.rand().item() == 1 and masked.project(torch.tensor(0)).item() == 1


def test_empty_and_zero_sized_discrete_specs():
    scalar_bit = Binary(shape=())
    assert scalar_bit.shape == () and scalar_bit.n == 1
    assert scalar_bit == scalar_bit.clone() and scalar_bit.is_in(scalar_bit.rand())
    assert scalar_bit.enumerate().tolist() == [0, 1]
    assert Binary(0).shape == (0,) and OneHot(0).shape == (0,) and Categorical(0).n == 0
    assert MultiOneHot([0]).shape == (0,)
    assert Binary(3, shape=(5, 3))[None].shape == (1, 5, 3)


def test_bounds_are_own_memory_and_can_be_edited_in_place():
    spec = Bounded(0.0, 1.0, shape=(3,))
    spec.space.low += 0.5
    assert spec.low.tolist() == [0.5, 0.5, 0.5] and not spec.is_in(torch.zeros(3))


def test_spaces_can_be_replaced_by_a_box_of_the_same_kind():
    bounded = Bounded(0.0, 1.0, shape=(2,))
    bounded.space = ContinuousBox(torch.zeros(2), torch.full((2,), 3.0))
    assert bounded.high.tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="Bounded.space: expected a ContinuousBox, got BinaryBox"):
        bounded.space = BinaryBox(2)
    with pytest.raises(ValueError, match="low <= high"):
        bounded.space = ContinuousBox(torch.ones(2), torch.zeros(2))
    unbounded = Unbounded((2,))
    unbounded.space = unbounded.space  # its own range is the only one it can hold
    with pytest.raises(ValueError, match="use Bounded"):
        unbounded.space = ContinuousBox(torch.zeros(2), torch.ones(2))
    categorical = Categorical(3)
    categorical.space = CategoricalBox(5)
    assert categorical.n == 5 and categorical.cardinality() == 5
    with pytest.raises(ValueError, match="stays 3"):
        OneHot(3).space = CategoricalBox(4)
    with pytest.raises(ValueError, match="stays 2"):
        Binary(2).space = BinaryBox(3)
    multi = MultiCategorical([2, 3])
    multi.space = BoxList.from_nvec([4, 5])
    assert multi.nvec.tolist() == [4, 5]
    with pytest.raises(ValueError, match="expected 2 boxes"):
        multi.space = BoxList.from_nvec([4])


def test_multi_categorical_space_nests_when_nvec_varies_across_the_batch():
    spec = MultiCategorical([[2, 3], [4, 5]])
    assert spec.space.nvec == ((2, 3), (4, 5)) and isinstance(spec.space.boxes[0], BoxList)
    assert MultiCategorical([2, 3], shape=(4, 2)).space.nvec == (2, 3)  # same nvec: flat
    other = MultiCategorical([[1, 1], [1, 1]], dtype=torch.float32)
    value = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert not other.is_in(value)
    other.space = spec.space
    assert other.nvec.tolist() == [[2, 3], [4, 5]] and other.is_in(value)
    with pytest.raises(ValueError, match="do not broadcast"):
        other.space = BoxList.from_nvec([[2, 3, 4], [4, 5, 6]])


def test_unbounded_equals_a_bounded_spec_over_its_whole_dtype_range():
    unbounded = Unbounded((2,), dtype=torch.float16)
    full = Bounded(-float("inf"), float("inf"), shape=(2,), dtype=torch.float16)
    assert unbounded == full and full == unbounded
    assert unbounded != Bounded(0.0, 1.0, shape=(2,), dtype=torch.float16)
    int_range = Bounded(-(2**31), 2**31 - 1, shape=(2,), dtype=torch.int32)
    assert Unbounded((2,), dtype=torch.int32) == int_range
    info = torch.finfo(torch.float16)
    finite = Bounded(info.min, info.max, shape=(2,), dtype=torch.float16)
    assert unbounded == finite and finite == unbounded


def test_unbounded_space_holds_the_finite_extremes_of_its_dtype():
    space = Unbounded((2,), dtype=torch.float32).space
    assert space.low.tolist() == [torch.finfo(torch.float32).min] * 2
    assert space.high.tolist() == [torch.finfo(torch.float32).max] * 2
    assert Unbounded((), dtype=torch.int16).space.high.item() == torch.iinfo(torch.int16).max
    # a Bounded spec built from that space is the Unbounded spec
    bounded = Bounded(space.low, space.high, shape=(2,), dtype=torch.float32)
    assert bounded == Unbounded((2,), dtype=torch.float32)
    # the whole range is accepted back, finite or infinite; anything narrower is refused
    unbounded = Unbounded((2,))
    unbounded.space = space
    unbounded.space = ContinuousBox(torch.full((2,), -float("inf")), torch.full((2,), float("inf")))
    with pytest.raises(ValueError, match="use Bounded"):
        unbounded.space = ContinuousBox(torch.zeros(2), torch.ones(2))


def test_one_hot_equality_includes_use_register():
    assert OneHot(4) == OneHot(4) and OneHot(4) != OneHot(4, use_register=True)


def test_non_tensor_feature_dims_and_example_equality():
    spec = NonTensor(shape=(3, 4), example_data="text")
    assert spec.feature_dims == 2 and isinstance(spec.zero(), NonTensorData)
    batched = NonTensor(shape=(3, 4), example_data="text", feature_dims=1)
    assert batched.feature_dims == 1
    assert isinstance(batched.zero(), NonTensorStack) and batched.zero().batch_size == (3, 4)
    assert isinstance(batched.zero()[0], NonTensorData) and batched.rand((2,)).shape == (2, 3, 4)
    assert spec != NonTensor(shape=(3, 4), example_data="other")
    assert spec.expand(2, 3, 4).example_data == "text"
    with pytest.raises(ValueError, match="feature_dims must be in"):
        NonTensor(shape=(2,), feature_dims=3)
