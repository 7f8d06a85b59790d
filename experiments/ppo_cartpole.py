"""PPO on CartPole-v1 (PureJaxRL's configuration: 4 envs x 128 steps, 4 epochs x 4 minibatches).

    python -m experiments.ppo_cartpole                         # 5e5 steps, solves CartPole (return 500)
    python -m experiments.ppo_cartpole --seed 3 --total-timesteps 1e6 --run-dir runs/cp3
    python -m experiments.ppo_cartpole --num-devices 2         # data-parallel; on a CPU 2 fake devices (slower)
    python -m experiments.ppo_cartpole --env gymnax/Acrobot-v1 # any env with discrete actions
"""

import sys

from rljax.agents.ppo import PPOConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000)


def main(argv=None) -> int:
    return run_experiment(PPOConfig, DEFAULTS, argv, description=__doc__, name="ppo_cartpole")


if __name__ == "__main__":
    sys.exit(main())
