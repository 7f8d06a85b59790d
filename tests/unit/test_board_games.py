"""The two-player board games (envs/board_games.py) and the turn-based contract's helpers, by hand.

Each game is played move by move from known positions: who wins, when, what each player is paid,
that an illegal move loses, that pieces drop to the lowest empty row, that the observation is seen
from the mover's side. The look-ahead players are checked on positions with one right answer, and
the perfect tic-tac-toe player against the facts of the game (it never loses; two of them always
draw).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.board_games import EMPTY, winning_lines
from rljax.env import CURRENT_PLAYER, LEGAL_ACTION_MASK, current_player, turn_sign
from rljax.policy import games


def _play(name, moves):
    env, params = envs.make(name)
    obs, state = env.reset(jax.random.key(0), params)
    steps = []
    for move in moves:
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(1), state, move, params)
        steps.append((float(reward), bool(terminated), np.asarray(info["rewards"]).tolist(), obs, info))
    return steps


def test_winning_lines_count_every_line_once():
    assert winning_lines(3, 3, 3).shape == (8, 3)
    assert winning_lines(6, 7, 4).shape == (69, 4)  # 24 across, 21 down, 12 + 12 diagonals
    assert len({tuple(sorted(line)) for line in winning_lines(6, 7, 4).tolist()}) == 69


def test_tictactoe_a_row_wins_for_the_mover_and_pays_both_players():
    # X: 0, 1, 2 (top row); O: 3, 4.
    steps = _play("TicTacToe-v0", [0, 3, 1, 4, 2])
    assert [s[:2] for s in steps] == [(0.0, False)] * 4 + [(1.0, True)]
    assert steps[-1][2] == [1.0, -1.0]
    assert all(s[2] == [0.0, 0.0] for s in steps[:-1])


def test_tictactoe_second_player_wins_and_the_observation_is_the_movers():
    # X: 0, 1, 8; O: 3, 4, 5 (middle row) wins on the sixth move.
    steps = _play("TicTacToe-v0", [0, 3, 1, 4, 8, 5])
    assert steps[-1][:3] == (1.0, True, [-1.0, 1.0])
    obs = steps[0][3]  # after X took cell 0, O moves: O's side sees X's piece as the opponent's
    assert int(obs[CURRENT_PLAYER]) == 1
    np.testing.assert_array_equal(np.asarray(obs["observation"])[0, 0], [0.0, 1.0])
    assert not bool(obs[LEGAL_ACTION_MASK][0]) and int(np.sum(obs[LEGAL_ACTION_MASK])) == 8


def test_tictactoe_full_board_without_a_line_is_a_draw():
    steps = _play("TicTacToe-v0", [0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert [s[1] for s in steps] == [False] * 8 + [True]
    assert steps[-1][0] == 0.0 and steps[-1][2] == [0.0, 0.0]


def test_an_illegal_move_loses_on_the_spot():
    steps = _play("TicTacToe-v0", [4, 4])  # O plays X's cell
    assert steps[-1][:3] == (-1.0, True, [1.0, -1.0])


def test_connect_four_pieces_drop_and_four_down_wins():
    steps = _play("ConnectFour-v0", [3, 4, 3, 4, 3, 4, 3])
    assert [s[1] for s in steps] == [False] * 6 + [True]
    assert steps[-1][:3] == (1.0, True, [1.0, -1.0])
    planes = np.asarray(steps[0][3]["observation"])  # O's side after X's first piece: bottom row, column 3
    assert planes.shape == (6, 7, 2) and planes[5, 3, 1] == 1.0 and planes.sum() == 1.0


def test_connect_four_full_column_is_illegal():
    steps = _play("ConnectFour-v0", [0, 0, 0, 0, 0, 0])
    mask = np.asarray(steps[-1][3][LEGAL_ACTION_MASK])
    assert mask.tolist() == [False] + [True] * 6


def test_connect_four_diagonal_wins():
    # X builds the diagonal (5,0) (4,1) (3,2) (2,3); O's moves fill the columns under it.
    steps = _play("ConnectFour-v0", [0, 1, 1, 2, 2, 3, 2, 3, 3, 6, 3])
    assert steps[-1][:2] == (1.0, True) and not any(s[1] for s in steps[:-1])


def test_state_of_rebuilds_the_board_from_an_observation():
    env, params = envs.make("ConnectFour-v0")
    obs, state = env.reset(jax.random.key(0), params)
    for move in [3, 3, 4, 0]:
        obs, state, *_ = env.step(jax.random.key(0), state, move, params)
    rebuilt = env.state_of(obs)
    np.testing.assert_array_equal(np.asarray(rebuilt.board), np.asarray(state.board))
    assert int(rebuilt.player) == int(state.player) and int(rebuilt.time) == 4


def _obs_of(env, moves):
    params = env.default_params
    obs, state = env.reset(jax.random.key(0), params)
    for move in moves:
        obs, state, *_ = env.step(jax.random.key(0), state, move, params)
    return obs


@functools.cache
def _minimax(depth):
    """One compiled connect-four minimax player per depth, its 8 or 32 draws in one call."""
    env, _ = envs.make("ConnectFour-v0")
    player = env.minimax_player(depth)
    return jax.jit(lambda obs, keys: jax.vmap(lambda k: player(obs, obs[LEGAL_ACTION_MASK], k))(keys))


def _choices(depth, moves, n):
    env, _ = envs.make("ConnectFour-v0")
    keys = jax.random.split(jax.random.key(0), n)
    return set(np.asarray(_minimax(depth)(_obs_of(env, moves), keys)).tolist())


@pytest.mark.parametrize("depth", [1, 2])
def test_minimax_takes_a_win_in_one(depth):
    assert _choices(depth, [3, 4, 3, 4, 3, 4], 32) == {3}  # X to move: column 3 wins


def test_minimax_depth_two_blocks_and_depth_one_does_not_see_it():
    moves = [3, 4, 3, 4, 0, 4]  # O threatens column 4; X has no win in one
    assert _choices(2, moves, 32) == {4}
    assert len(_choices(1, moves, 32)) > 1  # every move scores 0 one ply deep: a uniform choice


def test_minimax_rejects_a_bad_depth():
    env, _ = envs.make("TicTacToe-v0")
    with pytest.raises(ValueError, match="depth=0"):
        env.minimax_player(0)


def test_the_perfect_player_never_loses_and_two_of_them_always_draw():
    env, params = envs.make("TicTacToe-v0")
    perfect = games.opponent_player(env.perfect_player())
    against_random = games.match(env, params, perfect, games.random_player(), 200)
    assert all(o.losses == 0 for o in against_random.values())
    assert against_random["as_first"].wins >= 180  # random loses most games it starts second
    both = games.match(env, params, perfect, perfect, 50)
    assert all(o.draws == 50 for o in both.values())


def test_the_perfect_player_blocks_and_wins():
    env, _ = envs.make("TicTacToe-v0")
    player = jax.jit(env.perfect_player())
    win = _obs_of(env, [0, 3, 1, 4])  # X to move: 2 wins
    assert {int(player(win, win[LEGAL_ACTION_MASK], jax.random.key(k))) for k in range(8)} == {2}
    block = _obs_of(env, [0, 4, 1])  # O to move: must block at 2
    assert {int(player(block, block[LEGAL_ACTION_MASK], jax.random.key(k))) for k in range(8)} == {2}
    # The same table on the host: the moves that keep the value. Every opening draws; after X's edge,
    # O's centre and X's far corner, O keeps the draw with 0, 2, 3 or 5 only (6 and 7 let X fork).
    assert np.flatnonzero(env.optimal_moves(win)).tolist() == [2]
    assert np.flatnonzero(env.optimal_moves(block)).tolist() == [2]
    assert env.optimal_moves(_obs_of(env, [])).all()
    assert np.flatnonzero(env.optimal_moves(_obs_of(env, [1, 4, 8]))).tolist() == [0, 2, 3, 5]


def test_turn_sign_and_current_player():
    a = {CURRENT_PLAYER: jnp.array([0, 1, 1])}
    b = {CURRENT_PLAYER: jnp.array([1, 1, 0])}
    np.testing.assert_array_equal(np.asarray(turn_sign(a, b)), [-1.0, 1.0, -1.0])
    assert turn_sign(jnp.zeros(3), jnp.zeros(3)) == 1.0
    assert current_player(jnp.zeros(3)) is None and current_player(a).dtype == jnp.int32


def test_board_state_uses_empty_marker():
    env, params = envs.make("TicTacToe-v0")
    _, state = env.reset(jax.random.key(0), params)
    assert np.all(np.asarray(state.board) == EMPTY)


def test_the_module_level_opponents_can_be_traced_by_several_programs():
    # They build their player once and keep it: a constant made while the first program traced it would be
    # that program's tracer, leaked into the next (an UnexpectedTracerError).
    from envs.board_games import connect_four_minimax2, tictactoe_perfect

    for fn, name in ((tictactoe_perfect, "TicTacToe-v0"), (connect_four_minimax2, "ConnectFour-v0")):
        env, params = envs.make(name)
        obs, _ = env.reset(jax.random.key(0), params)
        first = jax.jit(lambda o, k: fn(o, o[LEGAL_ACTION_MASK], k))(obs, jax.random.key(0))
        again = jax.jit(lambda o, k: fn(o, o[LEGAL_ACTION_MASK], k) + 0)(obs, jax.random.key(0))
        assert int(first) == int(again)
