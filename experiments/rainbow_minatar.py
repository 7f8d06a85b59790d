"""Rainbow (Hessel et al. 2018) on MinAtar Breakout: the Rainbow components of
:mod:`experiments.rainbow_cartpole` (C51 + double + dueling + 3-step + prioritised replay + noisy
layers, epsilon 0) on DQN's MinAtar configuration (:mod:`experiments.dqn_minatar`: 1e5 replay, batch
32, one gradient step per env step, target copy every 1000 steps, a 16-filter 3x3 conv and a
128-unit layer), so the two differ only in the Rainbow components. The support is [0, 100]:
MinAtar's rewards are non-negative, and 100 is the ``vmax`` of Obando-Ceron & Castro 2021
("Revisiting Rainbow", their MinAtar Rainbow).

    python -m experiments.rainbow_minatar                               # Breakout-MinAtar, 5e6 steps
    python -m experiments.rainbow_minatar --env Asterix-MinAtar
"""

import sys

from experiments.dqn_minatar import DEFAULTS as DQN_DEFAULTS
from experiments.rainbow_cartpole import RAINBOW
from rljax.agents.c51 import C51Config
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(DQN_DEFAULTS, **RAINBOW, loss="mse", num_atoms=51, v_min=0.0, v_max=100.0)


def main(argv=None) -> int:
    return run_experiment(C51Config, DEFAULTS, argv, description=__doc__, name="rainbow_minatar")


if __name__ == "__main__":
    sys.exit(main())
