"""SMACv2 (StarCraft multi-agent challenge v2) as tdrl envs: :class:`SMACv2Wrapper`, :class:`SMACv2Env`.

SMAC's agents act together at each step and share one team reward. The ``"agents"`` group
holds each agent's ``"observation"``, ``"action_mask"`` (its available actions) and
``"action"``; the root holds the global ``"state"``, the team ``"reward"``, the ``"info"``
SMAC reports (``battle_won``, ``dead_allies``, ``dead_enemies``, ``episode_limit``) and the
``"done"`` / ``"terminated"`` / ``"truncated"`` flags (reaching the map's episode limit
without a winner truncates).

Follows the API of SMACv2 1.0 (``smacv2.env.StarCraft2Env`` and
``StarCraftCapabilityEnvWrapper``: ``get_env_info``, ``reset``, ``step``, ``get_obs``,
``get_state``, ``get_avail_actions``, ``close``). SMACv2 needs StarCraft II and is not installed
with tdrl: install it from its repository (``pip install git+https://github.com/oxwhirl/smacv2``)
with the game and maps. smacv2 is imported only when an env is built.
"""

from __future__ import annotations

import copy
import importlib.util
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.specs import Categorical, Composite, OneHot, Unbounded
from tdrl.envs.gym_like import _EnvWrapper
from tdrl.envs.libs._marl import (
    ACTION_ERROR,
    BackendModule,
    GroupedRandAction,
    check_action_shape,
    check_wrapped_env,
)

__all__ = ["SMACv2Env", "SMACv2Wrapper"]

_MISSING = (
    "{owner} needs the optional 'smacv2' package and StarCraft II "
    "(pip install git+https://github.com/oxwhirl/smacv2)"
)
_GROUP = "agents"
_INFO_KEYS = ("battle_won", "dead_allies", "dead_enemies", "episode_limit")


def _backend_found() -> bool:
    """Whether smacv2 can be imported (checked when an env is built)."""
    return importlib.util.find_spec("smacv2") is not None


class SMACv2Wrapper(GroupedRandAction, _EnvWrapper):
    """Wraps a SMACv2 env (``StarCraft2Env`` or ``StarCraftCapabilityEnvWrapper``).

    The batch size is ``[]``; the ``"agents"`` group has batch size ``[n_agents]``. Actions are
    integers (``categorical_actions``) or one-hot vectors; random actions (:meth:`rand_action`)
    pick available actions only, as the action spec's mask follows ``"action_mask"``. An action
    that is not available raises a ValueError naming the key and the agent.

    The StarCraft II game is seeded when the SMAC env is built: :meth:`set_seed` warns that a
    seed given later is not used (:class:`SMACv2Env` rebuilds its env with it instead).

    Args:
        env: the SMACv2 env.
        categorical_actions: actions as integers instead of one-hot vectors.

    Keyword Args:
        device: the device of the data.
        batch_size: must be empty when given.
        run_type_checks, allow_done_after_reset, spec_locked: see :class:`~tdrl.envs.EnvBase`.

    Examples:
        >>> from smacv2.env import StarCraft2Env  # doctest: +SKIP
        >>> env = SMACv2Wrapper(StarCraft2Env(map_name="3s_vs_5z"))  # doctest: +SKIP
        >>> env.rollout(5)["next", "agents", "observation"].shape[:2]  # doctest: +SKIP
        torch.Size([5, 3])
    """

    git_url = "https://github.com/oxwhirl/smacv2"
    libname = "smacv2"
    lib = BackendModule("smacv2", "smacv2")

    def __init__(
        self,
        env: Any = None,
        categorical_actions: bool = True,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if env is not None:
            kwargs["env"] = env
        if batch_size is not None and torch.Size(batch_size) != torch.Size([]):
            raise ValueError(
                f"{type(self).__name__} batch_size: a SMAC env is one battle, expected () "
                f"(use SerialEnv / ParallelEnv for batches), got {tuple(batch_size)}"
            )
        self.__dict__["categorical_actions"] = bool(categorical_actions)
        self.__dict__["_available"] = None
        super().__init__(
            device=device,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            **kwargs,
        )

    # ------------------------------------------------------------------ building
    def _check_kwargs(self, kwargs: dict) -> None:
        check_wrapped_env(
            self,
            kwargs.get("env"),
            "a SMACv2 env",
            "a SMACv2 StarCraft2Env",
            ("get_env_info", "reset", "step", "get_obs", "get_avail_actions"),
        )

    def _build_env(self, env: Any) -> Any:
        return env

    def _make_specs(self, env: Any) -> None:
        info = env.get_env_info()
        self.n_agents = n = int(info["n_agents"])
        self.n_actions = int(info["n_actions"])
        self.episode_limit = int(info["episode_limit"])
        self.agent_names = [f"agent_{i}" for i in range(n)]
        self.group_map = {_GROUP: list(self.agent_names)}
        if self.categorical_actions:
            action = Categorical(self.n_actions, (n,))
        else:
            action = OneHot(self.n_actions, (n, self.n_actions))
        self.full_action_spec = Composite({_GROUP: Composite(action=action, shape=(n,))})
        flag = Categorical(2, (1,), dtype=torch.bool)
        count = Unbounded((1,), dtype=torch.int64)
        self.full_observation_spec = Composite(
            {
                _GROUP: Composite(
                    observation=Unbounded((n, int(info["obs_shape"]))),
                    action_mask=Categorical(2, (n, self.n_actions), dtype=torch.bool),
                    shape=(n,),
                ),
                "state": Unbounded((int(info["state_shape"]),)),
                "info": Composite(
                    battle_won=flag.clone(),
                    dead_allies=count.clone(),
                    dead_enemies=count.clone(),
                    episode_limit=flag.clone(),
                ),
            }
        )
        self.full_reward_spec = Composite(reward=Unbounded((1,)))
        self.full_done_spec = Composite(
            done=flag.clone(), terminated=flag.clone(), truncated=flag.clone()
        )

    # ------------------------------------------------------------------ protocol
    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            warnings.warn(
                f"{type(self).__name__}: a SMACv2 env is seeded when it is built; seed {seed} "
                "is not used (build the StarCraft2Env with seed=...)",
                UserWarning,
                stacklevel=3,
            )

    def _observe(self, info: dict, steps: int, ended: bool) -> dict:
        env = self._env
        observation = torch.as_tensor(np.asarray(env.get_obs(), dtype=np.float32))
        available = np.asarray(env.get_avail_actions(), dtype=bool)
        self._available = available
        mask = torch.from_numpy(available.copy())
        # random actions (rand_action) then pick available actions only
        self.full_action_spec[_GROUP, "action"].update_mask(mask)
        state = torch.as_tensor(np.asarray(env.get_state(), dtype=np.float32))
        battle_won = bool(info.get("battle_won", False))
        limit = bool(info.get("episode_limit", False)) or (
            ended and steps >= self.episode_limit and not battle_won
        )
        return {
            _GROUP: TensorDict(
                {"observation": observation, "action_mask": mask}, batch_size=(self.n_agents,)
            ),
            "state": state,
            "info": TensorDict(
                {
                    "battle_won": torch.tensor([battle_won]),
                    "dead_allies": torch.tensor([int(info.get("dead_allies", 0))]),
                    "dead_enemies": torch.tensor([int(info.get("dead_enemies", 0))]),
                    "episode_limit": torch.tensor([limit]),
                }
            ),
        }

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        self._env.reset()
        self.__dict__["_steps"] = 0
        out = self._observe({}, 0, False)
        false = torch.zeros(1, dtype=torch.bool)
        out.update(done=false, terminated=false.clone(), truncated=false.clone())
        return TensorDict(out, batch_size=(), device=self.device)

    def _actions(self, tensordict: TensorDictBase) -> list[int]:
        name = type(self).__name__
        key = (_GROUP, "action")
        shape = (self.n_agents,) if self.categorical_actions else (self.n_agents, self.n_actions)
        value = check_action_shape(name, key, tensordict.get(key, None), torch.Size(shape))
        if not self.categorical_actions:
            value = value.to(torch.float32).argmax(-1)
        actions = value.tolist()
        available = self._available
        for agent, action in enumerate(actions):
            if not (0 <= action < self.n_actions and available[agent, action]):
                raise ValueError(
                    ACTION_ERROR.format(
                        env=name,
                        key=key,
                        expected=f"an available action of agent_{agent} (one of "
                        f"{np.flatnonzero(available[agent]).tolist()})",
                        got=action,
                    )
                )
        return actions

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        reward, ended, info = self._env.step(self._actions(tensordict))
        self.__dict__["_steps"] += 1
        ended = bool(ended)
        out = self._observe(info or {}, self._steps, ended)
        truncated = ended and bool(out["info"]["episode_limit"])
        out["reward"] = torch.tensor([float(reward)], dtype=torch.float32)
        out["done"] = torch.tensor([ended])
        out["terminated"] = torch.tensor([ended and not truncated])
        out["truncated"] = torch.tensor([truncated])
        return TensorDict(out, batch_size=(), device=self.device)


class SMACv2Env(SMACv2Wrapper):
    """Builds a SMACv2 battle on a map and wraps it (see :class:`SMACv2Wrapper`).

    With ``capability_config`` the battle's units and start positions are drawn by SMACv2's
    procedural generation (``StarCraftCapabilityEnvWrapper``); otherwise the map's fixed
    scenario is played (``StarCraft2Env``). Requires the optional ``smacv2`` package and
    StarCraft II.

    Args:
        map_name: the SMAC map, e.g. ``"10gen_terran"`` or ``"3s_vs_5z"``.
        capability_config: SMACv2's distribution config of the units and start positions.
        seed: seed of the battles; :meth:`set_seed` rebuilds the env with a new one.
        categorical_actions: actions as integers instead of one-hot vectors.
        **kwargs: other arguments of ``StarCraft2Env``.

    Keyword Args:
        device, batch_size, run_type_checks, allow_done_after_reset, spec_locked: see
            :class:`SMACv2Wrapper`.

    Examples:
        >>> env = SMACv2Env("3s_vs_5z", seed=0)  # doctest: +SKIP
        >>> env.rollout(5)["agents", "action_mask"].shape  # doctest: +SKIP
        torch.Size([5, 3, 11])
    """

    def __init__(
        self,
        map_name: str,
        capability_config: dict | None = None,
        seed: int | None = None,
        categorical_actions: bool = True,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        **kwargs: Any,
    ) -> None:
        if not _backend_found():
            raise ImportError(_MISSING.format(owner=type(self).__name__))
        if not isinstance(map_name, str):
            raise TypeError(f"SMACv2Env map_name: expected a str, got {type(map_name).__name__}")
        self.__dict__["_make_kwargs"] = dict(
            map_name=map_name, capability_config=capability_config, **kwargs
        )
        super().__init__(
            None,
            categorical_actions,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            seed=seed,
        )

    def _check_kwargs(self, kwargs: dict) -> None:
        pass

    def _build_env(self, seed: int | None) -> Any:
        from smacv2.env import StarCraft2Env, StarCraftCapabilityEnvWrapper

        kwargs = dict(self._make_kwargs)
        capability_config = kwargs.pop("capability_config")
        if capability_config is not None:
            # SMACv2 edits the distribution config it is given: hand it a copy
            return StarCraftCapabilityEnvWrapper(
                capability_config=copy.deepcopy(capability_config), seed=seed, **kwargs
            )
        return StarCraft2Env(seed=seed, **kwargs)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        self._env.close()
        self._env = self._build_env(int(seed))
