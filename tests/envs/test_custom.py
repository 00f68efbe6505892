import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import PendulumEnv, TicTacToeEnv, check_env_specs
from tests.envs.conformance import EnvConformance


class TestPendulumConformance(EnvConformance):
    def make_env(self):
        return PendulumEnv(seed=0)


class TestPendulumBatchedConformance(EnvConformance):
    def make_env(self):
        return PendulumEnv(seed=0)

    def reset_input(self, env):
        return TensorDict(batch_size=[4])


class TestTicTacToeConformance(EnvConformance):
    seeded = False

    def make_env(self):
        return TicTacToeEnv()


class TestTicTacToeBatchedConformance(EnvConformance):
    seeded = False

    def make_env(self):
        return TicTacToeEnv(single_player=True)

    def reset_input(self, env):
        return TensorDict(batch_size=[3])


def test_pendulum_matches_gymnasium_dynamics():
    gymnasium = pytest.importorskip("gymnasium")
    gym_env = gymnasium.make("Pendulum-v1").unwrapped
    gym_obs, _ = gym_env.reset(seed=0)
    env = PendulumEnv(seed=0)
    th, thdot = (float(v) for v in gym_env.state)
    data = env.reset()
    data.set("th", torch.tensor(th, dtype=torch.float32))
    data.set("thdot", torch.tensor(thdot, dtype=torch.float32))
    actions = torch.linspace(-3.0, 3.0, 40)
    for a in actions:
        gym_obs, gym_reward, terminated, truncated, _ = gym_env.step([a.item()])
        data.set("action", a.reshape(1))
        data = env.step(data)
        nxt = data["next"]
        obs = torch.stack([nxt["th"].cos(), nxt["th"].sin(), nxt["thdot"]])
        torch.testing.assert_close(
            obs, torch.as_tensor(gym_obs, dtype=torch.float32), atol=1e-4, rtol=1e-4
        )
        assert nxt["reward"].item() == pytest.approx(float(gym_reward), abs=1e-4)
        assert not nxt["done"].any() and not terminated
        data = nxt.exclude("reward")
    gym_env.close()


def test_pendulum_any_batch_and_params():
    env = PendulumEnv(seed=1)
    params = env.gen_params(g=5.0, batch_size=[6])
    data = env.rollout(4, tensordict=params)
    assert data.batch_size == (6, 4)
    assert (data["params", "g"] == 5.0).all()
    assert (data["next", "th"].abs() <= math.pi).all()
    assert (data["next", "thdot"].abs() <= 8.0).all()
    check_env_specs(env, tensordict=TensorDict(batch_size=[2]))


def test_pendulum_seeding():
    a = PendulumEnv(seed=3).reset(TensorDict(batch_size=[5]))
    b = PendulumEnv(seed=3).reset(TensorDict(batch_size=[5]))
    c = PendulumEnv(seed=4).reset(TensorDict(batch_size=[5]))
    assert torch.equal(a["th"], b["th"]) and not torch.equal(a["th"], c["th"])


def _play(env, cells):
    data = env.reset()
    for cell in cells:
        data.set("action", torch.tensor([cell]))
        data = env.step(data)
        if data["next", "done"].all():
            return data
        data = data["next"].exclude(("player0", "reward"), ("player1", "reward"))
    return data


def test_tictactoe_win_rewards_and_mask():
    env = TicTacToeEnv()
    data = _play(env, [0, 3, 1, 4, 2])
    nxt = data["next"]
    assert nxt["done"].all() and nxt["terminated"].all()
    assert nxt["player0", "reward"].item() == 1.0
    assert nxt["player1", "reward"].item() == -1.0
    assert nxt["board"].tolist() == [[1, 1, 1], [-1, -1, 0], [0, 0, 0]]
    assert nxt["action_mask"].tolist() == [False] * 5 + [True] * 4


def test_tictactoe_draw_and_turns():
    env = TicTacToeEnv()
    data = _play(env, [0, 1, 2, 4, 3, 5, 7, 6, 8])
    nxt = data["next"]
    assert nxt["done"].all()
    assert nxt["player0", "reward"].item() == 0.0
    first = env.reset()
    first.set("action", torch.tensor([4]))
    assert env.step(first)["next", "turn"].item() == 1


def test_tictactoe_illegal_move_error():
    env = TicTacToeEnv()
    data = env.reset()
    data.set("action", torch.tensor([4]))
    data = env.step(data)["next"].exclude(("player0", "reward"), ("player1", "reward"))
    data.set("action", torch.tensor([4]))
    with pytest.raises(ValueError, match="illegal move at key 'action': cell 4 is already taken"):
        env.step(data)


def test_tictactoe_random_rollouts_are_legal_batched():
    env = TicTacToeEnv()
    torch.manual_seed(1)
    data = env.rollout(9, tensordict=TensorDict(batch_size=[16]), break_when_all_done=True)
    assert data["next", "done"][:, -1].all()
    total = data["next", "player0", "reward"] + data["next", "player1", "reward"]
    assert (total == 0).all()


def test_tictactoe_single_player_replies():
    env = TicTacToeEnv(single_player=True)
    env.set_seed(0)
    data = env.reset()
    data.set("action", torch.tensor([0]))
    nxt = env.step(data)["next"]
    assert (nxt["board"] != 0).sum() == 2
    assert nxt["turn"].item() == 0
