"""Pgx (Koyamada et al. 2023), board games in JAX, as rljax environments: ``pgx/<id>``.

Needs the ``games`` extra (``pip install -e ".[games]"``). Ids are Pgx's own names
(``tic_tac_toe``, ``connect_four``, ``othello``, ``go_9x9``, ``hex``, ``chess``, ``2048``, ...;
:func:`ids` lists the installed version's, without its MinAtar games, which rljax has as
``<Game>-MinAtar``). Every id is a game in rljax's turn-based contract (``docs/env_api.md``,
"Turn-based games"): the observation is a dict,

* ``observation``: Pgx's observation of the player to move (bool or float32 planes);
* ``legal_action_mask``: Pgx's ``legal_action_mask``, bool ``[num_actions]``;
* ``current_player``: Pgx's ``current_player`` (int32; games of two or more players only),

the reward is the mover's (``rewards[current_player]`` of the step's Pgx state) and
``info["rewards"]`` is Pgx's ``rewards`` (float32 ``[num_players]``). Pgx picks who moves first at
random in its two-player games, so player 0 is not always the first mover.

Terminated vs truncated: a Pgx game that ends by its own rules is ``terminated``, and so is one that
Pgx cuts at its move limit (its ``truncated``: a rule of the game, scored as Pgx scores it, usually a
draw). rljax's time limit (``max_steps_in_episode``, 1000 by default) is ``truncated``.

>>> import rljax
>>> env, params = rljax.make("pgx/connect_four")
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.env import CURRENT_PLAYER, LEGAL_ACTION_MASK, Box, Discrete
from rljax.suites._adapter import SuiteEnv, SuiteParams, SuiteState, check_id, require

__all__ = ["MAX_STEPS", "PgxEnv", "ids", "make"]

MAX_STEPS = 1000
"""rljax's time limit on a Pgx game unless ``max_steps`` says otherwise."""


def _pgx() -> Any:
    return require("pgx", "games")


class PgxEnv(SuiteEnv):
    """One Pgx game (see the module docstring).

    Args:
        env_id: a Pgx id (:func:`ids`).
        max_steps: rljax's time limit (``params.max_steps_in_episode``); None: :data:`MAX_STEPS`.
    """

    def __init__(self, env_id: str, max_steps: int | None = None):
        pgx = _pgx()
        check_id("pgx", env_id, ids())
        game = pgx.make(env_id)
        limit = MAX_STEPS if max_steps is None else max_steps
        if not isinstance(limit, (int, np.integer)) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"pgx/{env_id}: max_steps must be a positive int, got {max_steps!r}")
        self._game = game
        self.num_players = int(game.num_players)
        spec = jax.eval_shape(game.init, jax.random.key(0)).observation
        if spec.dtype == jnp.bool_:
            board = Box(False, True, tuple(spec.shape), jnp.bool_)
        elif jnp.issubdtype(spec.dtype, jnp.integer):  # backgammon's counts of checkers
            info = jnp.iinfo(spec.dtype)
            board = Box(int(info.min), int(info.max), tuple(spec.shape), spec.dtype)
        else:
            board = Box(-np.inf, np.inf, tuple(spec.shape), spec.dtype)
        space = {"observation": board, LEGAL_ACTION_MASK: Box(False, True, (int(game.num_actions),), jnp.bool_)}
        if self.num_players > 1:
            space[CURRENT_PLAYER] = Discrete(self.num_players)
        super().__init__(f"pgx/{env_id}", space, Discrete(int(game.num_actions)),
                         SuiteParams(max_steps_in_episode=int(limit)), stochastic_transitions=True)

    def _game_obs(self, state: Any) -> dict[str, jax.Array]:
        obs = {"observation": state.observation, LEGAL_ACTION_MASK: state.legal_action_mask.astype(jnp.bool_)}
        if self.num_players > 1:
            obs[CURRENT_PLAYER] = jnp.asarray(state.current_player, jnp.int32)
        return obs

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[dict[str, jax.Array], SuiteState]:
        inner = self._game.init(key)
        return self._game_obs(inner), SuiteState(time=jnp.int32(0), inner=inner)

    def step_env(self, key: jax.Array, state: SuiteState, action: Any, params: SuiteParams
                 ) -> tuple[dict[str, jax.Array], SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        mover = jnp.asarray(state.inner.current_player, jnp.int32) if self.num_players > 1 else 0
        inner = self._game.step(state.inner, jnp.asarray(action, jnp.int32), key)
        rewards = jnp.asarray(inner.rewards, jnp.float32)
        return (self._game_obs(inner), SuiteState(time=state.time + 1, inner=inner), rewards[mover],
                jnp.asarray(inner.terminated | inner.truncated, jnp.bool_), {"rewards": rewards})


def ids() -> list[str]:
    """Pgx's game ids in the installed version, without its MinAtar games."""
    return [i for i in _pgx().available_envs() if not i.startswith("minatar")]


def make(env_id: str, max_steps: int | None = None) -> tuple[PgxEnv, SuiteParams]:
    """``(env, params)`` of Pgx's ``env_id`` (see :class:`PgxEnv`)."""
    env = PgxEnv(env_id, max_steps=max_steps)
    return env, env.default_params
