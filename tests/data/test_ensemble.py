"""Ensembles of replay buffers: weights, per-buffer and ensemble transforms, components."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.ensemble import (
    ReplayBufferEnsemble,
    SamplerEnsemble,
    StorageEnsemble,
    WriterEnsemble,
)
from tdrl.envs.transforms import Compose, RenameTransform


def to_image(size, in_keys, out_keys=None):
    """Stand-in for ToTensorImage + Resize: [..., H, W, C] uint-like -> [..., C, size, size]."""
    out_keys = out_keys or in_keys

    def transform(td):
        for in_key, out_key in zip(in_keys, out_keys):
            image = td.get(in_key).float()
            if image.shape[-1] == 3:
                image = image.movedim(-1, -3) / 255
            lead = image.shape[:-3]
            image = F.interpolate(image.reshape(-1, *image.shape[-3:]), size=(size, size))
            td.set(out_key, image.reshape(*lead, *image.shape[-3:]))
        return td

    return transform


def test_docs_example_shapes():
    pixel_keys = ["pixels", ("next", "pixels")]
    rb0 = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(10),
        transform=Compose(
            to_image(32, pixel_keys), RenameTransform([("some", "key")], ["renamed"])
        ),
    )
    rb1 = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(10),
        transform=Compose(to_image(32, pixel_keys), RenameTransform(["another_key"], ["renamed"])),
    )
    rb = ReplayBufferEnsemble(
        rb0, rb1, p=[0.5, 0.5], transform=to_image(33, ["pixels"], ["pixels33"])
    )
    data0 = TensorDict(
        {
            "pixels": torch.randint(255, (10, 244, 244, 3)),
            ("next", "pixels"): torch.randint(255, (10, 244, 244, 3)),
            ("some", "key"): torch.randn(10),
        },
        batch_size=[10],
    )
    data1 = TensorDict(
        {
            "pixels": torch.randint(255, (10, 64, 64, 3)),
            ("next", "pixels"): torch.randint(255, (10, 64, 64, 3)),
            "another_key": torch.randn(10),
        },
        batch_size=[10],
    )
    rb[0].extend(data0)
    rb[1].extend(data1)
    for _ in range(2):
        sample = rb.sample(10)
        assert sample["next", "pixels"].shape == torch.Size([2, 5, 3, 32, 32])
        assert sample["pixels"].shape == torch.Size([2, 5, 3, 32, 32])
        assert sample["pixels33"].shape == torch.Size([2, 5, 3, 33, 33])
        assert sample["renamed"].shape == torch.Size([2, 5])


def make_ensemble(**kwargs):
    rbs = []
    for value in range(3):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
        rb.extend(TensorDict({"x": torch.full((20,), value)}, [20]))
        rbs.append(rb)
    return ReplayBufferEnsemble(*rbs, **kwargs)


def test_weights_choose_buffers():
    rb = make_ensemble(p=[0.0, 0.0, 1.0], num_buffer_sampled=4, batch_size=8)
    sample, info = rb.sample(return_info=True)
    assert sample.shape == (4, 2) and (sample["x"] == 2).all()
    assert info["buffer_ids"].tolist() == [2, 2, 2, 2]
    assert (sample["buffer_ids"] == 2).all()
    rb = make_ensemble(sample_from_all=True, batch_size=9)
    assert rb.sample()["x"][:, 0].tolist() == [0, 1, 2]
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(3)
    rb = make_ensemble(p=[1, 3, 0], batch_size=3, generator=gen)
    for _ in range(200):
        counts += torch.bincount(rb.sample()["x"][:, 0], minlength=3)
    assert counts[2] == 0 and counts[1] > 2 * counts[0]


def test_heterogeneous_sub_batches_are_lazily_stacked():
    rb0 = TensorDictReplayBuffer(storage=LazyTensorStorage(5))
    rb1 = TensorDictReplayBuffer(storage=LazyTensorStorage(5))
    rb0.extend(TensorDict({"x": torch.zeros(5, 2)}, [5]))
    rb1.extend(TensorDict({"x": torch.zeros(5, 3)}, [5]))
    sample = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True).sample(4)
    assert sample.batch_size == (2, 2)
    assert sample[0]["x"].shape == (2, 2) and sample[1]["x"].shape == (2, 3)


def test_built_from_components_and_refuses_writes():
    rb = ReplayBufferEnsemble(
        storages=[LazyTensorStorage(4), LazyTensorStorage(4)],
        samplers=[RandomSampler(), RandomSampler()],
        writers=[RoundRobinWriter(), RoundRobinWriter()],
        batch_size=4,
    )
    rb[0].extend(torch.zeros(4))
    rb[1].extend(torch.ones(4))
    assert rb.sample().shape == (2, 2) and len(rb) == 8
    with pytest.raises(RuntimeError, match="extend its sub-buffers"):
        rb.extend(torch.zeros(2))
    with pytest.raises(RuntimeError, match="extend its sub-buffers"):
        rb.add(torch.zeros(()))
    with pytest.raises(ValueError, match="multiple of the number of sub-batches \\(2\\), got 5"):
        rb.sample(5)
    rb.empty()
    assert len(rb) == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="one probability per buffer \\(2\\), got 3"):
        SamplerEnsemble(RandomSampler(), RandomSampler(), p=[0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="non-negative"):
        SamplerEnsemble(RandomSampler(), p=[-1.0])
    with pytest.raises(TypeError, match="expects replay buffers, got int"):
        ReplayBufferEnsemble(3)
    with pytest.raises(TypeError, match="expects storages"):
        StorageEnsemble("a")
    with pytest.raises(RuntimeError, match="extend its sub-buffers"):
        WriterEnsemble(RoundRobinWriter()).add(1)


def test_components_and_state(tmp_path):
    rb = make_ensemble(batch_size=6)
    storage, sampler = rb.storage, rb.sampler
    (buffer_ids, indices), info = sampler.sample(storage, 6)
    data = storage.get((buffer_ids, indices))
    assert [int(d["x"][0]) for d in data] == buffer_ids.tolist()
    state = rb.state_dict()
    other = make_ensemble(batch_size=6)
    other[0].empty()
    other.load_state_dict(state)
    assert len(other[0]) == 20
    rb.dumps(tmp_path / "ckpt")
    other = make_ensemble(batch_size=6)
    other[1].empty()
    other.loads(tmp_path / "ckpt")
    assert (other[1][:]["x"] == 1).all()
    storage.dumps(tmp_path / "storages")
    StorageEnsemble(LazyTensorStorage(20), LazyTensorStorage(20), LazyTensorStorage(20)).loads(
        tmp_path / "storages"
    )


def test_sub_buffers_of_trajectory_items():
    rbs = []
    for value in range(2):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(TensorDict({"x": torch.full((4, 5), float(value))}, [4, 5]))
        rbs.append(rb)
    ensemble = ReplayBufferEnsemble(*rbs, sample_from_all=True, batch_size=6)
    sample = ensemble.sample()
    assert sample.batch_size == (2, 3, 5)
    assert sample["index"].shape == sample["buffer_ids"].shape == (2, 3, 5)
    assert torch.equal(sample["x"], sample["buffer_ids"].float())


def test_buffer_ids_under_index_for_plain_sub_buffers():
    rbs = []
    for value in range(3):
        rb = ReplayBuffer(storage=LazyTensorStorage(20))
        rb.extend(TensorDict({"x": torch.full((20,), value)}, [20]))
        rbs.append(rb)
    ensemble = ReplayBufferEnsemble(*rbs, p=[0.0, 0.5, 0.5], num_buffer_sampled=4, batch_size=8)
    for batch in (next(iter(ensemble)), ensemble.sample()):
        ids = batch.get(("index", "buffer_ids"))
        assert ids.shape == (4, 2)
        assert torch.equal(ids, batch["x"])
        assert 0 not in ids.unique().tolist()
