"""PPO on Craftax-Classic (symbolic observations) through the ``craftax/`` adapter.

    python -m benchmarks.suite_craftax                          # 1e6 env steps
    python -m benchmarks.suite_craftax --env craftax/Craftax-Symbolic-v1 --total-timesteps 5e6

Settings follow the Craftax authors' PPO baseline (their ``ppo.py``: GAE lambda 0.8, lr 2e-4
annealed, 4 epochs x 8 minibatches, entropy 0.01, tanh MLP) with fewer envs (64 instead of 1024)
and a smaller network (256 instead of 512 wide), so a CPU run finishes in minutes.

Published figure: Craftax-Classic-Symbolic, PPO with 1e9 env steps averages 90 % of the optimal
return (Matthews et al., "Craftax: A Lightning-Fast Benchmark for Open-Ended Reinforcement
Learning", ICML 2024, arXiv:2402.16801, February 2024); the optimal return is 22 (one point per
achievement, plus health changes that sum to about 0 over an episode). This benchmark runs 1000x
fewer steps: it shows learning (the return rises from a random policy's), not that figure.
"""

from __future__ import annotations

import sys

from benchmarks import suite_common

PUBLISHED = ("Craftax-Classic-Symbolic: PPO, 1e9 steps, 90 % of the optimal return of 22 (Matthews et al., "
             "ICML 2024, arXiv:2402.16801, Feb 2024)")


def main(argv=None) -> int:
    p = suite_common.parser(__doc__, 1e6)
    p.add_argument("--env", default="craftax/Craftax-Classic-Symbolic-v1")
    args = p.parse_args(argv)
    import rljax

    config = rljax.PPOConfig(env=args.env, seed=args.seed, total_timesteps=int(args.total_timesteps), num_envs=64,
                             num_steps=64, num_epochs=4, num_minibatches=8, learning_rate=2e-4, gae_lambda=0.8,
                             ent_coef=0.01, hidden_sizes=(256, 256), eval_interval=1000, eval_episodes=16)
    suite_common.run(config, PUBLISHED, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
