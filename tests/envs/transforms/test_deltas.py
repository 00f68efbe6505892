"""NextObservationDelta: env-side compression of next observations, buffer-side rebuild."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import Collector
from tdrl.data import Bounded, Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from tdrl.envs import (
    Compose,
    EnvBase,
    EnvCreator,
    NextObservationDelta,
    ParallelEnv,
    RewardSum,
    SerialEnv,
    Transform,
    TransformedEnv,
)
from tests.mocks import CountingEnv

OBS = "observation"
DELTA = ("next", "delta", OBS)


class WalkEnv(EnvBase):
    """Random walk with float32 and float64 observations and a uint8 image; done after ``horizon``."""

    def __init__(self, horizon: int = 4, seed: int = 0) -> None:
        super().__init__()
        self.horizon = horizon
        self.observation_spec = Composite(
            observation=Unbounded((3,)),
            precise=Unbounded((2,), dtype=torch.float64),
            pixels=Bounded(0, 255, (2, 2), dtype=torch.uint8),
        )
        self.action_spec = Bounded(-1.0, 1.0, (1,))
        self.reward_spec = Unbounded((1,))
        self.gen = torch.Generator().manual_seed(seed)
        self.t = 0
        self.obs = torch.zeros(3)
        self.precise = torch.zeros(2, dtype=torch.float64)

    def _data(self) -> dict:
        pixels = torch.randint(0, 256, (2, 2), generator=self.gen).to(torch.uint8)
        return {"observation": self.obs, "precise": self.precise, "pixels": pixels}

    def _reset(self, tensordict=None, **kwargs):
        self.t = 0
        self.obs = torch.randn(3, generator=self.gen)
        self.precise = torch.randn(2, generator=self.gen, dtype=torch.float64)
        return TensorDict({**self._data(), "done": torch.zeros(1, dtype=torch.bool)}, [])

    def _step(self, tensordict):
        self.t += 1
        self.obs = self.obs + 0.1 * torch.randn(3, generator=self.gen) + tensordict["action"]
        self.precise = self.precise + torch.randn(2, generator=self.gen, dtype=torch.float64)
        done = torch.tensor([self.t >= self.horizon])
        reward = tensordict["action"].clone()
        return TensorDict({**self._data(), "reward": reward, "done": done}, [])

    def _set_seed(self, seed):
        self.gen.manual_seed(seed)


def _pair(**kwargs) -> tuple[EnvBase, TransformedEnv]:
    return WalkEnv(**kwargs), TransformedEnv(WalkEnv(**kwargs), NextObservationDelta())


def _assert_same_except_deltas(plain, compressed, keys) -> None:
    """``compressed`` is ``plain`` with each ``("next", k)`` replaced by its f16 delta."""
    changed = {("next", k) for k in keys} | {("next", "delta", k) for k in keys}
    plain_keys = set(plain.keys(True, True)) - changed
    assert plain_keys == set(compressed.keys(True, True)) - changed
    for key in plain_keys:
        assert torch.equal(plain[key], compressed[key]), key
    for key in keys:
        assert ("next", key) not in compressed.keys(True, True)
        expected = (plain["next", key] - plain[key]).to(torch.float16)
        assert compressed["next", "delta", key].dtype == torch.float16
        assert torch.equal(compressed["next", "delta", key], expected), key


def test_default_in_keys_are_the_float_observations():
    env = TransformedEnv(WalkEnv(), NextObservationDelta())
    assert sorted(env.transform.in_keys) == [OBS, "precise"]
    assert env.observation_spec["delta", OBS].dtype == torch.float16
    assert "pixels" in env.observation_spec.keys()
    assert ("delta", "pixels") not in env.observation_spec.keys(True)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="delta_dtype"):
        NextObservationDelta(delta_dtype=torch.int8)
    with pytest.raises(TypeError, match="restore_dtype"):
        NextObservationDelta(restore_dtype="float32")
    with pytest.raises(KeyError, match="'missing'"):
        TransformedEnv(WalkEnv(), NextObservationDelta(in_keys=["missing"]))


def test_step_and_maybe_reset_splits_post_step_and_next_input():
    plain, env = _pair()
    torch.manual_seed(0)
    td = plain.reset()
    td["action"] = plain.action_spec.rand()
    p_out, p_next = plain.step_and_maybe_reset(td)
    torch.manual_seed(0)
    td = env.reset()
    td["action"] = env.action_spec.rand()
    out, next_input = env.step_and_maybe_reset(td)
    _assert_same_except_deltas(p_out, out, [OBS, "precise"])
    # the policy reads full-precision observations, and no delta
    assert set(next_input.keys(True, True)) == set(p_next.keys(True, True))
    for key in p_next.keys(True, True):
        assert torch.equal(next_input[key], p_next[key])
    assert next_input[OBS].dtype == torch.float32


@pytest.mark.parametrize("break_when_any_done", [True, False])
def test_rollout_matches_the_plain_rollout(break_when_any_done):
    # 10 steps over episodes of 4: the stop-early path stops at step 4, the other resets
    plain, env = _pair(horizon=4)
    torch.manual_seed(1)
    expected = plain.rollout(10, break_when_any_done=break_when_any_done)
    torch.manual_seed(1)
    got = env.rollout(10, break_when_any_done=break_when_any_done)
    assert got.shape == expected.shape == ((4,) if break_when_any_done else (10,))
    _assert_same_except_deltas(expected, got, [OBS, "precise"])
    assert "delta" not in got.keys()


def test_rollout_with_a_policy_and_a_downstream_transform():
    env = TransformedEnv(CountingEnv(max_steps=50), Compose(NextObservationDelta(), RewardSum()))
    data = env.rollout(6, policy=lambda td: td.set("action", torch.ones(1)))
    assert torch.equal(data["next", "delta", OBS], torch.ones(6, 4, dtype=torch.float16))
    assert ("next", OBS) not in data.keys(True, True)
    assert torch.equal(data["next", "episode_reward"].squeeze(-1), torch.arange(1.0, 7.0))


def test_env_step_alone_keeps_the_next_observation():
    # only the step loops drop ("next", k): a bare step has both
    env = TransformedEnv(WalkEnv(), NextObservationDelta(in_keys=[OBS]))
    td = env.reset().set("action", torch.zeros(1))
    out = env.step(td)
    assert (out["next", OBS] - out[OBS]).half().equal(out["next", "delta", OBS])


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_refused_inside_a_batched_env(batched):
    def make():
        return TransformedEnv(WalkEnv(), NextObservationDelta())

    with pytest.raises(RuntimeError, match="cannot live inside a SerialEnv/ParallelEnv"):
        batched(2, make)


def test_refused_inside_a_batched_env_built_from_an_env_creator():
    # the creator answers the metadata without building an env: the worker refuses it
    creator = EnvCreator(lambda: TransformedEnv(WalkEnv(), NextObservationDelta()))
    env = SerialEnv(2, creator)
    with pytest.raises(RuntimeError, match="cannot live inside a SerialEnv/ParallelEnv"):
        env.reset()


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_outside_a_batched_env(batched):
    env = TransformedEnv(batched(2, CountingEnv), NextObservationDelta())
    try:
        td = env.reset().set("action", torch.zeros(2, 1))
        out, next_input = env.step_and_maybe_reset(td)
        assert torch.equal(out[DELTA], torch.ones(2, 4, dtype=torch.float16))
        assert ("next", OBS) not in out.keys(True, True)
        assert torch.equal(next_input[OBS], torch.ones(2, 4))
        data = env.rollout(3, break_when_any_done=False)
        assert data[DELTA].shape == (2, 3, 4)
    finally:
        env.close()


@pytest.mark.parametrize("use_buffers", [True, False])
def test_collector_batches_match_the_plain_env(use_buffers):
    batches = {}
    for name, make in (
        ("plain", lambda: WalkEnv(horizon=5)),
        ("delta", lambda: TransformedEnv(WalkEnv(horizon=5), NextObservationDelta())),
    ):
        torch.manual_seed(2)
        collector = Collector(
            make, policy=None, frames_per_batch=8, total_frames=24, use_buffers=use_buffers
        )
        try:
            batches[name] = [batch.clone() for batch in collector]
        finally:
            collector.shutdown()
    assert len(batches["delta"]) == 3
    # the later batches start from the true last next observation of the earlier ones
    for plain, got in zip(batches["plain"], batches["delta"]):
        _assert_same_except_deltas(plain, got, [OBS, "precise"])


def test_rb_rebuild_is_bit_exact_when_the_delta_is_exact():
    obs = torch.arange(8.0).view(4, 2) / 4
    step = torch.tensor([0.125, -2.5])
    true_next = obs + step
    td = TensorDict({OBS: obs, DELTA: (true_next - obs).half()}, [4])
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4), transform=NextObservationDelta(in_keys=[OBS]), batch_size=4
    )
    rb.extend(td)
    sample = rb.sample()
    assert torch.equal(sample["next", OBS], sample[OBS] + step)
    assert sample["next", OBS].dtype == torch.float32
    assert ("next", "delta") not in sample.keys(True)


def test_rebuild_is_close_for_arbitrary_values():
    obs = torch.randn(16, 3)
    true_next = obs + torch.randn(16, 3)
    td = TensorDict({OBS: obs, DELTA: (true_next - obs).half()}, [16])
    out = NextObservationDelta()(td)  # no in_keys: every stored delta
    torch.testing.assert_close(out["next", OBS], true_next, atol=1e-2, rtol=1e-3)


def test_rebuild_options_and_no_ops():
    td = TensorDict(
        {OBS: torch.zeros(2, 1, dtype=torch.float64), DELTA: torch.ones(2, 1).half()}, [2]
    )
    kept = NextObservationDelta(in_keys=[OBS], drop_delta=False)(td.clone())
    assert DELTA in kept.keys(True, True) and ("next", OBS) in kept.keys(True, True)
    cast = NextObservationDelta(in_keys=[OBS], restore_dtype=torch.float32)(td.clone())
    assert cast["next", OBS].dtype == torch.float32
    assert torch.equal(cast["next", OBS], torch.ones(2, 1))
    # no delta stored, or no root observation: nothing to rebuild
    bare = TensorDict({OBS: torch.zeros(2, 1)}, [2])
    assert set(NextObservationDelta(in_keys=[OBS])(bare).keys(True, True)) == {OBS}
    only_delta = TensorDict({DELTA: torch.ones(2, 1).half()}, [2])
    assert set(NextObservationDelta(in_keys=[OBS])(only_delta).keys(True, True)) == {DELTA}


def test_collector_to_buffer_round_trip_is_exact_on_integer_steps():
    def make():
        return TransformedEnv(CountingEnv(max_steps=3), NextObservationDelta())

    collector = Collector(make, policy=None, frames_per_batch=12, total_frames=12)
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    plain = Collector(lambda: CountingEnv(max_steps=3), None, frames_per_batch=12, total_frames=12)
    try:
        expected = next(iter(plain))
    finally:
        plain.shutdown()
    rb = ReplayBuffer(storage=LazyTensorStorage(12), transform=NextObservationDelta(in_keys=[OBS]))
    rb.extend(batch)
    rebuilt = rb[:]
    assert torch.equal(rebuilt["next", OBS], expected["next", OBS])


class _Recorder(Transform):
    """A transform that records its post-step calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list = []

    def _post_step_mdp(self, tensordict, next_input):
        self.calls.append(next_input is None)


def test_post_step_hook_runs_once_per_step():
    assert CountingEnv()._post_step_hooks() == ()
    assert TransformedEnv(CountingEnv(), RewardSum())._post_step_hooks() == ()
    recorder = _Recorder()
    env = TransformedEnv(CountingEnv(max_steps=3), Compose(RewardSum(), recorder))
    env.rollout(5, break_when_any_done=True)
    # three steps, the last one (done) with no next input
    assert recorder.calls == [False, False, True]
    recorder.calls.clear()
    env.rollout(5, break_when_any_done=False)
    assert recorder.calls == [False] * 4 + [True]
    recorder.calls.clear()
    env.step_and_maybe_reset(env.reset().set("action", torch.zeros(1)))
    assert recorder.calls == [False]
