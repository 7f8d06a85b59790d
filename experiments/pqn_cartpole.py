"""PQN on CartPole-v1 (tuned on a 2-core CPU to reach return 500 in less wall time than PPO's default).

    python -m experiments.pqn_cartpole                          # solves CartPole (return 500)
    python -m experiments.pqn_cartpole --seed 3 --run-dir runs/pqn3
    python -m experiments.pqn_cartpole --num-devices 2          # data-parallel; on a CPU 2 fake devices (slower)
    python -m experiments.pqn_cartpole --env gymnax/Acrobot-v1  # any env with discrete actions
"""

import sys

from rljax.agents.pqn import PQNConfig
from rljax.cli.experiment import run_experiment

# purejaxql's CartPole setup (the PQNConfig defaults: 32 envs x 64 steps, 4 x 16 minibatches, 256 x 256)
# solves CartPole too, but needs ~1.5e5 steps and 64 gradient steps on a 256 x 256 network per 2048 env
# steps. This one takes 4 gradient steps on a 64 x 64 network per 512 env steps (a quarter of the gradient steps
# per env step, each far cheaper) at a higher learning rate, and reaches 500 in 0.6e5 - 1.2e5 steps
# (seeds 0-4; benchmarks/pqn_cartpole.py has the wall times against PPO).
DEFAULTS = dict(env="CartPole-v1", total_timesteps=200_000, num_envs=16, num_steps=32, num_epochs=1,
                num_minibatches=4, hidden_sizes=(64, 64), learning_rate=2.5e-3, epsilon_end=0.05)


def main(argv=None) -> int:
    return run_experiment(PQNConfig, DEFAULTS, argv, description=__doc__, name="pqn_cartpole")


if __name__ == "__main__":
    sys.exit(main())
