"""Rainbow (Hessel et al. 2018, "Rainbow: Combining Improvements in Deep Reinforcement Learning") on
CartPole-v1: C51's categorical head (51 atoms on [0, 100]) with double Q-learning, the dueling head,
3-step returns, prioritised replay (alpha 0.5, beta 0.4 -> 1, the paper's) and noisy layers in place of
epsilon-greedy exploration (epsilon 0). A config of the Q-learning family (:mod:`rljax.agents.c51`),
not another algorithm: every field can be switched back off on the command line. The rest is DQN's
PureJaxRL CartPole configuration but for a replay of 5e4 transitions (Obando-Ceron & Castro 2021's
CartPole Rainbow): with DQN's 1e4, Rainbow solves CartPole within about 1.3e5 steps, then forgets it on
some seeds once the buffer holds nothing but balanced poles (measured: one seed of three fell from 500
to 200-250 by 5e5 steps, with or without lr annealing; with 5e4, 500 on all three).

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

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000, buffer_size=50_000, **RAINBOW)


def main(argv=None) -> int:
    return run_experiment(C51Config, DEFAULTS, argv, description=__doc__, name="rainbow_cartpole")


if __name__ == "__main__":
    sys.exit(main())
