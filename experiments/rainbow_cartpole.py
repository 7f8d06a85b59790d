"""Rainbow (Hessel et al. 2018, "Rainbow: Combining Improvements in Deep Reinforcement Learning") on
CartPole-v1: C51's categorical head (51 atoms on [0, 100]) with double Q-learning, the dueling head,
3-step returns, prioritised replay (alpha 0.5, beta 0.4 -> 1, the paper's) and noisy layers in place of
epsilon-greedy exploration (epsilon 0). A config of the Q-learning family (:mod:`rljax.agents.c51`),
not another algorithm: every field can be switched back off on the command line. The rest is DQN's
PureJaxRL CartPole configuration.

    python -m experiments.rainbow_cartpole                          # 5e5 steps
    python -m experiments.rainbow_cartpole --no-noisy --epsilon-start 1 --epsilon-end 0.05
    python -m experiments.rainbow_cartpole sweep --seeds 3 --eval-interval 5
"""

import sys

from rljax.agents.c51 import C51Config
from rljax.cli.experiment import run_experiment

RAINBOW = dict(double_q=True, dueling=True, n_step=3, prioritized=True, priority_alpha=0.5, noisy=True,
               epsilon_start=0.0, epsilon_end=0.0)
"""The Rainbow components as C51 config fields (shared with :mod:`experiments.rainbow_minatar`)."""

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000, **RAINBOW)


def main(argv=None) -> int:
    return run_experiment(C51Config, DEFAULTS, argv, description=__doc__, name="rainbow_cartpole")


if __name__ == "__main__":
    sys.exit(main())
