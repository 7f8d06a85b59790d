"""Gumbel AlphaZero on tic-tac-toe (TicTacToe-v0): self-play with a 64-simulation search over the game's own rules.

Target: with its search (128 simulations), it never loses to a perfect player (200 games, 100 as each side).
Measured stricter, on every line a perfect player can choose (``benchmarks/alphazero_targets.py``): not one
losing move on any of 10 runs, seeds 0-4 each with and without the test suite's XLA flags (docs/search.md).

Three defaults differ from the algorithm's, each measured to matter (docs/search.md): the first two moves
of every self-play game are sampled from the search's improved policy (``--sample-moves 2``: varied
openings; without, a perfect player's rarer openings found untrained replies, 2 to 17 losses in 100
games as the second mover on seeds 1 and 3); the value targets are lambda-returns through the next
move's search value (``--td-lambda 0.5``) with 64 simulations: the outcome alone, from noisy
self-play, misjudged positions the search then trusted (3 to 13 losses on seeds 0 and 2); and a node's
children's Q-values are min-max scaled over a range of at least 1 (``--q-epsilon 1``, half the game's
value range): with mctx's 1e-8, children 0.1 apart were stretched to the whole scale, so the search
kept to one reply and never went back to one it had misjudged once (a fork three moves deep): 1 run in
3 made a losing move on some line (5 in 19 with more sampled openings, every move sampled or twice the
training).

    python -m experiments.alphazero_tictactoe --run-dir runs/ttt            # 4.1e5 moves, about two minutes on 2 cores
    rljax eval runs/ttt                                                     # the network against a random player
    rljax eval runs/ttt --opponent envs.board_games:tictactoe_perfect --search --simulations 128
"""

import sys

from rljax.agents.alphazero import AlphaZeroConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="TicTacToe-v0", total_timesteps=409_600, encoder="mlp", num_epochs=4, anneal_lr=True,
                sample_moves=2, td_lambda=0.5, num_simulations=64, q_epsilon=1.0)


def main(argv=None) -> int:
    return run_experiment(AlphaZeroConfig, DEFAULTS, argv, description=__doc__, name="alphazero_tictactoe")


if __name__ == "__main__":
    sys.exit(main())
