"""PQN on MinAtar Breakout (purejaxql's MinAtar configuration: 128 envs x 32 steps, 2 epochs x 32
minibatches, LayerNorm, lr 5e-4 annealed, Q(lambda) with lambda 0.65, epsilon 1 -> 0.05 over the
first 10 % of the run, 128 x 128 MLP; Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning", arXiv:2407.04811). Rewards unscaled, as there.

    python -m experiments.pqn_minatar                                   # Breakout-MinAtar, 1e7 steps
    python -m experiments.pqn_minatar --env Asterix-MinAtar
    python -m experiments.pqn_minatar --encoder mlp                     # flattened planes (purejaxql's torso)
"""

import sys

from rljax.agents.pqn import PQNConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="Breakout-MinAtar", total_timesteps=10_000_000, num_envs=128, num_steps=32, num_epochs=2,
                num_minibatches=32, hidden_sizes=(128, 128), learning_rate=5e-4, q_lambda=0.65,
                epsilon_end=0.05, exploration_fraction=0.1, reward_scale=1.0)


def main(argv=None) -> int:
    return run_experiment(PQNConfig, DEFAULTS, argv, description=__doc__, name="pqn_minatar")


if __name__ == "__main__":
    sys.exit(main())
