"""Successive halving against the full grid it searches: a 27-config PPO space (learning rate x entropy x
clip), on CartPole and Acrobot.

    python -m benchmarks.halving                                   # both envs, halving seeds 0 1 2
    python -m benchmarks.halving --envs CartPole-v1 --total-timesteps 200000 --halving-seeds 0

For each env: the grid trains all 27 configs (``--grid-seeds`` seeds each) for the whole budget and ranks
them by their mean final training return; then ``rljax sweep --halving`` (9 slots, eta 3, rungs at 1/9 and
1/3 of the run) runs once per halving seed (the order trials start in, and the trials' seed). Printed per
halving run: the config it ranks first, that config's grid score beside the grid's best, whether it is
within 5 % of the best (``score >= best - 0.05 |best|``), and the env steps it used against the grid's;
then how many of the 27 configs are within 5 % (the chance that a config picked at random passes).
Results go to ``--out`` as JSON lines as each run ends.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

GRID = {"learning_rate": [1e-4, 3e-4, 1e-3], "ent_coef": [0.0, 0.01, 0.03], "clip_eps": [0.1, 0.2, 0.3]}


def _label(values: dict) -> str:
    from rljax.training.sweep import _fmt

    return ",".join(f"{k}={_fmt(float(values[k]))}" for k in GRID)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=["CartPole-v1", "Acrobot-v1"])
    ap.add_argument("--total-timesteps", type=int, default=500_000, help="env steps per member (the grid's budget)")
    ap.add_argument("--chunks", type=int, default=27, help="chunks per run (rungs are whole chunks)")
    ap.add_argument("--grid-seeds", type=int, default=2, help="seeds per config of the grid")
    ap.add_argument("--halving-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="halving-results.jsonl")
    a = ap.parse_args(argv)
    from rljax.cli.process import request_cpu_devices

    request_cpu_devices(os.cpu_count() or 1)
    import jax

    from benchmarks.bench_vmap import cpu_model
    from rljax.agents.ppo import PPOConfig
    from rljax.training.hooks.halving import HalvingSpec
    from rljax.training.sweep import SweepSpec, run_sweep

    print(f"# {cpu_model()}, {os.cpu_count()} cores, jax {jax.__version__}; 27 configs, "
          f"{a.total_timesteps:,} env steps per member, {a.chunks} chunks", flush=True)
    out = open(a.out, "a")
    for env in a.envs:
        base = PPOConfig(env=env, total_timesteps=a.total_timesteps)
        updates = a.total_timesteps // (base.num_envs * base.num_steps)
        base = PPOConfig(env=env, total_timesteps=a.total_timesteps, updates_per_chunk=math.ceil(updates / a.chunks))
        t0 = time.perf_counter()
        result, members, agg = run_sweep(base, SweepSpec(grid=GRID, seeds=tuple(range(a.grid_seeds))), quiet=True,
                                         plots=False)
        grid_s = time.perf_counter() - t0
        grid_steps = result.timings["total_env_steps"] * len(members)
        scores = {r["config"]: r["score_mean"] for r in agg}
        best = max(scores.values())
        tolerance = 0.05 * abs(best)
        within = sorted(c for c, s in scores.items() if s >= best - tolerance)
        record = {"env": env, "kind": "grid", "best_config": agg[0]["config"], "best_score": best,
                  "env_steps": grid_steps, "seconds": grid_s, "within_5pct": len(within), "configs": len(scores),
                  "median_score": float(sorted(scores.values())[len(scores) // 2])}
        print(json.dumps(record), flush=True)
        out.write(json.dumps({**record, "scores": scores}) + "\n")
        out.flush()
        for seed in a.halving_seeds:
            spec = SweepSpec(grid=GRID, seeds=(seed,), halving=HalvingSpec(slots=9, eta=3, seed=seed))
            t0 = time.perf_counter()
            hres, slots, ranked = run_sweep(base, spec, quiet=True, plots=False, checkpoints=False)
            pick = _label(ranked[0]["values"])
            steps = hres.timings["total_env_steps"] * len(slots)
            record = {"env": env, "kind": "halving", "halving_seed": seed, "pick": pick,
                      "pick_halving_score": ranked[0]["score"], "pick_level": ranked[0]["level"],
                      "pick_grid_score": scores[pick], "grid_best": best,
                      "within_5pct": scores[pick] >= best - tolerance, "env_steps": steps,
                      "env_steps_vs_grid": steps / grid_steps * a.grid_seeds, "trials_started": len(ranked),
                      "seconds": time.perf_counter() - t0}
            print(json.dumps(record), flush=True)
            out.write(json.dumps(record) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
