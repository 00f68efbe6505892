"""Composite specs: nested keys, shape enforcement, sampling, mutation, copies and equality."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    CompositeSpec,
    NonTensor,
    OneHot,
    Unbounded,
)


def make_spec() -> Composite:
    return Composite(
        observation=Bounded(-1.0, 1.0, shape=(4, 3)),
        reward=Unbounded((4, 1)),
        agents=Composite(
            action=OneHot(5, shape=(4, 2, 5)),
            obs=Unbounded((4, 2, 6)),
            shape=(4, 2),
        ),
        info=Composite(text=NonTensor(shape=(4,), example_data="hi"), shape=(4,)),
        shape=(4,),
    )


def test_keys_items_values_with_nesting_options():
    spec = make_spec()
    assert set(spec.keys()) == {"observation", "reward", "agents", "info"}
    leaves = set(spec.keys(True, True))
    assert leaves == {
        "observation",
        "reward",
        ("agents", "action"),
        ("agents", "obs"),
        ("info", "text"),
    }
    assert set(spec.keys(True)) == leaves | {"agents", "info"}
    assert set(spec.keys(False, True)) == {"observation", "reward"}
    assert ("agents", "obs") in spec.keys(True) and ("reward",) in spec.keys()
    assert dict(spec.items(True, True))[("agents", "obs")] is spec["agents", "obs"]
    assert len(spec.values(True, True)) == 5
    assert ("agents", "obs") in spec and "missing" not in spec and 3 not in spec
    custom = spec.keys(True, True, is_leaf=lambda cls: cls is not Composite or cls is None)
    assert "agents" not in custom


def test_keys_cache_is_invalidated_by_nested_mutation():
    spec = make_spec()
    assert ("agents", "extra") not in spec.keys(True, True)
    spec["agents"]["extra"] = Unbounded((4, 2, 1))
    assert ("agents", "extra") in spec.keys(True, True)
    del spec["agents", "extra"]
    assert ("agents", "extra") not in spec.keys(True, True)


def test_rand_zero_one_return_tensordicts_with_the_batch_size():
    spec = make_spec()
    for method in (spec.rand, spec.zero, spec.one):
        td = method()
        assert isinstance(td, TensorDict) and td.batch_size == torch.Size((4,))
        assert td["agents"].batch_size == torch.Size((4, 2))
        assert td["agents", "action"].shape == torch.Size((4, 2, 5))
    td = spec.rand((3,))
    assert td.batch_size == torch.Size((3, 4)) and td["observation"].shape == torch.Size((3, 4, 3))
    assert spec.is_in(td) and spec.is_in(spec.rand())
    assert spec.zero()["info", "text"] == "hi"


def test_setting_a_nested_key_creates_intermediate_composites_with_the_parent_shape():
    spec = Composite(shape=(3,), device="cpu")
    spec["a", "b", "c"] = Unbounded((3, 2))
    assert isinstance(spec["a"], Composite) and spec["a"].shape == torch.Size((3,))
    assert spec["a", "b"].device == torch.device("cpu")
    assert spec.get(("a", "b", "c")).shape == torch.Size((3, 2))
    assert spec.get(("a", "x"), "default") == "default"
    spec.set("d", Categorical(2, shape=(3,)))
    assert "d" in spec


def test_dict_entries_become_composites_and_batch_size_is_an_alias():
    spec = Composite({"a": {"b": Unbounded((2, 1))}}, batch_size=(2,))
    assert spec.shape == torch.Size((2,)) and isinstance(spec["a"], Composite)
    assert spec["a"].shape == torch.Size((2,))
    assert CompositeSpec is Composite
    spec.shape = (2,)
    with pytest.raises(ValueError, match=re.escape("entry ('a', 'b') has shape (2, 1)")):
        spec.shape = (3,)


def test_equality_compares_structure_shapes_dtypes_devices_and_bounds():
    spec = make_spec()
    assert spec == make_spec()
    other = make_spec()
    other["observation"] = Bounded(-1.0, 2.0, shape=(4, 3))
    assert spec != other
    other = make_spec()
    other["reward"] = Unbounded((4, 1), dtype=torch.float64)
    assert spec != other
    other = make_spec()
    other["agents", "new"] = Unbounded((4, 2))
    assert spec != other
    assert Composite(a=Unbounded(1)) != Composite(a=Unbounded(1), device="cpu")
    assert spec != "not a spec"


def test_clone_is_deep_and_independent():
    spec = make_spec()
    copy = spec.clone()
    assert copy == spec
    copy["agents", "obs"] = Unbounded((4, 2, 7))
    copy["observation"].low.fill_(-5)
    assert spec["agents", "obs"].shape == torch.Size((4, 2, 6))
    assert (spec["observation"].low == -1).all()


def test_select_exclude_update_and_empty():
    spec = make_spec()
    picked = spec.select("reward", ("agents", "obs"))
    assert set(picked.keys(True, True)) == {"reward", ("agents", "obs")}
    assert picked["agents"].shape == torch.Size((4, 2))
    with pytest.raises(KeyError, match="nope"):
        spec.select("nope")
    assert "nope" not in spec.select("reward", "nope", strict=False)
    dropped = spec.exclude("reward", ("agents", "action"))
    assert set(dropped.keys(True, True)) == {"observation", ("agents", "obs"), ("info", "text")}
    assert "reward" in spec
    spec.update(Composite(agents=Composite(done=Binary(1, (4, 2, 1)), shape=(4, 2)), shape=(4,)))
    assert ("agents", "done") in spec.keys(True, True) and ("agents", "obs") in spec.keys(
        True, True
    )
    spec.update({"reward": Unbounded((4, 2))})
    assert spec["reward"].shape == torch.Size((4, 2))
    assert spec.empty().is_empty() and spec.empty().shape == spec.shape
    assert Composite(a=Composite()).is_empty(recurse=True)
    assert not Composite(a=Composite()).is_empty()
    assert spec.pop("reward").shape == torch.Size((4, 2)) and "reward" not in spec
    assert spec.pop("reward", None) is None


def test_lock_forbids_mutation_until_unlocked():
    spec = make_spec().lock_()
    assert spec.is_locked and spec["agents"].is_locked
    with pytest.raises(RuntimeError, match="locked"):
        spec["x"] = Unbounded((4,))
    with pytest.raises(RuntimeError, match="locked"):
        spec["agents", "x"] = Unbounded((4, 2))
    with pytest.raises(RuntimeError, match="locked"):
        del spec["reward"]
    spec.unlock_()
    spec["x"] = Unbounded((4,))
    assert not spec.is_locked and "x" in spec


def test_expand_unsqueeze_squeeze_and_indexing_move_batch_dims():
    spec = make_spec()
    expanded = spec.expand(2, 4)
    assert expanded.shape == torch.Size((2, 4))
    assert expanded["agents"].shape == torch.Size((2, 4, 2))
    assert expanded["agents", "action"].shape == torch.Size((2, 4, 2, 5))
    assert expanded.is_in(expanded.rand())
    unsqueezed = spec.unsqueeze(0)
    assert unsqueezed.shape == torch.Size((1, 4)) and unsqueezed["reward"].shape == torch.Size(
        (1, 4, 1)
    )
    assert unsqueezed.squeeze() == spec and unsqueezed.squeeze(0) == spec
    assert spec.unsqueeze(-1)["agents"].shape == torch.Size((4, 1, 2))
    first = spec[0]
    assert first.shape == torch.Size(()) and first["agents", "obs"].shape == torch.Size((2, 6))
    assert spec[1:3]["observation"].shape == torch.Size((2, 3))
    assert expanded[..., 0].shape == torch.Size((2,))
    assert spec.reshape(2, 2)["observation"].shape == torch.Size((2, 2, 3))
    with pytest.raises(IndexError):
        Composite(a=Unbounded(1))[0]
    parts = spec.unbind(0)
    assert len(parts) == 4 and parts[2] == spec[2]
    assert Bounded(0.0, 1.0, shape=(2, 3)).unbind(1)[0].shape == torch.Size((2,))


def test_torch_stack_of_identical_composites_adds_a_batch_dim():
    spec = make_spec()
    stacked = torch.stack([spec, make_spec()], 0)
    assert type(stacked) is Composite and stacked.shape == torch.Size((2, 4))
    assert stacked["agents", "action"].shape == torch.Size((2, 4, 2, 5))
    assert stacked[1] == spec
    assert torch.stack([spec] * 3, 1).shape == torch.Size((4, 3))


def test_is_in_rejects_missing_or_wrong_entries_and_skips_empty_composites():
    spec = Composite(a=Unbounded((2,)), b=Categorical(3), empty=Composite())
    td = spec.rand()
    assert spec.is_in(td)
    # a missing entry is a structural error, not a value outside the spec
    with pytest.raises(KeyError, match="key 'a'"):
        spec.is_in(td.exclude("a"))
    td["b"] = torch.tensor(7)
    assert not spec.is_in(td)
    assert not spec.is_in(torch.zeros(2))
    assert spec.is_in({"a": torch.zeros(2), "b": torch.tensor(1)})


def test_project_encode_to_numpy_on_nested_data():
    spec = Composite(obs=Bounded(0.0, 1.0, shape=(2,)), nested=Composite(act=Categorical(3)))
    td = TensorDict({"obs": torch.tensor([2.0, -1.0]), "nested": {"act": torch.tensor(5)}}, [])
    projected = spec.project(td)
    # project writes the projected entries into its input and returns it
    assert projected is td and spec.is_in(td)
    assert td["obs"].tolist() == [1.0, 0.0] and td["nested", "act"] == 2
    arrays = spec.to_numpy(spec.rand())
    assert isinstance(arrays["obs"], np.ndarray) and isinstance(arrays["nested"]["act"], np.ndarray)
    encoded = spec.encode(arrays)
    assert spec.is_in(encoded)
    with pytest.raises(KeyError, match="'zzz'"):
        spec.encode({"zzz": 1})


def test_type_check_checks_dtypes_of_entries():
    spec = Composite(a=Unbounded((2,)), nested=Composite(b=Categorical(3)))
    spec.type_check(spec.rand())
    spec.type_check(torch.zeros(2), "a")
    with pytest.raises(TypeError, match=r"key 'a'.*torch.float32.*torch.float64"):
        spec.type_check(torch.zeros(2, dtype=torch.float64), "a")
    bad = spec.rand()
    bad["nested", "b"] = torch.tensor(1, dtype=torch.int32)
    with pytest.raises(TypeError, match="int32"):
        spec.type_check(bad)


def test_to_device_dtype_and_composite_dtype():
    spec = Composite(a=Unbounded((2,)), b=Bounded(0.0, 1.0, shape=(2,)), device="cpu")
    assert spec.to("cpu") is spec and spec.device == torch.device("cpu")
    assert spec.dtype == torch.float32
    double = spec.to(torch.float64)
    assert double["b"].dtype == torch.float64 and double["b"].high.dtype == torch.float64
    spec["c"] = Categorical(2)
    assert spec.dtype is None


def test_data_cls_converts_samples():
    class Marker(TensorDict):
        @classmethod
        def from_tensordict(cls, td):
            return ("converted", td.batch_size)

    spec = Composite(a=Unbounded((2,)), data_cls=Marker)
    assert spec.rand() == ("converted", torch.Size(()))


def test_none_entries_are_kept_but_not_sampled():
    spec = Composite(a=Unbounded((1,)), b=None)
    assert "b" in spec.keys() and spec["b"] is None
    assert set(spec.rand().keys()) == {"a"}
    assert spec.is_in(spec.rand()) and spec.clone() == spec


def test_repr_mentions_entries():
    text = repr(make_spec())
    assert "observation" in text and "agents" in text and "shape=(4,)" in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_moving_a_composite_to_cuda_moves_every_leaf():
    spec = make_spec().to("cuda")
    assert spec.device.type == "cuda"
    assert spec["observation"].low.device.type == "cuda"
    td = spec.rand()
    assert td.device.type == "cuda" and spec.is_in(td)
    assert spec.to("cpu") == make_spec().to("cpu")
