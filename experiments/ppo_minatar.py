"""PPO on MinAtar Breakout (PureJaxRL's MinAtar configuration: 64 envs x 128 steps, lr 5e-3 annealed,
4 epochs x 8 minibatches, relu, 1e7 env steps).

The observation is MinAtar's [10, 10, C] boolean planes; the default encoder ('auto') sends them
through the CNN torso (one 16-filter 3x3 conv, relu, flatten) before the 64 x 64 MLPs; ``--encoder
mlp`` flattens them instead, as PureJaxRL does. ``benchmarks/ppo_minatar.py`` runs both beside
PureJaxRL.

    python -m experiments.ppo_minatar                                   # Breakout-MinAtar, 1e7 steps
    python -m experiments.ppo_minatar --encoder mlp                     # flattened planes, MLP only
    python -m experiments.ppo_minatar --env SpaceInvaders-MinAtar       # Asterix, Freeway, Seaquest too
    python -m experiments.ppo_minatar --total-timesteps 1e6 --run-dir runs/breakout
"""

import sys

from rljax.agents.ppo import PPOConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="Breakout-MinAtar", total_timesteps=10_000_000, num_envs=64, num_steps=128, num_epochs=4,
                num_minibatches=8, learning_rate=5e-3, activation="relu")


def main(argv=None) -> int:
    return run_experiment(PPOConfig, DEFAULTS, argv, description=__doc__, name="ppo_minatar")


if __name__ == "__main__":
    sys.exit(main())
