"""Two-player board games in pure JAX: tic-tac-toe and connect four.

Both are turn-based games in rljax's contract (``docs/env_api.md``, "Turn-based games"): the
observation is a dict seen from the side of the player to move,

* ``observation``: float32 ``[rows, cols, 2]``, plane 0 the mover's pieces, plane 1 the opponent's;
* ``legal_action_mask``: bool ``[num_actions]``, the empty cells (tic-tac-toe) or the columns with
  room (connect four);
* ``current_player``: int32, who moves (player 0 moves first),

the reward is the mover's (+1 for the move that wins, 0 otherwise) and ``info["rewards"]`` holds both
players' (float32 ``[2]``: the winner +1, the loser -1, both 0 in a draw). An illegal action (one
the mask rules out) loses the game on the spot: -1 to the mover, +1 to the other. The dynamics are
deterministic, so a search can use ``step_env`` as its model.

Opponents for evaluation (``rljax eval RUN --opponent envs.board_games:<name>``):
:func:`tictactoe_perfect` (never loses) and :func:`connect_four_minimax2` (looks two moves ahead).

Games
-----
``TicTacToe-v0``  3x3 board, 9 actions (cell ``3 * row + col``), three in a row wins.
``ConnectFour-v0`` 6 rows x 7 columns, 7 actions (the column to drop a piece in; it falls to the
                   lowest empty row), four in a row (across, down or diagonal) wins.

May import: :mod:`rljax.env`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import (CURRENT_PLAYER, LEGAL_ACTION_MASK, Box, Discrete, EnvParams, EnvState, Environment,
                       uniform_legal_action)

__all__ = ["BoardState", "LineGame", "TicTacToe", "ConnectFour", "winning_lines", "Opponent", "tictactoe_perfect",
           "connect_four_minimax2"]

Opponent = Callable[[Any, jax.Array, jax.Array], jax.Array]
"""A player for game evaluation: ``opponent(obs, legal_action_mask, key) -> action`` on ONE observation
(int32 scalar action; jittable, vmapped by the caller)."""

EMPTY = -1


def winning_lines(rows: int, cols: int, k: int) -> np.ndarray:
    """Every line of ``k`` cells in a row on a ``rows x cols`` board (across, down and both
    diagonals), as flat cell indices ``row * cols + col``: int32 ``[num_lines, k]`` (8 for
    tic-tac-toe, 69 for connect four)."""
    lines = []
    for r, c in itertools.product(range(rows), range(cols)):
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            end_r, end_c = r + dr * (k - 1), c + dc * (k - 1)
            if 0 <= end_r < rows and 0 <= end_c < cols:
                lines.append([(r + dr * i) * cols + c + dc * i for i in range(k)])
    return np.asarray(lines, np.int32)


@struct.dataclass
class BoardState(EnvState):
    """Attributes:
        board: int32 ``[rows * cols]``, -1 for an empty cell, else the player (0 or 1) whose piece it is.
        player: int32, the player to move.
        time: moves made in this game.
    """

    board: jax.Array
    player: jax.Array
    time: jax.Array


class LineGame(Environment[BoardState, EnvParams]):
    """A two-player game of ``k`` in a row on a ``rows x cols`` board (the module docstring).

    Args:
        rows, cols: the board's size.
        k: how many in a row win.
        drop: True: an action is a column and the piece falls to its lowest empty cell (connect
            four); False: an action is a cell (tic-tac-toe).
        name: the registered name.
    """

    stochastic_transitions = False
    num_players = 2

    def __init__(self, rows: int, cols: int, k: int, drop: bool, name: str):
        self.rows, self.cols, self.k, self.drop = rows, cols, k, drop
        self._name = name
        self._lines = winning_lines(rows, cols, k)

    @property
    def name(self) -> str:
        return self._name

    @property
    def num_actions(self) -> int:
        """Columns when pieces drop, cells otherwise."""
        return self.cols if self.drop else self.rows * self.cols

    @property
    def default_params(self) -> EnvParams:
        # No game lasts longer than the board has cells, so the time limit never cuts one.
        return EnvParams(max_steps_in_episode=self.rows * self.cols)

    def legal_actions(self, board: jax.Array) -> jax.Array:
        """bool ``[num_actions]``: the empty cells, or the columns whose top cell is empty."""
        return board[:self.cols] == EMPTY if self.drop else board == EMPTY

    def _obs(self, state: BoardState) -> dict[str, jax.Array]:
        grid = state.board.reshape(self.rows, self.cols)
        planes = jnp.stack([grid == state.player, grid == 1 - state.player], axis=-1).astype(jnp.float32)
        return {"observation": planes, LEGAL_ACTION_MASK: self.legal_actions(state.board),
                CURRENT_PLAYER: state.player}

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[dict[str, jax.Array], BoardState]:
        state = BoardState(board=jnp.full((self.rows * self.cols,), EMPTY, jnp.int32), player=jnp.int32(0),
                           time=jnp.int32(0))
        return self._obs(state), state

    def _cell(self, board: jax.Array, action: jax.Array) -> jax.Array:
        """The flat cell an action fills: the cell itself, or the lowest empty cell of the column."""
        if not self.drop:
            return action
        column = board.reshape(self.rows, self.cols)[:, action]
        lowest = self.rows - 1 - jnp.argmax((column == EMPTY)[::-1])
        return lowest * self.cols + action

    def step_env(self, key: jax.Array, state: BoardState, action: Any, params: EnvParams
                 ) -> tuple[dict[str, jax.Array], BoardState, jax.Array, jax.Array, dict[str, Any]]:
        action = jnp.clip(jnp.asarray(action, jnp.int32), 0, self.num_actions - 1)
        legal = self.legal_actions(state.board)[action]
        cell = self._cell(state.board, action)
        board = jnp.where(legal, state.board.at[cell].set(state.player), state.board)
        won = legal & jnp.any(jnp.all(board[self._lines] == state.player, axis=1))
        full = jnp.all(board != EMPTY)
        reward = jnp.where(legal, won.astype(jnp.float32), -1.0)
        rewards = jnp.zeros((2,), jnp.float32).at[state.player].set(reward).at[1 - state.player].set(0.0 - reward + 0.0)
        new_state = BoardState(board=board, player=1 - state.player, time=state.time + 1)
        return self._obs(new_state), new_state, reward, ~legal | won | full, {"rewards": rewards}

    def state_of(self, obs: dict[str, jax.Array]) -> BoardState:
        """The state an observation was made in (the board from its two planes and the player to
        move), for players that look ahead; ``time`` is the number of pieces on the board."""
        planes = obs["observation"].reshape(self.rows * self.cols, 2)
        player = jnp.asarray(obs[CURRENT_PLAYER], jnp.int32)
        board = jnp.where(planes[:, 0] > 0, player, jnp.where(planes[:, 1] > 0, 1 - player, EMPTY))
        return BoardState(board=board.astype(jnp.int32), player=player,
                          time=jnp.sum(board != EMPTY).astype(jnp.int32))

    def minimax_player(self, depth: int) -> Opponent:
        """A depth-``depth`` minimax player (:data:`Opponent`): it looks ``depth`` moves ahead
        (its own move first), scores a won game +1, a lost one -1 and anything else 0, and plays
        uniformly at random among the legal moves of the best score. Depth 1 takes a win in one;
        depth 2 also blocks the opponent's win in one. Costs ``num_actions ** depth`` steps per move.
        """
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"minimax_player(depth={depth!r}): depth must be a positive int")
        params = self.default_params

        def value(state: BoardState, remaining: int) -> jax.Array:
            """The best score the mover at ``state`` can force within ``remaining`` moves."""
            return jnp.max(scores(state, remaining))

        def scores(state: BoardState, remaining: int) -> jax.Array:
            legal = self.legal_actions(state.board)

            def score(action: jax.Array) -> jax.Array:
                _, child, reward, terminated, _ = self.step_env(jax.random.key(0), state, action, params)
                later = -value(child, remaining - 1) if remaining > 1 else jnp.float32(0.0)
                return jnp.where(terminated, reward, later)
            return jnp.where(legal, jax.vmap(score)(jnp.arange(self.num_actions)), -jnp.inf)

        def player(obs: Any, legal_action_mask: jax.Array, key: jax.Array) -> jax.Array:
            s = scores(self.state_of(obs), depth)
            best = legal_action_mask & (s == jnp.max(jnp.where(legal_action_mask, s, -jnp.inf)))
            return uniform_legal_action(key, best)
        return player

    def observation_space(self, params: EnvParams) -> dict[str, Any]:
        return {"observation": Box(0.0, 1.0, (self.rows, self.cols, 2), jnp.float32),
                LEGAL_ACTION_MASK: Box(False, True, (self.num_actions,), jnp.bool_),
                CURRENT_PLAYER: Discrete(2)}

    def action_space(self, params: EnvParams) -> Discrete:
        return Discrete(self.num_actions)


class TicTacToe(LineGame):
    """Tic-tac-toe: 3x3, three in a row, 9 actions (the cells, row-major)."""

    def __init__(self) -> None:
        super().__init__(3, 3, 3, drop=False, name="TicTacToe-v0")

    @staticmethod
    def optimal_moves(obs: Any) -> np.ndarray:
        """The perfect player's moves in one observation (NumPy, for analysis on the host): bool
        ``[9]``, True for every legal move that keeps the position's game-theoretic value (full
        minimax; :meth:`perfect_player` draws uniformly among them)."""
        planes = np.asarray(obs["observation"]).reshape(9, 2) > 0
        code = int(np.sum((planes[:, 0] + 2 * planes[:, 1]) * 3 ** np.arange(9)))
        return _tictactoe_optimal_moves()[code] & np.asarray(obs["legal_action_mask"], bool)

    def perfect_player(self) -> Opponent:
        """A perfect player (:data:`Opponent`): from a table of every position's game-theoretic
        value (full minimax, solved once in NumPy), it plays uniformly at random among the moves
        that keep the best result (a win where one can be forced, else a draw). Nobody beats it."""
        table = _tictactoe_optimal_moves()  # NumPy: made into a constant of each program that traces the player
        powers = 3 ** np.arange(9, dtype=np.int32)

        def player(obs: Any, legal_action_mask: jax.Array, key: jax.Array) -> jax.Array:
            planes = obs["observation"].reshape(9, 2)
            code = jnp.sum((planes[:, 0] > 0) * powers + 2 * (planes[:, 1] > 0) * powers)
            best = jnp.asarray(table)[code] & legal_action_mask
            return uniform_legal_action(key, best)
        return player


@functools.cache
def _tictactoe_optimal_moves() -> np.ndarray:
    """bool ``[3**9, 9]``: for every board (cell ``i`` coded ``3**i`` times 0 empty, 1 the mover's,
    2 the opponent's), the moves whose minimax value is the position's best."""
    lines = winning_lines(3, 3, 3)
    table = np.zeros((3 ** 9, 9), bool)

    @functools.cache
    def solve(board: tuple[int, ...]) -> int:
        """The mover's minimax value (+1 win, 0 draw, -1 loss) of a non-final board, filling
        ``table`` with its optimal moves; the board is from the mover's side (1 mine, 2 theirs)."""
        values = {}
        for move in (i for i in range(9) if board[i] == 0):
            after = list(board)
            after[move] = 1
            if any(all(after[c] == 1 for c in line) for line in lines):
                values[move] = 1
            elif all(after):
                values[move] = 0
            else:
                values[move] = -solve(tuple(0 if x == 0 else 3 - x for x in after))  # the opponent's side
        best = max(values.values())
        table[sum(x * 3 ** i for i, x in enumerate(board)), [m for m, v in values.items() if v == best]] = True
        return best

    solve((0,) * 9)
    return table


class ConnectFour(LineGame):
    """Connect four: 6 rows x 7 columns, four in a row, 7 actions (the columns)."""

    def __init__(self) -> None:
        super().__init__(6, 7, 4, drop=True, name="ConnectFour-v0")


@functools.cache
def _perfect() -> Opponent:
    return TicTacToe().perfect_player()


@functools.cache
def _minimax2() -> Opponent:
    return ConnectFour().minimax_player(2)


def tictactoe_perfect(obs: Any, legal_action_mask: jax.Array, key: jax.Array) -> jax.Array:
    """:meth:`TicTacToe.perfect_player` as a module-level :data:`Opponent`
    (``rljax eval RUN --opponent envs.board_games:tictactoe_perfect``)."""
    return _perfect()(obs, legal_action_mask, key)


def connect_four_minimax2(obs: Any, legal_action_mask: jax.Array, key: jax.Array) -> jax.Array:
    """:meth:`LineGame.minimax_player` of depth 2 on connect four as a module-level :data:`Opponent`
    (``rljax eval RUN --opponent envs.board_games:connect_four_minimax2``)."""
    return _minimax2()(obs, legal_action_mask, key)
