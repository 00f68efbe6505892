"""A small stand-in for ``smacv2`` (SMACv2 1.0), written from its public API.

``install()`` registers ``smacv2`` and ``smacv2.env`` in ``sys.modules``, with
``StarCraft2Env`` and ``StarCraftCapabilityEnvWrapper``. Like SMAC's, the fake env's actions
are 0 (no-op, only for dead agents), 1 (stop), 2-5 (moves) and ``6 + j`` (attack enemy ``j``,
available while ``j`` is alive); ``step`` returns ``(reward, terminated, info)`` and rejects
unavailable actions. Enemies have two hit points; the team reward is the damage dealt (plus
10 for a win); the last agent dies after two steps; reaching the episode limit ends the battle
without a winner. Observations start from a random offset drawn from the env's seed.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import numpy as np

MAPS = {"3s_vs_5z": (3, 5, 6), "MMM2": (10, 12, 8), "10gen_terran": (5, 5, 8)}
N_MOVES = 6


class StarCraft2Env:
    def __init__(self, map_name="8m", seed=None, capability_config=None, **kwargs):
        if map_name not in MAPS:
            raise KeyError(map_name)
        self.map_name = map_name
        self.n_agents, self.n_enemies, self.episode_limit = MAPS[map_name]
        if capability_config:
            self.n_agents = capability_config["n_units"]
            self.n_enemies = capability_config["n_enemies"]
        self.n_actions = N_MOVES + self.n_enemies
        self._seed = seed
        self._rng = np.random.RandomState(seed)
        self.kwargs = kwargs
        self.closed = False
        self.launched = False
        self.actions = []

    # sizes
    def get_obs_size(self):
        return 3 + self.n_enemies

    def get_state_size(self):
        return self.n_agents + self.n_enemies

    def get_total_actions(self):
        return self.n_actions

    def get_env_info(self):
        return {
            "state_shape": self.get_state_size(),
            "obs_shape": self.get_obs_size(),
            "cap_shape": 0,
            "n_actions": self.get_total_actions(),
            "n_agents": self.n_agents,
            "episode_limit": self.episode_limit,
        }

    # episode
    def reset(self, episode_config=None):
        self.launched = True
        self.t = 0
        self.offset = float(self._rng.uniform())
        self.enemy_health = np.full(self.n_enemies, 2.0)
        self.alive = np.ones(self.n_agents, dtype=bool)
        return self.get_obs(), self.get_state()

    def get_obs_agent(self, agent_id):
        head = [self.t + self.offset, agent_id, float(self.alive[agent_id])]
        return np.array(head + list(self.enemy_health), dtype=np.float32)

    def get_obs(self):
        return [self.get_obs_agent(i) for i in range(self.n_agents)]

    def get_state(self):
        return np.concatenate([self.alive.astype(np.float32), self.enemy_health]).astype(np.float32)

    def get_avail_agent_actions(self, agent_id):
        if not self.alive[agent_id]:
            return [1] + [0] * (self.n_actions - 1)
        return [0] + [1] * (N_MOVES - 1) + [int(h > 0) for h in self.enemy_health]

    def get_avail_actions(self):
        return [self.get_avail_agent_actions(i) for i in range(self.n_agents)]

    def step(self, actions):
        actions = [int(a) for a in actions]
        for agent, action in enumerate(actions):
            avail = self.get_avail_agent_actions(agent)
            assert avail[action] == 1, f"Agent {agent} cannot perform action {action}"
        self.actions.append(actions)
        self.t += 1
        reward = 0.0
        for action in actions:
            if action >= N_MOVES and self.enemy_health[action - N_MOVES] > 0:
                self.enemy_health[action - N_MOVES] -= 1.0
                reward += 1.0
        if self.t >= 2:
            self.alive[-1] = False
        info = {"battle_won": False}
        info["dead_allies"] = int((~self.alive).sum())
        info["dead_enemies"] = int((self.enemy_health <= 0).sum())
        terminated = False
        if (self.enemy_health <= 0).all():
            terminated = True
            info["battle_won"] = True
            reward += 10.0
        elif self.t >= self.episode_limit:
            terminated = True
        return reward, terminated, info

    def seed(self):
        return self._seed

    def close(self):
        self.closed = True


class StarCraftCapabilityEnvWrapper:
    def __init__(self, **kwargs):
        self.distribution_config = kwargs["capability_config"]
        for key, config in self.distribution_config.items():
            if isinstance(config, dict):
                config["env_key"] = key  # SMACv2 edits the config it is given
        self.env = StarCraft2Env(**kwargs)

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self):
        return self.env.reset({})


def install():
    """Make ``from smacv2.env import StarCraft2Env, StarCraftCapabilityEnvWrapper`` give the fake."""
    if "smacv2" in sys.modules and getattr(sys.modules["smacv2"], "IS_FAKE", False):
        return
    package = types.ModuleType("smacv2")
    package.__spec__ = importlib.machinery.ModuleSpec("smacv2", None, is_package=True)
    package.__path__ = []
    package.IS_FAKE = True
    env = types.ModuleType("smacv2.env")
    env.__spec__ = importlib.machinery.ModuleSpec("smacv2.env", None)
    env.StarCraft2Env = StarCraft2Env
    env.StarCraftCapabilityEnvWrapper = StarCraftCapabilityEnvWrapper
    package.env = env
    sys.modules["smacv2"] = package
    sys.modules["smacv2.env"] = env


def uninstall():
    for name in ("smacv2.env", "smacv2"):
        sys.modules.pop(name, None)
