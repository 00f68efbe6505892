"""A small stand-in for ``meltingpot`` (dm-meltingpot 2.4), written from its public API.

``install()`` registers ``meltingpot`` and ``meltingpot.substrate`` in ``sys.modules``. The
fake substrate behaves like a MeltingPot one: ``reset`` / ``step(actions)`` return dm_env-style
time steps whose observation is one dict per player (individual entries, the ``"WORLD.RGB"``
global view and ``"COLLECTIVE_REWARD"``) and whose reward is one value per player;
``observation_spec`` / ``action_spec`` / ``reward_spec`` describe them. Each player's ``"RGB"``
shows the step count and its index, so tests can check which data went where.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections import namedtuple

import numpy as np

SUBSTRATES = ("commons_harvest__open", "clean_up")
N_ACTIONS = 8
PLAYERS = {"commons_harvest__open": 3, "clean_up": 2}


class Array:
    def __init__(self, shape, dtype, name=""):
        self.shape, self.dtype, self.name = tuple(shape), np.dtype(dtype), name


class BoundedArray(Array):
    def __init__(self, shape, dtype, minimum, maximum, name=""):
        super().__init__(shape, dtype, name)
        self.minimum, self.maximum = minimum, maximum


class DiscreteArray(BoundedArray):
    def __init__(self, num_values, name=""):
        super().__init__((), np.int64, 0, num_values - 1, name)
        self.num_values = num_values


class TimeStep(namedtuple("TimeStep", ["step_type", "reward", "discount", "observation"])):
    def first(self):
        return self.step_type == 0

    def last(self):
        return self.step_type == 2


class Config(dict):
    """The attribute-access config ``get_config`` returns (a ``ConfigDict`` in MeltingPot)."""

    __getattr__ = dict.__getitem__


class Substrate:
    def __init__(self, num_players, episode_length=6):
        self.num_players = num_players
        self.episode_length = episode_length
        self.t = 0
        self.actions = []
        self.closed = False

    def observation_spec(self):
        return [
            {
                "RGB": BoundedArray((4, 4, 3), np.uint8, 0, 255, "RGB"),
                "READY_TO_SHOOT": Array((), np.float64, "READY_TO_SHOOT"),
                "COLLECTIVE_REWARD": Array((), np.float64, "COLLECTIVE_REWARD"),
                "WORLD.RGB": BoundedArray((6, 6, 3), np.uint8, 0, 255, "WORLD.RGB"),
            }
            for _ in range(self.num_players)
        ]

    def action_spec(self):
        return [DiscreteArray(N_ACTIONS, "action") for _ in range(self.num_players)]

    def reward_spec(self):
        return [Array((), np.float64, "REWARD") for _ in range(self.num_players)]

    def observation(self):
        world = np.full((6, 6, 3), self.t, dtype=np.uint8)
        collective = float(sum(self._rewards()))
        return [
            {
                "RGB": np.full((4, 4, 3), 10 * self.t + player, dtype=np.uint8),
                "READY_TO_SHOOT": np.float64(self.t % 2),
                "COLLECTIVE_REWARD": np.float64(collective),
                "WORLD.RGB": world,
            }
            for player in range(self.num_players)
        ]

    def _rewards(self):
        last = self.actions[-1] if self.actions else [0] * self.num_players
        return [float(action) for action in last]

    def reset(self):
        self.t = 0
        self.actions = []
        return TimeStep(0, [np.float64(0.0)] * self.num_players, 0.0, self.observation())

    def step(self, actions):
        actions = list(actions)
        assert len(actions) == self.num_players, actions
        assert all(isinstance(a, int) and 0 <= a < N_ACTIONS for a in actions), actions
        self.t += 1
        self.actions.append(actions)
        last = self.t >= self.episode_length
        rewards = [np.float64(r) for r in self._rewards()]
        return TimeStep(2 if last else 1, rewards, 0.0 if last else 1.0, self.observation())

    def close(self):
        self.closed = True


def get_config(name):
    if name not in SUBSTRATES:
        raise ValueError(name)
    return Config(substrate=name, default_player_roles=("default",) * PLAYERS[name])


def build_from_config(config, *, roles):
    return Substrate(len(roles))


def build(name, *, roles):
    return build_from_config(get_config(name), roles=roles)


def install():
    """Make ``import meltingpot`` and ``from meltingpot import substrate`` give the fake."""
    if "meltingpot" in sys.modules and getattr(sys.modules["meltingpot"], "IS_FAKE", False):
        return
    package = types.ModuleType("meltingpot")
    package.__spec__ = importlib.machinery.ModuleSpec("meltingpot", None, is_package=True)
    package.__path__ = []
    package.IS_FAKE = True
    substrate = types.ModuleType("meltingpot.substrate")
    substrate.__spec__ = importlib.machinery.ModuleSpec("meltingpot.substrate", None)
    substrate.SUBSTRATES = SUBSTRATES
    substrate.get_config = get_config
    substrate.build = build
    substrate.build_from_config = build_from_config
    package.substrate = substrate
    sys.modules["meltingpot"] = package
    sys.modules["meltingpot.substrate"] = substrate


def uninstall():
    for name in ("meltingpot.substrate", "meltingpot"):
        sys.modules.pop(name, None)
