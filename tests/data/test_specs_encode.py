"""Spec encoding: shape rules, memoized plans, the debug check flag and error classes."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import tdrl.data.specs as specs_package
from tdrl.data import (
    Binary,
    Bounded,
    Categorical,
    Choice,
    Composite,
    MultiOneHot,
    OneHot,
    Unbounded,
)
from tdrl.data.specs.errors import SpecEncodeShapeError, SpecTypeError, SpecValueError


@pytest.fixture
def encode_checks():
    """Turn the ``_CHECK_SPEC_ENCODE`` debug flag on for one test."""
    previous = specs_package._CHECK_SPEC_ENCODE
    specs_package._CHECK_SPEC_ENCODE = True
    yield
    specs_package._CHECK_SPEC_ENCODE = previous


def test_reference_module_path_is_the_spec_package():
    module = importlib.import_module("tdrl.data.tensor_specs")
    assert module is specs_package
    from tdrl.data.tensor_specs import Choice
    from tdrl.data.tensor_specs import Composite as FromPath

    assert FromPath is Composite and Choice is specs_package.Choice
    assert module._CHECK_SPEC_ENCODE is False


def test_reference_utils_module_path_gives_the_spec_helpers():
    from tdrl.data import utils as data_utils
    from tdrl.data.specs import utils as spec_utils

    for name in ("check_no_exclusive_keys", "consolidate_spec", "contains_lazy_spec"):
        assert getattr(data_utils, name) is getattr(spec_utils, name)
    assert data_utils.DEVICE_TYPING is specs_package.DEVICE_TYPING


@pytest.mark.parametrize(
    ("spec", "value", "shape"),
    [
        (Unbounded((1,)), 0.5, (1,)),  # a scalar gets the trailing singleton dim
        (Bounded(0.0, 1.0, shape=(3,)), np.zeros((1, 3)), (3,)),  # a leading 1 is dropped
        (Categorical(10), torch.tensor([5]), ()),
        (OneHot(4), np.int64(2), (4,)),
        (MultiOneHot([2, 3]), [[1, 0]], (5,)),
    ],
)
def test_encode_gives_the_spec_shape_up_to_singleton_dims(spec, value, shape):
    out = spec.encode(value)
    assert out.shape == shape and out.dtype == spec.dtype and spec.is_in(out)


@pytest.mark.parametrize(
    ("spec", "value", "message"),
    [
        (Bounded(0.0, 1.0, shape=(10,)), np.zeros((3, 10)), "is invalid for input of size 30"),
        (Binary(4), np.zeros((2, 2)), "only singleton dims can be added or removed"),
        (MultiOneHot([2, 2]), np.zeros((3, 2), dtype=np.int64), "invalid for input of size"),
    ],
)
def test_encode_refuses_other_shapes(spec, value, message):
    with pytest.raises(SpecEncodeShapeError, match="Shape mismatch") as info:
        spec.encode(value)
    assert message in str(info.value)
    # the error is both what tdrl raises for bad values and what reference code catches
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)


def test_batched_values_go_through_a_batched_spec():
    spec = Bounded(0.0, 1.0, shape=(10,))
    values = np.full((3, 10), 0.5)
    assert spec.expand(3, 10).encode(values).shape == (3, 10)
    assert MultiOneHot([2, 2]).expand(3, 4).encode(np.ones((3, 2), dtype=np.int64)).shape == (3, 4)


def test_one_hot_encode_validates_indices():
    spec = OneHot(3)
    assert spec.encode(1).tolist() == [False, True, False]
    assert spec.encode(torch.tensor(2)).tolist() == [False, False, True]
    for bad in (3, -1, torch.tensor([7])):
        with pytest.raises(ValueError, match=r"ind(ex|ices) in \[0, 3\)"):
            spec.encode(bad)
    with pytest.raises(ValueError, match="below nvec"):
        MultiOneHot([2, 2]).encode([0, 2])


def test_composite_encode_names_the_key():
    spec = Composite(a=Unbounded(1), b=Unbounded(2))
    with pytest.raises(KeyError, match=r"The Composite instance with keys \['a', 'b'\]"):
        spec.encode({"c": 0})
    with pytest.raises(RuntimeError, match="cannot encode key 'b': Shape mismatch") as info:
        spec.encode({"a": 0, "b": 0})
    assert isinstance(info.value.__cause__, SpecEncodeShapeError)


@pytest.mark.parametrize(
    "spec",
    [
        Bounded(-1.0, 1.0, shape=(3,)),
        Unbounded((1,)),
        Categorical(5, shape=(2,)),
        OneHot(4),
        MultiOneHot([2, 3]),
    ],
    ids=["bounded", "reward", "categorical", "one_hot", "multi_one_hot"],
)
def test_memoized_encode_gives_the_same_results(spec):
    fresh = spec.clone()
    raw = spec.to_numpy(spec.rand())
    assert spec.memoize_encode() is spec
    for value in (raw, raw.copy(), torch.as_tensor(raw)):
        assert torch.equal(spec.encode(value), fresh.encode(value))
        assert torch.equal(spec.encode(value), fresh.encode(value))  # replayed plan


def test_memoized_plans_follow_the_input_shape_and_the_spec():
    spec = Unbounded((1,)).memoize_encode()
    assert spec.encode(np.float32(1.0)).shape == (1,)
    assert spec.encode(np.array([2.0], dtype=np.float32)).tolist() == [2.0]
    # a plan is keyed by input type and shape: another shape is planned on its own
    assert spec.encode(np.array([[3.0]], dtype=np.float32)).tolist() == [3.0]
    spec.dtype = torch.float64  # changing the spec drops the plans
    assert spec.encode(np.array([2.0], dtype=np.float32)).dtype == torch.float64
    spec.erase_memoize_cache()
    assert spec.encode(np.array([4.0])).tolist() == [4.0]
    spec.memoize_encode(False)
    assert spec._encode_memo is None and spec.encode(5.0).tolist() == [5.0]


def test_copies_do_not_share_memoized_plans():
    spec = Bounded(0.0, 1.0, shape=(2,)).memoize_encode()
    spec.encode(np.zeros(2))
    batched = spec.expand(3, 2)
    assert batched.encode(np.zeros((3, 2))).shape == (3, 2)
    assert spec.encode(np.zeros(2)).shape == (2,)


def test_composite_memoize_reaches_every_entry():
    spec = Composite(obs=Bounded(0.0, 1.0, shape=(2,)), nested=Composite(r=Unbounded((1,))))
    spec.memoize_encode()
    assert spec["obs"]._encode_memo is not None and spec["nested", "r"]._encode_memo is not None
    out = spec.encode({"obs": np.full(2, 0.5), "nested": {"r": 1.0}})
    assert isinstance(out, TensorDict) and out["nested", "r"].tolist() == [1.0]
    spec.erase_memoize_cache().memoize_encode(False)
    assert spec["obs"]._encode_memo is None


def test_stacks_and_choices_memoize_through_their_elements():
    stacked = torch.stack([Bounded(0.0, 1.0, shape=(2,)), Bounded(0.0, 2.0, shape=(2,))])
    choice = Choice([Categorical(3), Categorical(4)])
    for spec, parts in ((stacked, stacked.specs), (choice, choice.choices)):
        spec.memoize_encode()
        assert all(part._encode_memo is not None for part in parts)
        spec.memoize_encode(False)
        assert all(part._encode_memo is None for part in parts)
    assert stacked.encode(np.full((2, 2), 0.5)).shape == (2, 2)


def test_check_flag_off_by_default_skips_value_checks():
    spec = Bounded(0.0, 1.0, shape=(2,))
    assert spec.encode(np.full(2, 5.0)).tolist() == [5.0, 5.0]
    assert spec.to_numpy(torch.full((2,), 5.0)).tolist() == [5.0, 5.0]


def test_check_flag_turns_on_encode_and_to_numpy_checks(encode_checks):
    spec = Bounded(0.0, 1.0, shape=(2,))
    with pytest.raises(AssertionError, match="encode produced a value outside the spec"):
        spec.encode(np.full(2, 5.0))
    with pytest.raises(SpecValueError, match="out of the spec's domain"):
        spec.to_numpy(torch.full((2,), 5.0))
    assert spec.to_numpy(torch.full((2,), 5.0), safe=False).tolist() == [5.0, 5.0]
    memo = Categorical(10).memoize_encode()
    memo.encode(np.int64(3))
    with pytest.raises(AssertionError):  # checked on replayed plans too
        memo.encode(np.int64(11))
    composite = Composite(a=spec)
    with pytest.raises(AssertionError):
        composite.to_numpy(TensorDict({"a": torch.full((2,), 5.0)}, []))
    stacked = torch.stack([spec, Bounded(0.0, 2.0, shape=(2,))])
    with pytest.raises(AssertionError):
        stacked.to_numpy(torch.full((2, 2), 5.0))
    with pytest.raises(AssertionError):
        Choice([Categorical(2), Categorical(3)]).to_numpy(torch.tensor(7))


def test_mismatch_errors_are_assertion_errors_too():
    spec = Bounded(0.0, 1.0, shape=(2,))
    with pytest.raises(SpecValueError) as info:
        spec.assert_is_in(torch.full((2,), 3.0))
    assert isinstance(info.value, AssertionError)
    with pytest.raises(SpecTypeError) as info:
        spec.assert_is_in(torch.zeros(2, dtype=torch.float64))
    assert isinstance(info.value, (TypeError, AssertionError))
    with pytest.raises(AssertionError):
        spec.to_numpy(torch.full((2,), 3.0), safe=True)
