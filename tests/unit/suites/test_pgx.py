"""Pgx's games as rljax envs (rljax/suites/pgx.py): the turn-based contract on tic-tac-toe played by hand,
a single-player game, the ids, the refusals. Every id's contract: tests/unit/test_env.py runs rljax's own
games; a pgx game through training and matches: tests/integration/test_search_stack.py."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

pytest.importorskip("pgx")

import rljax  # noqa: E402
from rljax.env import CURRENT_PLAYER, LEGAL_ACTION_MASK  # noqa: E402
from rljax.policy import games  # noqa: E402
from rljax.suites import pgx as pgx_suite  # noqa: E402


def test_ids_are_pgx_games_without_its_minatar():
    ids = pgx_suite.ids()
    assert {"tic_tac_toe", "connect_four", "othello", "2048"} <= set(ids)
    assert not [i for i in ids if i.startswith("minatar")]


def test_tictactoe_pays_the_mover_and_both_players_by_hand():
    env, params = rljax.make("pgx/tic_tac_toe")
    obs, state = env.reset(jax.random.key(3), params)
    first = int(obs[CURRENT_PLAYER])
    for move, last in [(0, False), (3, False), (1, False), (4, False), (2, True)]:
        mover = int(obs[CURRENT_PLAYER])
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(0), state, move, params)
        assert bool(terminated) == last and not bool(truncated)
    assert mover == first and float(reward) == 1.0  # the first mover completed the top row
    rewards = np.asarray(info["rewards"])
    assert rewards[first] == 1.0 and rewards[1 - first] == -1.0
    space = env.observation_space(params)
    assert set(space) == {"observation", LEGAL_ACTION_MASK, CURRENT_PLAYER} and env.num_players == 2


def test_a_single_player_game_has_no_current_player():
    env, params = rljax.make("pgx/2048")
    obs, _ = env.reset(jax.random.key(0), params)
    assert set(obs) == {"observation", LEGAL_ACTION_MASK} and obs[LEGAL_ACTION_MASK].shape == (4,)


def test_an_integer_observation_gets_its_dtypes_range():
    # Backgammon counts checkers in int32: Box(-inf, inf) of an int dtype failed to build (an OverflowError).
    env, params = rljax.make("pgx/backgammon")
    board = env.observation_space(params)["observation"]
    assert board.dtype == np.int32 and int(board.low.min()) == np.iinfo(np.int32).min


@pytest.mark.slow  # by default the matches on rljax's own games (tests/unit/policy/test_games.py)
def test_matches_run_on_a_pgx_game_whose_first_mover_is_random():
    env, params = rljax.make("pgx/tic_tac_toe")
    out = games.match(env, params, games.random_player(), games.random_player(), 64)
    assert out["as_first"].wins > out["as_first"].losses and out["as_second"].wins < out["as_second"].losses


@pytest.mark.parametrize("kw, match", [
    (dict(env_id="tic_tac_toes"), r"unknown pgx environment 'tic_tac_toes'"),
    (dict(env_id="tic_tac_toe", max_steps=0), r"max_steps must be a positive int, got 0"),
])
def test_refusals(kw, match):
    with pytest.raises(ValueError, match=match):
        pgx_suite.make(**kw)


def _ids():
    try:
        return pgx_suite.ids()
    except ImportError:  # pragma: no cover - skipped above
        return []


# Every game's contract (tests/unit/test_env.py's checks: spaces, dtypes, auto-reset, the mover's reward): by default
# tic-tac-toe's; with --slow the games whose checks compile in under 5 s on a 2-core CPU (for the slow tier's time);
# the others (8-45 s each there, through the same adapter code: chess, shogi, go, 2048, ...) with RLJAX_ALL_PGX=1.
SLOW_GAMES = ("connect_four", "othello", "hex", "kuhn_poker", "leduc_holdem", "backgammon")


def _contract_params():
    every = os.environ.get("RLJAX_ALL_PGX") == "1"
    return [i if i == "tic_tac_toe" else
            pytest.param(i, marks=pytest.mark.slow) if i in SLOW_GAMES or every else
            pytest.param(i, marks=pytest.mark.skip(reason="compiles for 8-45 s on a 2-core CPU; RLJAX_ALL_PGX=1 "
                                                          "runs it")) for i in _ids()]


@pytest.mark.parametrize("env_id", _contract_params())
def test_contract(env_id):
    from tests.unit.test_env import _make_rollout

    env, params = rljax.make(f"pgx/{env_id}")
    checks, *_ = jax.jit(_make_rollout(env, params))(jax.random.key(0))
    failed = [k for k, v in checks.items() if not bool(v)]
    assert not failed, f"pgx/{env_id}: failed checks {failed}"
