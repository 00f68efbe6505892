"""Leaf specs: property tests over every leaf kind, plus per-kind behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from tensordict import NonTensorData

from tdrl.data import (
    Binary,
    Bounded,
    BoundedDiscrete,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Stacked,
    TensorSpec,
    Unbounded,
    UnboundedDiscrete,
)

PROPS = settings(max_examples=25, deadline=None)


# One entry per leaf kind (and the notable variants); each test builds a fresh spec.
LEAF_FACTORIES = {
    "unbounded": lambda: Unbounded((3,)),
    "unbounded_f64_2d": lambda: Unbounded((2, 3), dtype=torch.float64),
    "unbounded_int": lambda: Unbounded((2,), dtype=torch.uint8),
    "bounded": lambda: Bounded(-1.0, 1.0, shape=(3,)),
    "bounded_tensor": lambda: Bounded(
        torch.tensor([[-2.0, 0.0], [1.0, 5.0]]), torch.tensor([[0.0, 0.5], [3.0, 5.0]])
    ),
    "bounded_half_open": lambda: Bounded(
        torch.tensor([-float("inf"), 0.0]), torch.tensor([0.0, float("inf")])
    ),
    "bounded_int": lambda: Bounded(-3, 10, shape=(2, 2), dtype=torch.int64),
    "categorical": lambda: Categorical(5),
    "categorical_masked": lambda: Categorical(
        4, shape=(2,), mask=torch.tensor([[True, False, True, False]] * 2)
    ),
    "categorical_bool": lambda: Categorical(2, shape=(1,), dtype=torch.bool),
    "one_hot": lambda: OneHot(4),
    "one_hot_masked": lambda: OneHot(
        3, shape=(2, 3), mask=torch.tensor([[False, True, True], [True, False, False]])
    ),
    "binary": lambda: Binary(3),
    "binary_done": lambda: Binary(1, shape=(1,), dtype=torch.bool),
    "multi_categorical": lambda: MultiCategorical([2, 3, 4]),
    "multi_categorical_masked": lambda: MultiCategorical(
        [2, 3], shape=(2, 2), mask=torch.tensor([[True, False, False, True, True]] * 2)
    ),
    "multi_one_hot": lambda: MultiOneHot([2, 3]),
    "multi_one_hot_masked": lambda: MultiOneHot(
        [2, 2], shape=(3, 4), mask=torch.tensor([[True, True, False, True]] * 3)
    ),
    "stacked": lambda: torch.stack(
        [Bounded(0.0, 1.0, shape=(2,)), Bounded(-5.0, -4.0, shape=(2,))]
    ),
    "non_tensor": lambda: NonTensor(shape=(2,), example_data="text"),
}

LEAF_IDS = list(LEAF_FACTORIES)
TENSOR_IDS = [name for name in LEAF_IDS if name != "non_tensor"]

extra_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


def leaf(name: str) -> TensorSpec:
    return LEAF_FACTORIES[name]()


@pytest.mark.parametrize("name", LEAF_IDS)
@PROPS
@given(extra=extra_shapes, seed=st.integers(0, 2**16))
def test_rand_zero_one_have_the_spec_shape_and_rand_is_in(name, extra, seed):
    spec = leaf(name)
    torch.manual_seed(seed)
    value = spec.rand(extra)
    assert spec.is_in(value)
    spec.assert_is_in(value)
    expected = torch.Size((*extra, *spec.shape))
    assert value.shape == expected
    if name != "non_tensor":
        assert value.dtype == spec.dtype and value.device == spec.device
        assert spec.zero(extra).shape == expected and spec.one(extra).shape == expected


@pytest.mark.parametrize("name", TENSOR_IDS)
@PROPS
@given(data=st.data())
def test_project_maps_arbitrary_values_into_the_spec(name, data):
    spec = leaf(name)
    extra = data.draw(extra_shapes)
    elements = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.integers(
        -(10**6), 10**6
    ).map(float)
    raw = data.draw(arrays(np.float64, (*extra, *spec.shape), elements=elements))
    projected = spec.project(torch.from_numpy(raw))
    assert spec.is_in(projected), (raw, projected)
    assert projected.shape == torch.Size((*extra, *spec.shape))


@pytest.mark.parametrize("name", TENSOR_IDS)
@PROPS
@given(seed=st.integers(0, 2**16))
def test_project_keeps_values_already_in_the_spec(name, seed):
    spec = leaf(name)
    torch.manual_seed(seed)
    value = spec.rand((2,))
    assert torch.equal(spec.project(value), value)


@pytest.mark.parametrize("name", LEAF_IDS)
@PROPS
@given(seed=st.integers(0, 2**16), extra=extra_shapes)
def test_encode_to_numpy_round_trip(name, seed, extra):
    spec = leaf(name)
    torch.manual_seed(seed)
    value = spec.rand(extra)
    array = spec.to_numpy(value, safe=True)
    # encode gives a value the spec's own shape: batched values go through a batched spec
    encoded = spec.expand(*extra, *spec.shape).encode(array)
    if name == "non_tensor":
        assert encoded.data == value.data
        return
    assert isinstance(array, np.ndarray)
    assert encoded.dtype == spec.dtype and encoded.device == spec.device
    assert torch.equal(encoded, value)


@pytest.mark.parametrize("name", LEAF_IDS)
@PROPS
@given(lead=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_expand_index_and_stack_keep_shapes_consistent(name, lead, seed):
    spec = leaf(name)
    torch.manual_seed(seed)
    expanded = spec.expand(lead, *spec.shape)
    assert expanded.shape == torch.Size((lead, *spec.shape))
    assert expanded.is_in(expanded.rand())
    assert expanded[0] == spec
    assert expanded[:1].shape == torch.Size((1, *spec.shape))
    stacked = torch.stack([spec] * lead, 0)
    assert stacked.shape == expanded.shape
    assert stacked == expanded
    assert spec.unsqueeze(0).squeeze(0) == spec
    assert spec.unsqueeze(0).shape == torch.Size((1, *spec.shape))


@pytest.mark.parametrize("name", LEAF_IDS)
def test_clone_is_equal_and_independent(name):
    spec = leaf(name)
    copy = spec.clone()
    assert copy == spec and copy is not spec
    for attr in type(spec)._shaped_tensors:
        original = getattr(spec, attr)
        if original is not None:
            getattr(copy, attr).zero_() if attr != "mask" else getattr(copy, attr).fill_(True)
            assert not torch.equal(getattr(copy, attr), original) or original.eq(0).all()
    if hasattr(spec, "mask") and spec.mask is not None:
        assert copy != spec


@pytest.mark.parametrize("name", LEAF_IDS)
def test_to_same_device_and_equality_basics(name):
    spec = leaf(name)
    assert spec.to("cpu") is spec
    assert spec == leaf(name)
    assert spec != Unbounded((7, 7))
    assert spec.ndim == len(spec.shape)


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        (Bounded(-1.0, 1.0, shape=(2,)), torch.tensor([0.0, 2.0])),
        (Categorical(3), torch.tensor(3)),
        (OneHot(3), torch.tensor([True, True, False])),
        (Binary(2), torch.tensor([0, 2], dtype=torch.int8)),
        (MultiCategorical([2, 3]), torch.tensor([1, 3])),
        (MultiOneHot([2, 2]), torch.tensor([True, False, False, False])),
    ],
)
def test_values_outside_the_domain_are_rejected(spec, value):
    assert not spec.is_in(value)
    with pytest.raises(ValueError, match="out of the spec's domain"):
        spec.assert_is_in(value)


def test_mask_restricts_rand_and_is_in_and_can_be_cleared():
    spec = Categorical(4, shape=(3,))
    spec.update_mask(torch.tensor([[False, False, True, False]] * 3))
    assert (spec.rand((50,)) == 2).all()
    assert not spec.is_in(torch.tensor([0, 2, 2]))
    assert torch.equal(spec.project(torch.tensor([0, 1, 2])), torch.tensor([2, 2, 2]))
    spec.update_mask(None)
    assert spec.is_in(torch.tensor([0, 1, 3]))
    one_hot = OneHot(3, mask=torch.tensor([True, False, False]))
    assert (one_hot.rand((20,)).to(torch.int64).argmax(-1) == 0).all()
    multi = MultiCategorical([2, 2], mask=torch.tensor([False, True, True, False]))
    assert (multi.rand((20,)) == torch.tensor([1, 0])).all()


def test_mask_with_a_row_of_no_allowed_category_raises():
    spec = Categorical(2, mask=torch.tensor([False, False]))
    with pytest.raises(ValueError, match="at least one allowed category"):
        spec.rand()


def test_dynamic_dims_accept_any_size_and_sample_size_one():
    spec = Unbounded((3, -1, 2))
    assert spec.rand().shape == torch.Size((3, 1, 2))
    assert spec.is_in(torch.zeros(3, 7, 2)) and spec.is_in(torch.zeros(5, 3, 0, 2))
    assert not spec.is_in(torch.zeros(3, 7, 3))
    bounded = Bounded(0.0, 1.0, shape=(-1, 2))
    assert bounded.is_in(torch.full((4, 2), 0.5)) and not bounded.is_in(torch.full((4, 2), 2.0))
    assert bounded.expand(3, -1, 2).shape == torch.Size((3, -1, 2))


def test_bounded_bounds_shape_inference_and_space():
    spec = Bounded(torch.zeros(2, 3), 1.0)
    assert spec.shape == torch.Size((2, 3)) and spec.high.shape == torch.Size((2, 3))
    assert torch.equal(spec.space.low, spec.low) and spec.minimum is spec.low
    assert Bounded(0.0, 1.0).shape == torch.Size(())
    assert Bounded(0, 3, shape=(2,), dtype=torch.int64).cardinality() == 4
    assert BoundedDiscrete(0, 3, shape=(2,)).dtype == torch.int64
    assert Bounded(-1.0, 1.0, (2,)) != Bounded(-1.0, 2.0, (2,))


def test_bounded_accepts_numpy_bounds_and_numpy_dtype():
    spec = Bounded(np.array([-1.0, -2.0]), np.array([1.0, 2.0]), dtype=np.float32)
    assert spec.dtype == torch.float32 and spec.shape == torch.Size((2,))
    assert torch.equal(spec.high, torch.tensor([1.0, 2.0]))


def test_unbounded_defaults_and_domains():
    assert Unbounded().shape == torch.Size((1,))
    assert Unbounded(3).shape == torch.Size((3,))
    assert Unbounded((2,)).domain == "continuous"
    assert Unbounded((2,), dtype=torch.int64).domain == "discrete"
    assert UnboundedDiscrete((2,)) == Unbounded((2,), dtype=torch.int64)
    assert Unbounded((2,), dtype=torch.uint8).cardinality() == 256
    assert Unbounded((2,)).cardinality() == float("inf")
    assert Bounded(0.0, 1.0, shape=(2,)).cardinality() == float("inf")


def test_cardinality_and_n():
    assert Categorical(5).cardinality() == 5 and Categorical(5).n == 5
    assert OneHot(4).cardinality() == 4 and OneHot(4).space.n == 4
    assert Binary(3).cardinality() == 8
    assert MultiCategorical([2, 3]).cardinality() == 6
    assert MultiOneHot([2, 3]).cardinality() == 6
    assert MultiCategorical([2, 3]).space.nvec == (2, 3)


def test_encode_adds_a_trailing_singleton_dim_and_casts():
    reward = Unbounded((1,))
    assert torch.equal(reward.encode(np.float64(1.5)), torch.tensor([1.5]))
    obs = Bounded(-1.0, 1.0, shape=(3,))
    encoded = obs.encode(np.zeros(3, dtype=np.float64))
    assert encoded.dtype == torch.float32
    assert OneHot(3).encode(np.int64(1)).tolist() == [False, True, False]
    assert MultiOneHot([2, 3], shape=(1, 5)).encode(np.array([[1, 2]])).shape == (1, 5)
    # singleton dims are the only difference encode makes up for
    assert MultiOneHot([2, 3]).encode(np.array([[1, 2]])).shape == (5,)


def test_one_hot_and_categorical_conversions():
    cat = Categorical(3, shape=(2,))
    value = torch.tensor([2, 0])
    hot = cat.to_one_hot(value)
    spec = cat.to_one_hot_spec()
    assert spec.is_in(hot) and spec.shape == torch.Size((2, 3))
    assert torch.equal(spec.to_categorical(hot), value)
    assert spec.to_categorical_spec() == cat
    multi = MultiCategorical([2, 3])
    assert torch.equal(
        multi.to_one_hot_spec().to_categorical(multi.to_one_hot(torch.tensor([1, 2]))),
        torch.tensor([1, 2]),
    )


def test_squeeze_unsqueeze_and_reshape():
    spec = Bounded(-1.0, 1.0, shape=(1, 4, 1, 2))
    assert spec.squeeze().shape == torch.Size((4, 2))
    assert spec.squeeze(0).shape == torch.Size((4, 1, 2))
    assert spec.squeeze(1).shape == spec.shape
    assert spec.unsqueeze(-1).shape == torch.Size((1, 4, 1, 2, 1))
    assert spec.reshape(4, 2).shape == torch.Size((4, 2))
    assert OneHot(3, shape=(1, 3)).squeeze().shape == torch.Size((3,))
    with pytest.raises(ValueError, match="value dim"):
        OneHot(1, shape=(1,)).squeeze(0)
    with pytest.raises(ValueError, match="unsqueeze"):
        OneHot(3).unsqueeze(-1)


def test_unsqueeze_after_singleton_value_dims():
    # a single-flag Binary / OneHot: its only value dim has size 1, so a trailing
    # singleton can be inserted (as when an env nests one flag per agent)
    flag = Binary(n=1, shape=(2, 1))
    nested = flag.unsqueeze(-1)
    assert nested.shape == (2, 1, 1) and nested.n == 1
    assert nested.expand(2, 5, 1).shape == (2, 5, 1)
    assert OneHot(1).unsqueeze(-1).shape == (1, 1)
    with pytest.raises(ValueError, match="outside the value dims"):
        Binary(n=3, shape=(3,)).unsqueeze(-1)


def test_indexing_bounded_keeps_per_element_bounds():
    spec = Bounded(torch.tensor([[0.0], [10.0]]), torch.tensor([[1.0], [11.0]]))
    assert spec[1] == Bounded(10.0, 11.0, shape=(1,))
    assert spec[..., 0].shape == torch.Size((2,))
    assert spec[torch.tensor([1, 0])][0] == spec[1]


def test_to_dtype_changes_bounds_and_domain():
    spec = Bounded(0.0, 4.0, shape=(2,)).to(torch.int64)
    assert spec.dtype == torch.int64 and spec.domain == "discrete" and spec.low.dtype == torch.int64


def test_non_tensor_wraps_python_objects():
    spec = NonTensor(shape=(), example_data={"a": 1})
    data = spec.zero()
    assert isinstance(data, NonTensorData) and data.data == {"a": 1}
    assert spec.is_in("anything") and not spec.is_in(torch.zeros(1))
    assert spec.to_numpy(spec.encode("x")) == "x"
    with pytest.raises(TypeError, match="expected non-tensor data"):
        spec.assert_is_in(torch.zeros(2))


def test_stacked_leaf_with_different_shapes_samples_nested_tensors():
    spec = torch.stack([Unbounded((2,)), Unbounded((3,))], 0)
    assert isinstance(spec, Stacked) and spec.shape == torch.Size((2, -1))
    value = spec.rand()
    assert value.is_nested and spec.is_in(value)
    assert [p.shape for p in value.unbind(0)] == [torch.Size((2,)), torch.Size((3,))]
    assert spec[0] == Unbounded((2,)) and spec.clone() == spec
    assert spec.expand(4, 2, -1).shape == torch.Size((4, 2, -1))
    assert spec.unbind(0)[1] == Unbounded((3,))


def test_stack_along_a_later_dim():
    specs = [Bounded(0.0, 1.0, shape=(2,)), Bounded(0.0, 2.0, shape=(2,))]
    spec = torch.stack(specs, -1)
    assert spec.shape == torch.Size((2, 2)) and spec.dim == 1
    value = spec.rand()
    assert spec.is_in(value) and (value[:, 0] <= 1).all()
    assert spec[:, 1] == specs[1]
    equal = torch.stack([Categorical(3)] * 4, -1)
    assert isinstance(equal, Categorical) and equal.shape == torch.Size((4,))


# ------------------------------------------------------------ cheap sampling paths
def test_one_hot_rand_returns_fresh_memory():
    spec = OneHot(3)
    first = spec.rand()
    first.fill_(True)
    for _ in range(20):
        sample = spec.rand()
        assert sample.sum() == 1 and spec.is_in(sample)
    batched = OneHot(3, shape=(4, 3), dtype=torch.int64).rand((2,))
    assert batched.shape == (2, 4, 3) and batched.dtype == torch.int64
    assert (batched.sum(-1) == 1).all()


def test_rand_sees_spec_changes_after_a_first_sample():
    spec = Bounded(-1.0, 1.0, (2,))
    spec.rand()
    spec.low = torch.full((2,), 5.0)
    spec.high = torch.full((2,), 6.0)
    sample = spec.rand((100,))
    assert ((sample >= 5.0) & (sample <= 6.0)).all()
    one_hot = OneHot(2)
    one_hot.rand()
    cast = one_hot.to(torch.int64)
    assert cast.rand().dtype == torch.int64
    categorical = Categorical(3, dtype=torch.int32)
    assert categorical.rand((5,)).dtype == torch.int32
    assert Categorical(2, dtype=torch.bool).rand((5,)).dtype == torch.bool


def test_bounded_rand_stays_within_uniform_bounds():
    for dtype in (torch.float16, torch.float32, torch.float64):
        spec = Bounded(-0.3, 0.7, (1000,), dtype=dtype)
        sample = spec.rand((10,))
        assert sample.dtype == dtype and spec.is_in(sample)
