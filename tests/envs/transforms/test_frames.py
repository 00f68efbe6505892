"""Tests of CatFrames and TimeMaxPool (tdrl/envs/transforms/frames.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import CatFrames, SerialEnv, TimeMaxPool, TransformedEnv, check_env_specs
from tests.mocks import CountingEnv


def _count_env(max_steps=10, batch_size=(), **kwargs) -> TransformedEnv:
    return TransformedEnv(
        CountingEnv(max_steps=max_steps, batch_size=batch_size),
        CatFrames(3, dim=-1, in_keys=["observation"], **kwargs),
    )


def _frames(td, key="observation"):
    """The count seen in each of the 3 stacked frames (each frame is 4 equal floats)."""
    return td[key][..., ::4]


# ------------------------------------------------------------------ CatFrames, env path
def test_catframes_reset_and_step_same_padding():
    env = _count_env()
    assert env.observation_spec["observation"].shape == (12,)
    check_env_specs(env)
    td = env.reset()
    assert _frames(td).tolist() == [0.0, 0.0, 0.0]
    rollout = env.rollout(4)
    assert _frames(rollout["next"]).tolist() == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]


def test_catframes_constant_padding_and_spec_bounds():
    env = TransformedEnv(
        CountingEnv(),
        CatFrames(3, dim=-1, in_keys=["observation"], padding="constant", padding_value=-1.0),
    )
    check_env_specs(env)
    td = env.reset()
    assert _frames(td).tolist() == [-1.0, -1.0, 0.0]
    td = env.rand_step(td)
    assert _frames(td["next"]).tolist() == [-1.0, 0.0, 1.0]


def test_catframes_out_key_and_parent_specs_untouched():
    base = CountingEnv()
    before = base.observation_spec.clone()
    env = TransformedEnv(base, CatFrames(2, dim=-1, in_keys=["observation"], out_keys=["stack"]))
    assert env.observation_spec["stack"].shape == (8,)
    assert env.observation_spec["observation"].shape == (4,)
    assert base.observation_spec == before
    check_env_specs(env)


def test_catframes_partial_reset_batched():
    env = _count_env(batch_size=(3,))
    td = env.reset()
    for _ in range(3):
        td = env.step(env.rand_action(td))["next"]
    assert _frames(td).tolist() == [[1, 2, 3]] * 3
    reset = torch.tensor([[False], [True], [False]])
    td = env.reset(td.set("_reset", reset))
    assert _frames(td).tolist() == [[1, 2, 3], [0, 0, 0], [1, 2, 3]]
    td = env.step(env.rand_action(td))["next"]
    assert _frames(td).tolist() == [[2, 3, 4], [0, 0, 1], [2, 3, 4]]


def test_catframes_over_serial_env_with_auto_resets():
    def make(max_steps):
        return lambda: CountingEnv(max_steps=max_steps)

    base = SerialEnv(2, [make(2), make(4)])
    env = TransformedEnv(base, CatFrames(3, dim=-1, in_keys=["observation"]))
    try:
        check_env_specs(env)
        rollout = env.rollout(5, break_when_any_done=False)
        # the root frames of each step: episodes of length 2 (env 0) and 4 (env 1)
        assert _frames(rollout)[0].tolist() == [
            [0, 0, 0],
            [0, 0, 1],
            [0, 0, 0],
            [0, 0, 1],
            [0, 0, 0],
        ]
        assert _frames(rollout)[1].tolist() == [
            [0, 0, 0],
            [0, 0, 1],
            [0, 1, 2],
            [1, 2, 3],
            [0, 0, 0],
        ]
    finally:
        env.close()


def test_catframes_inside_serial_env():
    env = SerialEnv(2, lambda: _count_env(max_steps=3))
    try:
        check_env_specs(env)
        rollout = env.rollout(4, break_when_any_done=False)
        assert _frames(rollout["next"])[0].tolist() == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [0, 0, 1]]
    finally:
        env.close()


def test_catframes_clones_share_buffers():
    transform = CatFrames(2, dim=-1, in_keys=["observation"])
    clone = transform.clone()
    env = TransformedEnv(CountingEnv(), transform)
    env.rollout(3)
    assert clone._cat_buffers_observation is transform._cat_buffers_observation
    assert _frames(TensorDict({"observation": clone._cat_buffers_observation}, [])).tolist() == [
        2.0,
        3.0,
    ]


def test_catframes_state_dict_round_trip():
    env = _count_env()
    env.rollout(2)
    state = env.transform.state_dict()
    fresh = CatFrames(3, dim=-1, in_keys=["observation"])
    fresh.load_state_dict(state)
    torch.testing.assert_close(
        fresh._cat_buffers_observation, env.transform._cat_buffers_observation
    )


def test_catframes_argument_errors():
    with pytest.raises(ValueError, match="negative"):
        CatFrames(2, dim=0)
    with pytest.raises(ValueError, match="padding"):
        CatFrames(2, dim=-1, padding="reflect")
    with pytest.raises(ValueError, match="positive"):
        CatFrames(0, dim=-1)
    env = TransformedEnv(
        CountingEnv(), CatFrames(2, dim=-1, in_keys=["observation"], as_inverse=True)
    )
    with pytest.raises(RuntimeError, match="only for replay buffers"):
        env.reset()


def test_catframes_step_before_reset_mismatch():
    env = _count_env(batch_size=(2,))
    env.reset()
    transform = env.transform
    with pytest.raises(ValueError, match="reset the env"):
        transform._call(TensorDict({"observation": torch.zeros(2, 5)}, [2]))


# ------------------------------------------------------------------ CatFrames, buffer path
def _trajectories() -> TensorDict:
    """Two trajectories in one sequence: steps 0-2 then 3-5; obs = step index + 1."""
    obs = torch.arange(1.0, 7.0).unsqueeze(-1)
    done = torch.tensor([0, 0, 1, 0, 0, 1], dtype=torch.bool).unsqueeze(-1)
    return TensorDict({"obs": obs, "next": {"obs": obs + 10, "done": done}}, [6], names=["time"])


def test_catframes_forward_same_padding_respects_trajectories():
    out = CatFrames(3, dim=-1, in_keys=["obs", ("next", "obs")])(_trajectories())
    assert out["obs"].tolist() == [[1, 1, 1], [1, 1, 2], [1, 2, 3], [4, 4, 4], [4, 4, 5], [4, 5, 6]]
    assert out["next", "obs"].tolist() == [
        [1, 1, 11],
        [1, 11, 12],
        [11, 12, 13],
        [4, 4, 14],
        [4, 14, 15],
        [14, 15, 16],
    ]


def test_catframes_forward_constant_padding():
    transform = CatFrames(
        3, dim=-1, in_keys=["obs", ("next", "obs")], padding="constant", padding_value=0
    )
    out = transform(_trajectories())
    assert out["obs"].tolist() == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [0, 0, 4], [0, 4, 5], [4, 5, 6]]
    assert out["next", "obs"][3].tolist() == [0, 4, 14]


def test_catframes_forward_matches_env_rollout():
    env = _count_env(max_steps=3)
    rollout = env.rollout(7, break_when_any_done=False)
    stacked_in_env = rollout.clone()
    raw = rollout.clone()
    raw.set("observation", raw["observation"][..., -4:])
    raw.set(("next", "observation"), raw["next", "observation"][..., -4:])
    out = CatFrames(3, dim=-1, in_keys=["observation", ("next", "observation")])(raw)
    torch.testing.assert_close(out["observation"], stacked_in_env["observation"])
    torch.testing.assert_close(out["next", "observation"], stacked_in_env["next", "observation"])


def test_catframes_forward_images_batched():
    frames = torch.rand(2, 5, 1, 4, 4)
    done = torch.zeros(2, 5, 1, dtype=torch.bool)
    td = TensorDict({"pixels": frames, ("next", "done"): done}, [2, 5], names=[None, "time"])
    out = CatFrames(2, dim=-3)(td)["pixels"]
    assert out.shape == (2, 5, 2, 4, 4)
    torch.testing.assert_close(out[:, 1:, 0], frames[:, :-1, 0])
    torch.testing.assert_close(out[:, 0, 0], frames[:, 0, 0])


def test_catframes_as_inverse_in_replay_buffer():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        transform=CatFrames(2, dim=-1, in_keys=["obs"], as_inverse=True),
    )
    rb.extend(_trajectories())
    assert rb[1]["obs"].tolist() == [1.0, 2.0]
    assert rb[3]["obs"].tolist() == [4.0, 4.0]


# ------------------------------------------------------------------ TimeMaxPool
def test_time_max_pool_env():
    env = TransformedEnv(
        CountingEnv(max_steps=10, batch_size=(2,)),
        TimeMaxPool(in_keys=["observation"], out_keys=["pooled"], T=2),
    )
    check_env_specs(env)
    td = env.reset()
    assert bool(td["pooled"].eq(0).all())
    td = env.step(env.rand_action(td))["next"]
    td = env.step(env.rand_action(td))["next"]
    assert td["pooled"][:, 0].tolist() == [2.0, 2.0]


def test_time_max_pool_takes_max_and_partial_reset():
    transform = TimeMaxPool(in_keys=["x"], T=3)
    reset_out = transform._reset(
        TensorDict({}, [2]), TensorDict({"x": torch.tensor([5.0, 5.0])}, [2])
    )
    assert reset_out["x"].tolist() == [5.0, 5.0]
    for value in (1.0, 2.0):
        out = transform._call(TensorDict({"x": torch.tensor([value, value])}, [2]))
    assert out["x"].tolist() == [5.0, 5.0]
    out = transform._call(TensorDict({"x": torch.tensor([0.0, 0.0])}, [2]))
    assert out["x"].tolist() == [2.0, 2.0]
    reset = TensorDict({"_reset": torch.tensor([[True], [False]])}, [2])
    out = transform._reset(reset, TensorDict({"x": torch.tensor([-3.0, 9.0])}, [2]))
    assert out["x"].tolist() == [-3.0, 2.0]
    out = transform._call(TensorDict({"x": torch.tensor([-4.0, -4.0])}, [2]))
    assert out["x"].tolist() == [-3.0, 2.0]


def test_time_max_pool_forward():
    td = TensorDict(
        {
            "x": torch.tensor([3.0, 1.0, 2.0, 0.0, 5.0, 1.0]),
            "next": {"done": torch.tensor([0, 0, 1, 0, 0, 0], dtype=torch.bool)},
        },
        [6],
        names=["time"],
    )
    out = TimeMaxPool(in_keys=["x"], out_keys=["m"], T=2)(td)
    assert out["m"].tolist() == [3.0, 3.0, 2.0, 0.0, 5.0, 5.0]
    with pytest.raises(ValueError, match="positive"):
        TimeMaxPool(T=0)


def test_missing_keys_raise_unless_tolerated():
    transform = CatFrames(2, dim=-1, in_keys=["obs"])
    with pytest.raises(KeyError, match="'obs'"):
        transform._call(TensorDict({"x": torch.zeros(2)}, []))
    with pytest.raises(KeyError, match="'obs'"):
        transform(TensorDict({"x": torch.zeros(3, 2)}, [3], names=["time"]))
    transform.set_missing_tolerance(True)
    assert "obs" not in transform(TensorDict({"x": torch.zeros(3, 2)}, [3], names=["time"])).keys()
    with pytest.raises(KeyError, match="'obs'"):
        TimeMaxPool(in_keys=["obs"])(TensorDict({"x": torch.zeros(3, 2)}, [3], names=["time"]))
