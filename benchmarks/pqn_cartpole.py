"""PQN on CartPole-v1 with the experiment defaults, against rljax's PPO default, in the same run.

    python -m benchmarks.pqn_cartpole                   # seeds 0..4, PQN and PPO interleaved
    python -m benchmarks.pqn_cartpole --seeds 3 --only pqn
    python -m benchmarks.pqn_cartpole --only breakout   # a short PQN run on gymnax/Breakout-MinAtar

Per seed and algorithm (``experiments.pqn_cartpole`` / ``experiments.ppo_cartpole`` DEFAULTS, each
through ``rljax.train`` in this process, compiling afresh; no persistent compilation cache):

  to500_s   wall time from the start of ``train`` (compile included) to the end of the first chunk
            whose mean episode return is 500 (None: never);
  steps500  env steps at that chunk;
  final     the run's final return (mean of the last two chunks with episodes);
  sps       env steps / seconds of compiled compute (compile excluded);
  compile_s / setup_s  the chunk's compile, and the set-up before it (env, init program).

The algorithms alternate seed by seed, so drift in the machine's speed hits both alike.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import jax

import rljax
from experiments import ppo_cartpole, pqn_cartpole
from rljax.agents.ppo import PPOConfig
from rljax.agents.pqn import PQNConfig


def one_run(config, label: str) -> dict:
    r = rljax.train(config, options=rljax.RunOptions(quiet=True))
    hit = next((row for row in r.rows if (row.get("episode_return_mean") or 0.0) >= 500.0), None)
    t = r.timings
    res = dict(label=label, seed=config.seed, to500_s=None if hit is None else round(hit["wall_time_s"], 2),
               steps500=None if hit is None else hit["env_steps"], final=round(r.final_return, 1),
               sps=round(t["total_env_steps"] / t["compute_s"]), compile_s=round(t["compile_s"], 2),
               setup_s=round(t["setup_s"], 2), total_s=round(t["total_s"], 2))
    print(f"  {label} seed {config.seed}: to 500 {res['to500_s']} s ({res['steps500']} steps), final "
          f"{res['final']}, {res['sps']:,} steps/s, compile {res['compile_s']} s, setup {res['setup_s']} s, "
          f"total {res['total_s']} s", flush=True)
    return res


def summary(rows: list[dict], label: str) -> dict:
    times = [r["to500_s"] for r in rows]
    solved = [t for t in times if t is not None]
    out = dict(label=label, to500_s=times, solved=f"{len(solved)}/{len(rows)}",
               to500_median_s=statistics.median(solved) if solved else None,
               to500_worst_s=max(solved) if len(solved) == len(rows) else None,
               finals=[r["final"] for r in rows], sps_median=statistics.median(r["sps"] for r in rows))
    print(f"{label}: reached 500 in {out['solved']} seeds; time to 500 (s) {times}, median "
          f"{out['to500_median_s']}, worst {out['to500_worst_s']}; finals {out['finals']}; "
          f"{out['sps_median']:,} steps/s median", flush=True)
    return out


def cartpole(seeds: list[int], only: list[str]) -> dict:
    rows: dict[str, list[dict]] = {"pqn": [], "ppo": []}
    for seed in seeds:
        if "pqn" in only:
            rows["pqn"].append(one_run(PQNConfig(seed=seed, **pqn_cartpole.DEFAULTS), "PQN"))
        if "ppo" in only:
            rows["ppo"].append(one_run(PPOConfig(seed=seed, **ppo_cartpole.DEFAULTS), "PPO"))
    out = {k: summary(v, k.upper()) for k, v in rows.items() if v}
    if "pqn" in out and "ppo" in out:
        pairs = [(a["to500_s"], b["to500_s"]) for a, b in zip(rows["pqn"], rows["ppo"])]
        wins = sum(a is not None and (b is None or a < b) for a, b in pairs)
        print(f"PQN reached 500 before PPO in {wins}/{len(pairs)} seeds", flush=True)
        out["pqn_faster_seeds"] = wins
    return out


def breakout(total_timesteps: int) -> dict:
    """A short PQN run on Breakout-MinAtar (image observations flattened into the MLP)."""
    cfg = PQNConfig(env="gymnax/Breakout-MinAtar", total_timesteps=total_timesteps, num_envs=128, num_steps=32,
                    num_epochs=2, num_minibatches=32, hidden_sizes=(128, 128), learning_rate=5e-4,
                    q_lambda=0.65, reward_scale=1.0, epsilon_end=0.05, exploration_fraction=0.1,
                    updates_per_chunk=0)
    t0 = time.perf_counter()
    r = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    returns = [(row["env_steps"], None if row["episode_return_mean"] is None else round(row["episode_return_mean"], 2))
               for row in r.rows]
    t = r.timings
    res = dict(returns=returns, final=round(r.final_return, 2), sps=round(t["total_env_steps"] / t["compute_s"]),
               compile_s=round(t["compile_s"], 2), wall_s=round(time.perf_counter() - t0, 1))
    print(f"Breakout-MinAtar, {total_timesteps:,} steps: returns by chunk {returns}; final {res['final']}; "
          f"{res['sps']:,} steps/s; compile {res['compile_s']} s; wall {res['wall_s']} s", flush=True)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=["pqn", "ppo"], help="pqn, ppo, breakout")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--breakout-steps", type=int, default=1_000_000)
    ap.add_argument("--json", default=None, help="also write the results here")
    a = ap.parse_args(argv)
    print(f"# {jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}; "
          f"PQN {pqn_cartpole.DEFAULTS} over PQNConfig defaults; PPO {ppo_cartpole.DEFAULTS}", flush=True)
    results = {}
    if {"pqn", "ppo"} & set(a.only):
        results["cartpole"] = cartpole(list(range(a.seeds)), a.only)
    if "breakout" in a.only:
        results["breakout"] = breakout(a.breakout_steps)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
