"""ActionChunkTransform."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import ActionChunkTransform, Compose, GymEnv, TransformedEnv, check_env_specs


def _windows(action, done=None):
    data = TensorDict({"action": action}, action.shape[:-1])
    if done is not None:
        data["next", "done"] = done
    return data


def _reference(action, size, ends):
    """A loop over steps: chunk[t, h] = action[min(t + h, end(t))]."""
    length = action.shape[-2]
    chunk = torch.empty(*action.shape[:-1], size, action.shape[-1])
    pad = torch.empty(*action.shape[:-1], size, dtype=torch.bool)
    for t in range(length):
        for h in range(size):
            step = min(t + h, ends[t])
            chunk[..., t, h, :] = action[..., step, :]
            pad[..., t, h] = t + h > ends[t]
    return chunk, pad


@pytest.mark.parametrize("batch", [(), (2,), (3, 2)])
@pytest.mark.parametrize("size", [1, 3, 7])
def test_chunks_match_a_step_by_step_reference(batch, size):
    torch.manual_seed(0)
    action = torch.randn(*batch, 5, 4)
    out = ActionChunkTransform(size)(_windows(action))
    chunk, pad = _reference(action, size, [4] * 5)
    assert torch.equal(out["action_chunk"], chunk)
    assert torch.equal(out["action_is_pad"], pad)


def test_chunks_stop_at_episode_ends():
    action = torch.arange(6.0).view(1, 6, 1)
    done = torch.zeros(1, 6, 1, dtype=torch.bool)
    done[0, 1] = done[0, 4] = True
    out = ActionChunkTransform(3)(_windows(action, done))
    chunk, pad = _reference(action[0], 3, [1, 1, 4, 4, 4, 5])
    assert torch.equal(out["action_chunk"][0], chunk)
    assert torch.equal(out["action_is_pad"][0], pad)
    ignoring = ActionChunkTransform(3, done_key=None)(_windows(action, done))
    assert ignoring["action_chunk"][0, 0, :, 0].tolist() == [0.0, 1.0, 2.0]


def test_chunks_on_a_buffer_and_custom_keys():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), transform=ActionChunkTransform(3), batch_size=4
    )
    rb.extend(TensorDict({"action": torch.randn(10, 5, 2)}, [10]))
    assert "action_chunk" not in rb.storage[:].keys()
    sample = rb.sample()
    assert sample["action_chunk"].shape == (4, 5, 3, 2)
    assert sample["action_is_pad"].shape == (4, 5, 3)
    t = ActionChunkTransform(2, ("data", "action"), ("data", "chunk"), ("data", "pad"))
    out = t.clone()(TensorDict({"data": {"action": torch.randn(2, 4, 3)}}, [2, 4]))
    assert out["data", "chunk"].shape == (2, 4, 2, 3) and out["data", "pad"].shape == (2, 4, 2)


def test_chunks_leave_envs_alone():
    env = TransformedEnv(GymEnv("Pendulum-v1"), Compose(ActionChunkTransform(3)))
    check_env_specs(env)
    rollout = env.rollout(3)
    assert "action_chunk" not in rollout.keys()
    stored = ActionChunkTransform(3).inv(TensorDict({"action": torch.ones(2, 1)}, [2]))
    assert list(stored.keys()) == ["action"]


def test_chunk_errors():
    with pytest.raises(ValueError, match="chunk_size"):
        ActionChunkTransform(0)
    with pytest.raises(KeyError, match="action"):
        ActionChunkTransform(2)(TensorDict({"other": torch.randn(2, 4, 3)}, [2, 4]))
    with pytest.raises(ValueError, match="immediately follow"):
        ActionChunkTransform(2, time_dim=0)(_windows(torch.randn(2, 4, 3)))
    mismatched = TensorDict(
        {"action": torch.randn(2, 4, 3), ("next", "done"): torch.zeros(2, 5, 1, dtype=torch.bool)},
        [2],
    )
    with pytest.raises(ValueError, match="does not line up"):
        ActionChunkTransform(2)(mismatched)
