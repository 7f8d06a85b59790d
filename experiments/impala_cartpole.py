"""IMPALA (V-trace actor-critic) on CartPole-v1: 16 envs x 16 steps per update, one Adam step each.

    python -m experiments.impala_cartpole                            # 5e5 steps
    python -m experiments.impala_cartpole sweep --grid learning_rate=5e-4,1e-3 --seeds 2
    python -m experiments.impala_cartpole --env gymnax/Acrobot-v1    # any env with discrete or flat Box actions
"""

import sys

from rljax.agents.impala import IMPALAConfig
from rljax.cli.main import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000)


def main(argv=None) -> int:
    return run_experiment(IMPALAConfig, DEFAULTS, argv, description=__doc__, name="impala_cartpole")


if __name__ == "__main__":
    sys.exit(main())
