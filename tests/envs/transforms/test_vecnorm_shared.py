"""VecNorm / VecNormV2 statistics shared by the envs of one EnvCreator, in real processes."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    Compose,
    EnvCreator,
    GymEnv,
    ParallelEnv,
    RenameTransform,
    TransformedEnv,
    VecNorm,
    step_mdp,
)

STEPS = 6


def _normalized_pendulum(new_api: bool):
    return TransformedEnv(
        GymEnv("Pendulum-v1"),
        Compose(
            RenameTransform(in_keys=["observation"], out_keys=[("nested", "obs")]),
            VecNorm(in_keys=[("nested", "obs"), "reward"], decay=1.0, new_api=new_api),
        ),
    )


def _counts(state: dict, new_api: bool) -> tuple[float, float]:
    """(observation count, reward count) from a TransformedEnv state dict."""
    stats = TensorDict(state["transforms.1._extra_state"]).unflatten_keys(VecNorm.SEP)
    if new_api:
        return stats["count", "nested", "obs"].item(), stats["count", "reward"].item()
    return stats["nested", "obs_count"].item(), stats["reward_count"].item()


def _run_one_env(creator: EnvCreator, seed: int, done, steps: int = STEPS) -> None:
    env = creator()
    env.set_seed(seed)
    tensordict = env.reset()
    for _ in range(steps):
        tensordict = step_mdp(env.rand_step(tensordict))
    done.put(True)


@pytest.mark.parametrize("new_api", [False, True], ids=["VecNorm", "VecNormV2"])
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_processes_update_the_statistics_of_their_creator(new_api, start_method):
    creator = EnvCreator(lambda: _normalized_pendulum(new_api))
    # the creator reset its env and took a step: the statistics exist and are shared
    assert _counts(creator.state_dict(), new_api) == (2, 1)
    ctx = mp.get_context(start_method)
    done = ctx.Queue()
    procs = [ctx.Process(target=_run_one_env, args=(creator, 10 + i, done)) for i in range(2)]
    for proc in procs:
        proc.start()
    try:
        assert [done.get(timeout=120) for _ in procs] == [True, True]
    finally:
        for proc in procs:
            proc.join(60)
    assert [proc.exitcode for proc in procs] == [0, 0]
    # each process: one reset and STEPS steps
    assert _counts(creator.state_dict(), new_api) == (2 + 2 * (STEPS + 1), 1 + 2 * STEPS)


@pytest.mark.parametrize("new_api", [False, True], ids=["VecNorm", "VecNormV2"])
def test_concurrent_updates_are_not_lost(new_api):
    # the updates of processes sharing statistics take turns under the creator's lock
    creator = EnvCreator(lambda: _normalized_pendulum(new_api))
    ctx = mp.get_context("fork")
    done = ctx.Queue()
    nprocs, steps = 4, 150
    procs = [
        ctx.Process(target=_run_one_env, args=(creator, i, done, steps)) for i in range(nprocs)
    ]
    for proc in procs:
        proc.start()
    try:
        assert [done.get(timeout=300) for _ in procs] == [True] * nprocs
    finally:
        for proc in procs:
            proc.join(60)
    assert _counts(creator.state_dict(), new_api) == (2 + nprocs * (steps + 1), 1 + nprocs * steps)


@pytest.mark.parametrize("new_api", [False, True], ids=["VecNorm", "VecNormV2"])
def test_parallel_env_workers_share_the_statistics(new_api):
    creator = EnvCreator(lambda: _normalized_pendulum(new_api))
    with ParallelEnv(2, creator) as env:
        env.rollout(STEPS, break_when_any_done=False)
    assert _counts(creator.state_dict(), new_api) == (2 + 2 * (STEPS + 1), 1 + 2 * STEPS)


def _vecnorm_of_wrong_shape():
    return TransformedEnv(GymEnv("Pendulum-v1"), VecNorm(in_keys=["observation"], shapes=[(5,)]))


def test_a_vecnorm_failing_in_a_worker_raises_in_the_parent():
    env = ParallelEnv(2, _vecnorm_of_wrong_shape)
    try:
        with pytest.raises(RuntimeError, match=r"worker \d of ParallelEnv failed .*\[-1, 5\]"):
            env.reset()
    finally:
        env.close(raise_if_closed=False)


def test_loading_shared_nested_statistics_into_an_initialized_vecnorm():
    # statistics in shared memory are locked tensordicts, nested keys included
    env = _normalized_pendulum(new_api=False)
    env.rollout(3)
    vecnorm = env.transform[1]
    before = dict(vecnorm.state_dict()["_extra_state"])
    assert all(value.is_shared() for value in before.values())
    shared = {key: torch.full_like(value, 2.0).share_memory_() for key, value in before.items()}
    vecnorm.load_state_dict({"_extra_state": shared})
    after = vecnorm.state_dict()["_extra_state"]
    for key, value in shared.items():
        # shared tensors are adopted (their owner keeps seeing the updates)
        assert after[key].data_ptr() == value.data_ptr()
    private = {key: torch.full_like(value, 3.0) for key, value in before.items()}
    vecnorm.load_state_dict({"_extra_state": private})
    after = vecnorm.state_dict()["_extra_state"]
    for value in after.values():
        assert value.is_shared() and (value == 3.0).all()  # copied in place, still shared


def test_transformed_env_state_dict_names_the_transform_keys():
    env = _normalized_pendulum(new_api=False)
    env.rollout(2)
    state = env.state_dict()
    assert list(state) == ["transforms.1._extra_state"]
    other = _normalized_pendulum(new_api=False)
    assert not other.load_state_dict(state).missing_keys
    assert _counts(other.state_dict(), False) == _counts(state, False)
    # inside a larger module the keys keep their prefix, and load back
    holder = torch.nn.ModuleDict({"env": other})
    assert list(holder.state_dict()) == ["env.transforms.1._extra_state"]
    holder.load_state_dict(holder.state_dict())


@pytest.mark.parametrize("batched", ["serial", "parallel"])
def test_batched_env_state_dict_holds_one_entry_per_worker(batched):
    from tdrl.envs import SerialEnv

    cls = SerialEnv if batched == "serial" else ParallelEnv
    with cls(2, lambda: _normalized_pendulum(new_api=True)) as env:
        env.rollout(3, break_when_any_done=False)
        state = env.state_dict()
        assert list(state) == ["worker0", "worker1"]
        assert _counts(state["worker0"], True) == (4, 3)
        with cls(2, lambda: _normalized_pendulum(new_api=True)) as other:
            other.load_state_dict(state)
            assert _counts(other.state_dict()["worker1"], True) == (4, 3)
            with pytest.raises(KeyError, match=r"missing \['worker1'\]"):
                other.load_state_dict({"worker0": state["worker0"]})


def test_a_transformed_env_subclass_keeps_its_own_state_entries():
    class WithScale(TransformedEnv):
        def __init__(self):
            super().__init__(GymEnv("Pendulum-v1"), VecNorm(in_keys=["observation"]))
            self.register_buffer("scale", torch.ones(2))

    env = WithScale()
    env.rollout(2)
    state = env.state_dict()
    assert set(state) == {"_extra_state", "scale"}
    other = WithScale()
    state["scale"] = torch.full((2,), 3.0)
    result = other.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys
    assert (other.scale == 3.0).all()
    assert other.state_dict()["_extra_state"]["observation_count"] > 0
