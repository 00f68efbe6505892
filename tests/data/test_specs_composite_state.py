"""Composite state: the lock graph, dim names, batch-shape changes, reserved keys, devices."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, Unbounded, consolidate_spec


def chain() -> list[Composite]:
    level3 = Composite()
    level2 = Composite(level3=level3)
    level1 = Composite(level2=level2)
    return [Composite(level1=level1), level1, level2, level3]


def test_lock_recursive_and_not():
    spec = Composite(a=Composite(b=Composite()))
    assert not spec.locked and spec.lock_() is spec
    assert spec.locked and spec["a"].locked and spec["a", "b"].is_locked
    with pytest.raises(RuntimeError, match="Cannot modify a locked Composite"):
        spec["a", "b", "c"] = Unbounded(1)
    with pytest.raises(RuntimeError, match="Cannot modify a locked Composite"):
        del spec["a"]
    spec.unlock_()
    spec["a", "b", "c"] = Unbounded(1)
    shallow = Composite(a=Composite())
    shallow.lock_(recurse=False)
    assert not shallow["a"].locked
    shallow["a", "x"] = Unbounded(1)  # the nested Composite is not locked: allowed
    with pytest.raises(RuntimeError, match="Cannot modify a locked Composite"):
        shallow["y"] = Unbounded(1)


def test_a_nested_composite_cannot_be_unlocked_while_its_locker_is_locked():
    level0, level1, level2, level3 = chain()
    level0.lock_()
    with pytest.raises(RuntimeError, match="part of a locked graph"):
        level3.unlock_()
    assert level3.is_locked
    other = Composite(level2=level2)
    other.lock_()
    # level2 is also locked by `other`: unlocking level0's tree would unlock it behind its back
    with pytest.raises(RuntimeError, match="part of a locked graph"):
        level0.unlock_()
    assert all(spec.is_locked for spec in (level0, level1, level2, level3))
    level0.unlock_(recurse=False)
    assert not level0.is_locked and level1.is_locked
    with pytest.raises(RuntimeError, match="part of a locked graph"):
        other.unlock_()  # level2 is still locked by level1 as well
    other.unlock_(recurse=False)
    level1.unlock_()
    assert not any(spec.is_locked for spec in (level1, level2, level3))


def test_locked_composites_pickle_without_their_lock_graph():
    level0, *_ = chain()
    level0.lock_()
    restored = pickle.loads(pickle.dumps(level0))
    assert restored.locked and restored == level0
    restored["level1"].unlock_()  # its locker in the original graph is not part of the copy


def test_names_follow_the_batch_dims():
    spec = Composite(
        {"obs": Bounded(-1.0, 1.0, shape=(4, 5, 3)), "nested": Composite(shape=(4, 5, 2))},
        shape=(4, 5),
        names=["batch", "time"],
    )
    assert spec.names == ["batch", "time"] and spec._has_names()
    assert spec["nested"].names == ["batch", "time", None]
    assert spec.expand(2, 4, 5).names == [None, "batch", "time"]
    assert spec.unsqueeze(1).names == ["batch", None, "time"]
    assert spec[0].names == ["time"] and spec[1:3].names == ["batch", "time"]
    assert [s.names for s in spec.unbind(1)] == [["batch"]] * 5
    assert spec.clone().names == spec.names and spec.to("cpu").names == spec.names
    assert spec.rand().names == ["batch", "time"]
    assert spec == Composite(
        obs=Bounded(-1.0, 1.0, shape=(4, 5, 3)), nested=Composite(shape=(4, 5, 2)), shape=(4, 5)
    )
    spec["late"] = Composite(shape=(4, 5))
    assert spec["late"].names == ["batch", "time"]
    squeezed = Composite(shape=(1, 3), names=["one", "three"]).squeeze()
    assert squeezed.names == ["three"]


def test_names_validation_and_refinement():
    spec = Composite(shape=(2, 3))
    assert spec.names == [None, None] and not spec._has_names()
    with pytest.raises(ValueError, match="Expected 2 names, but got 3 names"):
        spec.names = ["a", "b", "c"]
    with pytest.raises(ValueError, match="unique"):
        spec.names = ["a", "a"]
    refined = spec.refine_names("batch", ...)
    assert refined.names == ["batch", None] and spec.names == [None, None]
    with pytest.raises(RuntimeError, match="cannot coerce Composite names"):
        refined.refine_names("other", None)
    spec.names = ["x", "y"]
    spec.names = None
    assert not spec._has_names()


def test_setting_the_batch_shape_reaches_nested_composites():
    spec = Composite(nested=Composite(leaf=Unbounded((3, 2)), shape=(3,)), shape=(3,))
    spec.shape = ()
    assert spec["nested"].shape == (3,)  # entries only need to start with the new shape
    spec["nested"].shape = ()
    spec.shape = (3,)
    assert spec["nested"].shape == (3,)
    with pytest.raises(ValueError, match=r"entry \('nested', 'leaf'\) has shape \(3, 2\)"):
        spec.shape = (4,)
    assert spec.shape == (3,) and spec["nested"].shape == (3,)  # nothing changed


def test_nested_composites_take_the_parents_batch_shape_when_set():
    inner = Composite(b=Unbounded((2, 3)))
    spec = Composite(a=inner, shape=(2,))
    assert spec["a"].shape == (2,) and inner.shape == ()  # a copy takes the shape
    with pytest.raises(ValueError, match="spec shape mismatch at key 'a'"):
        Composite(a=Composite(b=Unbounded((3,))), shape=(2,))


@pytest.mark.parametrize("key", ["shape", "device", "dtype", "space"])
def test_attribute_names_are_reserved(key):
    with pytest.raises(AttributeError, match=f"the key '{key}' cannot be set"):
        Composite()[key] = Unbounded(1)
    with pytest.raises(AttributeError, match="cannot be set"):
        Composite()["nested", key] = Unbounded(1)


def test_keys_must_be_str_or_tuples_of_str():
    spec = Composite(a=Unbounded(1))
    for bad in (0, ("a", 1), None):
        with pytest.raises(TypeError, match="key should be a Sequence<NestedKey>") as info:
            spec[bad] = Unbounded(1)
        assert isinstance(info.value, RuntimeError)  # what tensordict raises for bad keys
    with pytest.raises(TypeError, match=r"got \('a', 1\)"):
        spec.get(("a", 1))


def test_clear_device_lets_the_parent_choose():
    spec = Composite(a=Composite(b=Unbounded(1), device="cpu"), device="cpu")
    assert spec.clear_device_() is spec
    assert spec.device is None and spec["a"].device is None
    assert spec["a", "b"].device == torch.device("cpu")  # leaves keep theirs


def test_project_writes_into_its_input():
    spec = Composite(
        obs=Bounded(0.0, 1.0, shape=(2,)), nested=Composite(x=Bounded(0.0, 1.0, shape=(1,)))
    )
    data = TensorDict({"obs": torch.tensor([3.0, -1.0]), "nested": {"x": torch.tensor([2.0])}}, [])
    assert spec.project(data) is data
    assert data["obs"].tolist() == [1.0, 0.0] and data["nested", "x"].tolist() == [1.0]


def test_stacked_composites_delete_exclusive_keys_and_type_check_per_element():
    stacked = torch.stack([Composite(a=Unbounded(2), b=Unbounded(1)), Composite(a=Unbounded(3))])
    data = stacked.rand()
    stacked.type_check(data)
    del stacked["b"]  # held by the first element only
    assert "b" not in stacked.composites[0].keys()
    with pytest.raises(KeyError, match="not found in any element"):
        del stacked["missing"]
    with pytest.raises(KeyError, match="key 'a'"):
        stacked.is_in(data.exclude("a"))


def test_consolidate_spec_keeps_nested_composite_shapes():
    stacked = torch.stack(
        [
            Composite(inner=Composite(x=Unbounded((3, 1)), shape=(3,))),
            Composite(other=Unbounded(2)),
        ]
    )
    consolidated = consolidate_spec(stacked)
    filled = consolidated.composites[1]["inner"]
    assert filled.shape == (3,) and filled["x"].shape == (3, 0)


def test_consolidate_spec_fills_keys_holding_leaf_stacks():
    agents = torch.stack([Unbounded((5, 6)), Unbounded((5, 7))], 0)
    stacked = torch.stack([Composite(agents=agents), Composite()])
    consolidated = consolidate_spec(stacked)
    # the filler is empty along the dim where the agents differ only: the fixed dim stays
    assert consolidated.composites[1]["agents"].shape == (2, 5, 0)
    assert consolidated["agents"].shape == (2, 2, 5, -1)


def test_consolidate_spec_fillers_of_batched_leaf_stacks_keep_fixed_dims():
    shapes = [(2, 5, 6, 7), (2, 5, 8, 7)]
    agents = torch.stack([Unbounded(shape) for shape in shapes], 1)
    shared = Unbounded((2, 4))
    stacked = torch.stack(
        [Composite(agents=agents, shared=shared, shape=(2,)), Composite(shape=(2,))]
    )
    consolidated = consolidate_spec(stacked)
    assert consolidated.composites[1]["agents"].shape == (2, 2, 5, 0, 7)
    assert consolidated["agents"].shape == (2, 2, 2, 5, -1, 7)
    assert consolidated["shared"].shape == (2, 2, -1)  # a plain leaf's filler has no value dims
    assert consolidated.composites[1]["shared"].shape == (2, 0)
    assert consolidated.composites[0]["agents"] == agents
