"""PPO on XLand-MiniGrid's MiniGrid-Empty-5x5 (the 7x7 egocentric view through rljax's CNN) via the
``xminigrid/`` adapter.

    python -m benchmarks.suite_xminigrid                                   # 2e5 env steps
    python -m benchmarks.suite_xminigrid --env xminigrid/MiniGrid-DoorKey-5x5 --total-timesteps 1e6

The observation is the agent's ``(7, 7, 2)`` uint8 view (tile, colour), which ``encoder='auto'``
sends through one 16-filter 3x3 conv before the MLP. The reward is MiniGrid's, ``1 - 0.9 t / T`` on
reaching the goal at step ``t`` with the time limit ``T`` = 100; the shortest path takes 5 steps, so
0.955 is the maximum return. A uniformly random policy returns about 0.26 (it reaches the goal in
about half of its episodes, late; measured with rljax's VecEnv, 256 envs, seed 0).

Published figure: none per environment that this benchmark can be set beside. XLand-MiniGrid's
paper (Nikulin et al., "XLand-MiniGrid: Scalable Meta-Reinforcement Learning Environments in JAX",
arXiv:2312.12044, December 2023; NeurIPS 2024 Datasets and Benchmarks) and README (snapshot of
2025-12) report that its recurrent-PPO baselines train at millions of env steps/s on one GPU and
that the environments scale to 2^16 parallel copies.
"""

from __future__ import annotations

import sys

from benchmarks import suite_common

PUBLISHED = ("MiniGrid-Empty-5x5: optimal return 0.955 (5 steps, 1 - 0.9 * 5/100); XLand-MiniGrid's PPO baselines "
             "train at millions of env steps/s on one GPU (Nikulin et al., arXiv:2312.12044, Dec 2023)")


def main(argv=None) -> int:
    return suite_common.grid_ppo_main(__doc__, "xminigrid/MiniGrid-Empty-5x5", PUBLISHED, argv)


if __name__ == "__main__":
    sys.exit(main())
