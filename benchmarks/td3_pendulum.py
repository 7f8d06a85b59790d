"""TD3 on Pendulum-v1 at the experiment's defaults (``experiments/td3_pendulum.py``, 2e4 env steps),
one fresh process per seed, with SAC's figures (``benchmarks/sac_pendulum.py``) from the same run.

    python -m benchmarks.td3_pendulum                  # 5 seeds of TD3, then 5 of SAC
    python -m benchmarks.td3_pendulum --seeds 2 --set policy_delay=1 --no-sac

Per seed, measured exactly as ``benchmarks/sac_pendulum.py`` measures SAC: compile s, steps/s (env
steps / seconds of compiled compute), process s (wall time of the whole process to the end of
training), final return (training episodes of the last two chunks that finished episodes) and eval
return (the deterministic actor ``mu(s)`` over 10 fresh episodes).

The target: eval return >= -200 within 2e4 env steps (SAC's bar) on all or nearly all seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

from benchmarks import sac_pendulum

ROOT = pathlib.Path(__file__).resolve().parents[1]


def worker(seed: int, overrides: dict, t_start: float) -> dict:
    """One seed, inside this process: train in memory (no run directory), then evaluate."""
    import jax

    import envs
    import rljax
    from experiments.td3_pendulum import DEFAULTS
    from rljax.agents.td3 import TD3Config

    cfg = TD3Config(seed=seed, **{**DEFAULTS, **overrides})
    env, env_params = envs.make(cfg.env)
    r = rljax.train(cfg, env=env, env_params=env_params, quiet=True)
    process_s = time.perf_counter() - t_start
    t = r.timings
    eval_return = sac_pendulum.evaluate(r.agent, r.state, env, env_params, jax.random.key(10_000 + seed))
    return dict(seed=seed, compile_s=t["compile_s"], compute_s=t["compute_s"],
                sps=t["total_env_steps"] / t["compute_s"], process_s=process_s, env_steps=t["total_env_steps"],
                final_return=r.final_return, eval_return=eval_return)


def run_seeds(num_seeds: int, sets: list[str]) -> dict:
    rows = []
    for seed in range(num_seeds):
        proc = subprocess.run([sys.executable, "-m", "benchmarks.td3_pendulum", "--worker", str(seed), "--set", *sets],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
        if proc.returncode or not lines:
            raise RuntimeError(f"seed {seed} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        row = json.loads(lines[-1])
        rows.append(row)
        print(f"  seed {seed}: compile {row['compile_s']:.2f}s  {row['sps']:,.0f} steps/s  "
              f"process {row['process_s']:.1f}s  final return {row['final_return']:.1f}  "
              f"eval return {row['eval_return']:.1f}", flush=True)
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    out = dict(compile_s=med("compile_s"), sps=med("sps"), process_s=med("process_s"),
               final_returns=[round(r["final_return"], 1) for r in rows],
               eval_returns=[round(r["eval_return"], 1) for r in rows], env_steps=rows[0]["env_steps"])
    out["solved"] = sum(r >= -200 for r in out["eval_returns"])
    print(f"rljax TD3 ({out['env_steps']} env steps): compile {out['compile_s']:.2f}s, {out['sps']:,.0f} steps/s, "
          f"process {out['process_s']:.1f}s (medians); final returns {out['final_returns']}; eval returns "
          f"{out['eval_returns']}; eval >= -200: {out['solved']}/{len(rows)}", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--set", nargs="*", default=[], help="TD3 config overrides, e.g. policy_delay=1")
    ap.add_argument("--no-sac", action="store_true", help="skip SAC's figures")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        print(json.dumps(worker(a.worker, sac_pendulum._parse_set(a.set), T_START)), flush=True)
        return
    import jax

    print(f"# {jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}, {os.cpu_count()} cores",
          flush=True)
    results = {"td3": run_seeds(a.seeds, a.set)}
    if not a.no_sac:
        results["sac"] = sac_pendulum.run_seeds(a.seeds, [])
        print(f"TD3/SAC median steps/s: {results['td3']['sps'] / results['sac']['sps']:.2f}x; eval >= -200: "
              f"TD3 {results['td3']['solved']}/{a.seeds}, SAC {results['sac']['solved']}/{a.seeds}", flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=2))


T_START = time.perf_counter()

if __name__ == "__main__":
    sys.exit(main())
