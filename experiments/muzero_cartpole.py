"""Gumbel MuZero on CartPole-v1: a 16-simulation search over a learned model, values and rewards categorical.

Target: its network's greedy policy returns at least 475 on seeds 0, 1 and 2 (``python -m
benchmarks.muzero_targets``; the same module with ``--env gymnax/Catch-bsuite --q-epsilon 0.5 --learning-rate
1e-3 --total-timesteps 200000`` catches every ball). Four defaults differ from the algorithm's
(docs/search.md): values and rewards on a categorical support of 21 atoms in the h-transformed space
(``--support-size 10``: returns reach 100 at gamma 0.99), four epochs over each batch, a step size of 3e-4,
and the completed Q-values of a node's two children stretched to the full scale only where they differ by more
than 20 (``--q-epsilon 20``, in reward units): with mctx's 1e-8, model noise between the two actions decided
every improved policy and the policy collapsed onto one action (seed 0: a return of 9); with 1, on one seed of
three.

    python -m experiments.muzero_cartpole --run-dir runs/mz           # 5e5 steps, about a minute and a half on 2 cores
    rljax eval runs/mz                                                # the network's greedy policy
"""

import sys

from rljax.agents.muzero import MuZeroConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="CartPole-v1", total_timesteps=500_000, support_size=10, num_epochs=4, learning_rate=3e-4,
                q_epsilon=20.0)


def main(argv=None) -> int:
    return run_experiment(MuZeroConfig, DEFAULTS, argv, description=__doc__, name="muzero_cartpole")


if __name__ == "__main__":
    sys.exit(main())
