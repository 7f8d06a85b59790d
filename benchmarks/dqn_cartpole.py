"""DQN on CartPole-v1 with PureJaxRL's DQN configuration: return and env steps/s for 5 seeds.

    python -m benchmarks.dqn_cartpole                   # 5 seeds x 5e5 steps (about 2 minutes on 2 cores)
    python -m benchmarks.dqn_cartpole --seeds 2 --variant double_q=1 n_step=3 prioritized=1

PureJaxRL's configuration: 10 envs, one gradient step (batch 128) per env step of the 10 envs, 1e4
replay, learning from 1e4 steps, hard target update every 500 steps, Adam 2.5e-4, epsilon 1 -> 0.05
over 2.5e5 steps. PureJaxRL cannot run beside rljax; its recorded figure (``benchmarks/results.md``)
is printed for reference. "Final return" is the mean episode return (epsilon-greedy, as PureJaxRL logs it) over
the last 10 % of chunks; "greedy" evaluates the final greedy policy for 20 episodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import envs
import rljax
from rljax.agents.dqn import DQNConfig
from rljax.core.wrappers import EpisodeStatistics, VecEnv


def greedy_return(result, env_name: str, episodes: int = 20, seed: int = 123) -> float:
    """Mean return of ``agent.act`` (greedy) over ``episodes`` full episodes, in one compiled scan."""
    env, params = envs.make(env_name)
    venv = EpisodeStatistics(VecEnv(env, episodes))
    state = result.state
    obs, env_state = venv.reset(jax.random.key(seed), params)
    limit = int(params.max_steps_in_episode)

    def body(carry, key):
        obs, env_state, total, finished = carry
        action = result.agent.act(state, obs, key)
        obs, env_state, reward, term, trunc, info = venv.step(key, env_state, action, params)
        total = total + jnp.where(finished, 0.0, reward)
        return (obs, env_state, total, finished | term | trunc), None

    init = (obs, env_state, jnp.zeros(episodes), jnp.zeros(episodes, bool))
    (_, _, total, _), _ = jax.jit(lambda c: jax.lax.scan(body, c, jax.random.split(jax.random.key(seed), limit)))(init)
    return float(jnp.mean(total))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--total-timesteps", type=int, default=500_000)
    ap.add_argument("--variant", nargs="*", default=[], help="config overrides, e.g. double_q=1 n_step=3")
    a = ap.parse_args(argv)
    overrides = {}
    for kv in a.variant:
        k, v = kv.split("=", 1)
        default = getattr(DQNConfig(), k)
        overrides[k] = type(default)(float(v)) if not isinstance(default, bool) else bool(int(v))
    print(f"# {jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}; PureJaxRL DQN here: "
          f"31.6k env steps/s, return 500 (measured 2026-11-30, 2-core CPU VM); overrides {overrides or 'none'}", flush=True)
    rows = []
    for seed in range(a.seeds):
        cfg = DQNConfig(total_timesteps=a.total_timesteps, seed=seed, **overrides)
        r = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
        t = r.timings
        returns = [x["episode_return_mean"] for x in r.rows if x["episode_return_mean"] is not None]
        final = float(np.mean(returns[-max(1, len(returns) // 10):]))
        rows.append(dict(compile_s=t["compile_s"], sps=t["total_env_steps"] / t["compute_s"], final=final,
                         greedy=greedy_return(r, cfg.env)))
        print(f"  seed {seed}: compile {t['compile_s']:.2f}s  {rows[-1]['sps']:,.0f} steps/s  "
              f"final return {final:.1f}  greedy {rows[-1]['greedy']:.1f}", flush=True)
    med = lambda k: statistics.median(x[k] for x in rows)  # noqa: E731
    print(f"DQN CartPole: compile {med('compile_s'):.2f}s, {med('sps'):,.0f} steps/s (median), final returns "
          f"{[round(x['final'], 1) for x in rows]}, greedy {[round(x['greedy'], 1) for x in rows]}, "
          f">=475 (final): {sum(x['final'] >= 475 for x in rows)}/{len(rows)}; ratio to PureJaxRL's 31.6k: "
          f"{med('sps') / 31_600:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
