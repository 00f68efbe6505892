"""Tic-tac-toe for two players, stateless and batch-unlocked."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import Categorical, Composite, Unbounded
from tdrl.envs.common import EnvBase

__all__ = ["TicTacToeEnv"]

#: The 8 winning lines as flat cell indices.
_LINES = torch.tensor(
    [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]]
)

ILLEGAL_MOVE = (
    "TicTacToeEnv: illegal move at key 'action': cell {cell} is already taken "
    "(batch index {index}); legal cells are those where 'action_mask' is True"
)


class TicTacToeEnv(EnvBase):
    """Tic-tac-toe: two players alternate placing marks on a 3x3 board.

    The board (``1`` for player 0's marks, ``-1`` for player 1's, ``0`` empty),
    the player to move (``"turn"``) and the legal cells (``"action_mask"``) are
    observations and state, so the env is stateless and runs any batch size.
    The action is the flat cell index (``Categorical(9, (1,))``). Rewards are
    per player (``("player0", "reward")`` and ``("player1", "reward")``):
    ``+1`` for the winner, ``-1`` for the loser, ``0`` otherwise. Playing a taken
    cell raises ``ValueError``. :meth:`rand_action` samples legal moves only.

    Args:
        single_player: player 1 is played by the env (uniformly random legal
            moves), so each step is one move of player 0 plus the reply.
        device: the device of the data.

    Examples:
        >>> env = TicTacToeEnv()
        >>> _ = torch.manual_seed(0)
        >>> data = env.rollout(10)
        >>> bool(data["next", "done"][-1])
        True
        >>> float(data["next", "player0", "reward"][-1] + data["next", "player1", "reward"][-1])
        0.0
    """

    _batch_locked = False

    def __init__(self, *, single_player: bool = False, device: Any = None) -> None:
        super().__init__(device=device, batch_size=())
        self.single_player = single_player
        self.observation_spec = Composite(
            board=Unbounded((3, 3), dtype=torch.int32),
            turn=Unbounded((1,), dtype=torch.int32),
            action_mask=Unbounded((9,), dtype=torch.bool),
        )
        self.state_spec = self.observation_spec.clone()
        self.action_spec = Categorical(9, shape=(1,), dtype=torch.int64)
        self.full_reward_spec = Composite(
            player0=Composite(reward=Unbounded((1,), dtype=torch.float32)),
            player1=Composite(reward=Unbounded((1,), dtype=torch.float32)),
        )
        self.full_done_spec = Composite(
            done=Categorical(2, (1,), dtype=torch.bool),
            terminated=Categorical(2, (1,), dtype=torch.bool),
        )
        self.__dict__["_generator"] = torch.Generator(device=self.device or "cpu")

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        batch_size = tensordict.batch_size if tensordict is not None else self.batch_size
        device = self.device
        done = torch.zeros((*batch_size, 1), dtype=torch.bool, device=device)
        return TensorDict._new_unsafe(
            {
                "board": torch.zeros((*batch_size, 3, 3), dtype=torch.int32, device=device),
                "turn": torch.zeros((*batch_size, 1), dtype=torch.int32, device=device),
                "action_mask": torch.ones((*batch_size, 9), dtype=torch.bool, device=device),
                "done": done,
                "terminated": done.clone(),
            },
            batch_size=batch_size,
            device=device,
        )

    @staticmethod
    def _play(board: torch.Tensor, turn: torch.Tensor, cell: torch.Tensor) -> tuple:
        """Place the mover's mark; return the new flat board and whether the mover won."""
        mark = torch.where(turn == 0, 1, -1).to(board.dtype)
        board = board.scatter(-1, cell, mark)
        lines = board[..., _LINES.to(board.device)].sum(-1)
        won = (lines == 3 * mark).any(-1, keepdim=True)
        return board, won

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch_size = tensordict.batch_size
        board = tensordict.get("board").reshape(*batch_size, 9)
        turn = tensordict.get("turn")
        cell = tensordict.get("action").long().reshape(*batch_size, 1)
        taken = board.gather(-1, cell) != 0
        if bool(taken.any()):
            index = taken.reshape(-1).nonzero()[0].item()
            raise ValueError(ILLEGAL_MOVE.format(cell=int(cell.reshape(-1)[index]), index=index))
        board, won = self._play(board, turn, cell)
        reward0 = torch.where(won, torch.where(turn == 0, 1.0, -1.0), 0.0)
        done = won | (board != 0).all(-1, keepdim=True)
        turn = 1 - turn
        if self.single_player:
            board, turn, done, reward0 = self._reply(board, turn, done, reward0)
        reward0 = reward0.to(torch.float32)
        return TensorDict._new_unsafe(
            {
                "board": board.reshape(*batch_size, 3, 3),
                "turn": turn,
                "action_mask": board == 0,
                "player0": TensorDict._new_unsafe({"reward": reward0}, batch_size=batch_size),
                "player1": TensorDict._new_unsafe({"reward": -reward0}, batch_size=batch_size),
                "done": done,
                "terminated": done.clone(),
            },
            batch_size=batch_size,
            device=self.device,
        )

    def _reply(
        self, board: torch.Tensor, turn: torch.Tensor, done: torch.Tensor, reward0: torch.Tensor
    ) -> tuple:
        legal = (board == 0).float() + 1e-12 * (board != 0).all(-1, keepdim=True).float()
        flat = legal.reshape(-1, 9)
        cell = torch.multinomial(flat, 1, generator=self._generator).reshape(*board.shape[:-1], 1)
        new_board, won = self._play(board, turn, cell)
        play = ~done
        board = torch.where(play, new_board, board)
        won = won & play
        reward0 = torch.where(won, -1.0, reward0)
        done = done | won | (board != 0).all(-1, keepdim=True)
        turn = torch.where(play, 1 - turn, turn)
        return board, turn, done, reward0

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Sample a uniformly random *legal* move (reads ``"action_mask"``)."""
        if tensordict is None:
            tensordict = self.reset()
        mask = tensordict.get("action_mask", None)
        if mask is None:
            return super().rand_action(tensordict)
        flat = mask.reshape(-1, 9).float()
        flat = flat + (flat.sum(-1, keepdim=True) == 0).float()
        action = torch.multinomial(flat, 1).reshape(*tensordict.batch_size, 1)
        tensordict.set(self.action_key, action)
        return tensordict

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._generator.manual_seed(seed)
