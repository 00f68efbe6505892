"""ParallelEnv with real worker processes: conformance, equality with SerialEnv, start methods."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from functools import partial

import pytest
import torch

import tdrl
from tdrl.envs import step_mdp
from tdrl.envs.batched import EnvCreator, ParallelEnv, SerialEnv, _start
from tdrl.envs.libs.gym import GymEnv
from tests.envs.batched._envs import SizedEnv, TextEnv
from tests.envs.conformance import EnvConformance
from tests.mocks import CountingEnv, EnvWithDynamicSpec, MultiAgentCountingEnv


class TestParallelCounting(EnvConformance):
    seeded = False

    def make_env(self):
        return ParallelEnv(2, CountingEnv)


class TestParallelMultiAgent(EnvConformance):
    seeded = False

    def make_env(self):
        return ParallelEnv(2, partial(MultiAgentCountingEnv, batch_size=(2,)))


@pytest.fixture(scope="module")
def pendulums():
    """One ParallelEnv of Pendulums reused by the read-only tests of this module."""
    env = ParallelEnv(4, partial(GymEnv, "Pendulum-v1", g=9.81))
    yield env
    env.close()


def test_serial_and_parallel_give_identical_data(pendulums):
    serial = SerialEnv(4, partial(GymEnv, "Pendulum-v1", g=9.81))
    rollouts = []
    for env in (serial, pendulums):
        assert env.set_seed(11) == serial.set_seed(11)
        torch.manual_seed(0)
        rollouts.append(env.rollout(20))
    serial.close()
    assert rollouts[0].batch_size == (4, 20)
    assert (rollouts[0] == rollouts[1]).all()
    # each worker got its own seed
    first_obs = rollouts[1][:, 0]["observation"]
    assert len({tuple(row.tolist()) for row in first_obs}) == 4


def test_attribute_access_returns_one_value_per_worker(pendulums):
    a, b, c, d = pendulums.g
    assert a == b == c == d == 9.81
    assert pendulums.batch_size == torch.Size([4])


def test_method_calls_run_in_every_worker():
    with ParallelEnv(2, [partial(SizedEnv, 3), partial(SizedEnv, 5)]) as env:
        assert env.describe("?") == ["size=3?", "size=5?"]
        pids = env.pid()
        assert len(set(pids)) == 2
        assert all(pid != multiprocessing.current_process().pid for pid in pids)


def test_attributes_of_sub_env_attributes_are_read_in_the_workers():
    with ParallelEnv(2, [partial(SizedEnv, 3), partial(SizedEnv, 5)]) as env:
        assert env.settings.size == [3, 5]
        assert env.settings.doubled() == [6, 10]
        assert list(env.settings.size) == [3, 5]


def test_heterogeneous_workers():
    with ParallelEnv(2, [partial(SizedEnv, 3), partial(SizedEnv, 5)]) as env:
        data = env.rand_step(env.reset())
        assert data[0]["next", "observation"].shape == (3,)
        assert data[1]["next", "observation"].shape == (5,)


def test_partial_step_and_reset():
    with ParallelEnv(3, CountingEnv) as env:
        data = step_mdp(env.rand_step(env.reset()))
        data = env.rand_action(data)
        data.set("_step", torch.tensor([False, True, True]))
        data = env.step(data)
        assert data["next", "observation"][:, 0].tolist() == [1.0, 2.0, 2.0]
        data = step_mdp(data)
        data.set("_reset", torch.tensor([[False], [False], [True]]))
        out = env.reset(data)
        assert out["observation"][:, 0].tolist() == [1.0, 2.0, 0.0]
        assert [c.item() for c in env.count] == [1.0, 2.0, 0.0]


def test_sub_batched_workers():
    with ParallelEnv(2, partial(CountingEnv, batch_size=(3,))) as env:
        assert env.batch_size == (2, 3)
        data = env.rollout(3)
        assert data.batch_size == (2, 3, 3)
        assert data["next", "observation"][..., -1, 0].eq(3).all()


def test_non_tensor_data_through_pipes():
    with ParallelEnv(2, TextEnv, [{"prefix": "x"}, {"prefix": "y"}]) as env:
        data = env.rand_step(env.reset())
        assert data["text"] == ["x0", "y0"]
        assert data["next", "text"] == ["x1", "y1"]


def test_dynamic_specs_without_buffers():
    with pytest.warns(UserWarning, match="pipes"):
        env = ParallelEnv(2, EnvWithDynamicSpec)
    data = env.rollout(3, return_contiguous=False)
    assert data[1, 2]["next", "observation"].shape == (3, 4, 2)
    env.close()


def test_env_creator_metadata_is_reused():
    calls = []

    def make():
        calls.append(1)
        return CountingEnv()

    creator = EnvCreator(make)
    assert len(calls) == 1
    with ParallelEnv(2, creator) as env:
        assert len(calls) == 1  # no throwaway env built in the parent
        assert env.reset().batch_size == (2,)
    assert len(calls) == 1  # the workers built theirs in their own processes


def test_default_start_method_is_fork_when_safe():
    # a fresh interpreter: this one may have started JAX or threads in earlier tests
    code = (
        "from tdrl.envs.batched import _start\n"
        "assert _start.fork_unsafe_reason() is None, _start.fork_unsafe_reason()\n"
        "assert _start.default_start_method() == 'fork'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert "thread" in _start.fork_unsafe_reason()
        assert _start.default_start_method() == "forkserver"
    finally:
        stop.set()
        thread.join()


def test_spawned_workers_get_parsable_tensordict_options(monkeypatch):
    """tensordict 0.14 leaves "None" in its option variables; new interpreters must not see it."""
    monkeypatch.setenv("LAZY_LEGACY_OP", "None")
    monkeypatch.setenv("LIST_TO_STACK", "True")
    _start.get_context("fork")
    assert os.environ["LAZY_LEGACY_OP"] == "None"
    _start.get_context("spawn")
    assert "LAZY_LEGACY_OP" not in os.environ
    assert os.environ["LIST_TO_STACK"] == "True"


def test_invalid_start_method():
    with pytest.raises(ValueError, match="mp_start_method"):
        ParallelEnv(2, CountingEnv, mp_start_method="teleport")


def test_forkserver_workers_leave_the_global_start_method_alone():
    before = multiprocessing.get_start_method(allow_none=True)
    with ParallelEnv(2, lambda: CountingEnv(max_steps=3), mp_start_method="forkserver") as env:
        assert env.rollout(5).shape == (2, 3)
        assert env.max_steps == [3, 3]
    assert multiprocessing.get_start_method(allow_none=True) == before


def test_warnings_filtered_in_workers_unless_disabled():
    with ParallelEnv(2, SizedEnv) as env:
        assert env.warn_count() == [0, 0]
    tdrl.filter_warnings_subprocess = False
    try:
        with ParallelEnv(2, SizedEnv) as env:
            assert env.warn_count() == [1, 1]
    finally:
        tdrl.filter_warnings_subprocess = True


def test_serial_for_single():
    env = ParallelEnv(1, CountingEnv, serial_for_single=True)
    assert isinstance(env, SerialEnv)
    env.close()


def test_device_and_outputs_are_copies():
    with ParallelEnv(2, CountingEnv, device="cpu") as env:
        data = env.rand_step(env.reset())
        assert data.device == torch.device("cpu")
        kept = data["next", "observation"].clone()
        env.rand_step(step_mdp(data))
        assert (data["next", "observation"] == kept).all()


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_fused_step_and_maybe_reset_matches_the_generic_one(cls):
    from tdrl.envs import EnvBase

    runs = []
    for fused in (True, False):
        env = cls(3, [partial(CountingEnv, max_steps=m) for m in (2, 3, 4)])
        td = env.reset()
        seq = []
        for _ in range(7):
            td = env.rand_action(td)
            if fused:
                data, td = env.step_and_maybe_reset(td)
            else:
                data, td = EnvBase.step_and_maybe_reset(env, td)
            seq.append((data["next", "observation"].clone(), td["observation"].clone(), td["done"]))
        env.close()
        runs.append(seq)
    for (a, b, c), (x, y, z) in zip(*runs):
        assert (a == x).all() and (b == y).all() and (c == z).all()
    assert runs[0][1][1][0, 0] == 0.0  # the first env was reset after its second step


def _untransformed_cartpole():
    from tdrl.envs import Compose, TransformedEnv

    # an empty transform keeps the data and takes the generic sub-env step
    return TransformedEnv(GymEnv("CartPole-v1"), Compose())


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_in_place_gym_steps_match_the_generic_sub_env_step(cls):
    runs = []
    for make in (partial(GymEnv, "CartPole-v1"), _untransformed_cartpole):
        env = cls(3, make)
        env.set_seed(7)
        torch.manual_seed(0)
        td = env.reset()
        seq = []
        for _ in range(60):
            td = env.rand_action(td)
            data, td = env.step_and_maybe_reset(td)
            seq.append((data.clone(), td.clone()))
        env.close()
        runs.append(seq)
    assert sum(bool(data["next", "done"].any()) for data, _ in runs[0]) >= 2
    for (data, td), (data_, td_) in zip(*runs):
        assert set(data.keys(True)) == set(data_.keys(True))
        assert (data == data_).all() and (td == td_).all()


def test_gym_sub_envs_step_in_place_unless_wrapped():
    env = SerialEnv(2, [partial(GymEnv, "CartPole-v1"), _untransformed_cartpole])
    env.start()
    direct = [runner.direct_step is not None for runner in env._runners]
    env.close()
    assert direct == [True, False]


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_rollout_over_sub_envs_of_different_shapes(cls):
    makers = [partial(SizedEnv, 3, max_steps=4), partial(SizedEnv, 5, max_steps=4)]
    env = cls(2, makers)
    data = env.rollout(9, break_when_any_done=False)
    assert data.batch_size == (2, 9) and data.names == [None, "time"]
    td = env.reset()
    pairs = []
    for _ in range(9):
        stepped, td = env.step_and_maybe_reset(env.rand_action(td))
        pairs.append((stepped[1]["next", "observation"].clone(), td[1]["observation"].clone()))
    env.close()
    for w, make in enumerate(makers):
        alone = make().rollout(9, break_when_any_done=False)
        assert (data[w]["next", "observation"] == alone["next", "observation"]).all()
        assert (data[w]["observation"] == alone["observation"]).all()
        assert (data[w]["next", "done"] == alone["next", "done"]).all()
    assert bool(data[0]["next", "done"].any())  # episodes ended and were reset
    alone = makers[1]().rollout(9, break_when_any_done=False)
    for t, (next_obs, root_obs) in enumerate(pairs):
        assert (next_obs == alone["next", "observation"][t]).all()
        if t + 1 < 9:
            assert (root_obs == alone["observation"][t + 1]).all()


@pytest.mark.filterwarnings("ignore:.*stacked lazily")
def test_consolidated_replies_give_the_same_data():
    datas = []
    for consolidate in (True, False):
        with ParallelEnv(2, EnvWithDynamicSpec, consolidate=consolidate) as env:
            assert env.consolidate is consolidate
            env.set_seed(0)
            datas.append(env.rollout(4, return_contiguous=False, break_when_any_done=False))
    for step_a, step_b in zip(datas[0].unbind(1), datas[1].unbind(1)):
        for key in ("observation", ("next", "observation"), ("next", "done")):
            for part_a, part_b in zip(step_a.get(key).unbind(0), step_b.get(key).unbind(0)):
                assert torch.equal(part_a, part_b)


def test_workers_read_their_previous_observations_from_the_input():
    from tests.envs.batched._envs import EchoEnv

    with ParallelEnv(2, EchoEnv) as env:
        data = env.rollout(3, lambda td: td.set("action", torch.ones(2, 1)))
        assert data["next", "total"][1].squeeze(-1).tolist() == [1.0, 2.0, 3.0]
