"""Assertions shared by the tests that compare a fast path's data with the generic path's."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase


def assert_identical(got: TensorDictBase, expected: TensorDictBase) -> None:
    """``got`` equals ``expected`` bit for bit: class, batch size, names, device, key order,
    and every leaf's dtype, shape and values."""
    assert type(got) is type(expected)
    assert got.batch_size == expected.batch_size
    assert got.names == expected.names
    assert got.device == expected.device
    assert list(got.keys(True)) == list(expected.keys(True))
    for key in expected.keys(True, True):
        value, reference = got.get(key), expected.get(key)
        assert value.dtype == reference.dtype, key
        assert value.shape == reference.shape, key
        assert torch.equal(value, reference), key
