"""reset(tensordict, set_state=...): resetting an env to the state its input holds."""

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import ParallelEnv, PendulumEnv, SerialEnv, StepCounter, TransformedEnv
from tests.mocks import CountingEnv


def _state(batch):
    return TensorDict(th=torch.full(batch, 0.25), thdot=torch.full(batch, -0.5), batch_size=batch)


def test_pendulum_resets_to_the_given_state_only_when_asked():
    env = PendulumEnv(seed=0)
    assert env.supports_set_state
    out = env.reset(_state((3,)), set_state=True)
    assert out["th"].tolist() == [0.25] * 3 and out["thdot"].tolist() == [-0.5] * 3
    for kwargs in ({"set_state": False}, {}):
        out = env.reset(_state((3,)), **kwargs)
        assert not (out["th"] == 0.25).any()  # a fresh state is drawn


def test_set_state_on_an_env_that_cannot_restore_a_state():
    class PlainResetEnv(CountingEnv):
        def _reset(self, tensordict=None):  # takes no keyword arguments
            return super()._reset(tensordict)

    env = PlainResetEnv()
    assert not env.supports_set_state
    data = env.reset()
    with pytest.raises(NotImplementedError, match=r"PlainResetEnv.reset\(set_state=True\)"):
        env.reset(data.clone(), set_state=True)
    # set_state=False is what it does anyway: not passed on to its _reset
    assert (env.reset(data.clone(), set_state=False)["observation"] == 0).all()


def test_transformed_env_restores_the_state_of_its_base_env():
    env = TransformedEnv(PendulumEnv(seed=1), StepCounter())
    assert env.supports_set_state
    out = env.reset(_state(()), set_state=True)
    assert out["th"].item() == 0.25 and out["step_count"].item() == 0


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_batched_envs_forward_set_state_to_their_workers(cls):
    with cls(2, PendulumEnv) as env:
        assert env.supports_set_state
        data = env.reset()
        data.update(_state((2,)))
        out = env.reset(data, set_state=True)
        assert out["th"].tolist() == [0.25, 0.25] and out["thdot"].tolist() == [-0.5, -0.5]
    with cls(2, CountingEnv) as env:
        assert not env.supports_set_state
        with pytest.raises(NotImplementedError, match="set_state"):
            env.reset(env.reset(), set_state=True)


def test_rollout_passes_set_state_to_its_first_reset():
    env = PendulumEnv(seed=0)
    rollout = env.rollout(3, tensordict=_state(()), set_state=True)
    assert rollout["th"][0].item() == 0.25 and rollout["thdot"][0].item() == -0.5
    fresh = env.rollout(3, tensordict=_state(()), set_state=False)
    assert fresh["th"][0].item() != 0.25
    with pytest.raises(ValueError, match="set_state.*auto_reset=False"):
        env.rollout(3, tensordict=env.reset(), auto_reset=False, set_state=True)
    with pytest.raises(NotImplementedError, match="set_state"):
        CountingEnv().rollout(3, tensordict=TensorDict(), set_state=True)


class _RecordingEnv(CountingEnv):
    """Keeps the keys of the tensordict its _reset received."""

    _supports_set_state = True

    def _reset(self, tensordict=None, **kwargs):
        self.seen = None if tensordict is None else sorted(tensordict.keys())
        return super()._reset(tensordict)


def test_select_reset_only_hands_reset_the_masks_alone():
    env = _RecordingEnv(batch_size=(2,))
    data = env.reset()
    data["_reset"] = torch.tensor([[True], [False]])
    env.reset(data.clone())
    assert env.seen == ["_reset", "done", "observation", "terminated"]
    out = env.reset(data.clone(), select_reset_only=True)
    assert env.seen == ["_reset"]
    assert "_reset" not in out.keys()
    with pytest.raises(ValueError, match="select_reset_only=True, set_state=True"):
        env.reset(data.clone(), select_reset_only=True, set_state=True)
