"""C51 (categorical DQN, 51 atoms on [0, 100]) on CartPole-v1, with DQN's PureJaxRL CartPole configuration otherwise.

    python -m experiments.c51_cartpole                          # 5e5 steps
    python -m experiments.c51_cartpole --double-q --dueling --n-step 3 --prioritized --noisy
    python -m experiments.c51_cartpole sweep --seeds 3 --eval-interval 5
"""

import sys

from rljax.agents.c51 import C51Config
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000)


def main(argv=None) -> int:
    return run_experiment(C51Config, DEFAULTS, argv, description=__doc__, name="c51_cartpole")


if __name__ == "__main__":
    sys.exit(main())
