"""Slice samplers: trajectories from ids or end flags, ndim=2 storages, flags, epochs, priorities."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.samplers import (
    PrioritizedSliceSampler,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)


class MockCollector:
    """Hand-made stand-in for a collector over ``num_envs`` counting envs.

    Yields TED batches (``[frames]`` for one env, ``[num_envs, frames]`` otherwise) with
    ``("collector", "traj_ids")``, ``("next", "step_count")`` and done flags; episodes last
    between ``min_len`` and ``max_len`` steps and auto-reset.
    """

    def __init__(self, num_envs=1, frames_per_batch=10, min_len=5, max_len=40, seed=0):
        self.num_envs = num_envs
        self.frames = frames_per_batch
        self.gen = torch.Generator().manual_seed(seed)
        self.min_len, self.max_len = min_len, max_len
        self.step = torch.zeros(num_envs, dtype=torch.long)
        self.length = self._lengths(num_envs)
        self.traj = torch.arange(num_envs)
        self.next_traj = num_envs
        self.obs = torch.randn(num_envs, 3, generator=self.gen)

    def _lengths(self, n):
        return torch.randint(self.min_len, self.max_len + 1, (n,), generator=self.gen)

    def rollout(self):
        steps = []
        for _ in range(self.frames):
            next_obs = torch.randn(self.num_envs, 3, generator=self.gen)
            self.step += 1
            truncated = self.step >= self.length
            terminated = torch.zeros_like(truncated)
            done = truncated | terminated
            steps.append(
                TensorDict(
                    {
                        "observation": self.obs,
                        "step_count": (self.step - 1).unsqueeze(-1),
                        "action": torch.randn(self.num_envs, 1, generator=self.gen),
                        "collector": {"traj_ids": self.traj.clone()},
                        "done": torch.zeros(self.num_envs, 1, dtype=torch.bool),
                        "next": {
                            "observation": next_obs,
                            "step_count": self.step.unsqueeze(-1).clone(),
                            "reward": torch.ones(self.num_envs, 1),
                            "done": done.unsqueeze(-1),
                            "terminated": terminated.unsqueeze(-1),
                            "truncated": truncated.unsqueeze(-1),
                        },
                    },
                    [self.num_envs],
                )
            )
            reset = done.nonzero().squeeze(-1)
            self.obs = next_obs.clone()
            if reset.numel():
                self.obs[reset] = torch.randn(reset.numel(), 3, generator=self.gen)
                self.step[reset] = 0
                self.length[reset] = self._lengths(reset.numel())
                self.traj[reset] = torch.arange(self.next_traj, self.next_traj + reset.numel())
                self.next_traj += reset.numel()
        batch = torch.stack(steps, dim=1)
        return batch[0] if self.num_envs == 1 else batch

    def __iter__(self):
        while True:
            yield self.rollout()


def episodes(lengths, terminated_last=True):
    """TED data of consecutive episodes with ``"episode"`` ids, step ``t`` and done flags."""
    lengths = torch.as_tensor(lengths)
    n = int(lengths.sum())
    episode = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    t = torch.arange(n) - starts[episode]
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.cumsum(lengths, 0) - 1] = True
    return TensorDict(
        {
            "episode": episode,
            "t": t,
            "next": {"done": done, "terminated": done.clone() if terminated_last else done & False},
        },
        [n],
    )


def assert_contiguous_slices(sample, num_slices, key="t", episode="episode"):
    sample = sample.reshape(num_slices, -1)
    assert (sample[key].diff(dim=1) == 1).all(), sample[key]
    if episode is not None:
        assert (sample[episode] == sample[episode][:, :1]).all()


@pytest.mark.parametrize("keys", [{"traj_key": "episode"}, {"end_key": ("next", "done")}, {}])
def test_slices_stay_in_one_trajectory(keys):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(200),
        sampler=SliceSampler(num_slices=10, **keys),
        batch_size=50,
    )
    rb.extend(episodes([7, 30, 12, 40, 4, 20]))
    for _ in range(20):
        sample = rb.sample()
        assert sample.shape == (50,)
        assert_contiguous_slices(sample, 10)
        assert (sample.reshape(10, 5)["episode"][:, 0] != 4).all()  # too short, strict


def test_slice_len_argument_and_flags():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(slice_len=4, traj_key="episode"),
        batch_size=12,
    )
    rb.extend(episodes([4, 4, 4], terminated_last=True))
    sample = rb.sample().reshape(3, 4)
    # every slice covers a whole episode, ending where it terminated
    assert sample["next", "terminated"][:, -1].all()
    assert not sample["next", "truncated"].any()
    assert (sample["next", "done"][:, -1]).all() and not sample["next", "done"][:, :-1].any()


def test_truncated_flag_at_slice_ends():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(num_slices=4, traj_key="episode"),
        batch_size=20,
    )
    rb.extend(episodes([50, 50]))
    sample = rb.sample().reshape(4, 5)
    ends_episode = sample["t"][:, -1] == 49
    assert (sample["next", "truncated"][:, -1, 0] == ~ends_episode).all()
    assert (sample["next", "terminated"][:, -1, 0] == ends_episode).all()
    assert not sample["next", "truncated"][:, :-1].any()


def test_newest_open_trajectory_is_truncated_not_terminated():
    data = episodes([6])
    data["next", "done"][-1] = False
    data["next", "terminated"][-1] = False
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=SliceSampler(slice_len=6, end_key=("next", "done")),
        batch_size=6,
    )
    rb.extend(data)
    sample = rb.sample()
    assert sample["next", "truncated"][-1] and not sample["next", "terminated"].any()


def test_strict_length_false_gives_shorter_slices():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(num_slices=8, traj_key="episode", strict_length=False),
        batch_size=40,
    )
    rb.extend(episodes([2, 3, 2]))
    sample = rb.sample()
    assert sample.shape[0] < 40
    ends = sample["next", "done"].squeeze(-1).nonzero().squeeze(-1)
    assert ends.numel() == 8 and int(ends[-1]) == sample.shape[0] - 1
    starts = torch.cat([torch.zeros(1, dtype=torch.long), ends[:-1] + 1])
    for start, end in zip(starts.tolist(), ends.tolist()):
        piece = sample[start : end + 1]
        assert (piece["episode"] == piece["episode"][0]).all()
        assert (piece["t"].diff() == 1).all()


def test_strict_length_without_long_trajectories_raises():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(slice_len=10, traj_key="episode"),
        batch_size=20,
    )
    rb.extend(episodes([3, 4]))
    with pytest.raises(RuntimeError, match="no trajectory of at least 10 steps.*longest: 4"):
        rb.sample()


def test_pad_output_keeps_batch_size_and_masks():
    sampler = SliceSampler(num_slices=4, traj_key="episode", strict_length=False, pad_output=True)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=24)
    rb.extend(episodes([2, 3]))
    sample, info = rb.sample(return_info=True)
    assert sample.shape == (24,)
    mask = info[("collector", "mask")].reshape(4, 6)
    assert sample["collector", "mask"].shape == (24,)
    assert mask[:, 0].all() and not mask[:, 3:].any()
    steps = sample["t"].reshape(4, 6)
    assert (steps.diff(dim=1)[mask[:, 1:]] == 1).all()


@pytest.mark.parametrize("span", [True, (True, False), (False, True), 2])
def test_span_lets_slices_overhang(span):
    sampler = SliceSampler(num_slices=50, traj_key="episode", span=span)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=500)
    rb.extend(episodes([20, 20]))
    sample = rb.sample()
    left, right = (span, span) if not isinstance(span, tuple) else span
    t = sample["t"]
    if left:
        assert sample.shape[0] < 500 and (t == 0).sum() > 10
    if right and not left:
        assert (t == 19).sum() > 10
    if span == 2:
        ends = sample["next", "done"].squeeze(-1).nonzero().squeeze(-1)
        lengths = torch.diff(torch.cat([torch.tensor([-1]), ends]))
        assert int(lengths.min()) >= 8


def test_ndim2_storage_streams_and_wrap():
    collector = MockCollector(num_envs=3, frames_per_batch=7, min_len=4, max_len=12)
    sampler = SliceSampler(num_slices=6, traj_key=("collector", "traj_ids"), strict_length=False)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(60, ndim=2), sampler=sampler, batch_size=24
    )
    for _, data in zip(range(5), collector):
        rb.extend(data)
    assert len(rb) == 60 and rb.storage.shape == (20, 3)
    for _ in range(10):
        sample, info = rb.sample(return_info=True)
        rows, cols = info["index"]
        ends = sample["next", "done"].squeeze(-1).nonzero().squeeze(-1)
        starts = torch.cat([torch.zeros(1, dtype=torch.long), ends[:-1] + 1])
        for start, end in zip(starts.tolist(), ends.tolist()):
            piece = sample[start : end + 1]
            assert (piece["next", "step_count"].diff(dim=0) == 1).all()
            assert (cols[start : end + 1] == cols[start]).all()
            assert (piece["collector", "traj_ids"] == piece["collector", "traj_ids"][0]).all()


def test_full_buffer_is_read_from_its_oldest_row():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SliceSampler(slice_len=5, traj_key="episode", cache_values=True),
        batch_size=200,
    )
    rb.extend(episodes([9, 9, 9]))  # 27 steps into 20 slots: wraps, episode 2 spans the seam
    assert rb[:]["episode"].tolist()[:7] == [2] * 7
    sample = rb.sample()
    assert_contiguous_slices(sample, 40)
    assert (sample.reshape(40, 5)["episode"] == 2).any()


def test_full_buffer_seam_between_newest_and_oldest_is_a_boundary():
    data = TensorDict({"episode": torch.zeros(25, dtype=torch.long), "t": torch.arange(25)}, [25])
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=SliceSampler(slice_len=5, traj_key="episode"),
        batch_size=100,
    )
    rb.extend(data[:15])
    rb.extend(data[15:23])  # cursor at 3: rows 0-2 are the newest
    sample = rb.sample()
    assert_contiguous_slices(sample, 20, episode=None)


def test_cache_values_refreshes_after_writes():
    sampler = SliceSampler(slice_len=3, traj_key="episode", cache_values=True)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=300)
    rb.extend(episodes([5]))
    assert (rb.sample()["episode"] == 0).all()
    more = episodes([5, 5])
    more["episode"] += 1
    rb.extend(more[5:])
    assert set(rb.sample()["episode"].tolist()) == {0, 2}


def test_static_ends_and_trajectories_arguments():
    data = TensorDict({"x": torch.arange(10)}, [10])
    ends = torch.zeros(10, dtype=torch.bool)
    ends[[3, 9]] = True
    for kwargs in ({"ends": ends}, {"trajectories": (torch.arange(10) > 3).long()}):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(10),
            sampler=SliceSampler(slice_len=4, **kwargs),
            batch_size=40,
        )
        rb.extend(data)
        x = rb.sample()["x"].reshape(10, 4)
        assert (x.diff(dim=1) == 1).all()
        assert not ((x[:, 0] <= 3) & (x[:, -1] > 3)).any()


def test_plain_tensor_storage_with_memmap_and_uninterrupted_data():
    rb = ReplayBuffer(
        storage=LazyMemmapStorage(50),
        sampler=SliceSampler(num_slices=2, traj_key="episode", truncated_key=None),
        batch_size=10,
    )
    rb.extend(episodes([25, 25]))
    sample, info = rb.sample(return_info=True)
    assert ("next", "truncated") not in info
    assert_contiguous_slices(sample, 2)


def test_bad_arguments_and_missing_keys():
    with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
        SliceSampler(num_slices=2, slice_len=3)
    with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
        SliceSampler()
    with pytest.raises(ValueError, match="end_key and end_keys are exclusive"):
        SliceSampler(num_slices=2, end_key="done", end_keys=["done", "truncated"])
    with pytest.raises(ValueError, match="pad_output=True is incompatible with strict_length"):
        SliceSampler(num_slices=2, pad_output=True)
    with pytest.raises(ValueError, match="span"):
        SliceSampler(num_slices=2, span=(True, True, True))
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=SliceSampler(num_slices=3, traj_key="ep"),
        batch_size=10,
    )
    rb.extend(TensorDict({"x": torch.arange(10)}, [10]))
    with pytest.raises(ValueError, match="multiple of num_slices=3, got 10"):
        rb.sample()
    with pytest.raises(KeyError, match="expected one of the keys \\['ep'\\].*got keys \\['x'\\]"):
        rb.sample(9)
    list_rb = ReplayBuffer(sampler=SliceSampler(num_slices=1), batch_size=2)
    list_rb.extend([1, 2])
    with pytest.raises(
        TypeError, match="Could not get a tensordict out of the storage.*TensorStorage holding"
    ):
        list_rb.sample()


def test_without_replacement_visits_each_trajectory_once():
    sampler = SliceSamplerWithoutReplacement(num_slices=2, traj_key="episode")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=8)
    rb.extend(episodes([6, 7, 8, 9, 10]))
    seen = []
    for batch in rb:
        assert_contiguous_slices(batch, batch.shape[0] // 4)
        seen.extend(batch.reshape(-1, 4)["episode"][:, 0].tolist())
    assert sorted(seen) == [0, 1, 2, 3, 4]
    again = [batch.reshape(-1, 4)["episode"][:, 0].tolist() for batch in rb]
    assert sorted(sum(again, [])) == [0, 1, 2, 3, 4]


def test_without_replacement_drop_last_and_state():
    sampler = SliceSamplerWithoutReplacement(
        num_slices=2, traj_key="episode", drop_last=True, shuffle=False
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=4)
    rb.extend(episodes([5, 5, 5]))
    batches = [batch["episode"].reshape(2, 2)[:, 0].tolist() for batch in rb]
    assert batches == [[0, 1]]
    state = sampler.state_dict()
    other = SliceSamplerWithoutReplacement(num_slices=2, traj_key="episode", drop_last=True)
    other.load_state_dict(state)
    # the epoch ran out (one trajectory left, too few for a batch of 2 with drop_last) and
    # the next one was drawn: the restored sampler continues with it
    assert other._sample_list.tolist() == sampler._sample_list.tolist() == [0, 1, 2]
    assert other.ran_out and other.len_storage == 3


def test_prioritized_slice_sampler_follows_priorities():
    sampler = PrioritizedSliceSampler(100, alpha=1.0, beta=0.5, slice_len=4, traj_key="episode")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=40)
    rb.extend(episodes([10, 10, 10]))
    sample = rb.sample()
    assert_contiguous_slices(sample, 10)
    starts = sample.reshape(10, 4)["t"][:, 0]
    assert int(starts.max()) <= 6  # a slice never starts in the last 3 steps of an episode
    priority = torch.full((30,), 1e-3)
    priority[15] = 100.0
    rb.update_priority(torch.arange(30), priority)
    sample = rb.sample()
    assert (sample["index"].reshape(10, 4)[:, 0] == 15).float().mean() > 0.9
    weights = sample["priority_weight"]
    assert weights.shape == (40,) and float(weights.max()) <= 1.0
    priority[15] = 1e-3
    priority[28] = 100.0  # cannot start a slice of 4 there
    rb.update_priority(torch.arange(30), priority)
    assert (rb.sample()["index"].reshape(10, 4)[:, 0] <= 26).all()
    assert float(sampler._tree.leaves()[28]) > 1  # the blocked leaf was restored


def test_prioritized_slice_sampler_non_strict_and_ndim2():
    collector = MockCollector(num_envs=2, frames_per_batch=10, min_len=2, max_len=6)
    sampler = PrioritizedSliceSampler(
        40,
        alpha=0.7,
        beta=0.5,
        num_slices=4,
        traj_key=("collector", "traj_ids"),
        strict_length=False,
    )
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(40, ndim=2), sampler=sampler, batch_size=20
    )
    for _, data in zip(range(3), collector):
        rb.extend(data)
    sample = rb.sample()
    ends = sample["next", "done"].squeeze(-1).nonzero().squeeze(-1)
    assert ends.numel() == 4
    rb.update_priority(sample["index"], torch.rand(sample.shape[0]) + 0.1)
    with pytest.raises(ValueError, match="span"):
        PrioritizedSliceSampler(10, 1.0, 1.0, slice_len=2, span=True)


def test_docs_example_single_env_collector():
    """data.rst: a single env, flat storage of 100 steps, traj ids from the collector."""
    collector = MockCollector(num_envs=1, frames_per_batch=10)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(
            num_slices=8,
            traj_key=("collector", "traj_ids"),
            truncated_key=None,
            strict_length=False,
        ),
        batch_size=64,
    )
    for i, data in enumerate(collector):
        rb.extend(data)
        if i == 10:
            break
    assert len(rb) == 100, len(rb)
    assert rb[:]["next", "step_count"].shape == (100, 1)
    sample = rb.sample()
    assert sample.shape[0] <= 64
    traj = sample["collector", "traj_ids"]
    steps = sample["next", "step_count"].squeeze(-1)
    same = traj[1:] == traj[:-1]
    assert int((steps[1:][same] - steps[:-1][same] != 1).sum()) <= 7  # only slice seams


def test_docs_example_batched_env_collector():
    """data.rst: two envs, one frame per batch, a [T, B] storage with ndim=2."""
    collector = MockCollector(num_envs=2, frames_per_batch=1)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100, ndim=2),
        sampler=SliceSampler(
            num_slices=8,
            traj_key=("collector", "traj_ids"),
            truncated_key=None,
            strict_length=False,
        ),
        batch_size=64,
    )
    for i, data in enumerate(collector):
        rb.extend(data)
        if i == 100:
            break
    assert len(rb) == 100, len(rb)
    counts = rb[:]["next", "step_count"].squeeze()
    # read back as extended: [envs, time]
    assert counts.shape == (2, 50)
    sample, info = rb.sample(return_info=True)
    rows, cols = info["index"]
    traj = sample["collector", "traj_ids"]
    same = (traj[1:] == traj[:-1]) & (cols[1:] == cols[:-1])
    steps = sample["next", "step_count"].squeeze(-1)
    assert int((steps[1:][same] - steps[:-1][same] != 1).sum()) <= 7  # only slice seams


def test_docs_examples_with_real_collectors():
    """Both data.rst snippets, run with tdrl's collector and CartPole."""
    collectors = pytest.importorskip("tdrl.collectors")
    from tdrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv

    def sampler():
        return SliceSampler(
            num_slices=8,
            traj_key=("collector", "traj_ids"),
            truncated_key=None,
            strict_length=False,
        )

    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    collector = collectors.SyncDataCollector(
        env, collectors.RandomPolicy(env.action_spec), frames_per_batch=10, total_frames=-1
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler(), batch_size=64)
    for i, data in enumerate(collector):
        rb.extend(data)
        if i == 10:
            break
    assert len(rb) == 100
    sample = rb.sample()
    traj, steps = sample["collector", "traj_ids"], sample["next", "step_count"].squeeze(-1)
    same = traj[1:] == traj[:-1]
    assert int((steps[1:][same] - steps[:-1][same] != 1).sum()) <= 7  # only slice seams

    env = TransformedEnv(SerialEnv(2, lambda: GymEnv("CartPole-v1")), StepCounter())
    collector = collectors.SyncDataCollector(
        env, collectors.RandomPolicy(env.action_spec), frames_per_batch=2, total_frames=-1
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2), sampler=sampler(), batch_size=64)
    for i, data in enumerate(collector):
        rb.extend(data)
        if i == 100:
            break
    assert len(rb) == 100
    assert rb[:]["next", "step_count"].squeeze().shape == (2, 50)
    assert rb.sample().shape[0] <= 64


@pytest.mark.parametrize(
    "make",
    [
        lambda: SliceSampler(num_slices=2, traj_key="episode"),
        lambda: SliceSamplerWithoutReplacement(num_slices=2, traj_key="episode"),
        lambda: PrioritizedSliceSampler(40, 0.7, 0.5, num_slices=2, traj_key="episode"),
    ],
)
def test_ndim2_items_with_batch_dims_of_their_own(make):
    """[B, T, K] data in a ndim=2 storage: slices of [K] items, flags and index per item."""
    streams, time, width = 2, 10, 3
    step = torch.arange(time).view(1, time, 1).expand(streams, time, width)
    data = TensorDict(
        {
            "episode": torch.arange(streams).view(streams, 1, 1).expand(streams, time, width),
            "step": step.clone(),
            "obs": torch.randn(streams, time, width, 4),
        },
        [streams, time, width],
    )
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(40, ndim=2), sampler=make(), batch_size=10
    )
    rb.extend(data)
    sample = rb.sample()
    assert sample.batch_size == (10, width)
    assert sample["index"].shape == (10, width, 2)
    assert sample["next", "truncated"].shape == (10, width, 1)
    slices = sample.reshape(2, 5, width)
    assert (slices["step"].diff(dim=1) == 1).all()
    assert (slices["episode"] == slices["episode"][:, :1]).all()
    rows, stream = sample["index"][:, 0].unbind(-1)
    assert torch.equal(sample["obs"], data["obs"][stream, rows])
    assert (
        slices["next", "truncated"][:, -1].all() and not slices["next", "truncated"][:, :-1].any()
    )
