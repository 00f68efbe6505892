import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Categorical, Composite, Unbounded
from tdrl.envs import GymLikeEnv, check_env_specs, default_info_dict_reader
from tests.envs.conformance import EnvConformance

gymnasium = pytest.importorskip("gymnasium")


class CartPoleWrapper(GymLikeEnv):
    def _check_kwargs(self, kwargs):
        if "name" not in kwargs:
            raise TypeError("name is required")

    def _build_env(self, name, **kwargs):
        return gymnasium.make(name, **kwargs)

    def _make_specs(self, env):
        self.observation_spec = Composite(observation=Unbounded((4,)))
        self.action_spec = Categorical(2, ())
        self.reward_spec = Unbounded((1,))
        self.full_done_spec = Composite(
            done=Categorical(2, (1,), dtype=torch.bool),
            terminated=Categorical(2, (1,), dtype=torch.bool),
            truncated=Categorical(2, (1,), dtype=torch.bool),
        )

    def _set_seed(self, seed):
        self._env.reset(seed=seed)


class TestCartPoleWrapper(EnvConformance):
    seeded = False

    def make_env(self):
        return CartPoleWrapper(name="CartPole-v1")


def test_gym_like_step_reads_outputs():
    env = CartPoleWrapper(name="CartPole-v1")
    env.set_seed(0)
    data = env.rollout(200, break_when_any_done=True)
    assert data["next", "done"][-1].all()
    assert data["next", "terminated"][-1].all() or data["next", "truncated"][-1].all()
    assert data["next", "reward"].dtype == torch.float32
    assert env.action_space.n == 2  # forwarded to the wrapped env
    env.close()
    assert env.is_closed


def test_gym_like_frame_skip_sums_rewards():
    env = CartPoleWrapper(name="CartPole-v1", frame_skip=3)
    env.set_seed(0)
    data = env.rand_step(env.reset())
    assert data["next", "reward"].item() == 3.0


def test_read_done_and_output_transform():
    env = CartPoleWrapper(name="CartPole-v1")
    assert env.read_done(terminated=False, truncated=True) == (False, True, True, True)
    terminated, truncated, done, do_break = env.read_done(done=np.array([False]))
    assert not do_break and terminated is None
    with pytest.raises(ValueError, match="at least one"):
        env.read_done()
    with pytest.raises(ValueError, match="4 or 5 values"):
        env._output_transform((1, 2, 3))


def test_wrapper_rejects_positional_args():
    with pytest.raises(ValueError, match="keyword arguments only"):
        GymLikeEnv.__init__(CartPoleWrapper.__new__(CartPoleWrapper), 1)


def test_info_dict_reader_registers_specs():
    class InfoCartPole(CartPoleWrapper):
        def _output_transform(self, step_outputs):
            obs, reward, terminated, truncated, info = step_outputs
            info = {"x_position": float(obs[0]), "_private": 1}
            return obs, reward, terminated, truncated, None, info

    env = InfoCartPole(name="CartPole-v1")
    reader = default_info_dict_reader(["x_position"], spec=[Unbounded((), dtype=torch.float32)])
    env.set_info_dict_reader(reader)
    assert "x_position" in env.observation_keys
    assert env.info_dict_reader == [reader]
    check_env_specs(env)
    data = env.rand_step(env.reset())
    assert data["next", "x_position"] == data["next", "observation"][0]

    lazy = InfoCartPole(name="CartPole-v1").auto_register_info_dict()
    assert "x_position" in lazy.observation_keys and "_private" not in lazy.observation_keys


def test_default_info_dict_reader_lazy_keys():
    reader = default_info_dict_reader()
    td = reader({"a": 1.5, "b": np.zeros(2), "_c": 1, "text": object()}, TensorDict())
    assert set(td.keys()) == {"a", "b"}
    assert set(reader.info_spec) == {"a", "b"}
    with pytest.warns(UserWarning, match="expected a dict"):
        reader([1, 2], TensorDict())


def test_auto_resetting_wrapper_seeds_example():
    class AutoResettingCartPole(CartPoleWrapper):
        def _step(self, tensordict):
            tensordict = super()._step(tensordict)
            if tensordict["done"].any():
                td_reset = super().reset()
                tensordict.update(td_reset.exclude(*self.done_keys))
            return tensordict

        def _reset(self, tensordict=None):
            if tensordict is not None and "_reset" in tensordict:
                return tensordict.copy()
            return super()._reset(tensordict)

    torch.manual_seed(0)
    env = AutoResettingCartPole(name="CartPole-v1", auto_reset=True, auto_reset_replace=True)
    env.set_seed(0)
    r = env.rollout(60, break_when_any_done=False)
    done = r["next", "done"].squeeze(-1)
    assert done.any()
    obs = r["next", "observation"]
    assert torch.isnan(obs[done]).all()
    assert not torch.isnan(obs[~done]).any()
    # the step after a done starts from the stashed first observation of the new episode
    after = done.nonzero().squeeze(-1) + 1
    after = after[after < 60]
    assert not torch.isnan(r["observation"][after]).any()
