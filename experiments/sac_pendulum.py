"""SAC on Pendulum-v1: 4 envs, 2 gradient steps per update (batch 256), 2x64 ReLU MLPs, lr 1e-3,
automatic entropy tuning; returns pass -200 well within 2e4 env steps (run time: benchmarks/results.md).

    python -m experiments.sac_pendulum                          # 2e4 steps
    python -m experiments.sac_pendulum --gradient-steps 4       # update-to-data ratio 1
    python -m experiments.sac_pendulum --n-step 3 --num-steps 4 --prioritized
    python -m experiments.sac_pendulum --num-devices 2          # data-parallel; on a CPU 2 fake devices (slower)
"""

import sys

from rljax.agents.sac import SACConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="Pendulum-v1", total_timesteps=20_000)


def main(argv=None) -> int:
    return run_experiment(SACConfig, DEFAULTS, argv, description=__doc__, name="sac_pendulum")


if __name__ == "__main__":
    sys.exit(main())
