"""PQN on CartPole-v1 (tuned on a 2-core CPU to reach return 500 in less wall time than PPO's default).

    python -m experiments.pqn_cartpole                          # solves CartPole (return 500)
    python -m experiments.pqn_cartpole --seed 3 --run-dir runs/pqn3
    python -m experiments.pqn_cartpole --num-devices 2          # data-parallel over 2 (CPU) devices
    python -m experiments.pqn_cartpole --env gymnax/Acrobot-v1  # any env with discrete actions
"""

import sys

from rljax.agents.pqn import PQNConfig
from rljax.cli import run_experiment

# purejaxql's CartPole setup (the PQNConfig defaults: 32 envs x 64 steps, 4 x 16 minibatches, 256 x 256)
# solves CartPole too, but takes ~1.5e5 steps at ~2e4 steps/s on 2 CPU cores. This one, with one tenth
# of the gradient steps per env step and a 64 x 64 network, reaches 500 in fewer env steps at ~7x the
# throughput (benchmarks/pqn_cartpole.py).
DEFAULTS = dict(env="CartPole-v1", total_timesteps=200_000, num_envs=16, num_steps=32, num_epochs=1,
                num_minibatches=4, hidden_sizes=(64, 64), learning_rate=2.5e-3, epsilon_end=0.05)


def main(argv=None) -> int:
    return run_experiment(PQNConfig, DEFAULTS, argv, description=__doc__, name="pqn_cartpole")


if __name__ == "__main__":
    sys.exit(main())
