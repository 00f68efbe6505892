"""CatFrames on sequence data: unfolding, future windows, masks, replay-buffer helpers."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import CatFrames, TimeMaxPool, TransformedEnv
from tdrl.envs.transforms.functional import cat_frames
from tests.mocks import CountingEnv


def _sequence(length=4, done_at=(), batch=1) -> TensorDict:
    """``obs`` = step index, shape ``[batch, T, 1, 1]``, time named."""
    obs = torch.arange(float(length)).view(1, length, 1, 1).expand(batch, length, 1, 1).clone()
    done = torch.zeros(batch, length, 1, dtype=torch.bool)
    for step in done_at:
        done[:, step] = True
    td = TensorDict({"obs": obs, ("next", "done"): done}, [batch, length])
    return td.refine_names(None, "time")


def _windows(td, key="obs_cat"):
    return td[key][0, :, :, 0].tolist()


def test_unfolding_history_windows_restart_at_trajectory_starts():
    transform = CatFrames(3, dim=-2, in_keys=["obs"], out_keys=["obs_cat"], mask_key="mask")
    out = transform.unfolding(_sequence(done_at=[1]))
    assert _windows(out) == [[0, 0, 0], [0, 0, 1], [2, 2, 2], [2, 2, 3]]
    assert out["mask"][0].int().tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0]]
    assert out["obs"].shape == (1, 4, 1, 1)  # the input entry is kept


def test_unfolding_is_what_forward_does():
    transform = CatFrames(2, dim=-2, in_keys=["obs"], out_keys=["obs_cat"])
    torch.testing.assert_close(
        transform(_sequence(done_at=[2]))["obs_cat"],
        transform.unfolding(_sequence(done_at=[2]))["obs_cat"],
    )


def test_unfolding_window_longer_than_sequence():
    out = CatFrames(6, dim=-2, in_keys=["obs"], out_keys=["obs_cat"])(_sequence(length=3))
    assert out["obs_cat"].shape == (1, 3, 6, 1)
    assert _windows(out)[2] == [0, 0, 0, 0, 1, 2]


def test_future_windows_with_and_without_done():
    transform = CatFrames(
        3, dim=-2, in_keys=["obs"], out_keys=["obs_cat"], future=True, mask_key="mask"
    )
    seq = _sequence()
    del seq["next"]
    out = transform(seq)
    assert _windows(out) == [[0, 1, 2], [1, 2, 3], [2, 3, 3], [3, 3, 3]]
    assert out["mask"][0].int().tolist() == [[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1]]
    out = transform(_sequence(done_at=[1]))
    assert _windows(out) == [[0, 1, 1], [1, 1, 1], [2, 3, 3], [3, 3, 3]]
    constant = CatFrames(
        3,
        dim=-2,
        in_keys=["obs"],
        out_keys=["obs_cat"],
        future=True,
        padding="constant",
        padding_value=-1.0,
    )
    assert _windows(constant(seq))[2:] == [[2, 3, -1], [3, -1, -1]]


def test_time_dim_found_by_name_wherever_it_is():
    transform = CatFrames(2, dim=-1, in_keys=["obs"], out_keys=["stack"])
    obs = torch.randn(3, 5, 2)  # [batch, T, features]
    done = torch.zeros(3, 5, 1, dtype=torch.bool)
    done[1, 2] = True
    td = TensorDict({"obs": obs, ("next", "done"): done}, [3, 5], names=[None, "time"])
    swapped = TensorDict(
        {"obs": obs.transpose(0, 1), ("next", "done"): done.transpose(0, 1)},
        [5, 3],
        names=["time", None],
    )
    expected = transform(td)["stack"]
    torch.testing.assert_close(transform(swapped)["stack"], expected.transpose(0, 1))


def test_unnamed_time_dim_warns_and_uses_the_last_dim():
    transform = CatFrames(2, dim=-1, in_keys=["obs"], out_keys=["stack"])
    td = TensorDict(
        {"obs": torch.arange(3.0).unsqueeze(-1), ("next", "done"): torch.zeros(3, 1).bool()}, [3]
    )
    with pytest.warns(UserWarning, match="named 'time'"):
        out = transform(td)
    assert out["stack"].tolist() == [[0, 0], [0, 1], [1, 2]]


def test_unfolding_errors():
    transform = CatFrames(2, dim=-1, in_keys=["obs"])
    with pytest.raises(ValueError, match="cannot process unbatched tensordict"):
        transform(TensorDict({"obs": torch.zeros(2)}, []))
    no_done = TensorDict({"obs": torch.zeros(1, 4, 2)}, [1, 4], names=[None, "time"])
    with pytest.raises(KeyError, match=r"\('next', 'done'\) entry to delimit"):
        transform(no_done)
    both = CatFrames(
        2, dim=-1, in_keys=["obs", ("next", "obs")], out_keys=["a", ("next", "a")], future=True
    )
    seq = TensorDict(
        {"obs": torch.zeros(1, 4, 2), ("next", "obs"): torch.zeros(1, 4, 2)},
        [1, 4],
        names=[None, "time"],
    )
    with pytest.raises(NotImplementedError, match="history windows only"):
        both(seq)


@pytest.mark.parametrize("option", [{"future": True}, {"mask_key": "mask"}, {"as_inverse": True}])
def test_offline_only_options_refuse_envs_at_reset(option):
    env = TransformedEnv(CountingEnv(), CatFrames(2, dim=-1, in_keys=["observation"], **option))
    assert env.observation_spec["observation"].shape == (4,)  # construction works
    with pytest.raises(RuntimeError, match="offline|only for replay buffers"):
        env.reset()


@pytest.mark.parametrize("padding", ["same", "constant"])
@pytest.mark.parametrize("dim", [-1, -2])
def test_unfolding_matches_the_functional(padding, dim):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 3, *(4,) * (-dim - 1))
    done = torch.zeros(2, 7, 1, dtype=torch.bool)
    td = TensorDict({"obs": x, ("next", "done"): done}, [2, 7], names=[None, "time"])
    transform = CatFrames(3, dim=dim, in_keys=["obs"], out_keys=["out"], padding=padding)
    expected = cat_frames(x, N=3, dim=dim, time_dim=1 - x.ndim, padding=padding)
    torch.testing.assert_close(transform.unfolding(td)["out"], expected)


def test_call_before_any_reset_starts_from_padding():
    same = CatFrames(3, dim=-1, in_keys=["x"])
    out = same._call(TensorDict({"x": torch.ones(1, 2)}, [1]))
    assert out["x"].tolist() == [[0, 0, 0, 0, 1, 1]]
    out = same._call(TensorDict({"x": torch.ones(1, 2) * 2}, [1]))
    assert out["x"].tolist() == [[0, 0, 1, 1, 2, 2]]
    constant = CatFrames(2, dim=-1, in_keys=["x"], padding="constant", padding_value=5)
    assert constant._call(TensorDict({"x": torch.ones(1)}, []))["x"].tolist() == [5, 1]


def test_buffers_are_named_after_their_keys():
    cat = CatFrames(2, dim=-1, in_keys=["first key", ("nested", "obs")])
    assert {"_cat_buffers_first key", "_cat_buffers_nested_obs"} <= set(cat.state_dict())
    pool = TimeMaxPool(in_keys=["observation"], T=2)
    assert "_maxpool_buffer_observation" in pool.state_dict()
    td = TensorDict({"first key": torch.ones(1, 3), ("nested", "obs"): torch.ones(1, 3)}, [1])
    buffer = cat._cat_buffers_nested_obs
    cat._call(td.clone())
    cat._reset(td, td.clone())
    assert cat._cat_buffers_nested_obs is buffer  # refilled in place
    assert bool((buffer == 1).all())


def test_make_rb_transform_and_sampler_stacks_at_sampling_time():
    env = TransformedEnv(
        CountingEnv(max_steps=10),
        CatFrames(4, dim=-1, in_keys=["observation"], out_keys=["stack"]),
    )
    rollout = env.rollout(60, break_when_any_done=False)
    transform, sampler = env.transform.make_rb_transform_and_sampler(batch_size=16)
    rb = ReplayBuffer(storage=LazyTensorStorage(60), sampler=sampler, transform=transform)
    rb.extend(rollout)
    assert "stack" not in rb.storage[:].keys()  # the storage keeps single frames
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the windows have a named time dim
        sample = rb.sample(16)
    assert sample.shape == (16,)
    counts = sample["stack"][:, ::4]  # the 4 frames of each stack (4 equal floats per frame)
    assert bool((counts == counts[:, :1] + torch.arange(4)).all())
    assert bool((sample["next", "stack"][:, ::4] == counts + 1).all())
    torch.testing.assert_close(sample["stack"][:, -4:], sample["observation"])
    with pytest.raises(ValueError, match="slice length is N"):
        env.transform.make_rb_transform_and_sampler(batch_size=16, slice_len=3)
    with pytest.raises(ValueError, match="batch_size: expected a positive int"):
        env.transform.make_rb_transform_and_sampler(batch_size=0)
