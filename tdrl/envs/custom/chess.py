"""ChessEnv: chess on a python-chess board, one move per step, both sides played by the policy.

Written against python-chess 1.11 (``chess.Board`` and its SAN moves); board images are drawn
with Pillow.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from tdrl.data import Bounded, Categorical, Composite, NonTensor, Unbounded
from tdrl.envs.common import EnvBase
from tdrl.envs.custom import _chess_support as support
from tdrl.envs.libs.backends import BackendModule

__all__ = ["ChessEnv"]

_HAS_CHESS = importlib.util.find_spec("chess") is not None
MISSING_CHESS = "ChessEnv needs the optional 'chess' package (pip install chess)"
#: The most legal moves any chess position has.
MAX_LEGAL_MOVES = 218
START_SAN = "<start>"


def _text(value: Any) -> str | None:
    """A string entry of a tensordict (plain or ``NonTensorData``), or None."""
    if isinstance(value, NonTensorData):
        value = value.data
    if value is None or (isinstance(value, str) and not value):
        return None
    if not isinstance(value, str):
        raise TypeError(f"ChessEnv: expected a string, got {type(value).__name__}")
    return value


class ChessEnv(EnvBase):
    """Chess for two players sharing one policy: each step plays one move for the side to move.

    The action indexes :attr:`san_moves`, the sorted list of every SAN string a legal move
    can have (check marks included). A move that is not legal in the current position raises
    ``ValueError``. The game ends on checkmate or a draw (stalemate, insufficient material,
    or a draw a player may claim: fifty moves, threefold repetition); the reward goes to the
    side that just moved: 1 for a win, 0.5 for a draw, 0 otherwise. ``"turn"`` is True when
    white is to move.

    A *stateful* env keeps the board; a stateless one rebuilds it at every step from the input
    ``"pgn"`` (or ``"fen"``), so it needs one of them. ``reset`` starts from the initial
    position, or from the ``"fen"`` / ``"pgn"`` entry of its input when one is given.

    With ``mask_actions`` (the default) or ``include_hash``, the constructor returns the env
    inside a :class:`~tdrl.envs.TransformedEnv`: an :class:`~tdrl.envs.ActionMask` keeps the
    action spec's mask on the legal moves (so ``rand_action`` plays legal moves), and
    :class:`~tdrl.envs.Hash` transforms add ``"<key>_hash"`` entries.

    Args:
        stateful: keep the board in the env (True) or read it from the input at each step.
        include_pgn: add a ``"pgn"`` entry (the game so far).
        include_fen: add a ``"fen"`` entry (the position).
        include_hash: add ``"fen_hash"`` / ``"pgn_hash"`` / ``"san_hash"`` entries (SHA-256 of
            the included strings, 32 uint8).
        include_san: add a ``"san"`` entry: the SAN of the move just played (``"<start>"``
            after a reset).
        include_legal_moves: add ``"legal_moves"``: the indices of the legal moves, padded
            with -1 to 218 entries.
        include_hash_inv: with ``include_hash``, the hashes of the fen / pgn may stand for
            them in the input (the strings are recovered from the hashes seen so far).
        pixels: add a ``"pixels"`` entry, a 256 x 256 RGB image of the board.
        mask_actions: add an ``"action_mask"`` entry and keep the action spec masked.
        device: the device of the data.

    Examples:
        >>> from tdrl.envs import ChessEnv
        >>> env = ChessEnv(include_fen=True, include_san=True)
        >>> _ = torch.manual_seed(0)
        >>> data = env.rollout(4)
        >>> data["next", "fen"][-1] == env.board.fen()
        True
        >>> int(env.reset()["action_mask"].sum())  # 20 legal first moves
        20
    """

    #: The PGN of a game with no move played.
    _PGN_RESTART = "*"

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Build the env; with masks or hashes it comes back inside a ``TransformedEnv``."""
        instance = super().__new__(cls)
        if kwargs.get("_bare", False):  # unpickling: the state follows
            return instance
        transforms = cls._transforms_for(**kwargs)
        if not transforms:
            return instance
        from tdrl.envs.transforms import Compose, TransformedEnv

        instance.__init__(*args, **kwargs)
        return TransformedEnv(instance, Compose(*transforms))

    def __getnewargs_ex__(self) -> tuple[tuple, dict]:
        return (), {"_bare": True}

    @staticmethod
    def _transforms_for(
        *,
        include_pgn: bool = False,
        include_fen: bool = False,
        include_hash: bool = False,
        include_san: bool = False,
        include_hash_inv: bool = False,
        mask_actions: bool = True,
        **_: Any,
    ) -> list:
        from tdrl.envs.transforms import ActionMask, Hash

        transforms: list = [ActionMask()] if mask_actions else []
        if not include_hash:
            return transforms
        for key, included, is_state in (
            ("fen", include_fen, True),
            ("pgn", include_pgn, True),
            ("san", include_san, False),
        ):
            if not included:
                continue
            hashed = f"{key}_hash"
            if include_hash_inv and is_state:
                transform = Hash(
                    in_keys=[key], out_keys=[hashed], in_keys_inv=[key], out_keys_inv=[hashed]
                )
                transform.enable_inv_on_reset = True
            else:
                transform = Hash(in_keys=[key], out_keys=[hashed])
            transforms.append(transform)
        return transforms

    def __init__(
        self,
        stateful: bool = True,
        include_pgn: bool = False,
        include_fen: bool = False,
        include_hash: bool = False,
        include_san: bool = False,
        include_legal_moves: bool = False,
        include_hash_inv: bool = False,
        pixels: bool = False,
        mask_actions: bool = True,
        *,
        device: Any = None,
    ) -> None:
        if not _HAS_CHESS:
            raise ImportError(MISSING_CHESS)
        if not stateful and not include_pgn and not include_fen:
            raise RuntimeError(
                "At least one state representation (pgn or fen) must be enabled when "
                "stateful is False: pass include_pgn=True or include_fen=True"
            )
        if include_hash_inv and not include_hash:
            raise ValueError("ChessEnv include_hash_inv: expected include_hash=True as well")
        import chess

        super().__init__(device=device, batch_size=())
        self.stateful = stateful
        self.include_pgn = include_pgn
        self.include_fen = include_fen
        self.include_hash = include_hash
        self.include_san = include_san
        self.include_legal_moves = include_legal_moves
        self.include_hash_inv = include_hash_inv
        self.pixels = pixels
        self.mask_actions = mask_actions
        self.board = chess.Board()
        self._san_moves = list(support.all_san_moves())
        self._san_index = {san: index for index, san in enumerate(self._san_moves)}
        self._legal_cache: tuple[str, dict] | None = None
        self._known_boards: dict[str, Any] = {}
        self._make_specs()

    def _make_specs(self) -> None:
        device = self.device
        observations: dict[str, Any] = {"turn": Categorical(2, (), dtype=torch.bool)}
        states: dict[str, Any] = {}
        for key, included in (("fen", self.include_fen), ("pgn", self.include_pgn)):
            if included:
                observations[key] = NonTensor(example_data="")
                states[key] = NonTensor(example_data="")
        if self.include_san:
            observations["san"] = NonTensor(example_data=START_SAN)
        if self.mask_actions:
            observations["action_mask"] = Categorical(2, (len(self._san_moves),), dtype=torch.bool)
        if self.include_legal_moves:
            observations["legal_moves"] = Bounded(
                -1, len(self._san_moves) - 1, (MAX_LEGAL_MOVES,), dtype=torch.int64
            )
        if self.pixels:
            side = support.BOARD_PIXELS
            observations["pixels"] = Bounded(0, 255, (side, side, 3), dtype=torch.uint8)
        self.observation_spec = Composite(observations, device=device)
        self.state_spec = Composite(states, device=device)
        self.action_spec = Categorical(len(self._san_moves), (), dtype=torch.int64, device=device)
        self.reward_spec = Unbounded((1,), dtype=torch.float32, device=device)
        flag = Categorical(2, (1,), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(done=flag, terminated=flag.clone(), device=device)

    # ------------------------------------------------------------------ properties
    #: The python-chess module (read on the class or an instance; imported when first read).
    lib = BackendModule("chess")

    @property
    def san_moves(self) -> list[str]:
        """Every SAN string an action can stand for; an action is an index in this list."""
        return self._san_moves

    # ------------------------------------------------------------------ PGN helpers
    @staticmethod
    def _pgn_to_board(pgn: str) -> Any:
        return support.pgn_to_board(pgn)

    @staticmethod
    def _board_to_pgn(board: Any) -> str:
        return support.board_to_pgn(board)

    @staticmethod
    def _add_move_to_pgn(pgn: str, move: Any) -> str:
        board = support.pgn_to_board(pgn)
        board.push(move)
        return support.board_to_pgn(board)

    # ------------------------------------------------------------------ board bookkeeping
    def _board_from(self, tensordict: TensorDictBase | None, required: bool) -> Any:
        """The board described by the input's ``"pgn"`` (preferred) or ``"fen"``."""
        import chess

        pgn = fen = None
        if tensordict is not None:
            pgn = _text(tensordict.get("pgn", None))
            fen = _text(tensordict.get("fen", None))
        if pgn is None and fen is None:
            if required:
                raise KeyError(
                    "ChessEnv (stateless): expected a 'pgn' or 'fen' entry in the input, got "
                    f"keys {list(tensordict.keys()) if tensordict is not None else []}"
                )
            return chess.Board()
        known = self._known_boards.get(pgn if pgn is not None else fen)
        if known is not None:
            return known.copy()
        if pgn is not None:
            return support.pgn_to_board(pgn)
        try:
            return chess.Board(fen)
        except ValueError as err:
            raise ValueError(f"ChessEnv 'fen': not a valid FEN ({err}): {fen!r}") from None

    def _legal(self, board: Any) -> dict[str, Any]:
        """SAN -> move of the legal moves of ``board`` (cached for the last position)."""
        key = board.fen()
        cached = self._legal_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        legal = {board.san(move): move for move in board.legal_moves}
        self._legal_cache = (key, legal)
        return legal

    def _observe(self, board: Any, san: str, reward: float, done: bool) -> TensorDictBase:
        source: dict[str, Any] = {"turn": torch.tensor(bool(board.turn))}
        remembered: list[str] = []
        if self.include_fen:
            source["fen"] = board.fen()
            remembered.append(source["fen"])
        if self.include_pgn:
            source["pgn"] = support.board_to_pgn(board)
            remembered.append(source["pgn"])
        if remembered and not self.stateful:
            # the next step's input is this output: find its board without parsing it again
            self._known_boards = dict.fromkeys(remembered, board.copy())
        if self.include_san:
            source["san"] = san
        if self.mask_actions or self.include_legal_moves:
            indices = [self._san_index[move] for move in self._legal(board)]
            if self.mask_actions:
                mask = np.zeros(len(self._san_moves), dtype=np.bool_)
                mask[indices] = True
                source["action_mask"] = torch.from_numpy(mask)
            if self.include_legal_moves:
                legal_moves = torch.full((MAX_LEGAL_MOVES,), -1, dtype=torch.int64)
                legal_moves[: len(indices)] = torch.tensor(sorted(indices), dtype=torch.int64)
                source["legal_moves"] = legal_moves
        if self.pixels:
            source["pixels"] = torch.from_numpy(support.render_board(board).copy())
        source["reward"] = torch.tensor([reward], dtype=torch.float32)
        source["done"] = torch.tensor([done])
        source["terminated"] = torch.tensor([done])
        return TensorDict(source, batch_size=(), device=self.device)

    # ------------------------------------------------------------------ env protocol
    @staticmethod
    def _result(board: Any) -> tuple[float, str] | None:
        """``(reward of the side that just moved, reason)`` when the game is over, else None.

        A draw a player may claim ends the game as soon as it is reached (fifty moves
        without capture or pawn move, a position seen three times).
        """
        outcome = board.outcome(claim_draw=False)
        if outcome is not None:
            reward = 1.0 if outcome.winner is not None else 0.5
            return reward, outcome.termination.name.lower()
        if board.is_fifty_moves():
            return 0.5, "fifty_moves"
        if board.is_repetition(3):
            return 0.5, "threefold_repetition"
        return None

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        board = self._board_from(tensordict, required=False)
        result = self._result(board)
        if result is not None:
            raise ValueError(
                f"Cannot reset to a fen that is a gameover state: {board.fen()!r} ({result[1]})"
            )
        self.board = board
        data = self._observe(board, START_SAN, 0.0, False)
        del data["reward"]
        return data

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        board = self.board if self.stateful else self._board_from(tensordict, required=True)
        action = tensordict.get("action")
        index = int(action.reshape(-1)[0]) if action.numel() == 1 else None
        if index is None or not 0 <= index < len(self._san_moves):
            raise ValueError(
                f"ChessEnv: expected 'action' to be one index in [0, {len(self._san_moves)}), "
                f"got {action.tolist()}"
            )
        san = self._san_moves[index]
        legal = self._legal(board)
        move = legal.get(san)
        if move is None:
            raise ValueError(
                f"ChessEnv: illegal move at key 'action': {san!r} (index {index}) is not legal "
                f"in {board.fen()!r}; legal moves: {sorted(legal)}"
            )
        board.push(move)
        self.board = board
        result = self._result(board)
        if result is None:
            return self._observe(board, san, 0.0, False)
        return self._observe(board, san, result[0], True)

    def _set_seed(self, seed: int | None) -> None:
        """Chess has no randomness of its own: random moves come from torch's generator."""

    def all_actions(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Every legal action of the current position (or of the one ``tensordict`` holds).

        Returns:
            a tensordict of batch size ``[number of legal moves]`` with an ``"action"`` entry.
        """
        if not self.mask_actions:
            raise RuntimeError(
                "Cannot generate legal actions: ChessEnv was built with mask_actions=False"
            )
        if tensordict is None or self.stateful:
            board = self.board
        else:
            board = self._board_from(tensordict, required=True)
        indices = sorted(self._san_index[san] for san in self._legal(board))
        actions = torch.tensor(indices, dtype=torch.int64, device=self.device)
        return TensorDict({"action": actions}, batch_size=[len(indices)], device=self.device)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(stateful={self.stateful}, fen={self.board.fen()!r}, "
            f"mask_actions={self.mask_actions})"
        )


def _make_from_id(env_id: str, **kwargs: Any) -> Any:
    """``ChessEnv`` for ``tdrl check-env --lib chess chess`` (the id is not used)."""
    return ChessEnv(include_fen=True, **kwargs)
