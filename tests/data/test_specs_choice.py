"""The Choice spec: alternatives of one kind, or fixed non-tensor values."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack

from tdrl.data import Bounded, Categorical, Choice, Composite, OneHot


def bounded_choice() -> Choice:
    return Choice([Bounded(0.0, 2.5, shape=()), Bounded(10.0, 12.0, shape=())])


def test_spec_choices_sample_from_every_alternative():
    spec = bounded_choice()
    torch.manual_seed(0)
    samples = [float(spec.rand()) for _ in range(50)]
    assert any(s <= 2.5 for s in samples) and any(s >= 10.0 for s in samples)
    assert all(spec.is_in(torch.tensor(s)) for s in samples)
    assert spec.is_in(torch.tensor(11.0)) and not spec.is_in(torch.tensor(9.0))
    assert spec.shape == () and spec.dtype == torch.float32
    assert spec.rand((4,)).shape == (4,)
    with pytest.raises(AssertionError, match="in none of the 2 choices"):
        spec.assert_is_in(torch.tensor(5.0))


@pytest.mark.parametrize(
    ("choices", "inside", "outside"),
    [
        ([NonTensorData("a"), NonTensorData("b")], NonTensorData("b"), NonTensorData("c")),
        (
            [NonTensorStack("a", "b", "c"), NonTensorStack("d", "e", "f")],
            NonTensorStack("a", "b", "c"),
            NonTensorStack("a", "c", "b"),
        ),
    ],
    ids=["data", "stack"],
)
def test_data_choices_compare_by_content_and_layout(choices, inside, outside):
    spec = Choice(choices)
    assert spec.is_in(spec.rand()) and spec.is_in(inside) and not spec.is_in(outside)
    assert spec.cardinality() == len(choices)
    assert spec.clone() == spec and spec.clone() is not spec
    assert spec.expand(3, *spec.shape).shape == (3, *spec.shape)
    assert spec.rand((2,)).batch_size == (2, *spec.shape)
    assert spec.encode("a").batch_size == spec.shape


def test_cardinality_sums_the_alternatives():
    assert Choice([Categorical(10), Categorical(20)]).cardinality() == 30
    assert bounded_choice().cardinality() == float("inf")
    enumerated = Choice([Categorical(2), Categorical(3)]).enumerate()
    assert enumerated.tolist() == [0, 1, 0, 1, 2]


def test_shape_ops_apply_to_every_alternative():
    spec = Choice([Categorical(10, shape=(2,)), Categorical(20, shape=(2,))])
    assert spec.expand(3, 2).shape == (3, 2)
    assert spec.unsqueeze(0).shape == (1, 2) and spec.unsqueeze(0).squeeze(0) == spec
    assert spec[0].shape == () and len(spec.unbind(0)) == 2
    stacked = torch.stack([spec, spec.clone()], 0)
    assert isinstance(stacked, Choice) and stacked.shape == (2, 2)
    assert spec.to("cpu").device == torch.device("cpu")
    assert spec.to(torch.int32).dtype == torch.int32
    composite = Composite(mode=spec, shape=(2,))
    assert composite.is_in(composite.rand())


def test_spec_choice_encode_and_project():
    spec = bounded_choice()
    assert spec.encode(11.0).dtype == torch.float32
    assert spec.project(torch.tensor(11.0)) == 11.0
    assert spec.project(torch.tensor(5.0)) == 2.5  # onto the first alternative


def test_choice_errors():
    with pytest.raises(TypeError, match="must be a list, got str"):
        Choice("abc")
    with pytest.raises(TypeError, match="must be either a TensorSpec, NonTensorData, or"):
        Choice(["abc"])
    with pytest.raises(TypeError, match="must be the same type"):
        Choice([Bounded(0, 1, (1,)), Categorical(10, (1,))])
    with pytest.raises(ValueError, match="must have the same shape"):
        Choice([Categorical(10, (1,)), Categorical(10, (2,))])
    with pytest.raises(ValueError, match="must have the same dtype"):
        Choice([Categorical(10, (2,)), Categorical(10, (2,), dtype=torch.float32)])
    with pytest.raises(ValueError, match="must not be empty"):
        Choice([])
    with pytest.raises(TypeError, match="must be the same type"):
        Choice([OneHot(2), NonTensorData("a")])
