"""Gumbel AlphaZero on tic-tac-toe (TicTacToe-v0): self-play with a 32-simulation search over the game's own rules.

Target: with its search, it never loses to a perfect player (200 games, 100 as each side).

    python -m experiments.alphazero_tictactoe --run-dir runs/ttt            # 4.1e5 moves, about a minute on 2 cores
    rljax eval runs/ttt                                                     # the network against a random player
    rljax eval runs/ttt --opponent envs.board_games:tictactoe_perfect --search
"""

import sys

from rljax.agents.alphazero import AlphaZeroConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="TicTacToe-v0", total_timesteps=409_600, encoder="mlp", num_epochs=4, anneal_lr=True)


def main(argv=None) -> int:
    return run_experiment(AlphaZeroConfig, DEFAULTS, argv, description=__doc__, name="alphazero_tictactoe")


if __name__ == "__main__":
    sys.exit(main())
