"""Gumbel AlphaZero on connect four (ConnectFour-v0): self-play with a 32-simulation search, a small CNN torso.

Target: with its search, at least 95 % wins against a random player as either side; its win rate against a
depth-2 minimax player (envs.board_games:connect_four_minimax2) is reported beside it.

    python -m experiments.alphazero_connect_four --run-dir runs/c4             # 1e6 moves, about 12 min on 2 cores
    rljax eval runs/c4 --search --games 100                                    # against a random player
    rljax eval runs/c4 --search --opponent envs.board_games:connect_four_minimax2
"""

import sys

from rljax.agents.alphazero import AlphaZeroConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="ConnectFour-v0", total_timesteps=1_024_000, num_epochs=4, anneal_lr=True, cnn_channels=(32, 32),
                sample_moves=4)


def main(argv=None) -> int:
    return run_experiment(AlphaZeroConfig, DEFAULTS, argv, description=__doc__, name="alphazero_connect_four")


if __name__ == "__main__":
    sys.exit(main())
