"""What the suite benchmarks (``benchmarks/suite_<name>.py``) share: train one config on a suite
environment in memory, score the greedy policy, print the figures beside the suite's published one.

Figures printed per run:

  train return   mean training-episode return over the last chunk that finished episodes
  eval return    the greedy policy over ``eval_episodes`` fresh episodes after the last chunk
  steps/s        env steps / seconds of compiled compute (compile excluded), as peers report it
  compile s      ``lower().compile()`` of the training chunk
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def parser(description: str, total_timesteps: float) -> argparse.ArgumentParser:
    """The flags every suite benchmark takes."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--total-timesteps", type=float, default=total_timesteps)
    p.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    return p


def run(config: Any, published: str, env: Any = None, env_params: Any = None, as_json: bool = False) -> dict:
    """Trains ``config`` (on ``env`` if given, else ``config.env`` by name) and prints its figures.

    Args:
        config: an algorithm config with ``eval_interval`` > 0 (the greedy score is the result).
        published: the suite's published figure to print beside ours, with its source and date.
        env, env_params: an env object and params to train on instead of ``config.env``'s defaults.
        as_json: print one JSON line.

    Returns:
        The figures as a dict.
    """
    import rljax

    t0 = time.perf_counter()
    result = rljax.train(config, env=env, env_params=env_params, options=rljax.RunOptions(quiet=True, checkpoints=False,
                         tensorboard=False, handle_signals=False))
    rows = [r for r in result.rows if r.get("episodes", 0) > 0]
    steps = result.rows[-1]["env_steps"]
    out = {
        "env": config.env, "algo": type(config).__name__, "seed": config.seed, "env_steps": steps,
        "train_return": rows[-1]["episode_return_mean"] if rows else float("nan"),
        "first_train_return": rows[0]["episode_return_mean"] if rows else float("nan"),
        "eval_return": result.rows[-1].get("eval/return_mean", float("nan")),
        "steps_per_s": steps / max(result.timings["compute_s"], 1e-9),
        "compile_s": result.timings["compile_s"], "process_s": time.perf_counter() - t0,
    }
    if as_json:
        print(json.dumps(out))
        return out
    print(f"{out['algo']} on {out['env']}, seed {out['seed']}, {steps} env steps")
    print(f"  train return   {out['first_train_return']:.2f} (first chunk) -> {out['train_return']:.2f} (last)")
    print(f"  eval return    {out['eval_return']:.2f} (greedy, {config.eval_episodes} episodes)")
    print(f"  steps/s        {out['steps_per_s']:.0f}   (compile {out['compile_s']:.1f} s, "
          f"process {out['process_s']:.1f} s)")
    print(f"  published      {published}")
    return out


GRID_PPO = dict(num_envs=32, num_steps=64, num_epochs=4, num_minibatches=4, learning_rate=3e-4, gae_lambda=0.95,
                ent_coef=0.01, hidden_sizes=(64, 64), eval_interval=1000, eval_episodes=16)
"""The PPO settings of the grid-world suite benchmarks (Navix, XLand-MiniGrid): 2e5 steps by default."""


def grid_ppo_main(description: str, default_env: str, published: str, argv: Any = None) -> int:
    """``main`` of a grid-world suite benchmark: PPO with :data:`GRID_PPO` on ``--env``."""
    p = parser(description, 2e5)
    p.add_argument("--env", default=default_env)
    args = p.parse_args(argv)
    import rljax

    config = rljax.PPOConfig(env=args.env, seed=args.seed, total_timesteps=int(args.total_timesteps), **GRID_PPO)
    run(config, published, as_json=args.json)
    return 0
