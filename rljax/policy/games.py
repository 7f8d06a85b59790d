"""Matches in two-player games: a player's wins, draws and losses as the first and as the second mover.

A **player** is ``player(key, env_states, obs) -> actions``: a batch of ``B`` games' env states
(leaves ``[B, ...]``, what ``env.step_env`` steps) and observations ``[B, ...]`` to int32 actions
``[B]``. Players come from

* an opponent function ``(obs, legal_action_mask, key) -> action`` on one observation
  (:func:`opponent_player`; :func:`random_player` is the uniform one over the legal moves, and the
  bundled games have :meth:`envs.board_games.LineGame.minimax_player` and
  :meth:`envs.board_games.TicTacToe.perfect_player`);
* a trained policy (:func:`policy_player`: its network, greedy or sampled; for a policy that plans
  with a search over the env, such as AlphaZero's, :func:`search_player`).

:func:`play` runs ``B`` games to their end in one compiled loop (``env.step_env``, no auto-reset;
finished games stay frozen), and :func:`match` plays a player against an opponent ``n`` times as
each side. The outcome of a game is decided by the players' summed rewards (``info["rewards"]``,
:data:`rljax.env.CURRENT_PLAYER`'s contract): more than the other's is a win. A game the time limit
cuts before it ends is a draw (and counted as ``unfinished``).

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.agents`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.env import CURRENT_PLAYER, current_player, legal_action_mask, uniform_legal_action

__all__ = ["Player", "Outcomes", "opponent_player", "random_player", "policy_player", "search_player", "play",
           "play_games", "match", "is_game", "game_observation", "player_of", "resolve_opponent", "elo_ratings",
           "ELO_SCALE"]

ELO_SCALE = 400.0
"""Elo points per factor of 10 in the odds: a player rated ``d`` points above another is expected to
score ``1 / (1 + 10 ** (-d / 400))`` against it."""

Player = Callable[[jax.Array, Any, Any], jax.Array]
"""``player(key, env_states[B], obs[B]) -> actions[B]`` (int32)."""


class Outcomes(NamedTuple):
    """How a batch of games ended, for one player: counts (Python ints) that add up to ``games``.

    Attributes:
        wins: games where the player's summed reward beat the opponent's.
        draws: games where they were equal, including games the time limit cut (``unfinished``).
        losses: games where the opponent's was higher.
        unfinished: games still running at the time limit (counted as draws).
    """

    wins: int
    draws: int
    losses: int
    unfinished: int

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    def as_dict(self) -> dict[str, int]:
        """``{"wins", "draws", "losses", "unfinished", "games"}``, for reports."""
        return {**self._asdict(), "games": self.games}


def is_game(env: Any, env_params: Any) -> bool:
    """Whether ``env`` is a two-player game: its observation has a :data:`~rljax.env.CURRENT_PLAYER`
    leaf (and ``env.num_players``, where it says, is 2). Nothing is compiled."""
    obs = jax.eval_shape(lambda key: env.reset(key, env_params)[0], jax.random.key(0))
    return game_observation(obs) and getattr(env, "num_players", 2) == 2


def game_observation(obs: Any) -> bool:
    """Whether an observation (or its shapes) is a turn-based game's: a dict with a
    :data:`~rljax.env.CURRENT_PLAYER` leaf."""
    return isinstance(obs, dict) and CURRENT_PLAYER in obs


def _require_game(env: Any, env_params: Any) -> None:
    if not is_game(env, env_params):
        raise ValueError(f"{getattr(env, 'name', type(env).__name__)} is not a two-player game: matches need an "
                         f"observation with a {CURRENT_PLAYER!r} leaf (docs/env_api.md, 'Turn-based games') and "
                         f"two players")


def opponent_player(opponent: Callable[[Any, jax.Array, jax.Array], jax.Array]) -> Player:
    """A :data:`Player` from ``opponent(obs, legal_action_mask, key) -> action`` on one observation
    (vmapped over the batch; each game draws its own key)."""
    def player(key: jax.Array, env_states: Any, obs: Any) -> jax.Array:
        legal = legal_action_mask(obs)
        keys = jax.random.split(key, legal.shape[0])
        return jax.vmap(opponent)(obs, legal, keys).astype(jnp.int32)
    return player


def _uniform_legal(obs: Any, legal_action_mask: jax.Array, key: jax.Array) -> jax.Array:
    return uniform_legal_action(key, legal_action_mask)


def random_player() -> Player:
    """A :data:`Player` that plays uniformly at random among the legal moves."""
    return opponent_player(_uniform_legal)


def policy_player(policy: Any, deterministic: bool = True) -> Player:
    """A :data:`Player` from a trained :class:`~rljax.policy.trained.Policy` of a memoryless
    algorithm: its network's action (greedy when ``deterministic``, else sampled as it explored)."""
    if policy.recurrent:
        raise ValueError("policy_player: a recurrent policy cannot play matches yet (its memory would need one "
                         "game's history per seat); train without --memory")

    def player(key: jax.Array, env_states: Any, obs: Any) -> jax.Array:
        return policy.agent.policy(policy.params, obs, key, deterministic).astype(jnp.int32)
    return player


def search_player(policy: Any, env: Any, env_params: Any, gumbel_scale: float = 0.0,
                  num_simulations: int | None = None) -> Player:
    """A :data:`Player` that plans with the search of an AlphaZero or MuZero
    :class:`~rljax.policy.trained.Policy` and plays its choice: AlphaZero's over ``env``'s dynamics
    (:func:`rljax.agents.alphazero.search_policy`), MuZero's over its learned model
    (:func:`rljax.agents.muzero.muzero_search`). With ``gumbel_scale`` 0 (the default) the best action
    the search found, deterministic up to the search's own ties. ``num_simulations``: the search's
    size (None: the run's)."""
    import dataclasses

    from rljax.agents.alphazero import SearchConfig, search_policy
    from rljax.agents.muzero import MuZeroConfig, muzero_network, muzero_search
    from rljax.agents.onpolicy import actor_critic_network

    config = policy.config
    if not isinstance(config, SearchConfig):
        raise ValueError(f"search_player: the policy was trained by {type(config).__name__}, which has no search; "
                         f"use policy_player")
    config = dataclasses.replace(config, gumbel_scale=float(gumbel_scale), dirichlet_fraction=0.0,
                                 num_simulations=config.num_simulations if num_simulations is None else
                                 int(num_simulations))
    hyperparams = config.hyperparams()
    if isinstance(config, MuZeroConfig):
        learned = muzero_search(muzero_network(config, env, env_params), config)

        def player(key: jax.Array, env_states: Any, obs: Any) -> jax.Array:
            return learned(policy.params.params, key, obs, hyperparams).action.astype(jnp.int32)
        return player
    network = actor_critic_network(config, env, env_params, "AlphaZero")
    search = search_policy(env, env_params, network.apply, config)

    def player(key: jax.Array, env_states: Any, obs: Any) -> jax.Array:
        return search(policy.params.params, key, env_states, obs, hyperparams).action.astype(jnp.int32)
    return player


def play(env: Any, env_params: Any, players: tuple[Player, Player], first: jax.Array, num_games: int,
         key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Plays ``num_games`` games of a two-player ``env`` to their end (or the time limit), in one
    compiled loop that stops when every game has ended (:func:`play_games`, compiled).

    ``players[0]`` plays the seat ``first`` (bool ``[num_games]``: True, the side that moves first;
    False, the other), ``players[1]`` the other seat. Every step asks both players (each on the whole
    batch) and keeps the one whose turn it is.

    Returns:
        ``(margin, finished)``: float32 ``[num_games]``, ``players[0]``'s summed reward minus
        ``players[1]``'s; bool ``[num_games]``, whether the game ended before the time limit.
    """
    _require_game(env, env_params)
    steps = int(env_params.max_steps_in_episode)
    return jax.jit(lambda k: play_games(env, env_params, players, first, num_games, k, steps)[:2])(key)


def play_games(env: Any, env_params: Any, players: tuple[Player, Player], first: jax.Array, num_games: int,
               key: jax.Array, max_steps: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`play`'s loop as a pure, traceable function (``env_params`` may be traced; ``max_steps``
    the Python int that bounds it): ``(margin, finished, lengths)``, ``lengths`` int32 ``[num_games]``
    the moves each game took."""
    reset = jax.vmap(env.reset, in_axes=(0, None))
    step = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
    k_reset, k_play = jax.random.split(key)
    obs, state = reset(jax.random.split(k_reset, num_games), env_params)
    mover0 = current_player(obs)
    seat = jnp.where(first, mover0, 1 - mover0)  # players[0]'s player index in each game

    def body(carry: Any) -> Any:
        t, k, obs, state, margin, done, lengths = carry
        k, k0, k1, k_env = jax.random.split(k, 4)
        mine = current_player(obs) == seat
        action = jnp.where(mine, players[0](k0, state, obs), players[1](k1, state, obs))
        obs2, state2, _, terminated, info = step(jax.random.split(k_env, num_games), state, action, env_params)
        rewards = info["rewards"]
        gain = jnp.take_along_axis(rewards, seat[:, None], 1)[:, 0] - \
            jnp.take_along_axis(rewards, 1 - seat[:, None], 1)[:, 0]
        live = ~done
        keep = lambda new, old: jnp.where(live.reshape(live.shape + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
        return (t + 1, k, jax.tree.map(keep, obs2, obs), jax.tree.map(keep, state2, state),
                margin + jnp.where(live, gain, 0.0), done | terminated, lengths + live.astype(jnp.int32))

    init = (jnp.int32(0), k_play, obs, state, jnp.zeros((num_games,), jnp.float32), jnp.zeros((num_games,), bool),
            jnp.zeros((num_games,), jnp.int32))
    *_, margin, done, lengths = jax.lax.while_loop(lambda c: (c[0] < max_steps) & ~jnp.all(c[5]), body, init)
    return margin, done, lengths


def match(env: Any, env_params: Any, player: Player, opponent: Player, games_per_side: int, seed: int = 0
          ) -> dict[str, Outcomes]:
    """``player`` against ``opponent``, ``games_per_side`` games moving first and as many moving second.

    Returns:
        ``{"as_first": Outcomes, "as_second": Outcomes}``, ``player``'s results on each side.
    """
    if not isinstance(games_per_side, int) or games_per_side < 1:
        raise ValueError(f"games_per_side must be a positive int, got {games_per_side!r}")
    first = jnp.arange(2 * games_per_side) < games_per_side
    margin, finished = jax.device_get(play(env, env_params, (player, opponent), first, 2 * games_per_side,
                                           jax.random.key(seed)))
    out = {}
    for side, rows in (("as_first", slice(0, games_per_side)), ("as_second", slice(games_per_side, None))):
        m, f = margin[rows], finished[rows]
        out[side] = Outcomes(wins=int((m > 0).sum()), draws=int((m == 0).sum()), losses=int((m < 0).sum()),
                             unfinished=int((~f).sum()))
    return out


def player_of(policy: Any, search: bool = False, num_simulations: int | None = None) -> Player:
    """The :data:`Player` of a trained policy: :func:`search_player` with ``search`` (an AlphaZero
    policy only; anything else is a ``ValueError``), else its greedy network (:func:`policy_player`)."""
    from rljax.agents.alphazero import AlphaZeroConfig

    if search:
        if not isinstance(policy.config, AlphaZeroConfig):
            raise ValueError(f"--search: {policy.run_dir or 'the policy'} was trained by {policy.algorithm}, which has "
                             f"no search; drop --search to play its network")
        return search_player(policy, policy.env, policy.env_params, num_simulations=num_simulations)
    return policy_player(policy)


def resolve_opponent(spec: str, policy: Any, search: bool = False, num_simulations: int | None = None
                     ) -> tuple[Player, str]:
    """The opponent ``spec`` names, for a match of ``policy``'s game: ``(player, label)``.

    ``spec`` is ``"random"`` (:func:`random_player`), a run directory (its newest checkpoint's policy,
    which must have been trained on the same env; with ``search`` and an AlphaZero run, playing with
    its search), or ``"package.module:Name"``, a function ``(obs, legal_action_mask, key) -> action``
    on one observation, imported like a user env (:func:`opponent_player`). The label names it in
    reports (``random``, the run directory's name, ``module:Name``).

    Raises:
        ValueError: ``spec`` names nothing usable (the message says what would be valid).
    """
    import pathlib

    if spec == "random":
        return random_player(), "random"
    path = pathlib.Path(spec)
    if path.is_dir():
        from rljax.policy.trained import load

        other = load(path)
        if str(other.config.env) != str(policy.config.env):
            raise ValueError(f"--opponent {spec}: that run trained on {other.config.env}, this one on "
                             f"{policy.config.env}; a match needs both players on the same game")
        return player_of(other, search, num_simulations), path.resolve().name
    if ":" in spec:
        from rljax.core.registry import import_spec

        fn, where = import_spec(spec, what="opponent")
        if not callable(fn):
            raise ValueError(f"--opponent {spec}: {where} is a {type(fn).__name__}, not a function "
                             f"(obs, legal_action_mask, key) -> action")
        return opponent_player(fn), where
    raise ValueError(f"--opponent {spec!r}: give 'random', a run directory (none exists at {path}) or "
                     f"'package.module:Name' (a function (obs, legal_action_mask, key) -> action)")


def elo_ratings(num_players: int, results: list[tuple[int, int, float, int]], anchor: int = 0,
                prior_games: float = 1.0) -> np.ndarray:
    """Elo ratings that best explain a set of match results (Bradley-Terry by maximum likelihood).

    The expected score of player ``i`` against ``j`` is ``E_ij = 1 / (1 + 10 ** (-(R_i - R_j) / 400))``;
    the ratings maximise ``sum over games of s log E + (1 - s) log(1 - E)`` (a game's score ``s``: 1 a
    win, 1/2 a draw, 0 a loss), with ``R_anchor = 0``. Every other player also gets ``prior_games``
    virtual draws against the anchor, which keeps the ratings finite when a player won (or lost) every
    game and pulls players with few games towards the anchor; Newton's method on the concave
    log-likelihood.

    Args:
        num_players: players ``0 .. num_players - 1``.
        results: ``(i, j, score_i, games)``: player ``i`` scored ``score_i`` (wins + draws / 2) in
            ``games`` games against ``j``.
        anchor: the player rated 0 (e.g. a random player).
        prior_games: the virtual draws against the anchor (> 0).

    Returns:
        float64 ``[num_players]``, Elo points (``anchor``'s 0).
    """
    if not prior_games > 0:
        raise ValueError(f"prior_games must be > 0, got {prior_games}")
    score = np.zeros((num_players, num_players))
    games = np.zeros((num_players, num_players))
    for i, j, s, g in results:
        if not (0 <= i < num_players and 0 <= j < num_players) or i == j or not 0 <= s <= g:
            raise ValueError(f"a result (i={i}, j={j}, score={s}, games={g}) is not a match between two of "
                             f"{num_players} players with a score in [0, games]")
        score[i, j] += s
        score[j, i] += g - s
        games[i, j] += g
        games[j, i] += g
    for i in range(num_players):
        if i != anchor:
            score[i, anchor] += prior_games / 2
            score[anchor, i] += prior_games / 2
            games[i, anchor] += prior_games
            games[anchor, i] += prior_games
    free = np.array([i for i in range(num_players) if i != anchor])
    theta = np.zeros(num_players)  # natural-log odds units
    for _ in range(100):
        e = 1.0 / (1.0 + np.exp(-(theta[:, None] - theta[None, :])))
        grad = np.sum(score - games * e, axis=1)
        w = games * e * (1.0 - e)
        hess = w - np.diag(np.sum(w, axis=1))
        step = np.linalg.solve(hess[np.ix_(free, free)], grad[free])
        theta[free] -= step
        if np.max(np.abs(step)) < 1e-12:
            break
    return theta * ELO_SCALE / np.log(10.0)
