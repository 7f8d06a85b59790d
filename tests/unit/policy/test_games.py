"""Matches (rljax/policy/games.py): outcomes of scripted games worked out by hand, seats, the time limit,
opponents by name and their refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from rljax.policy import games


def _lowest_legal(obs, legal_action_mask, key):
    return jnp.argmax(legal_action_mask).astype(jnp.int32)


def test_a_scripted_game_is_won_by_the_first_mover_whoever_plays_it():
    # Both take the lowest free cell: X 0, O 1, X 2, O 3, X 4, O 5, X 6 -> X wins on the diagonal 2-4-6.
    env, params = envs.make("TicTacToe-v0")
    lowest = games.opponent_player(_lowest_legal)
    out = games.match(env, params, lowest, lowest, 3)
    assert out["as_first"] == games.Outcomes(wins=3, draws=0, losses=0, unfinished=0)
    assert out["as_second"] == games.Outcomes(wins=0, draws=0, losses=3, unfinished=0)
    assert out["as_first"].as_dict() == {"wins": 3, "draws": 0, "losses": 0, "unfinished": 0, "games": 3}


def test_play_reports_margins_and_the_time_limit_cuts_games_into_unfinished_draws():
    env, params = envs.make("TicTacToe-v0")
    lowest = games.opponent_player(_lowest_legal)
    first = jnp.array([True, False])
    margin, finished = games.play(env, params, (lowest, lowest), first, 2, jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(margin), [2.0, -2.0])  # +1 - (-1) for the winner's side
    assert np.all(np.asarray(finished))
    short = params.replace(max_steps_in_episode=4)
    out = games.match(env, short, lowest, lowest, 2)
    assert all(o == games.Outcomes(0, 2, 0, 2) for o in out.values())


def test_game_episodes_score_each_game_for_the_player_as_play_does():
    from rljax.policy.evaluate import game_episodes

    env, params = envs.make("TicTacToe-v0")
    perfect, rand = games.opponent_player(env.perfect_player()), games.random_player()
    out = jax.jit(lambda k: game_episodes(env, params, perfect, k, 40, 9))(jax.random.key(0))
    returns, lengths = np.asarray(out.returns), np.asarray(out.lengths)
    assert set(np.unique(returns)) <= {0.0, 1.0} and returns.mean() > 0.5  # never loses to random, mostly wins
    assert np.all((lengths >= 5) & (lengths <= 9)) and not np.asarray(out.truncated).any()
    first = jnp.arange(40) < 20  # the first half moves first
    margin, finished = games.play(env, params, (perfect, rand), first, 40, jax.random.key(0))
    np.testing.assert_array_equal(np.sign(np.asarray(margin)), returns)
    cut = jax.jit(lambda k: game_episodes(env, params, rand, k, 6, 3, opponent=rand))(jax.random.key(1))
    assert np.all(np.asarray(cut.truncated)) and np.all(np.asarray(cut.returns) == 0.0)  # no game ends in 3 moves
    assert np.all(np.asarray(cut.lengths) == 3)


def test_random_plays_legal_moves_only():
    env, params = envs.make("ConnectFour-v0")
    state = env.reset(jax.random.key(0), params)[1]
    board = state.board.at[7:].set(0)  # every column but its top cell (row 0, cells 0-6) filled
    obs = env._obs(state.replace(board=board.at[jnp.array([0, 2, 4])].set(1)))  # top cells of columns 0, 2, 4 taken
    batch = jax.tree.map(lambda x: jnp.broadcast_to(x, (512,) + x.shape), obs)
    picks = np.asarray(games.random_player()(jax.random.key(1), None, batch))
    assert set(picks.tolist()) == {1, 3, 5, 6}


def test_a_single_player_env_is_not_a_game():
    env, params = envs.make("CartPole-v1")
    assert not games.is_game(env, params) and games.is_game(*envs.make("TicTacToe-v0"))
    with pytest.raises(ValueError, match="CartPole-v1 is not a two-player game"):
        games.match(env, params, games.random_player(), games.random_player(), 1)


def test_match_refuses_a_bad_number_of_games():
    with pytest.raises(ValueError, match="games_per_side must be a positive int, got 0"):
        games.match(*envs.make("TicTacToe-v0"), games.random_player(), games.random_player(), 0)


class _Policy:
    class config:
        env = "TicTacToe-v0"


@pytest.mark.parametrize("spec, match", [
    ("nobody", r"--opponent 'nobody': give 'random', a run directory \(none exists at nobody\) or "
               r"'package.module:Name'"),
    ("envs.board_games:no_such_player", r"opponent 'envs.board_games:no_such_player': envs.board_games .* has no "
                                        r"attribute 'no_such_player'"),
    ("envs.board_games:EMPTY", r"envs.board_games:EMPTY is a int, not a function"),
])
def test_opponents_by_name_are_resolved_or_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        games.resolve_opponent(spec, _Policy())


def test_a_named_opponent_is_a_function_of_one_observation():
    player, label = games.resolve_opponent("envs.board_games:tictactoe_perfect", _Policy())
    assert label == "envs.board_games:tictactoe_perfect"
    env, params = envs.make("TicTacToe-v0")
    out = games.match(env, params, player, games.random_player(), 20)
    assert all(o.losses == 0 for o in out.values())
    assert games.resolve_opponent("random", _Policy())[1] == "random"


def test_elo_ratings_by_hand():
    # 75 % against the anchor is 400 log10(3) = 190.85 points; a chain adds up; the prior keeps a clean sweep finite.
    np.testing.assert_allclose(games.elo_ratings(2, [(1, 0, 750, 1000)], prior_games=1e-9), [0, 400 * np.log10(3)],
                               rtol=1e-6)
    np.testing.assert_allclose(games.elo_ratings(3, [(1, 0, 750, 1000), (2, 1, 750, 1000)], prior_games=1e-9),
                               [0, 190.8485, 381.6970], rtol=1e-5)
    sweep = games.elo_ratings(2, [(1, 0, 10, 10)])  # 10 wins + one virtual draw: 10.5 of 11
    np.testing.assert_allclose(sweep[1], 400 * np.log10(10.5 / 0.5), rtol=1e-6)
    even = games.elo_ratings(3, [(1, 2, 5, 10)], anchor=0)
    np.testing.assert_allclose(even, [0, 0, 0], atol=1e-9)
    with pytest.raises(ValueError, match="score=11"):
        games.elo_ratings(2, [(1, 0, 11, 10)])
    with pytest.raises(ValueError, match="prior_games must be > 0"):
        games.elo_ratings(2, [], prior_games=0)
