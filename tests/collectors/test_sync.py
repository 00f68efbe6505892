from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.collectors import RandomPolicy, SyncDataCollector
from tdrl.envs import GymEnv, PendulumEnv, StepCounter, TransformedEnv
from tdrl.envs.utils import ExplorationType, exploration_type
from tests.mocks import CountingEnv


class ConstantPolicy:
    def __init__(self, value=0.5):
        self.value = value
        self.calls = 0

    def __call__(self, td):
        self.calls += 1
        return td.set("action", torch.full((*td.batch_size, 1), self.value))


def _runs(ids):
    """The (id, length) of each run of equal consecutive ids in a 1-d tensor."""
    values, counts = torch.unique_consecutive(ids, return_counts=True)
    return list(zip(values.tolist(), counts.tolist()))


@pytest.mark.parametrize("batch_size", [(), (3,), (2, 2)])
def test_batch_shapes_and_count(batch_size):
    env = CountingEnv(batch_size=batch_size)
    numel = max(torch.Size(batch_size).numel(), 1)
    collector = SyncDataCollector(
        env, ConstantPolicy(), frames_per_batch=12 * numel, total_frames=36 * numel
    )
    batches = list(collector)
    assert len(collector) == 3
    assert len(batches) == 3
    for data in batches:
        assert data.batch_size == torch.Size((*batch_size, 12))
        assert data.numel() == 12 * numel
        assert data.names[-1] == "time"
        assert data["collector", "traj_ids"].shape == data.batch_size
        assert data["next", "observation"].shape == torch.Size((*batch_size, 12, 4))
    assert collector.state_dict()["frames"] == 36 * numel


def test_frames_per_batch_rounded_up_with_warning():
    with pytest.warns(UserWarning, match="not a multiple"):
        collector = SyncDataCollector(
            CountingEnv(batch_size=(3,)), frames_per_batch=10, total_frames=24
        )
    assert collector.frames_per_batch == 12
    assert next(iter(collector)).batch_size == torch.Size([3, 4])


def test_total_frames_not_multiple_warns_and_ends_after():
    with pytest.warns(UserWarning, match="last batch"):
        collector = SyncDataCollector(CountingEnv(), frames_per_batch=10, total_frames=25)
    assert len(collector) == 3
    assert sum(data.numel() for data in collector) == 30


def test_endless_collector_has_no_length_and_keeps_going():
    collector = SyncDataCollector(CountingEnv(), frames_per_batch=4, total_frames=-1)
    with pytest.raises(RuntimeError, match="no length"):
        len(collector)
    for i, _ in enumerate(collector):
        if i == 20:
            break
    assert collector.state_dict()["iter"] == 20


def test_traj_ids_follow_episodes_across_batches():
    # episodes of CountingEnv last 5 steps; batches of 7 cut them
    collector = SyncDataCollector(
        CountingEnv(max_steps=5), ConstantPolicy(), frames_per_batch=7, total_frames=35
    )
    data = torch.cat([batch for batch in collector], 0)
    ids = data["collector", "traj_ids"]
    assert _runs(ids) == [(i, 5) for i in range(7)]
    counts = data["observation"][:, 0]
    assert counts.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] * 7


def test_traj_ids_unique_across_envs_and_batches():
    env = TransformedEnv(CountingEnv(max_steps=100, batch_size=(3,)), StepCounter(max_steps=4))
    collector = SyncDataCollector(env, frames_per_batch=3 * 6, total_frames=3 * 6 * 4)
    data = torch.cat(list(collector), -1)
    ids = data["collector", "traj_ids"]
    seen = set()
    for row in range(3):
        runs = _runs(ids[row])
        assert [length for _, length in runs[:-1]] == [4] * (len(runs) - 1)
        row_ids = {value for value, _ in runs}
        assert not row_ids & seen
        seen |= row_ids
    assert seen == set(range(len(seen)))
    # a new id starts exactly where step_count restarts
    restart = data["next", "step_count"].squeeze(-1)[:, :-1] == 4
    changed = ids[:, 1:] != ids[:, :-1]
    assert torch.equal(restart, changed)


def test_default_policy_is_random_policy():
    collector = SyncDataCollector(PendulumEnv(), frames_per_batch=8, total_frames=8)
    assert isinstance(collector.policy, RandomPolicy)
    data = next(iter(collector))
    assert collector.env.action_spec.is_in(data["action"])


def test_tensordict_module_policy_and_weight_update():
    module = torch.nn.Linear(4, 1)
    torch.nn.init.zeros_(module.weight)
    torch.nn.init.constant_(module.bias, 0.25)
    policy = TensorDictModule(module, in_keys=["observation"], out_keys=["action"])
    collector = SyncDataCollector(CountingEnv(), policy, frames_per_batch=5, total_frames=10)
    iterator = iter(collector)
    assert torch.allclose(next(iterator)["action"], torch.full((5, 1), 0.25))
    weights = TensorDict.from_module(policy).data.clone()
    weights["module", "bias"].fill_(-0.5)
    collector.update_policy_weights_(weights)
    assert torch.allclose(next(iterator)["next", "reward"], torch.full((5, 1), -0.5))
    collector.update_policy_weights_(
        {"module.bias": torch.tensor([0.75]), "module.weight": torch.zeros(1, 4)}
    )
    assert module.bias.item() == 0.75


def test_update_policy_weights_rejects_weights_for_plain_callable():
    collector = SyncDataCollector(CountingEnv(), ConstantPolicy(), frames_per_batch=5)
    collector.update_policy_weights_()
    with pytest.raises(TypeError, match="torch.nn.Module"):
        collector.update_policy_weights_(TensorDict())


def test_init_random_frames_uses_random_actions_first():
    policy = ConstantPolicy(0.5)
    collector = SyncDataCollector(
        CountingEnv(), policy, frames_per_batch=10, total_frames=30, init_random_frames=10
    )
    first, second, third = list(collector)
    assert not (first["action"] == 0.5).all()
    assert (second["action"] == 0.5).all() and (third["action"] == 0.5).all()
    # 20 policy steps, plus one call that tells the random phase which entries the policy writes
    assert policy.calls == 21


def test_max_frames_per_traj_truncates():
    collector = SyncDataCollector(
        CountingEnv(max_steps=100), frames_per_batch=9, total_frames=9, max_frames_per_traj=3
    )
    data = next(iter(collector))
    assert data["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3] * 3
    assert data["next", "truncated"].squeeze(-1).tolist() == [False, False, True] * 3
    assert _runs(data["collector", "traj_ids"]) == [(0, 3), (1, 3), (2, 3)]


def test_max_frames_per_traj_conflicts_with_step_counter():
    env = TransformedEnv(CountingEnv(), StepCounter())
    with pytest.raises(ValueError, match="step_count"):
        SyncDataCollector(env, frames_per_batch=4, max_frames_per_traj=3)


def test_reset_at_each_iter_restarts_episodes():
    collector = SyncDataCollector(
        CountingEnv(max_steps=100),
        ConstantPolicy(),
        frames_per_batch=3,
        total_frames=9,
        reset_at_each_iter=True,
    )
    batches = list(collector)
    for i, data in enumerate(batches):
        assert data["observation"][:, 0].tolist() == [0.0, 1.0, 2.0]
        assert data["collector", "traj_ids"].tolist() == [i] * 3


def test_reset_when_done_false_steps_on():
    collector = SyncDataCollector(
        CountingEnv(max_steps=2),
        ConstantPolicy(),
        frames_per_batch=4,
        total_frames=8,
        reset_when_done=False,
    )
    first, second = list(collector)
    assert first["next", "observation"][:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert second["observation"][:, 0].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert first.names[-1] == "time"


def test_split_trajs_and_postproc():
    seen = []

    def postproc(data):
        seen.append(data.batch_size)
        return data

    collector = SyncDataCollector(
        CountingEnv(max_steps=3, batch_size=(2,)),
        ConstantPolicy(),
        frames_per_batch=8,
        total_frames=8,
        split_trajs=True,
        postproc=postproc,
    )
    data = next(iter(collector))
    # each env: steps 0-2 then 0: two full trajectories and one of length 1
    assert data.batch_size == torch.Size([4, 3])
    assert data["collector", "mask"].sum(-1).tolist() == [3, 1, 3, 1]
    assert seen == [torch.Size([4, 3])]


def test_exploration_type_is_set_for_the_policy():
    modes = []

    def policy(td):
        modes.append(exploration_type())
        return td.set("action", torch.zeros(1))

    collector = SyncDataCollector(
        CountingEnv(), policy, frames_per_batch=2, exploration_type=ExplorationType.DETERMINISTIC
    )
    next(iter(collector))
    assert set(modes) == {ExplorationType.DETERMINISTIC}


def test_return_same_td_reuses_the_batch():
    collector = SyncDataCollector(
        CountingEnv(), ConstantPolicy(), frames_per_batch=4, total_frames=12, return_same_td=True
    )
    batches = [(data, data["observation"].clone()) for data in collector]
    assert batches[0][0] is batches[1][0] is batches[2][0]
    assert batches[2][0]["observation"].equal(batches[2][1])
    assert not batches[0][1].equal(batches[1][1])
    fresh = SyncDataCollector(CountingEnv(), ConstantPolicy(), frames_per_batch=4, total_frames=8)
    first, second = list(fresh)
    assert first is not second


def test_set_truncated_marks_the_last_step():
    env = TransformedEnv(CountingEnv(max_steps=100), StepCounter(max_steps=1000))
    for reset_when_done in (True, False):
        collector = SyncDataCollector(
            env,
            ConstantPolicy(),
            frames_per_batch=4,
            set_truncated=True,
            reset_when_done=reset_when_done,
        )
        data = next(iter(collector))
        assert data["next", "done"].squeeze(-1).tolist() == [False, False, False, True]
        assert data["next", "truncated"].squeeze(-1).tolist() == [False, False, False, True]
    with pytest.raises(ValueError, match="truncated"):
        SyncDataCollector(CountingEnv(), frames_per_batch=4, set_truncated=True)


def test_partial_reset_by_index():
    collector = SyncDataCollector(
        CountingEnv(max_steps=100, batch_size=(2,)), ConstantPolicy(), frames_per_batch=4
    )
    iterator = iter(collector)
    next(iterator)
    collector.reset(1)
    data = next(iterator)
    assert data["observation"][:, :, 0].tolist() == [[2.0, 3.0], [0.0, 1.0]]
    assert data["collector", "traj_ids"].tolist() == [[0, 0], [2, 2]]


def test_state_dict_round_trip_and_shutdown():
    module = TensorDictModule(torch.nn.Linear(4, 1), in_keys=["observation"], out_keys=["action"])
    collector = SyncDataCollector(CountingEnv(), module, frames_per_batch=3, total_frames=9)
    for _ in collector:
        pass
    state = collector.state_dict()
    assert state["frames"] == 9 and state["iter"] == 2
    other = SyncDataCollector(
        CountingEnv(),
        TensorDictModule(torch.nn.Linear(4, 1), in_keys=["observation"], out_keys=["action"]),
        frames_per_batch=3,
        total_frames=9,
    )
    other.load_state_dict(state)
    assert other.state_dict()["frames"] == 9
    assert torch.equal(other.policy.module.weight, module.module.weight)
    assert list(other) == []
    collector.shutdown()
    assert collector.env.is_closed


def test_create_env_fn_callable_with_kwargs_and_seed():
    collector = SyncDataCollector(
        lambda max_steps: CountingEnv(max_steps=max_steps),
        frames_per_batch=4,
        create_env_kwargs={"max_steps": 2},
    )
    assert collector.env.max_steps == 2
    assert isinstance(collector.set_seed(3), int)
    assert collector.env.seed_value == 3


def test_gym_env_collection():
    env = GymEnv("CartPole-v1")
    collector = SyncDataCollector(env, frames_per_batch=50, total_frames=100)
    collector.set_seed(0)
    for data in collector:
        ends = data["next", "done"].squeeze(-1)
        ids = data["collector", "traj_ids"]
        assert torch.equal(ids[1:] != ids[:-1], ends[:-1])
    collector.shutdown()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"create_env_fn": 3}, TypeError, "create_env_fn"),
        ({"create_env_fn": lambda: 3}, TypeError, "return an EnvBase"),
        ({"policy": 3}, TypeError, "policy"),
        ({"frames_per_batch": 0}, ValueError, "frames_per_batch"),
        ({"frames_per_batch": 2.0}, TypeError, "frames_per_batch"),
        ({"total_frames": 0}, ValueError, "total_frames"),
        ({"create_env_kwargs": {"a": 1}}, ValueError, "create_env_kwargs"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    arguments = {"create_env_fn": CountingEnv(), "frames_per_batch": 4, **kwargs}
    with pytest.raises(error, match=match):
        SyncDataCollector(**arguments)


def _check_ids_match_step_counts(ids, step_count):
    """Along time, a trajectory id changes exactly where the step count restarts at 1."""
    restarts = step_count[1:] == 1
    changes = ids[1:] != ids[:-1]
    assert torch.equal(restarts, changes)


def _check_slices(sample, num_slices):
    """A slice sample holds at most ``num_slices`` runs of consecutive steps of one trajectory."""
    ids = sample["collector", "traj_ids"].reshape(-1)
    steps = sample["next", "step_count"].reshape(-1)
    breaks = (ids[1:] != ids[:-1]) | (steps[1:] != steps[:-1] + 1)
    assert int(breaks.sum()) + 1 <= num_slices
    assert sample.numel() <= 64


def test_data_docs_collector_into_slice_sampler_single_env():
    from tdrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    env.set_seed(0)
    collector = SyncDataCollector(
        env, RandomPolicy(env.action_spec), frames_per_batch=10, total_frames=-1
    )
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
    stored = rb[:]
    # the 10 newest frames overwrote the 10 oldest: put the storage back in time order
    in_order = torch.cat([stored[10:], stored[:10]])
    assert torch.equal(in_order[-10:]["next", "step_count"], data["next", "step_count"])
    _check_ids_match_step_counts(
        in_order["collector", "traj_ids"], in_order["next", "step_count"].squeeze(-1)
    )
    _check_slices(rb.sample(), num_slices=8)
    collector.shutdown()


def test_data_docs_collector_into_slice_sampler_serial_env():
    from tdrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler
    from tdrl.envs import SerialEnv

    env = TransformedEnv(SerialEnv(2, lambda: GymEnv("CartPole-v1")), StepCounter())
    env.set_seed(0)
    with pytest.warns(UserWarning, match="not a multiple"):
        collector = SyncDataCollector(
            env, RandomPolicy(env.action_spec), frames_per_batch=1, total_frames=-1
        )
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
    # rb[:] reads the data as extended ([envs, time]); the storage rows are time
    assert rb[:].batch_size == (2, 50)
    stored = rb.storage[:]
    assert stored.batch_size == (50, 2)
    ids = stored["collector", "traj_ids"]
    assert not set(ids[:, 0].tolist()) & set(ids[:, 1].tolist())
    # 101 batches of one step per env: the storage wrapped once, the newest row is row 0
    in_order = torch.cat([stored[1:], stored[:1]])
    for column in range(2):
        _check_ids_match_step_counts(
            in_order["collector", "traj_ids"][:, column],
            in_order["next", "step_count"][:, column].squeeze(-1),
        )
    _check_slices(rb.sample(), num_slices=8)
    collector.shutdown()


def test_next_and_repr():
    collector = SyncDataCollector(
        CountingEnv(), ConstantPolicy(), frames_per_batch=3, total_frames=6
    )
    assert collector.next().batch_size == (3,)
    assert collector.next().batch_size == (3,)
    with pytest.raises(StopIteration):
        collector.next()
    assert "frames_per_batch=3" in repr(collector) and "frames=6" in repr(collector)


def test_explicit_cpu_devices():
    collector = SyncDataCollector(
        CountingEnv(), ConstantPolicy(), frames_per_batch=4, device="cpu", storing_device="cpu"
    )
    data = next(iter(collector))
    assert data.device == torch.device("cpu")
    assert collector.policy_device == collector.env_device == torch.device("cpu")
