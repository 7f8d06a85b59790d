"""SAC (or PPO) on Brax continuous control through the ``brax/`` adapter.

    python -m benchmarks.suite_brax                                   # SAC, inverted_pendulum, 1e5 steps
    python -m benchmarks.suite_brax --env brax/hopper --total-timesteps 1e6 --backend generalized
    python -m benchmarks.suite_brax --algo ppo --total-timesteps 1e6

The physics backend defaults to ``positional`` (the cheapest of Brax's pipelines on a CPU); the
environment's own default is ``generalized``.

Published figure: Brax's inverted_pendulum gives +1 per step while the pole stays within 0.2 rad,
so 1000 over its 1000-step episode is the maximum, which Brax's own SAC and PPO reach (Freeman et
al., "Brax - A Differentiable Physics Engine for Large Scale Rigid Body Simulation", NeurIPS 2021
Datasets and Benchmarks, arXiv:2106.13281, June 2021).
"""

from __future__ import annotations

import sys

from benchmarks import suite_common

PUBLISHED = {"brax/inverted_pendulum": "inverted_pendulum: 1000 is the maximum (1 per step, 1000 steps), reached by "
                                       "Brax's SAC and PPO (Freeman et al., arXiv:2106.13281, June 2021)"}


def main(argv=None) -> int:
    p = suite_common.parser(__doc__, 1e5)
    p.add_argument("--env", default="brax/inverted_pendulum")
    p.add_argument("--backend", default="positional", help="Brax physics pipeline")
    p.add_argument("--algo", choices=("sac", "ppo"), default="sac")
    args = p.parse_args(argv)
    import rljax

    env, params = rljax.make(args.env, backend=args.backend)
    common = dict(env=args.env, seed=args.seed, total_timesteps=int(args.total_timesteps), eval_interval=1000,
                  eval_episodes=8)
    if args.algo == "sac":
        config = rljax.SACConfig(num_envs=4, learning_starts=1000, hidden_sizes=(256, 256), **common)
    else:
        config = rljax.PPOConfig(num_envs=32, num_steps=64, num_epochs=4, num_minibatches=4, learning_rate=3e-4,
                                 normalize_obs=True, hidden_sizes=(64, 64), **common)
    suite_common.run(config, PUBLISHED.get(args.env, "none restated here for this environment"), env=env,
                     env_params=params, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
