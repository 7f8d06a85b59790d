"""QR-DQN (51 quantiles, quantile Huber loss) on CartPole-v1, with DQN's PureJaxRL CartPole configuration otherwise
but a learning rate of 5e-4 (2.5e-4 reaches 500 too, at the end of the 5e5 steps; 5e-4 keeps it for the last 10 %).

    python -m experiments.qrdqn_cartpole                          # 5e5 steps
    python -m experiments.qrdqn_cartpole --double-q --dueling --n-step 3 --prioritized --noisy
    python -m experiments.qrdqn_cartpole sweep --seeds 3 --eval-interval 5
"""

import sys

from rljax.agents.qrdqn import QRDQNConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000, learning_rate=5e-4)


def main(argv=None) -> int:
    return run_experiment(QRDQNConfig, DEFAULTS, argv, description=__doc__, name="qrdqn_cartpole")


if __name__ == "__main__":
    sys.exit(main())
