"""SAC on Pendulum-v1 at the default configuration (2e4 env steps), one fresh process per seed.

    python -m benchmarks.sac_pendulum                  # 5 seeds (about 2 minutes on 2 CPU cores)
    python -m benchmarks.sac_pendulum --seeds 2 --set gradient_steps=2 batch_size=128
    python -m benchmarks.sac_pendulum --rejax          # also rejax's SAC at matching settings

Per seed (each in its own Python process, so the wall time is what a user waits for: importing JAX,
building, compiling and training; no persistent compilation cache):

  compile s      ``lower().compile()`` of the training chunk
  steps/s        env steps / seconds of compiled compute (compile excluded), as peers report it
  process s      wall time of the whole process, from start to the end of training
  final return   mean training-episode return over the last two chunks that finished episodes
  eval return    the deterministic policy (``tanh(mean)``) over 10 fresh episodes

The target: return >= -200 within 2e4 steps, and a process wall time well under rejax's SAC at
matching settings (``--rejax``; recorded figures in ``benchmarks/results.md``).
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

# The peers' run scripts and venv set-up (setup.sh) install other projects, so they are not part of this
# repository: RLJAX_PEERS_DIR names the folder holding them; without it the peer rows are skipped.
PEERS_DIR = pathlib.Path(os.environ["RLJAX_PEERS_DIR"]) if os.environ.get("RLJAX_PEERS_DIR") else None
ROOT = pathlib.Path(__file__).resolve().parents[1]


def evaluate(agent, state, env, env_params, key, num_episodes: int = 10) -> float:
    """Mean undiscounted return of ``agent.act`` over ``num_episodes`` fresh episodes (first episode
    of each of ``num_episodes`` envs; steps after an env's first episode ends are not counted)."""
    import jax
    import jax.numpy as jnp

    from rljax.core import wrappers

    venv = wrappers.VecEnv(wrappers.ClipAction(env), num_episodes)
    horizon = int(env_params.max_steps_in_episode)

    @jax.jit
    def run(state, key):
        k_reset, k_run = jax.random.split(key)
        obs, env_state = venv.reset(k_reset, env_params)

        def step(carry, k):
            obs, env_state, ret, alive = carry
            k_act, k_env = jax.random.split(k)
            action = agent.act(state, obs, k_act)
            obs, env_state, reward, terminated, truncated, _ = venv.step(k_env, env_state, action, env_params)
            ret = ret + jnp.where(alive, reward, 0.0)
            alive = alive & ~(terminated | truncated)
            return (obs, env_state, ret, alive), None

        init = (obs, env_state, jnp.zeros(num_episodes), jnp.ones(num_episodes, bool))
        (_, _, ret, _), _ = jax.lax.scan(step, init, jax.random.split(k_run, horizon))
        return jnp.mean(ret)

    return float(run(state, key))


def worker(seed: int, overrides: dict, t_start: float, algo: str = "sac") -> dict:
    """One seed of ``algo`` (``sac`` or ``td3``) at its experiment's defaults
    (``experiments/<algo>_pendulum.py``), inside this process: train (in memory: no run directory, so
    no checkpoints), then evaluate."""
    import importlib

    import jax

    import envs
    import rljax
    from rljax.agents import algorithms

    defaults = importlib.import_module(f"experiments.{algo}_pendulum").DEFAULTS
    cfg = algorithms()[algo].config_cls(seed=seed, **{**defaults, **overrides})
    env, env_params = envs.make(cfg.env)
    r = rljax.train(cfg, env=env, env_params=env_params, options=rljax.RunOptions(quiet=True))
    process_s = time.perf_counter() - t_start
    t = r.timings
    eval_return = evaluate(r.agent, r.state, env, env_params, jax.random.key(10_000 + seed))
    return dict(seed=seed, compile_s=t["compile_s"], compute_s=t["compute_s"], train_total_s=t["total_s"],
                sps=t["total_env_steps"] / t["compute_s"], process_s=process_s, env_steps=t["total_env_steps"],
                final_return=r.final_return, eval_return=eval_return)


def parse_set(items: list[str]) -> dict:
    """``["k=v", ...]`` config overrides, each value an int tuple, int, float, bool or string."""
    out = {}
    for kv in items:
        k, v = kv.split("=", 1)
        if "," in v:
            out[k] = tuple(int(x) for x in v.split(",") if x)
            continue
        for cast in (int, float):
            try:
                out[k] = cast(v)
                break
            except ValueError:
                pass
        else:
            out[k] = {"true": True, "false": False}.get(v.lower(), v)
    return out


def run_seeds(num_seeds: int, sets: list[str], algo: str = "sac") -> dict:
    """``num_seeds`` seeds of ``algo``, each in a fresh process (:func:`worker`); prints a line per seed
    and the medians, and returns them."""
    rows = []
    for seed in range(num_seeds):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "benchmarks.sac_pendulum", "--worker", str(seed),
                               "--algo", algo, "--set", *sets], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
        if proc.returncode or not lines:
            raise RuntimeError(f"seed {seed} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        row = json.loads(lines[-1])
        row["wall_s"] = time.perf_counter() - t0  # the whole process, evaluation included
        rows.append(row)
        print(f"  seed {seed}: compile {row['compile_s']:.2f}s  {row['sps']:,.0f} steps/s  "
              f"process {row['process_s']:.1f}s (to the end of training)  final return {row['final_return']:.1f}  "
              f"eval return {row['eval_return']:.1f}", flush=True)
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    out = dict(compile_s=med("compile_s"), sps=med("sps"), process_s=med("process_s"),
               final_returns=[round(r["final_return"], 1) for r in rows],
               eval_returns=[round(r["eval_return"], 1) for r in rows],
               env_steps=rows[0]["env_steps"])
    out["solved"] = sum(r >= -200 for r in out["eval_returns"])
    print(f"rljax {algo.upper()} ({out['env_steps']} env steps): compile {out['compile_s']:.2f}s, "
          f"{out['sps']:,.0f} steps/s, process {out['process_s']:.1f}s (medians); final returns "
          f"{out['final_returns']}; eval returns {out['eval_returns']}; eval >= -200: {out['solved']}/{len(rows)}",
          flush=True)
    return out


REJAX_SETTINGS = dict(num_envs=1, batch_size=256, fill_buffer=1000, learning_rate=0.001, polyak=0.995,
                      buffer_size=20_000, total_timesteps=20_000, gamma=0.99, num_epochs=1)


def rejax() -> dict | None:
    """rejax's SAC (its own venv) with 1 env, UTD 1, 2x64 MLPs: one process, timed from outside."""
    setup = None if PEERS_DIR is None else PEERS_DIR / "setup.sh"
    if setup is None or not setup.exists():
        print(f"rejax: no setup.sh in RLJAX_PEERS_DIR ({PEERS_DIR}); skipped")
        return None
    python = subprocess.run(["bash", str(setup)], capture_output=True, text=True, check=True).stdout.split()[-1]
    t0 = time.perf_counter()
    proc = subprocess.run([python, str(PEERS_DIR / "rejax_run.py"), "--algo", "sac", "--env", "Pendulum-v1",
                           "--seeds", "1", "--repeats", "1", "--set",
                           *[f"{k}={v}" for k, v in REJAX_SETTINGS.items()]], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    line = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode or not line:
        print(f"rejax failed: {proc.stderr[-2000:]}")
        return None
    res = json.loads(line[-1])
    res["process_s"] = wall
    print(f"rejax SAC ({REJAX_SETTINGS}): compile {res['compile_s']:.2f}s, run {res['run_s']:.2f}s, "
          f"{res['sps']:,.0f} steps/s, process {wall:.1f}s (incl. its final 128-episode eval), "
          f"return {res['final_return']:.1f}", flush=True)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--set", nargs="*", default=[], help="config overrides, e.g. gradient_steps=2")
    ap.add_argument("--rejax", action="store_true", help="also run rejax's SAC (needs a peers venv: $RLJAX_PEERS_DIR)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--algo", default="sac", choices=("sac", "td3"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        print(json.dumps(worker(a.worker, parse_set(a.set), T_START, a.algo)), flush=True)
        return
    import jax

    print(f"# {jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}, "
          f"{os.cpu_count()} cores", flush=True)
    results = {"rljax": run_seeds(a.seeds, a.set)}
    if a.rejax:
        results["rejax"] = rejax()
        if results["rejax"]:
            print(f"ratio rljax/rejax process wall time: "
                  f"{results['rljax']['process_s'] / results['rejax']['process_s']:.2f}x (lower is better)")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=2))


T_START = time.perf_counter()

if __name__ == "__main__":
    sys.exit(main())
