"""Heterogeneous stacks (Stacked, StackedComposite) and the spec helpers."""

from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, NonTensorData, TensorClass, TensorDict

from tdrl.data import (
    Bounded,
    Categorical,
    Composite,
    LazyStackedCompositeSpec,
    LazyStackedTensorSpec,
    NonTensor,
    Stacked,
    StackedComposite,
    Unbounded,
    check_no_exclusive_keys,
    consolidate_spec,
    contains_lazy_spec,
    make_composite_from_td,
)


def agent_specs() -> list[Composite]:
    return [
        Composite(obs=Unbounded((2,)), action=Categorical(3), reward=Unbounded((1,))),
        Composite(obs=Unbounded((4,)), action=Categorical(3), reward=Unbounded((1,))),
        Composite(obs=Unbounded((3,)), action=Categorical(3), reward=Unbounded((1,))),
    ]


def test_stacking_different_composites_gives_a_stacked_composite():
    spec = torch.stack(agent_specs(), 0)
    assert isinstance(spec, StackedComposite) and isinstance(spec, Composite)
    assert spec.shape == torch.Size((3,)) and LazyStackedCompositeSpec is StackedComposite
    assert set(spec.keys()) == {"obs", "action", "reward"}
    assert isinstance(spec["obs"], Stacked) and spec["obs"].shape == torch.Size((3, -1))
    assert type(spec["action"]) is Categorical and spec["action"].shape == torch.Size((3,))
    assert spec[1] == agent_specs()[1]


def test_stacked_composite_samples_lazy_stacks():
    spec = torch.stack(agent_specs(), 0)
    for method in (spec.rand, spec.zero, spec.one):
        td = method()
        assert isinstance(td, LazyStackedTensorDict) and td.batch_size == torch.Size((3,))
        assert [t["obs"].shape[-1] for t in td.tensordicts] == [2, 4, 3]
    batched = spec.rand((5,))
    assert batched.batch_size == torch.Size((5, 3)) and spec.is_in(batched)
    assert spec.is_in(spec.rand())
    bad = spec.rand()
    bad.tensordicts[2]["action"] = torch.tensor(9)
    assert not spec.is_in(bad)
    with pytest.raises(ValueError, match="'action'"):
        spec.assert_is_in(bad)


def test_stacked_composite_nested_in_a_composite():
    parent = Composite(agents=torch.stack(agent_specs(), 0), done=Unbounded((1,), dtype=torch.bool))
    assert ("agents", "obs") in parent.keys(True, True)
    td = parent.rand()
    assert isinstance(td["agents"], LazyStackedTensorDict) and parent.is_in(td)
    parent["agents", "extra"] = Unbounded((3, 2))
    assert all("extra" in c.keys() for c in parent["agents"].composites)
    assert parent["agents"].rand()["extra"].shape == torch.Size((3, 2))
    assert parent.clone() == parent
    expanded = parent.expand(5)
    assert expanded["agents"].shape == torch.Size((5, 3)) and expanded.is_in(expanded.rand())


def test_stacked_composite_lock_clone_and_shape_ops():
    spec = torch.stack(agent_specs(), 0)
    copy = spec.clone()
    assert copy == spec and copy.composites[0] is not spec.composites[0]
    spec.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        spec["x"] = Unbounded((3, 1))
    spec.unlock_()
    assert spec.unsqueeze(0).shape == torch.Size((1, 3))
    assert spec.unsqueeze(0).squeeze(0) == spec
    assert spec[:2].shape == torch.Size((2,)) and spec[:2][1] == agent_specs()[1]
    del spec["reward"]
    assert "reward" not in spec.composites[1].keys()
    picked = spec.select("obs")
    assert set(picked.keys()) == {"obs"} and set(spec.keys()) == {"obs", "action"}
    assert set(spec.exclude("obs").keys()) == {"action"}
    spec.update(Composite(nested=Composite(x=Unbounded((3, 1)), shape=(3,)), shape=(3,)))
    assert all(("nested", "x") in c.keys(True, True) for c in spec.composites)


def test_stacked_composite_along_a_later_dim():
    specs = [Composite(obs=Unbounded((2, n)), shape=(2,)) for n in (1, 2)]
    spec = torch.stack(specs, 1)
    assert spec.shape == torch.Size((2, 2)) and spec["obs"].shape == torch.Size((2, 2, -1))
    td = spec.rand()
    assert td.batch_size == torch.Size((2, 2)) and spec.is_in(td)
    assert spec[:, 1] == specs[1]
    assert spec.stack_dim == spec.dim == 1
    leaves = torch.stack([Unbounded((2, 3)), Unbounded((2, 4))], -2)
    assert leaves.stack_dim == 1 and leaves.shape == (2, 2, -1)


def test_stacked_leaf_errors_and_projection():
    # incompatible elements raise an error that is a ValueError and a RuntimeError
    with pytest.raises(ValueError, match="Dtypes differ: Stacked element 1 has dtype torch.int64"):
        Stacked(Unbounded((2,)), Unbounded((2,), dtype=torch.int64))
    with pytest.raises(RuntimeError, match="Ndims differ: Stacked element 1 has shape"):
        Stacked(Unbounded((2,)), Unbounded((2, 1)))
    with pytest.raises(RuntimeError, match="more than one type of specs"):
        torch.stack([Bounded(0.0, 1.0, shape=(2,)), Unbounded((2,))])
    spec = torch.stack([Bounded(0.0, 1.0, shape=(2,)), Bounded(2.0, 3.0, shape=(2,))])
    assert LazyStackedTensorSpec is Stacked
    projected = spec.project(torch.zeros(4, 2, 2))
    assert spec.is_in(projected) and (projected[:, 1] == 2).all()


def test_contains_lazy_spec_and_exclusive_keys():
    plain = Composite(a=Unbounded((1,)))
    assert not contains_lazy_spec(plain) and check_no_exclusive_keys(plain)
    stacked = torch.stack(agent_specs(), 0)
    assert contains_lazy_spec(Composite(agents=stacked)) and check_no_exclusive_keys(stacked)
    exclusive = torch.stack([Composite(a=Unbounded((1,))), Composite(b=Unbounded((1,)))])
    assert not check_no_exclusive_keys(Composite(group=exclusive))
    assert set(exclusive.keys()) == set()


def test_consolidate_spec_fills_exclusive_keys_with_empty_specs():
    exclusive = torch.stack([Composite(a=Unbounded((1,))), Composite(b=Categorical(3, shape=(2,)))])
    consolidated = consolidate_spec(Composite(group=exclusive))
    group = consolidated["group"]
    assert check_no_exclusive_keys(group) and set(group.keys()) == {"a", "b"}
    assert group.composites[0]["b"].shape == torch.Size((0,))
    assert group.composites[0]["b"].dtype == torch.int64
    assert set(exclusive.keys()) == set()


def test_make_composite_from_td():
    td = TensorDict(
        {
            "obs": torch.zeros(3, 4),
            "scalar": torch.zeros(3),
            "nested": {"r": torch.zeros(3, 1, dtype=torch.int64)},
        },
        batch_size=[3],
    )
    spec = make_composite_from_td(td)
    assert spec.shape == torch.Size((3,)) and spec["nested", "r"].dtype == torch.int64
    assert spec["obs"] == Unbounded((3, 4)) and spec.is_in(td)
    scalar = make_composite_from_td(TensorDict({"x": torch.tensor(1.0)}, []))
    assert scalar["x"].shape == torch.Size((1,))
    assert make_composite_from_td(
        TensorDict({"x": torch.tensor(1.0)}, []), unsqueeze_null_shapes=False
    )["x"].shape == torch.Size(())
    text = TensorDict({"t": NonTensorData("hello", batch_size=[2])}, [2])
    assert isinstance(make_composite_from_td(text)["t"], NonTensor)
    lazy = LazyStackedTensorDict.lazy_stack(
        [TensorDict({"o": torch.zeros(2)}), TensorDict({"o": torch.zeros(3)})]
    )
    assert isinstance(make_composite_from_td(lazy), StackedComposite)
    assert make_composite_from_td(lazy, dynamic_shape=True)["o"].shape == torch.Size((2, -1))


class _Record(TensorClass):
    obs: torch.Tensor
    label: str


def test_make_composite_from_td_rebuilds_tensorclasses():
    td = TensorDict(
        rec=_Record(obs=torch.ones(5, 3), label="tag", batch_size=(5,)),
        note="text",
        batch_size=(5,),
    )
    spec = make_composite_from_td(td)
    assert spec["rec"].data_cls is _Record and spec["rec", "obs"].shape == (5, 3)
    assert spec["rec", "label"].example_data == "tag" and spec["note"].example_data == "text"
    one = spec.one()
    assert isinstance(one["rec"], _Record) and one["rec"].label == "tag"
    assert one["note"] == "text" and (one["rec"].obs == 1).all()


def test_make_composite_from_td_dynamic_shape_marks_feature_dims():
    td = TensorDict({"obs": torch.zeros(2, 3, 4), "r": torch.zeros(2, 1)}, [2])
    spec = make_composite_from_td(td, dynamic_shape=True)
    assert spec["obs"].shape == (2, -1, -1) and spec["r"].shape == (2, -1)
    assert spec.is_in(TensorDict({"obs": torch.zeros(2, 5, 1), "r": torch.zeros(2, 1)}, [2]))
