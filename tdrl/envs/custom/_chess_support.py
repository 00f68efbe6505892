"""Helpers of ChessEnv: the SAN action list, PGN <-> board conversion and board images."""

from __future__ import annotations

import functools
import io
from typing import Any

import numpy as np

__all__ = ["BOARD_PIXELS", "all_san_moves", "board_to_pgn", "pgn_to_board", "render_board"]

_FILES = "abcdefgh"
_RANKS = "12345678"
_SQUARES = [(file, rank) for rank in range(8) for file in range(8)]
_KNIGHT = {(1, 2), (2, 1), (-1, 2), (-2, 1), (1, -2), (2, -1), (-1, -2), (-2, -1)}
SQUARE_PIXELS = 32
BOARD_PIXELS = 8 * SQUARE_PIXELS
_LIGHT, _DARK = (240, 217, 181), (181, 136, 99)


def _name(square: tuple[int, int]) -> str:
    return _FILES[square[0]] + _RANKS[square[1]]


def _reaches(piece: str, origin: tuple[int, int], target: tuple[int, int]) -> bool:
    """Whether ``piece`` moves from ``origin`` to ``target`` on an empty board."""
    dx, dy = target[0] - origin[0], target[1] - origin[1]
    if (dx, dy) == (0, 0):
        return False
    straight = dx == 0 or dy == 0
    diagonal = abs(dx) == abs(dy)
    return {
        "Q": straight or diagonal,
        "R": straight,
        "B": diagonal,
        "N": (dx, dy) in _KNIGHT,
        "K": max(abs(dx), abs(dy)) == 1,
    }[piece]


@functools.cache
def all_san_moves() -> tuple[str, ...]:
    """Every SAN string a legal chess move can have, sorted (check marks included).

    Piece moves carry the disambiguations SAN can need: the origin's file when another
    square reaches the target, its rank when another square on the same file does, the whole
    square when others on both its file and its rank do (on an empty board); pawn moves cover pushes, captures and promotions; each move
    appears plain, with ``+`` and with ``#``.
    """
    bases = {"O-O", "O-O-O"}
    for target in _SQUARES:
        to = _name(target)
        for piece in "QRBNK":
            origins = [origin for origin in _SQUARES if _reaches(piece, origin, target)]
            prefixes = {""}
            if piece != "K":
                for origin in origins:
                    name = _name(origin)
                    same_file = any(o != origin and o[0] == origin[0] for o in origins)
                    same_rank = any(o != origin and o[1] == origin[1] for o in origins)
                    if len(origins) > 1:
                        prefixes.add(name[0])  # another piece may reach the target
                    if same_file:
                        prefixes.add(name[1])  # the file does not tell them apart
                    if same_file and same_rank:
                        prefixes.add(name)  # neither the file nor the rank does
            for prefix in prefixes:
                bases.add(f"{piece}{prefix}{to}")
                bases.add(f"{piece}{prefix}x{to}")
        sources = [_FILES[f] for f in (target[0] - 1, target[0] + 1) if 0 <= f < 8]
        if target[1] in (0, 7):
            for promoted in "QRBN":
                bases.add(f"{to}={promoted}")
                bases.update(f"{source}x{to}={promoted}" for source in sources)
        else:
            bases.add(to)
            bases.update(f"{source}x{to}" for source in sources)
    return tuple(sorted(base + suffix for base in bases for suffix in ("", "+", "#")))


def pgn_to_board(pgn: str) -> Any:
    """The board at the end of the main line of a PGN game."""
    import chess.pgn

    game = chess.pgn.read_game(io.StringIO(pgn))
    if game is None:
        raise ValueError(f"pgn: expected a PGN game, got {pgn[:60]!r}")
    if game.errors:
        raise ValueError(f"pgn: the game does not parse ({game.errors[0]}): {pgn[:60]!r}")
    return game.end().board()


def board_to_pgn(board: Any) -> str:
    """The PGN of the moves played on ``board`` (with a FEN header when not from the start)."""
    import chess.pgn

    game = chess.pgn.Game.from_board(board)
    for tag in list(game.headers):
        if tag not in ("FEN", "SetUp"):
            del game.headers[tag]
    exporter = chess.pgn.StringExporter(headers=True, variations=False, comments=False)
    return game.accept(exporter)


@functools.cache
def _font() -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=int(SQUARE_PIXELS * 0.7))


def render_board(board: Any) -> np.ndarray:
    """A ``(256, 256, 3)`` uint8 image of ``board``, white at the bottom.

    Squares are light and dark; pieces are their letters (K, Q, R, B, N, P), white ones
    drawn white with a black outline and black ones drawn black with a white outline.
    """
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (BOARD_PIXELS, BOARD_PIXELS))
    draw = ImageDraw.Draw(image)
    font = _font()
    for index in range(64):
        file, rank = index % 8, index // 8
        left, top = file * SQUARE_PIXELS, (7 - rank) * SQUARE_PIXELS
        color = _LIGHT if (file + rank) % 2 else _DARK
        draw.rectangle((left, top, left + SQUARE_PIXELS - 1, top + SQUARE_PIXELS - 1), fill=color)
        piece = board.piece_at(index)
        if piece is None:
            continue
        white = piece.color
        draw.text(
            (left + SQUARE_PIXELS / 2, top + SQUARE_PIXELS / 2),
            piece.symbol().upper(),
            fill=(255, 255, 255) if white else (0, 0, 0),
            stroke_width=1,
            stroke_fill=(0, 0, 0) if white else (255, 255, 255),
            font=font,
            anchor="mm",
        )
    return np.asarray(image, dtype=np.uint8)
