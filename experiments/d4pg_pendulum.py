"""D4PG on Pendulum-v1: a categorical critic (51 atoms on [-1000, 0]) with 3-step returns, one critic,
no target smoothing, the actor updated at every critic step; TD3's Pendulum configuration otherwise
(4 envs, 2 gradient steps per update, batch 256, 2x64 ReLU MLPs, lr 1e-3, exploration noise 0.1).

    python -m experiments.d4pg_pendulum                          # 2e4 steps
    python -m experiments.d4pg_pendulum --prioritized            # D4PG with prioritised replay
    python -m experiments.d4pg_pendulum sweep --seeds 3 --eval-interval 5
"""

import sys

from rljax.agents.d4pg import D4PGConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="Pendulum-v1", total_timesteps=20_000)


def main(argv=None) -> int:
    return run_experiment(D4PGConfig, DEFAULTS, argv, description=__doc__, name="d4pg_pendulum")


if __name__ == "__main__":
    sys.exit(main())
