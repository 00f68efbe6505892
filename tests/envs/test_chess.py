"""ChessEnv on real python-chess boards."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import SyncDataCollector
from tdrl.envs import ActionMask, ChessEnv, SerialEnv, TransformedEnv, check_env_specs
from tdrl.envs.custom._chess_support import all_san_moves, board_to_pgn, pgn_to_board
from tests.envs.conformance import EnvConformance

chess = pytest.importorskip("chess")

START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"


class TestChessStatefulConformance(EnvConformance):
    contiguous = False  # string entries

    def make_env(self):
        return ChessEnv(include_fen=True, include_san=True)


class TestChessStatelessConformance(EnvConformance):
    contiguous = False

    def make_env(self):
        return ChessEnv(stateful=False, include_pgn=True, include_legal_moves=True)


def test_mask_and_hash_options_wrap_the_env():
    plain = ChessEnv(mask_actions=False, include_fen=True)
    assert not isinstance(plain, TransformedEnv) and "action_mask" not in plain.observation_spec
    masked = ChessEnv()
    assert isinstance(masked, TransformedEnv) and isinstance(masked.base_env, ChessEnv)
    hashed = ChessEnv(include_fen=True, include_pgn=True, include_san=True, include_hash=True)
    for key in ("fen_hash", "pgn_hash", "san_hash"):
        assert hashed.observation_spec[key].shape == (32,)
    check_env_specs(hashed)


def test_stateless_needs_a_state_representation():
    with pytest.raises(RuntimeError, match="At least one state representation"):
        ChessEnv(stateful=False)


def test_san_list_covers_the_legal_moves_of_random_games():
    moves = set(all_san_moves())
    assert {"O-O", "O-O-O#", "exd8=N+", "Qh4e1", "N1c3", "e4"} <= moves
    generator = torch.Generator().manual_seed(0)
    board = chess.Board()
    for _ in range(300):
        legal = list(board.legal_moves)
        assert {board.san(move) for move in legal} <= moves
        board.push(legal[int(torch.randint(len(legal), (), generator=generator))])
        if board.is_game_over():
            board = chess.Board()


def test_pgn_round_trips_with_and_without_a_start_position():
    board = chess.Board()
    pgn = ChessEnv._PGN_RESTART
    for san in ("e4", "e5", "Nf3"):
        board.push_san(san)
        following = ChessEnv._add_move_to_pgn(pgn, board.peek())
        assert following == board_to_pgn(board) != pgn
        pgn = following
    assert pgn_to_board(pgn).fen() == board.fen()
    custom = chess.Board("5k2/4r3/8/8/8/1Q6/2K5/8 b - - 0 1")
    custom.push_san("Ke8")
    assert pgn_to_board(board_to_pgn(custom)).fen() == custom.fen()
    with pytest.raises(ValueError, match="pgn"):
        pgn_to_board("1. e4 Ke3 *")


@pytest.mark.parametrize("stateful", [True, False])
def test_rollout_plays_legal_moves_and_tracks_the_board(stateful):
    env = ChessEnv(stateful=stateful, include_fen=True, include_pgn=True, include_san=True)
    data = env.rollout(60, break_when_any_done=False)
    assert data.shape == (60,)
    board = chess.Board()
    for step in range(60):
        assert data["fen"][step] == board.fen()
        assert bool(data["turn"][step]) == board.turn
        board.push_san(data["next", "san"][step])
        assert data["next", "fen"][step] == board.fen()
    assert pgn_to_board(data["next", "pgn"][-1]).fen() == board.fen()
    assert env.board.fen() == board.fen()


@pytest.mark.parametrize("stateful", [True, False])
def test_replaying_the_san_entries_reproduces_the_rollout(stateful):
    env = ChessEnv(stateful=stateful, include_fen=True, include_san=True)
    first = env.rollout(40, break_when_any_done=False)
    actions = iter([env.san_moves.index(san) for san in first["next", "san"]])

    def policy(td):
        return td.set("action", torch.tensor(next(actions)))

    second = env.rollout(40, policy=policy, break_when_any_done=False)
    assert torch.equal(first["action"], second["action"])
    assert first["next", "fen"] == second["next", "fen"]


@pytest.mark.parametrize(
    ("fen", "move", "reward"),
    [
        ("5k2/2R5/8/8/8/1R6/2K5/8 w - - 0 1", "Rb8#", 1.0),  # white mates
        ("5k2/6r1/8/8/8/8/7r/1K6 b - - 0 1", "Rg1#", 1.0),  # black mates
        ("5k2/6r1/8/8/8/8/7r/K7 b - - 0 1", "Rb7", 0.5),  # stalemate
        ("5k2/8/8/8/3r4/2K5/8/8 w - - 0 1", "Kxd4", 0.5),  # insufficient material
        ("5k2/8/1R6/8/6r1/2K5/8/8 b - - 99 123", "Kf7", 0.5),  # fifty moves
    ],
)
@pytest.mark.parametrize("stateful", [True, False])
def test_terminal_rewards_go_to_the_side_that_moved(fen, move, reward, stateful):
    env = ChessEnv(stateful=stateful, include_fen=True)
    td = env.reset(TensorDict({"fen": fen}))
    mover = td["turn"].item()
    td["action"] = env.san_moves.index(move)
    out = env.step(td)["next"]
    assert out["done"].item() and out["terminated"].item()
    assert out["reward"].item() == reward
    assert out["turn"].item() == (not mover)


def test_a_stateless_step_reads_the_board_from_the_input_alone():
    env = ChessEnv(stateful=False, include_fen=True)
    td = TensorDict({"fen": "5k2/2R5/8/8/8/1R6/2K5/8 w - - 0 1"})
    td["action"] = env.san_moves.index("Rb8#")
    out = env.step(td)["next"]
    assert out["reward"].item() == 1.0 and out["done"].item()


def test_reset_positions_and_their_errors():
    env = ChessEnv(include_fen=True)
    td = env.reset(TensorDict({"fen": "5k2/4r3/8/8/8/1Q6/2K5/8 b - - 0 1"}))
    assert td["turn"].item() is False and env.board.turn == chess.BLACK
    assert not td["done"].item()
    assert env.reset()["fen"] == START
    with pytest.raises(ValueError, match="Cannot reset to a fen that is a gameover state"):
        env.reset(TensorDict({"fen": "1R3k2/2R5/8/8/8/8/2K5/8 b - - 0 1"}))
    with pytest.raises(ValueError, match="not a valid FEN"):
        env.reset(TensorDict({"fen": "not a fen"}))


def test_illegal_and_out_of_range_actions_are_rejected():
    env = ChessEnv(mask_actions=False, include_fen=True)
    td = env.reset()
    td["action"] = env.san_moves.index("e5")  # a black move while white is to move
    with pytest.raises(ValueError, match=r"illegal move at key 'action': 'e5'.*legal moves"):
        env.step(td)
    td["action"] = len(env.san_moves)
    with pytest.raises(ValueError, match="expected 'action' to be one index"):
        env.step(td)
    stateless = ChessEnv(stateful=False, include_fen=True, mask_actions=False)
    with pytest.raises(KeyError, match="expected a 'pgn' or 'fen' entry"):
        stateless.step(TensorDict({"action": torch.tensor(0)}))


@pytest.mark.parametrize("stateful", [True, False])
def test_masked_random_actions_are_the_legal_moves(stateful):
    env = ChessEnv(stateful=stateful, include_fen=True, include_legal_moves=True)
    td = env.reset()
    for _ in range(20):
        legal = env.all_actions(td if not stateful else None)["action"]
        assert td["action_mask"].sum() == legal.numel()
        assert torch.equal(td["legal_moves"][: legal.numel()], legal)
        assert (td["legal_moves"][legal.numel() :] == -1).all()
        td = env.rand_action(td)
        assert (legal == td["action"]).sum() == 1
        td = env.step(td)["next"]
        if td["done"].item():
            td = env.reset()
    with pytest.raises(RuntimeError, match="Cannot generate legal actions"):
        ChessEnv(mask_actions=False, include_fen=True).all_actions()


@pytest.mark.parametrize("stateful", [True, False])
def test_hash_entries_stand_for_the_state(stateful):
    env = ChessEnv(
        stateful=stateful,
        include_fen=True,
        include_pgn=True,
        include_hash=True,
        include_hash_inv=True,
    )
    assert set(env.state_spec.keys()) == {"fen_hash", "pgn_hash"}
    check_env_specs(env)
    td = env.reset()
    for _ in range(6):
        stepped = env.rand_step(td.exclude("fen", "pgn"))
        assert "fen" not in stepped.keys() and "pgn" not in stepped.keys()
        reference = ChessEnv(stateful=False, include_fen=True, mask_actions=False)
        check = reference.step(TensorDict({"fen": td["fen"], "action": stepped["action"]}))
        assert check["next", "fen"] == stepped["next", "fen"]
        td = stepped["next"]
    loaded = env.reset(td.select("fen_hash"))
    assert loaded["fen"] == td["fen"]


def test_pixels_show_the_board():
    env = ChessEnv(include_fen=True, pixels=True)
    check_env_specs(env)
    data = env.rollout(2)
    pixels = data["next", "pixels"]
    assert pixels.shape == (2, 256, 256, 3) and pixels.dtype == torch.uint8
    assert not torch.equal(data["pixels"][0], pixels[0])  # a piece moved


def test_serial_env_and_collector():
    # the mask of a batched env is kept by an ActionMask around the batched env
    env = TransformedEnv(SerialEnv(2, lambda: ChessEnv(include_fen=True)), ActionMask())
    check_env_specs(env)
    data = env.rollout(5, break_when_any_done=False)
    assert data.shape == (2, 5)
    assert data["next", "fen"][0][0] != START
    collector = SyncDataCollector(ChessEnv(include_fen=True), frames_per_batch=6, total_frames=12)
    batches = list(collector)
    collector.shutdown()
    assert [batch.numel() for batch in batches] == [6, 6]


def test_a_bare_env_pickles_without_being_wrapped():
    env = ChessEnv(mask_actions=False, include_fen=True)
    env.reset()
    clone = pickle.loads(pickle.dumps(env))
    assert type(clone) is ChessEnv and clone.board.fen() == START
