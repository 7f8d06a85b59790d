"""A2C on CartPole-v1: 16 envs x 8 steps per update, one RMSprop step each; reaches a return of 500.

    python -m experiments.a2c_cartpole                          # 5e5 steps
    python -m experiments.a2c_cartpole sweep --grid learning_rate=5e-4,1e-3,2e-3 --seeds 2
    python -m experiments.a2c_cartpole --env gymnax/Acrobot-v1  # any env with discrete or flat Box actions
"""

import sys

from rljax.agents.a2c import A2CConfig
from rljax.cli.main import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000)


def main(argv=None) -> int:
    return run_experiment(A2CConfig, DEFAULTS, argv, description=__doc__, name="a2c_cartpole")


if __name__ == "__main__":
    sys.exit(main())
