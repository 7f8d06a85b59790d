"""PQN on CartPole-v1 (tuned on a 2-core CPU to reach return 500 in less wall time than PPO's default).

    python -m experiments.pqn_cartpole                          # solves CartPole (return 500)
    python -m experiments.pqn_cartpole --seed 3 --run-dir runs/pqn3
    python -m experiments.pqn_cartpole --num-devices 2          # data-parallel over 2 (CPU) devices
    python -m experiments.pqn_cartpole --env gymnax/Acrobot-v1  # any env with discrete actions
"""

import sys

from rljax.agents.pqn import PQNConfig
from rljax.cli import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000)


def main(argv=None) -> int:
    return run_experiment(PQNConfig, DEFAULTS, argv, description=__doc__, name="pqn_cartpole")


if __name__ == "__main__":
    sys.exit(main())
