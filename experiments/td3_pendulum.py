"""TD3 on Pendulum-v1: 4 envs, 2 critic gradient steps per update (batch 256), actor and targets every
2nd critic step, 2x64 ReLU MLPs, lr 1e-3, target smoothing 0.2 (clip 0.5), exploration noise 0.1.

    python -m experiments.td3_pendulum                          # 2e4 steps
    python -m experiments.td3_pendulum --gradient-steps 4       # update-to-data ratio 1
    python -m experiments.td3_pendulum --n-step 3 --num-steps 4 --prioritized
    python -m experiments.td3_pendulum --num-devices 2          # data-parallel; on a CPU 2 fake devices (slower)
"""

import sys

from rljax.agents.td3 import TD3Config
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="Pendulum-v1", total_timesteps=20_000)


def main(argv=None) -> int:
    return run_experiment(TD3Config, DEFAULTS, argv, description=__doc__, name="td3_pendulum")


if __name__ == "__main__":
    sys.exit(main())
