"""DQN on CartPole-v1 (PureJaxRL's configuration: 10 envs, 1e4 replay, batch 128, hard target every 500 steps).

    python -m experiments.dqn_cartpole                          # 5e5 steps
    python -m experiments.dqn_cartpole --double-q --dueling --n-step 3 --prioritized
    python -m experiments.dqn_cartpole --env Acrobot-v1         # any env with discrete actions
"""

import sys

from rljax.agents.dqn import DQNConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000)


def main(argv=None) -> int:
    return run_experiment(DQNConfig, DEFAULTS, argv, description=__doc__, name="dqn_cartpole")


if __name__ == "__main__":
    sys.exit(main())
