"""OpenSpiel games as tdrl envs: :class:`OpenSpielWrapper` and :class:`OpenSpielEnv`.

A game is played one state at a time (batch size ``[]``). Players are named ``"player_<i>"``
and gathered into groups (``group_map``, one ``"agents"`` group by default); each group holds
the players' ``"observation"`` (the game's observation tensor, or its information-state tensor),
``"action_mask"`` (legal actions), ``"action"`` and ``"reward"``. The root holds
``"current_player"`` and the ``"done"`` / ``"terminated"`` / ``"truncated"`` flags.

Sequential games apply the action of the current player only; simultaneous games apply every
player's action at once. Chance nodes are resolved by sampling (``chance_sampler``) right after
each reset and step, so the env never stops at one.

Follows the API of open_spiel 2.0 (``pyspiel.load_game``, ``Game``, ``State``). pyspiel is
imported only when an env is built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from tdrl.data.specs import Categorical, Composite, NonTensor, OneHot, Unbounded
from tdrl.envs.gym_like import _EnvWrapper
from tdrl.envs.libs._marl import (
    ACTION_ERROR,
    BackendModule,
    GroupedRandAction,
    check_action_shape,
    check_wrapped_env,
    resolve_group_map,
)
from tdrl.envs.marl import MarlGroupMapType

__all__ = ["OpenSpielEnv", "OpenSpielWrapper"]

_has_pyspiel = importlib.util.find_spec("pyspiel") is not None
_MISSING = "{owner} needs the optional 'open_spiel' package (pip install open_spiel)"
_CHANCE = -1
_SIMULTANEOUS = -2
_TERMINAL = -4


def _default_group_map(players: Sequence[str]) -> dict[str, list[str]]:
    return MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(players)


class _AvailableGames:
    """Class-level attribute listing the names of the registered OpenSpiel games."""

    def __get__(self, instance: Any, owner: type) -> list[str]:
        if not _has_pyspiel:
            return []
        import pyspiel

        return sorted(pyspiel.registered_names())


class OpenSpielWrapper(GroupedRandAction, _EnvWrapper):
    """Wraps an OpenSpiel game state (``pyspiel.State``) as a multi-agent tdrl env.

    Each reset starts again from the wrapped state (or, with ``return_state``, from the state
    serialized in the input's ``"state"`` entry when the input carries no ``"_reset"``). Each
    group's entries have batch size ``[n_players_in_group]``: ``"observation"`` (float32),
    ``"action_mask"`` (bool, the legal actions; all True for players who do not act, whose
    actions are ignored, so that masked sampling stays possible), ``"action"`` (one-hot, or
    integers with ``categorical_actions``) and ``"reward"`` (the players' rewards over the step
    and the chance outcomes that follow it). The root ``"current_player"`` is the player to
    act, -2 when all act at once (simultaneous node) and -4 when the game is over. An illegal
    action raises a ValueError naming the key, the player and the legal actions. A finished game
    is absorbing: stepping it again changes nothing, gives zero rewards and stays done.

    Random actions (:meth:`rand_action`) pick legal moves: the action spec's mask follows the
    action masks.

    Args:
        env: the game state to play from (``pyspiel.load_game(name).new_initial_state()``).
        group_map: None (one ``"agents"`` group), a :class:`~tdrl.envs.MarlGroupMapType` or a
            dict of group name -> player names (``"player_0"``, ...).
        categorical_actions: actions as integers instead of one-hot vectors.
        return_state: add the serialized game state (``State.serialize()``) at the root, as
            non-tensor data; it can be given back to :meth:`reset` to resume that state.
        chance_sampler: ``chance_sampler(actions, probabilities) -> action`` picks chance
            outcomes; by default they are drawn with a numpy generator seeded by
            :meth:`set_seed`.

    Keyword Args:
        device: the device of the data.
        batch_size: must be empty when given (one game per env).
        run_type_checks, allow_done_after_reset, spec_locked: see :class:`~tdrl.envs.EnvBase`.

    Examples:
        >>> import pyspiel
        >>> env = OpenSpielWrapper(pyspiel.load_game("tic_tac_toe").new_initial_state())
        >>> td = env.reset()
        >>> td["agents", "observation"].shape, td["current_player"]
        (torch.Size([2, 3, 3, 3]), tensor(0, dtype=torch.int32))
        >>> env.rollout(20)["next", "done"][-1]
        tensor([True])
    """

    git_url = "https://github.com/google-deepmind/open_spiel"
    libname = "pyspiel"
    lib = BackendModule("pyspiel", "open_spiel")
    available_envs = _AvailableGames()

    def __init__(
        self,
        env: Any = None,
        group_map: Any = None,
        categorical_actions: bool = False,
        return_state: bool = False,
        chance_sampler: Callable[[list, list], Any] | None = None,
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
                f"{type(self).__name__} batch_size: an OpenSpiel state is one game, expected () "
                f"(use SerialEnv / ParallelEnv for batches), got {tuple(batch_size)}"
            )
        if chance_sampler is not None and not callable(chance_sampler):
            raise TypeError(
                f"{type(self).__name__} chance_sampler: expected a callable "
                f"(actions, probabilities) -> action, got {type(chance_sampler).__name__}"
            )
        config = self.__dict__
        config["_requested_group_map"] = group_map
        config["categorical_actions"] = bool(categorical_actions)
        config["return_state"] = bool(return_state)
        config["chance_sampler"] = chance_sampler
        config["_rng"] = np.random.default_rng()
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
            "an OpenSpiel state",
            "a pyspiel.State (game.new_initial_state())",
            ("get_game", "current_player", "apply_action", "legal_actions", "clone"),
        )

    def _build_env(self, env: Any) -> Any:
        # the given state is never played: each episode plays a clone of it. pyspiel clones
        # can outlive neither the state they were cloned from nor their game, so both are kept.
        self.__dict__["_initial_state"] = env
        self.__dict__["game"] = env.get_game()
        return env.clone()

    def _make_specs(self, env: Any) -> None:
        game = self.game
        game_type = game.get_type()
        self.num_players = int(game.num_players())
        self.num_actions = int(game.num_distinct_actions())
        self.player_names = [f"player_{i}" for i in range(self.num_players)]
        self.group_map = resolve_group_map(
            self._requested_group_map, self.player_names, _default_group_map, type(self).__name__
        )
        self._groups = [
            (group, [int(name.rsplit("_", 1)[1]) for name in players])
            for group, players in self.group_map.items()
        ]
        if game_type.provides_observation_tensor:
            self._observe = "observation_tensor"
            observation_shape = tuple(game.observation_tensor_shape())
        elif game_type.provides_information_state_tensor:
            self._observe = "information_state_tensor"
            observation_shape = tuple(game.information_state_tensor_shape())
        else:
            self._observe = None
            observation_shape = ()
        self._observation_size = int(np.prod(observation_shape)) if observation_shape else 0
        self._observation_shape = observation_shape
        action_specs, observation_specs, reward_specs = {}, {}, {}
        for group, players in self._groups:
            n = len(players)
            if self.categorical_actions:
                action = Categorical(self.num_actions, (n,))
            else:
                action = OneHot(self.num_actions, (n, self.num_actions))
            action_specs[group] = Composite(action=action, shape=(n,))
            entries = {"action_mask": Categorical(2, (n, self.num_actions), dtype=torch.bool)}
            if self._observe is not None:
                entries["observation"] = Unbounded((n, *observation_shape))
            observation_specs[group] = Composite(entries, shape=(n,))
            reward_specs[group] = Composite(reward=Unbounded((n, 1)), shape=(n,))
        observation_specs["current_player"] = Unbounded((), dtype=torch.int32)
        if self.return_state:
            observation_specs["state"] = NonTensor(shape=(), example_data="")
        flag = Categorical(2, (1,), dtype=torch.bool)
        self.full_action_spec = Composite(action_specs)
        self.full_observation_spec = Composite(observation_specs)
        self.full_reward_spec = Composite(reward_specs)
        self.full_done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone())

    def _init_env(self) -> None:
        self._resolve_chance(self._env)
        # random actions are legal from the start, before any reset
        self._output(self._env, None)

    # ------------------------------------------------------------------ protocol
    def _set_seed(self, seed: int | None) -> None:
        self.__dict__["_rng"] = np.random.default_rng(seed)

    def _resolve_chance(self, state: Any) -> list[float]:
        """Sample chance outcomes until a player acts; the rewards collected on the way."""
        rewards = [0.0] * self.num_players
        while state.is_chance_node():
            outcomes = state.chance_outcomes()
            actions = [action for action, _ in outcomes]
            probabilities = [probability for _, probability in outcomes]
            if self.chance_sampler is not None:
                action = self.chance_sampler(actions, probabilities)
            else:
                action = actions[int(self._rng.choice(len(actions), p=probabilities))]
            state.apply_action(int(action))
            rewards = [total + reward for total, reward in zip(rewards, state.rewards())]
        return rewards

    def _saved_state(self, tensordict: TensorDictBase | None) -> Any:
        """The serialized state a reset resumes, or None.

        It is the input's ``"state"`` when ``return_state`` is on and the input has no
        ``"_reset"`` entry.
        """
        if not self.return_state or tensordict is None or "_reset" in tensordict.keys():
            return None
        return tensordict.get("state", None)

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        """Start a new game, or resume the serialized ``"state"`` of ``tensordict``.

        A resumed finished game is done right after the reset (no error is raised for it).
        """
        if self._saved_state(tensordict) is None:
            return super().reset(tensordict, **kwargs)
        allow = self.allow_done_after_reset
        self.allow_done_after_reset = True
        try:
            return super().reset(tensordict, **kwargs)
        finally:
            self.allow_done_after_reset = allow

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        saved = self._saved_state(tensordict)
        if saved is not None:
            text = saved.data if isinstance(saved, NonTensorData) else saved
            state = self.game.deserialize_state(str(text))
        else:
            state = self._initial_state.clone()
            self._resolve_chance(state)
        self._env = state
        return self._output(state, None)

    def _player_actions(self, tensordict: TensorDictBase, state: Any) -> list[int]:
        """The action of each player (legal ones only for the players who act)."""
        name = type(self).__name__
        player = state.current_player()
        acting = range(self.num_players) if player == _SIMULTANEOUS else (player,)
        actions = [0] * self.num_players
        for group, players in self._groups:
            wanted = [p for p in players if p in acting]
            if not wanted:
                continue
            key = (group, "action")
            n = len(players)
            shape = (n,) if self.categorical_actions else (n, self.num_actions)
            value = check_action_shape(name, key, tensordict.get(key, None), torch.Size(shape))
            if not self.categorical_actions:
                value = value.to(torch.float32).argmax(-1)
            value = value.tolist()
            for p in wanted:
                action = value[players.index(p)]
                legal = state.legal_actions(p)
                if action not in legal:
                    raise ValueError(
                        ACTION_ERROR.format(
                            env=name,
                            key=key,
                            expected=f"a legal action of player_{p} (one of {legal})",
                            got=action,
                        )
                    )
                actions[p] = action
        return actions

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        state = self._env
        if state.is_terminal():
            # a finished game is absorbing: it stays over and gives no more reward
            return self._output(state, [0.0] * self.num_players)
        actions = self._player_actions(tensordict, state)
        player = state.current_player()
        if player == _SIMULTANEOUS:
            state.apply_actions(actions)
        else:
            state.apply_action(actions[player])
        rewards = list(state.rewards())
        rewards = [a + b for a, b in zip(rewards, self._resolve_chance(state))]
        return self._output(state, rewards)

    def _output(self, state: Any, rewards: list[float] | None) -> TensorDictBase:
        terminal = state.is_terminal()
        player = int(state.current_player())
        out: dict = {}
        all_legal = np.ones(self.num_actions, dtype=bool)
        observe = getattr(state, self._observe) if self._observe is not None else None
        for group, players in self._groups:
            masks = []
            for p in players:
                if terminal or (player != _SIMULTANEOUS and p != player):
                    masks.append(all_legal)
                else:
                    masks.append(np.asarray(state.legal_actions_mask(p), dtype=bool))
            mask = torch.from_numpy(np.stack(masks))
            entries = {"action_mask": mask}
            if observe is not None:
                observations = np.array([observe(p) for p in players], dtype=np.float32)
                entries["observation"] = torch.from_numpy(
                    observations.reshape(len(players), *self._observation_shape)
                )
            if rewards is not None:
                entries["reward"] = torch.tensor(
                    [[rewards[p]] for p in players], dtype=torch.float32
                )
            out[group] = TensorDict(entries, batch_size=(len(players),))
            # random actions (rand_action) then pick legal moves only
            self.full_action_spec[group, "action"].update_mask(mask)
        out["current_player"] = torch.tensor(player, dtype=torch.int32)
        flag = torch.tensor([terminal])
        out["done"] = flag
        out["terminated"] = flag.clone()
        out["truncated"] = torch.zeros(1, dtype=torch.bool)
        if self.return_state:
            out["state"] = NonTensorData(state.serialize())
        return TensorDict(out, batch_size=(), device=self.device)


class OpenSpielEnv(OpenSpielWrapper):
    """Loads an OpenSpiel game (``pyspiel.load_game``) and wraps its initial state.

    See :class:`OpenSpielWrapper` for the data layout. Requires the optional ``open_spiel``
    package.

    Args:
        game_string: the game, with its parameters if any (``"kuhn_poker(players=3)"``).
        group_map, categorical_actions, return_state, chance_sampler: see
            :class:`OpenSpielWrapper`.

    Keyword Args:
        device, batch_size, run_type_checks, allow_done_after_reset, spec_locked: see
            :class:`OpenSpielWrapper`.

    Examples:
        >>> env = OpenSpielEnv("kuhn_poker", categorical_actions=True)
        >>> _ = env.set_seed(0)
        >>> data = env.rollout(10)
        >>> data["next", "agents", "reward"][-1].sum()  # a zero-sum game
        tensor(0.)
    """

    def __init__(
        self,
        game_string: str,
        group_map: Any = None,
        categorical_actions: bool = False,
        return_state: bool = False,
        chance_sampler: Callable[[list, list], Any] | None = None,
        *,
        device: Any = None,
        batch_size: Any = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
    ) -> None:
        if not _has_pyspiel:
            raise ImportError(_MISSING.format(owner=type(self).__name__))
        if not isinstance(game_string, str):
            raise TypeError(
                f"OpenSpielEnv game_string: expected a game name, got {type(game_string).__name__}"
            )
        self.__dict__["game_string"] = game_string
        super().__init__(
            None,
            group_map,
            categorical_actions,
            return_state,
            chance_sampler,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
            game_string=game_string,
        )

    def _check_kwargs(self, kwargs: dict) -> None:
        pass

    def _build_env(self, game_string: str) -> Any:
        import pyspiel

        try:
            game = pyspiel.load_game(game_string)
        except pyspiel.SpielError as err:
            raise ValueError(
                f"OpenSpielEnv game_string: expected a registered game (see "
                f"OpenSpielEnv.available_envs), got {game_string!r} ({err})"
            ) from err
        return super()._build_env(game.new_initial_state())
