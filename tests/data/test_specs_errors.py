"""Bad input to specs: each error names the key, what was expected and what was received."""

from __future__ import annotations

import re

import pytest
import torch

from tdrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)


def test_entry_shape_not_starting_with_the_composite_shape():
    with pytest.raises(ValueError) as info:
        Composite(obs=Unbounded((3, 2)), shape=(4,))
    assert str(info.value) == (
        "spec shape mismatch at key 'obs': expected a shape starting with the Composite's "
        "shape (4,), got (3, 2)"
    )


def test_nested_entry_shape_mismatch_names_the_full_key():
    spec = Composite(agents=Composite(shape=(4, 3)), shape=(4,))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "key ('agents', 'action'): expected a shape starting with the Composite's shape (4, 3), got (4, 2)"
        ),
    ):
        spec["agents", "action"] = Unbounded((4, 2))


def test_assert_is_in_wrong_dtype_names_key_expected_and_received():
    spec = Composite(agents=Composite(obs=Unbounded((2,))))
    td = spec.zero()
    td["agents", "obs"] = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(TypeError) as info:
        spec.assert_is_in(td)
    assert str(info.value) == (
        "spec mismatch at key ('agents', 'obs'): expected dtype torch.float32, got torch.float64"
    )


def test_assert_is_in_wrong_shape_and_missing_entry():
    spec = Composite(obs=Unbounded((3,)))
    with pytest.raises(ValueError, match=re.escape("key 'obs': expected shape (*, 3), got (2,)")):
        spec.assert_is_in({"obs": torch.zeros(2)})
    with pytest.raises(KeyError, match="key 'obs': the spec has this entry but the value has none"):
        spec.assert_is_in({})
    with pytest.raises(TypeError, match="expected a torch.Tensor, got list"):
        Unbounded((3,)).assert_is_in([1, 2, 3])


def test_type_check_wrong_dtype():
    with pytest.raises(
        TypeError, match=re.escape("key 'action': expected dtype torch.int64, got torch.float32")
    ):
        Categorical(3).type_check(torch.zeros(()), "action")


def test_low_greater_than_high():
    with pytest.raises(
        ValueError,
        match=re.escape("expected low <= high everywhere, got low=[0.0, 2.0] and high=[1.0, 1.0]"),
    ):
        Bounded(torch.tensor([0.0, 2.0]), torch.tensor([1.0, 1.0]))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Categorical(-1), "Categorical: n must be >= 0, got -1"),
        (lambda: OneHot(-2), "OneHot: n must be >= 0, got -2"),
        (lambda: Binary(-1), "Binary: n must be >= 0, got -1"),
        (
            lambda: MultiCategorical([2, -1]),
            "MultiCategorical: every entry of nvec must be >= 0, got [2, -1]",
        ),
        (lambda: MultiOneHot([-3]), "MultiOneHot: every entry of nvec must be >= 0, got [-3]"),
    ],
)
def test_non_positive_category_counts(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: OneHot(3, shape=(2, 4)),
            "OneHot: expected the last dim of shape to be n=3, got shape (2, 4)",
        ),
        (
            lambda: Binary(3, shape=(2,)),
            "Binary: expected the last dim of shape to be n=3, got shape (2,)",
        ),
        (
            lambda: MultiOneHot([2, 2], shape=(3,)),
            "expected the last dim of shape to be sum(nvec)=4, got shape (3,)",
        ),
        (
            lambda: Bounded(torch.zeros(3), 1.0, shape=(2,)),
            "cannot be broadcast to the spec shape (2,)",
        ),
        (
            lambda: Categorical(3, mask=torch.ones(4, dtype=torch.bool)),
            "Categorical mask: expected shape (3,), got (4,)",
        ),
        (lambda: Unbounded((2, -3)), "shape dims must be >= 0 or -1 (dynamic), got (2, -3)"),
    ],
)
def test_inconsistent_shapes(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Categorical(2.5), "Categorical: n must be an int, got float"),
        (
            lambda: Categorical(3, dtype=torch.complex64),
            "Categorical: expected a real dtype, got torch.complex64",
        ),
        (
            lambda: Categorical(2, mask=torch.ones(2)),
            "Categorical mask: expected dtype torch.bool, got torch.float32",
        ),
        (lambda: Unbounded((2,), dtype="nonsense"), "dtype must be a torch dtype, got 'nonsense'"),
        (lambda: Composite(a=3), "Composite entry 'a': expected a TensorSpec or None, got int"),
        (lambda: Composite()[(1, "a")], None),
    ],
)
def test_bad_types(build, message):
    with pytest.raises((TypeError, IndexError)) as info:
        build()
    if message is not None:
        assert message in str(info.value)


def test_missing_key_lists_available_keys():
    spec = Composite(a=Unbounded(1), b=Unbounded(1))
    with pytest.raises(
        KeyError, match=re.escape("key 'c' not found in Composite; available keys: ['a', 'b']")
    ):
        spec["c"]
    with pytest.raises(KeyError, match="entry 'a' is a Unbounded, not a Composite"):
        spec["a", "x"]


def test_bad_expand_and_stack():
    with pytest.raises(
        ValueError,
        match=re.escape("cannot expand a spec of shape (3,) to (2, 4). The last 1 of the expanded"),
    ):
        Unbounded((3,)).expand(2, 4)
    with pytest.raises(ValueError, match=re.escape("dim 1 has size 3, got 4")):
        Unbounded((3,)).expand(2, 4)
    with pytest.raises(TypeError, match="cannot stack Composite specs with leaf specs"):
        torch.stack([Composite(), Unbounded(1)])
    with pytest.raises(ValueError, match="StackedComposite element 1: expected shape"):
        torch.stack([Composite(shape=(2,)), Composite(shape=(3,))])


def test_standalone_leaf_messages_and_stacked_element_index():
    with pytest.raises(
        TypeError, match=r"^spec mismatch: expected dtype torch.float32, got torch.int64$"
    ):
        Unbounded((2,)).assert_is_in(torch.zeros(2, dtype=torch.int64))
    spec = Composite(obs=torch.stack([Bounded(0.0, 1.0, (2,)), Bounded(5.0, 6.0, (2,))]))
    with pytest.raises(
        ValueError, match=r"^spec mismatch at key 'obs': value out of .* \(stacked element 1\)$"
    ):
        spec.assert_is_in({"obs": torch.zeros(2, 2)})
    with pytest.raises(
        ValueError, match=re.escape("cannot project: expected shape (3,), got (2,)")
    ):
        Bounded(0.0, 1.0, (3,)).project(torch.zeros(2))
