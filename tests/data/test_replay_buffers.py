import copy
import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import replay_buffers as rbs
from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)


def _td(n, start=0):
    obs = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "obs": obs.unsqueeze(-1).expand(n, 3).clone(),
            "action": torch.zeros(n, 2),
            "next": {"obs": obs.unsqueeze(-1) + 1, "done": torch.zeros(n, 1, dtype=torch.bool)},
        },
        [n],
    )


STORAGES = [
    pytest.param(lambda tmp: ListStorage(20), id="list"),
    pytest.param(lambda tmp: LazyTensorStorage(20), id="lazy"),
    pytest.param(lambda tmp: LazyMemmapStorage(20, scratch_dir=tmp / "mm"), id="memmap"),
]


def test_seed_list_storage_example():
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.add("a string!")
    rb.extend([30, None])
    assert len(rb) == 3
    assert rb[0] == "a string!" and rb[1] == 30 and rb[2] is None


def test_seed_tensor_storage_example():
    container = torch.empty(10, 3, 8, 8, dtype=torch.uint8)
    rb = ReplayBuffer(storage=TensorStorage(container))
    img = torch.randint(255, (3, 8, 8), dtype=torch.uint8)
    rb.add(img)
    # a storage built on a container holds all its rows; the writer overwrites from row 0
    assert len(rb) == 10 and rb.writer._cursor == 1
    assert torch.equal(container[0], img)
    assert torch.equal(rb[0], img)


def test_seed_memmap_pytree_example(tmp_path):
    rb_td = ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path / "a"), batch_size=1)
    rb_td.add(
        TensorDict(
            {
                "img": torch.randint(255, (3, 8, 8), dtype=torch.uint8),
                "labels": torch.randint(100, ()),
            },
            batch_size=[],
        )
    )
    assert len(rb_td) == 1
    assert rb_td[0]["img"].dtype == torch.uint8
    assert rb_td.sample(4)["labels"].shape == (4,)
    rb_pytree = ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path / "b"))
    rb_pytree.extend({"a": {"b": torch.randn(3), "c": [torch.zeros(3, 2), (torch.ones(3, 10),)]}})
    assert len(rb_pytree) == 3
    sample = rb_pytree.sample(5)
    assert sample["a"]["c"][0].shape == (5, 2)
    assert sample["a"]["c"][1][0].shape == (5, 10)
    assert isinstance(sample["a"]["c"][1], tuple)


def test_pytree_leaves_must_share_leading_dim():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(ValueError, match="leading dimension"):
        rb.extend({"a": torch.zeros(3), "b": torch.zeros(4)})


def test_pytree_items_read_and_written_by_index():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend({"a": torch.arange(5), "b": (torch.zeros(5, 2),)})
    part = rb[1:3]
    assert torch.equal(part["a"], torch.tensor([1, 2])) and part["b"][0].shape == (2, 2)
    part["a"].fill_(-1)  # a copy: the buffer is unchanged
    assert torch.equal(rb[:]["a"], torch.arange(5))
    rb[1:3] = {"a": torch.tensor([7, 8]), "b": (torch.ones(2, 2),)}
    assert torch.equal(rb[:]["a"], torch.tensor([0, 7, 8, 3, 4]))
    assert torch.equal(rb[:]["b"][0][:, 0], torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="structure mismatch"):
        rb[0] = {"a": torch.tensor(1)}


def test_list_is_many_items_tuple_is_one_pytree():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend([torch.zeros(2), torch.ones(2)])
    assert len(rb) == 2 and torch.equal(rb[1], torch.ones(2))
    rb2 = ReplayBuffer(storage=LazyTensorStorage(10))
    rb2.extend((torch.zeros(4, 2), torch.arange(4)))
    assert len(rb2) == 4
    assert torch.equal(rb2[3][1], torch.tensor(3))
    rb3 = ReplayBuffer(storage=ListStorage(10))
    rb3.add((1, "x"))
    assert rb3[0] == (1, "x")


@pytest.mark.parametrize("make", STORAGES)
def test_extend_sample_getitem(make, tmp_path):
    rb = TensorDictReplayBuffer(storage=make(tmp_path), batch_size=8)
    index = rb.extend(_td(5))
    assert index.tolist() == [0, 1, 2, 3, 4]
    assert len(rb) == 5
    sample = rb.sample()
    assert sample.batch_size == (8,)
    assert torch.equal(sample["obs"][:, 0], sample["index"].float())
    assert torch.equal(sample["next", "obs"][:, 0], sample["index"].float() + 1)
    assert rb[2]["obs"][0] == 2
    assert rb[1:3]["obs"][:, 0].tolist() == [1, 2]
    assert rb[torch.tensor([4, 0])]["obs"][:, 0].tolist() == [4, 0]
    assert rb[:]["obs"].shape == (5, 3)


@pytest.mark.parametrize("make", STORAGES)
def test_round_robin_wraps(make, tmp_path):
    rb = ReplayBuffer(storage=make(tmp_path))
    rb.extend(torch.arange(15))
    index = rb.extend(torch.arange(15, 25))
    assert index.tolist() == [15, 16, 17, 18, 19, 0, 1, 2, 3, 4]
    assert len(rb) == 20
    stored = rb[:]
    assert stored[:5].tolist() == [20, 21, 22, 23, 24]
    assert stored[5:].tolist() == list(range(5, 20))
    assert rb.write_count == 25


def test_extend_larger_than_capacity_keeps_last_items():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(torch.arange(3))
    index = rb.extend(torch.arange(10))
    assert index.shape == (10,)
    assert sorted(rb[:].tolist()) == [6, 7, 8, 9]
    rb.add(torch.tensor(100))
    assert 100 in rb[:].tolist() and len(rb) == 4


def test_setitem_does_not_move_cursor():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5))
    rb[1] = torch.tensor(42)
    rb[torch.tensor([2, 3])] = torch.tensor([7, 8])
    rb[-1] = torch.tensor(-1)
    assert rb[:].tolist() == [0, 42, 7, 8, -1]
    assert len(rb) == 5
    assert rb.extend(torch.tensor([9])).tolist() == [5]
    with pytest.raises(IndexError, match="out of range"):
        rb[7] = torch.tensor(1)


def test_index_out_of_range_messages():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5))
    with pytest.raises(IndexError, match=r"expected indices in \[-5, 5\)"):
        rb[5]
    with pytest.raises(IndexError, match="out of range"):
        rb[torch.tensor([0, 9])]
    rbl = ReplayBuffer(storage=ListStorage(10))
    rbl.extend([1, 2])
    with pytest.raises(IndexError, match="out of range"):
        rbl[3]


def test_negative_and_bool_indices():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5))
    assert rb[-1] == 4
    assert rb[torch.tensor([-1, -2])].tolist() == [4, 3]
    assert rb[torch.tensor([True, False, True, False, False])].tolist() == [0, 2]


def test_sample_empty_buffer_raises():
    for rb in (
        ReplayBuffer(storage=LazyTensorStorage(10)),
        ReplayBuffer(storage=ListStorage(10)),
        PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10)),
        ReplayBuffer(storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement()),
    ):
        with pytest.raises(RuntimeError, match="empty"):
            rb.sample(4)


def test_sample_needs_batch_size():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(3))
    with pytest.raises(ValueError, match="batch_size"):
        rb.sample()
    assert rb.sample(2).shape == (2,)


def test_structure_mismatch_names_key():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(_td(3))
    bad = _td(2).exclude(("next", "done"))
    with pytest.raises(ValueError, match=r"\('next', 'done'\)"):
        rb.extend(bad)
    extra = _td(2)
    extra["other"] = torch.zeros(2)
    rb.extend(extra)  # a new key joins the stored structure (test_in_place.py)
    assert rb[:]["other"].shape == (5,)
    wrong_shape = _td(2)
    wrong_shape["other"] = torch.zeros(2)
    wrong_shape["obs"] = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"'obs'.*expected shape \(2, 3\), got \(2, 4\)"):
        rb.extend(wrong_shape)
    with pytest.raises(TypeError, match="TensorDict"):
        rb.extend(torch.zeros(3))
    assert len(rb) == 5  # the failed writes wrote nothing


def test_iter_without_replacement_is_finite():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20), sampler=SamplerWithoutReplacement(), batch_size=4
    )
    rb.extend(torch.arange(10))
    batches = list(rb)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    assert len(list(rb)) == 3
    rb_drop = ReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=4,
    )
    rb_drop.extend(torch.arange(10))
    assert [len(b) for b in rb_drop] == [4, 4]


def test_iter_with_random_sampler_is_endless():
    rb = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=2)
    rb.extend(torch.arange(10))
    iterator = iter(rb)
    assert all(next(iterator).shape == (2,) for _ in range(50))


def test_empty():
    rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
    rb.extend(torch.arange(6))
    rb.empty()
    assert len(rb) == 0 and rb.write_count == 0
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample(2)
    assert rb.extend(torch.arange(2)).tolist() == [0, 1]
    assert set(rb.sample(20).tolist()) <= {0, 1}


class _AddOne:
    def __call__(self, data):
        return data + 1

    def inv(self, data):
        return data * 10


def test_transforms_forward_on_sample_inv_on_extend():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.append_transform(_AddOne())
    rb.extend(torch.tensor([1, 2]))
    assert rb.storage[:].tolist() == [10, 20]
    assert sorted(set(rb.sample(20).tolist())) == [11, 21]
    assert rb[0] == 11
    rb.insert_transform(0, lambda x: x * 2)
    assert rb[0] == 21
    assert len(rb.transform) == 2
    rb2 = ReplayBuffer(storage=LazyTensorStorage(10))
    rb2.append_transform(_AddOne(), invert=True)
    rb2.extend(torch.tensor([1, 2]))
    assert rb2.storage[:].tolist() == [2, 3]
    assert rb2[1] == 30


def test_insert_transform_out_of_range_and_forward_probe():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.append_transform(_AddOne())
    with pytest.raises(ValueError, match=r"expected a position in \[-1, 1\].*got 5"):
        rb.insert_transform(5, _AddOne())
    rb.extend(torch.tensor([1, 2]))
    calls = []
    rb.transform.forward = lambda data: calls.append(data) or data
    rb.sample(2)
    assert len(calls) == 1  # sampled data go through the sequence's forward


def test_module_transform_on_tensordict():
    class Scale(torch.nn.Module):
        def forward(self, td):
            td["obs"] = td["obs"] * 2
            return td

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=Scale())
    rb.extend(_td(3))
    sample = rb.sample(6)
    assert torch.equal(sample["obs"][:, 0], sample["index"].float() * 2)


def test_collate_fn_and_list_storage_stacking():
    rb = ReplayBuffer(storage=ListStorage(10), batch_size=3)
    rb.extend([torch.ones(2) * i for i in range(4)])
    assert rb.sample().shape == (3, 2)
    rb_td = ReplayBuffer(storage=ListStorage(10))
    for i in range(3):
        rb_td.add(_td(1, start=i)[0])
    assert rb_td.sample(5).batch_size == (5,)
    custom = ReplayBuffer(storage=LazyTensorStorage(10), collate_fn=lambda x: x.sum())
    custom.extend(torch.ones(4))
    assert custom.sample(3) == 3


def test_generator_makes_sampling_reproducible():
    def draws(generator):
        rb = PrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=LazyTensorStorage(100), generator=generator
        )
        rb.extend(torch.arange(100))
        rb_uniform = ReplayBuffer(storage=LazyTensorStorage(100), generator=generator)
        rb_uniform.extend(torch.arange(100))
        return rb.sample(16).tolist() + rb_uniform.sample(16).tolist()

    assert draws(torch.Generator().manual_seed(3)) == draws(torch.Generator().manual_seed(3))
    assert draws(torch.Generator().manual_seed(3)) != draws(torch.Generator().manual_seed(4))


def test_prefetch_returns_batches():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50), batch_size=4, prefetch=3)
    rb.extend(_td(20))
    for _ in range(10):
        sample = rb.sample()
        assert sample.batch_size == (4,)
    assert rb.sample(7).batch_size == (7,)
    rb.empty()
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_memory_and_cuda_storage():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), pin_memory=True, batch_size=2)
    rb.extend(_td(4))
    assert rb.sample()["obs"].is_pinned()
    rb_cuda = TensorDictReplayBuffer(storage=LazyTensorStorage(10, device="cuda"), batch_size=2)
    rb_cuda.extend(_td(4))
    assert rb_cuda.sample()["obs"].device.type == "cuda"


def test_pin_memory_is_ignored_without_cuda():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), pin_memory=True)
    rb.extend(torch.arange(4))
    assert rb.sample(2).shape == (2,)


def test_ndim_storage_and_dim_extend():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100, ndim=2), batch_size=16)
    for step in range(60):
        data = TensorDict(
            {"step": torch.full((2, 1), step), "env": torch.arange(2).unsqueeze(-1)}, [2, 1]
        )
        rb.extend(data)
    assert len(rb) == 100
    stored = rb[:]
    # read back in the layout extend received: [envs, time] (storage rows are time)
    assert stored.batch_size == (2, 50)
    assert stored["env"][:, 0].tolist() == [0, 1]
    assert stored["step"][:, 0].tolist() == [50, 50]
    assert rb.storage[:].batch_size == (50, 2)
    sample = rb.sample()
    assert sample.batch_size == (16,)
    assert sample["index"].shape == (16, 2)
    assert torch.equal(sample["env"], sample["index"][:, 1])
    rows = sample["index"][:, 0]
    assert torch.equal(sample["step"], torch.where(rows < 10, rows + 50, rows))


@pytest.mark.parametrize("data", [TensorDict({"a": torch.zeros(10)}, [10]), torch.zeros(10)])
def test_extend_without_the_dim_extend_dim_names_it(data):
    rb = ReplayBuffer(storage=LazyTensorStorage(20, ndim=2))
    rb.extend(data.reshape(2, 5))
    with pytest.raises(ValueError, match=r"dim 1 \(dim_extend\).*2 batch dims.*\(10,\)"):
        rb.extend(data)


def test_ndim_max_size_is_rounded_to_whole_rows():
    rb = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    rb.extend(torch.zeros(3, 4))
    assert rb.storage.max_size == 102
    assert len(rb) == 12
    assert rb.sample(5).shape == (5,)


def test_ndim_prioritized():
    storage = LazyTensorStorage(100, ndim=2)
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=storage, batch_size=32)
    rb.extend(TensorDict({"x": torch.arange(12).reshape(3, 4)}, [3, 4]))
    sample = rb.sample()
    sample["td_error"] = (sample["x"] == 5).float() * 100 + 1e-6
    rb.update_tensordict_priority(sample)
    if (sample["x"] == 5).any():
        assert (rb.sample()["x"] == 5).float().mean() > 0.9


def test_getitem_by_key_and_data_prefix():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(21))
    rb.extend(_td(4))
    assert torch.equal(rb["obs"], rb[:]["obs"])
    assert torch.equal(rb["_data", "obs"], rb[:]["obs"])
    assert torch.equal(rb["next", "obs"], rb[:]["next", "obs"])


def test_state_dict_roundtrip(tmp_path):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(10), batch_size=4
    )
    rb.extend(_td(6))
    sample = rb.sample()
    sample["td_error"] = torch.rand(4) + 0.5
    rb.update_tensordict_priority(sample)
    path = tmp_path / "rb.pt"
    torch.save(rb.state_dict(), path)
    other = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyMemmapStorage(10, scratch_dir=tmp_path / "m"), batch_size=4
    )
    other.load_state_dict(torch.load(path, weights_only=False))
    assert len(other) == 6
    assert torch.equal(other[:]["obs"], rb[:]["obs"])
    assert torch.equal(other.sampler._tree.leaves(), rb.sampler._tree.leaves())
    assert other.extend(_td(1)).tolist() == [6]


def test_pickle_and_deepcopy():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=1)
    rb.extend(_td(3))
    for clone in (pickle.loads(pickle.dumps(rb)), copy.deepcopy(rb)):
        assert len(clone) == 3
        clone.extend(_td(2))
        assert len(clone) == 5 and len(rb) == 3
        assert clone.sample().batch_size == (2,)


def test_exports():
    import tdrl.data

    for name in rbs.__all__:
        assert getattr(tdrl.data, name) is getattr(rbs, name)


def test_repr():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(10, 0.5, 0.5))
    assert "PrioritizedSampler" in repr(rb) and "LazyTensorStorage" in repr(rb)


# -- ListStorage: more items than the capacity, sequences of items --------------------------------
@pytest.mark.parametrize("storage_cls", [ListStorage, LazyTensorStorage])
def test_extend_beyond_capacity_keeps_the_last_items(storage_cls):
    rb = ReplayBuffer(storage=storage_cls(10))
    items = list(range(12)) if storage_cls is ListStorage else torch.arange(12)
    index = rb.extend(items)
    assert index.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert rb[:].tolist() == [10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    assert rb.writer._cursor == 2 and rb.write_count == 12
    more = list(range(20, 33)) if storage_cls is ListStorage else torch.arange(20, 33)
    rb.extend(more)  # from a non-zero cursor, wrapping again
    assert sorted(rb[:].tolist()) == list(range(23, 33))
    assert rb.add(99 if storage_cls is ListStorage else torch.tensor(99)) == 5


@pytest.mark.parametrize(
    "make",
    [
        lambda storage: PrioritizedReplayBuffer(alpha=0.7, beta=0.9, storage=storage),
        lambda storage: ReplayBuffer(storage=storage),
    ],
)
def test_list_storage_extends_with_range_and_tuples(make):
    rb = make(ListStorage(10))
    assert rb.extend(range(10)).tolist() == list(range(10))
    assert rb.storage._storage == list(range(10))
    assert set(rb.sample(5).tolist()) <= set(range(10))
    words = make(ListStorage(10))
    words.extend(("a", "b", "c"))
    assert len(words) == 3 and words[:] == ["a", "b", "c"]
    mixed = make(ListStorage(10))
    mixed.extend((torch.zeros(2), "x"))  # not all tensors: two items
    assert len(mixed) == 2 and mixed[1] == "x"
    pytree = make(ListStorage(10))
    pytree.extend((torch.zeros(4, 2), torch.arange(4)))  # tensors only: a pytree of 4 items
    assert len(pytree) == 4 and pytree.storage._storage[3][1] == 3


def test_tensor_storage_extend_with_non_tensors_names_what_it_expects():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    expected = "extend expects a tensor, a TensorDict, a list of items or a pytree of tensors"
    with pytest.raises(TypeError, match=f"{expected}.*got range"):
        rb.extend(range(10))
    with pytest.raises(TypeError, match=f"{expected}.*got tuple holding str"):
        rb.extend(("a", "b"))


# -- writing back at sampled indices ----------------------------------------------------------------
def _ndim2_buffer(sampler=None):
    kwargs = {} if sampler is None else {"sampler": sampler}
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20, ndim=2), batch_size=4, **kwargs)
    rb.extend(TensorDict({"a": torch.zeros(2, 5), "b": torch.zeros(2, 5, 3)}, [2, 5]))
    return rb


@pytest.mark.parametrize("form", ["tuple", "tensor"])
def test_ndim2_write_back_at_sampled_indices(form):
    rb = _ndim2_buffer()
    sample = rb.sample()
    coords = sample["index"]
    assert coords.shape == (4, 2)
    sample["a"] = coords[:, 0] * 10.0 + coords[:, 1] + 1
    index = tuple(coords.unbind(-1)) if form == "tuple" else coords
    rb[index] = sample.exclude("index")
    stored = rb.storage[:]
    expected = torch.zeros(5, 2)
    expected[coords[:, 0], coords[:, 1]] = coords[:, 0] * 10.0 + coords[:, 1] + 1
    assert torch.equal(stored["a"], expected)
    assert torch.equal(rb[index]["a"], sample["a"])  # reads take the same index forms
    assert len(rb) == 10 and rb.writer._cursor == 5
    with pytest.raises(IndexError, match="along dim 1"):
        rb[(torch.tensor([0]), torch.tensor([2]))] = sample[:1].exclude("index")
    with pytest.raises(IndexError, match="along dim 0"):
        rb[torch.tensor([[5, 0]])] = sample[:1].exclude("index")


def test_ndim2_write_back_resets_priorities():
    sampler = PrioritizedSampler(20, alpha=1.0, beta=1.0)
    rb = _ndim2_buffer(sampler)
    rb.update_priority(torch.tensor([[0, 0], [1, 1]]), torch.tensor([5.0, 5.0]))
    coords = torch.tensor([[1, 1]])
    rb[coords] = TensorDict({"a": torch.ones(1), "b": torch.ones(1, 3)}, [1])
    leaves = sampler._tree.leaves()
    assert leaves[0].item() == pytest.approx(5.0)
    assert leaves[3].item() == pytest.approx(sampler.default_priority)


def test_trajectory_items_sample_index_write_back_and_priorities():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(10), batch_size=4, eps=0.0
    )
    data = TensorDict({"x": torch.arange(30.0).reshape(6, 5)}, [6, 5])
    index = rb.extend(data)
    assert data["index"].shape == (6, 5) and torch.equal(data["index"][:, 0], index)
    sample = rb.sample()
    assert sample.batch_size == (4, 5)
    assert sample["index"].shape == sample["priority_weight"].shape == (4, 5)
    items = sample["index"][:, 0]
    assert torch.equal(sample["x"], data["x"][items])
    sample["x"] = -sample["x"]
    rb[sample["index"]] = sample.exclude("index", "priority_weight")
    assert torch.equal(rb[items]["x"], -data["x"][items])
    # per-step errors are reduced per item (reduction "max")
    data["td_error"] = torch.arange(30.0).reshape(6, 5) + 1
    rb.update_tensordict_priority(data)
    leaves = rb.sampler._tree.leaves()[:6]
    assert torch.equal(leaves, torch.arange(5.0, 31.0, 5.0, dtype=torch.float64))


def test_random_crop_on_stored_trajectories():
    from tdrl.envs import RandomCropTensorDict

    obs = torch.randn(100, 50, 1)
    data = TensorDict({"obs": obs[:, :-1], "next": {"obs": obs[:, 1:]}}, [100, 49])
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(1000))
    rb.extend(data)
    rb.append_transform(RandomCropTensorDict(sub_seq_len=10))
    sample = rb.sample(16)
    assert sample.batch_size == (16, 10)
    assert sample["obs"].shape == (16, 10, 1)
    assert (sample["obs"][:, 1:] == sample["next", "obs"][:, :-1]).all()


def test_ndim2_reads_back_in_the_layout_extended():
    rb = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    data = TensorDict({"x": torch.arange(20).reshape(2, 10)}, [2, 10])
    rb.extend(data)
    assert rb[:].batch_size == (2, 10)
    assert torch.equal(rb[:]["x"], data["x"])
    assert torch.equal(rb["x"], data["x"])
    assert rb[1]["x"].tolist() == list(range(10, 20))
    assert rb[0, 3:5]["x"].tolist() == [3, 4]
    # the storage itself keeps time along its rows
    assert rb.storage[:].batch_size == (10, 2)
    tensors = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    tensors.extend(torch.arange(20).reshape(2, 10))
    assert torch.equal(tensors[:], torch.arange(20).reshape(2, 10))


def test_ndim2_in_place_writes_in_the_layout_extended():
    rb = ReplayBuffer(storage=LazyTensorStorage(102, ndim=2))
    rb.extend(TensorDict({"a": torch.arange(50).expand(2, 50).clone()}, [2, 50]))
    revision = rb.storage._mutation_revision
    rb[0, 3:4] = TensorDict({"a": torch.tensor([0])}, [1])
    assert rb[0, 3:4]["a"].tolist() == [0] and rb[1, 3:4]["a"].tolist() == [3]
    # broadcast over the streams
    rb[:, 10:20] = TensorDict({"a": torch.zeros(10, dtype=torch.long)}, [10])
    assert (rb[:, 10:20]["a"] == 0).all() and rb[:, 20]["a"].tolist() == [20, 20]
    assert len(rb) == 100 and rb.writer._cursor == 50
    assert rb.storage._mutation_revision == revision + 2
    with pytest.raises(ValueError, match="cannot write data of shape \\(3,\\)"):
        rb[:, 0:2] = TensorDict({"a": torch.zeros(3, dtype=torch.long)}, [3])


def test_ndim2_in_place_write_resets_priorities_of_the_items_written():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20, ndim=2),
        sampler=PrioritizedSampler(20, alpha=1.0, beta=1.0),
    )
    rb.extend(torch.zeros(2, 10))
    rb.update_priority(torch.arange(20), torch.arange(1.0, 21.0))
    rb[1, 4] = torch.tensor(1.0)
    leaves = rb.sampler._tree.leaves()
    # stream 1 at time 4 is storage row 4, column 1: flat index 9, which gets the default
    # (largest) priority; the others keep theirs
    assert leaves[9] == pytest.approx(20.0)
    others = torch.arange(20) != 9
    assert torch.allclose(leaves[others], torch.arange(1.0, 21.0, dtype=torch.float64)[others])
