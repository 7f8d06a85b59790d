"""PPO on Navix's Empty-5x5 (the full symbolic grid through rljax's CNN) via the ``navix/`` adapter.

    python -m benchmarks.suite_navix                                       # 2e5 env steps
    python -m benchmarks.suite_navix --env navix/Navix-DoorKey-5x5-v0 --total-timesteps 1e6

The observation is Navix's symbolic map, ``(5, 5, 3)`` uint8, which ``encoder='auto'`` sends through
one 16-filter 3x3 conv before the MLP. Navix's Empty pays 1 for reaching the goal within its
100-step limit and nothing else, so 1.0 is the maximum return; a uniformly random policy reaches the
goal in about 43 % of its episodes (a return of about 0.43; measured with rljax's VecEnv, 256 envs,
seed 0). The learning signal is the rise from there to 1.0 (and the greedy policy's 1.0).

Published figure: none per environment that this benchmark can be set beside. Navix's README
(snapshot of 2026-08) and paper (Pignatelli et al., "NAVIX: Scaling MiniGrid Environments with JAX",
arXiv:2407.19396, July 2024) report throughput: 2048 PPO agents x 16 envs at about 670 million
env steps/s on one A100 in batch mode, against about 4 200 steps/s for one PPO agent on the
original MiniGrid.
"""

from __future__ import annotations

import sys

from benchmarks import suite_common

PUBLISHED = ("Navix: return <= 1.0 (goal reward 1); ~670 M env steps/s with 2048 PPO agents x 16 envs on one A100, "
             "original MiniGrid ~4 200 steps/s (Pignatelli et al., arXiv:2407.19396, July 2024; Navix README)")


def main(argv=None) -> int:
    return suite_common.grid_ppo_main(__doc__, "navix/Navix-Empty-5x5-v0", PUBLISHED, argv)


if __name__ == "__main__":
    sys.exit(main())
