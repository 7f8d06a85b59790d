"""DQN on MinAtar Breakout (the MinAtar paper's DQN: 1e5 replay, batch 32, one gradient step per env
step, hard target update every 1000 steps, epsilon 1 -> 0.1 over the first 1e5 steps, learning from
5000 steps, Huber loss, a 16-filter 3x3 conv and a 128-unit layer; Young & Tian 2019, "MinAtar",
arXiv:1903.03176. Adam instead of its RMSProp, at its step size 2.5e-4).

    python -m experiments.dqn_minatar                                   # Breakout-MinAtar, 5e6 steps
    python -m experiments.dqn_minatar --env Asterix-MinAtar --double-q
    python -m experiments.dqn_minatar --encoder mlp                     # flattened planes, MLP only
"""

import sys

from rljax.agents.dqn import DQNConfig
from rljax.cli.experiment import run_experiment

# One env: the paper's one gradient step per env step. The buffer stores MinAtar's bool planes as
# bool (10 x 10 x C bytes per observation), so 1e5 transitions of Breakout take 80 MB for obs + next_obs
# (320 MB as float32).
DEFAULTS = dict(env="Breakout-MinAtar", total_timesteps=5_000_000, num_envs=1, num_steps=1, batch_size=32,
                buffer_size=100_000, learning_starts=5_000, target_update_interval=1_000, hidden_sizes=(128,),
                loss="huber", learning_rate=2.5e-4, epsilon_end=0.1, exploration_fraction=0.02)


def main(argv=None) -> int:
    return run_experiment(DQNConfig, DEFAULTS, argv, description=__doc__, name="dqn_minatar")


if __name__ == "__main__":
    sys.exit(main())
