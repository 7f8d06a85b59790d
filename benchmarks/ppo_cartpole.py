"""PPO on CartPole-v1 with PureJaxRL's default configuration, beside rejax in the same run.

    python -m benchmarks.ppo_cartpole                 # everything (about 5 minutes on 2 CPU cores)
    python -m benchmarks.ppo_cartpole --only seeds    # one section: seeds | envs64 | vmap | overhead | checkpoint | rejax
    python -m benchmarks.ppo_cartpole --only purejaxrl --purejaxrl SCRATCH/purejaxrl/purejaxrl \\
        --peers-python /tmp/rljax-peers/bin/python --rounds 5   # 1 seed beside PureJaxRL, interleaved

Sections:
  seeds     5 seeds, one process each run in turn: compile s, training-phase steps/s, final return.
            rljax's logging is on (metrics.jsonl + tensorboard in a temp run directory).
  envs64    the same with 64 envs (fewer, larger updates).
  vmap      8 seeds vmapped in one compiled program: total env steps/s.
  overhead  the chunked host loop with logging vs one monolithic jit of the same updates, with a
            one-thread XLA CPU pool (NPROC=1) and with the default pool, each in its own process.
  checkpoint  run time with checkpoints (default interval; every 5 s, with and without checksums)
            vs none, on a ~20 s run.
  rejax     rejax's PPO with the same configuration (its own venv, from the directory in $RLJAX_PEERS_DIR).
  purejaxrl 1 seed in a fresh process, then PureJaxRL's own ``make_train`` (1 seed, through the peers'
            timing script ``--peer-script`` in the peers' venv ``--peers-python``), ``--rounds`` times
            interleaved: steps/s and compile of each and their ratios, medians. ``--xla-threads 1``
            also runs rljax with a one-thread XLA CPU pool (``NPROC=1``) in the same rounds.

"Training-phase steps/s" is env steps / seconds of compiled compute (compile excluded), as
PureJaxRL's and rejax's figures are. PureJaxRL is no pip package: section ``purejaxrl`` runs its
checkout (outside this repository) in the peers' venv; the other sections print its recorded figures
(``benchmarks/results.md``) for reference.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import envs
import rljax
import rljax.store.checkpoint
from rljax.agents.ppo import PPOConfig
from rljax.agents import build_agent
from rljax.training.program import make_chunk, pack_output, plan_updates
from rljax.runtime.devices import serial_map

PUREJAXRL = dict(num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4, learning_rate=2.5e-4,
                 anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
                 max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", total_timesteps=500_000)
# The peers' run scripts and venv set-up (setup.sh) install other projects, so they are not part of this
# repository: RLJAX_PEERS_DIR names the folder holding them; without it the peer rows are skipped.
PEERS_DIR = pathlib.Path(os.environ["RLJAX_PEERS_DIR"]) if os.environ.get("RLJAX_PEERS_DIR") else None
REFERENCE = ("PureJaxRL, measured 2026-11-30 on a 2-core CPU VM (jax 0.10.2): 1 seed compile 6.4 s, 86k steps/s "
             "(114k best), return 500; 8 seeds vmapped 148k steps/s total; 64 envs 117k steps/s")


def run_seeds(cfg_kw: dict, seeds: list[int], label: str) -> dict:
    rows = []
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = PPOConfig(seed=seed, **cfg_kw)
            r = rljax.train(cfg, options=rljax.RunOptions(run_dir=os.path.join(tmp, "run"), quiet=True))
        t = r.timings
        rows.append(dict(seed=seed, compile_s=t["compile_s"], sps=t["total_env_steps"] / t["compute_s"],
                         logging_s=t["logging_s"], final_return=r.final_return))
        print(f"  {label} seed {seed}: compile {t['compile_s']:.2f}s  {rows[-1]['sps']:,.0f} steps/s  "
              f"return {r.final_return:.1f}", flush=True)
    out = dict(label=label, compile_s=statistics.median(x["compile_s"] for x in rows),
               sps_median=statistics.median(x["sps"] for x in rows), sps_best=max(x["sps"] for x in rows),
               returns=[round(x["final_return"], 1) for x in rows],
               solved=sum(x["final_return"] >= 475 for x in rows))
    print(f"{label}: compile {out['compile_s']:.2f}s (median), {out['sps_median']:,.0f} steps/s median "
          f"({out['sps_best']:,.0f} best), returns {out['returns']}, >=475: {out['solved']}/{len(rows)}",
          flush=True)
    return out


def vmapped_seeds(cfg_kw: dict, num_seeds: int) -> dict:
    """All seeds' full runs as one program: vmap over the population, one compile, one launch."""
    cfg = PPOConfig(**cfg_kw)
    env, params = envs.make(cfg.env)
    agent = build_agent(cfg, env, params, None)
    plan = plan_updates(cfg.total_timesteps, agent.env_steps_per_update, cfg.updates_per_chunk)
    keys = jax.vmap(jax.random.key)(jnp.arange(num_seeds))
    init = jax.jit(lambda ks: serial_map(lambda k: agent.init(k, 0, plan.num_updates, cfg.hyperparams(), params), ks))
    run = make_chunk(agent.update, plan.num_updates, None)
    fn = jax.jit(jax.vmap(run), donate_argnums=0)
    state = init(keys)
    t0 = time.perf_counter()
    compiled = fn.lower(state).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, out = jax.block_until_ready(compiled(state))
    run_s = time.perf_counter() - t0
    steps = plan.total_env_steps * num_seeds
    res = dict(label=f"{num_seeds} seeds vmapped", compile_s=compile_s, run_s=run_s, sps_total=steps / run_s)
    print(f"{res['label']}: compile {compile_s:.2f}s, run {run_s:.2f}s, {res['sps_total']:,.0f} env steps/s "
          f"total", flush=True)
    return res


def shared_executables() -> None:
    """Routes compiles through a fresh persistent cache, so repeated ``rljax.train`` calls of the same
    config load the same executable instead of compiling a new one."""
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="rljax-bench-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


class _NoChecksumCheckpointer(rljax.store.checkpoint.Checkpointer):
    """The checkpointer without checksums, to measure what they cost inside a run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, checksums=False, **kwargs)


def checkpoint_cost(cfg_kw: dict, repeats: int = 3) -> dict:
    """Run time with checkpoints at the default interval (60 s, plus the final save) and at a 5 s
    interval, against no checkpoints, on a run of about 20 s; and at a 5 s interval without
    checksums, to isolate their cost. One shared executable, interleaved, best of ``repeats``.
    Times are whole ``train`` calls after compile: set-up, loop and the final save's commit."""
    shared_executables()
    cfg = PPOConfig(**cfg_kw)
    variants = {"none": dict(checkpoints=False), "default": {}, "every 5 s": dict(checkpoint_interval_s=5.0),
                "every 5 s, no checksums": dict(checkpoint_interval_s=5.0)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    saves: dict[str, int] = {}
    rljax.train(cfg, options=rljax.RunOptions(quiet=True))  # fills the cache
    real = rljax.store.checkpoint.Checkpointer
    for i in range(repeats):
        for name, kw in variants.items():
            with tempfile.TemporaryDirectory() as tmp:
                # train() imports the class from rljax.store.checkpoint when it is called
                rljax.store.checkpoint.Checkpointer = _NoChecksumCheckpointer if "no checksums" in name else real
                try:
                    r = rljax.train(cfg, options=rljax.RunOptions(run_dir=os.path.join(tmp, "run"), quiet=True, **kw))
                finally:
                    rljax.store.checkpoint.Checkpointer = real
                times[name].append(r.timings["total_s"] - r.timings["compile_s"])
                saves[name] = len(list(pathlib.Path(tmp, "run", "checkpoints").glob("[0-9]*")))
    res = {f"{k}_s": min(v) for k, v in times.items()}
    for k in ("default", "every 5 s", "every 5 s, no checksums"):
        res[f"{k}_pct"] = 100.0 * (res[f"{k}_s"] / res["none_s"] - 1.0)
    res["checksums_pct"] = 100.0 * (res["every 5 s_s"] / res["every 5 s, no checksums_s"] - 1.0)
    print(f"checkpoint cost ({cfg.total_timesteps:,} steps, best of {repeats}): none {res['none_s']:.2f}s; "
          f"default interval {res['default_s']:.2f}s ({res['default_pct']:+.1f}%); every 5 s "
          f"{res['every 5 s_s']:.2f}s ({res['every 5 s_pct']:+.1f}%, {saves['every 5 s']} kept of keep=3); "
          f"every 5 s without checksums {res['every 5 s, no checksums_s']:.2f}s "
          f"({res['every 5 s, no checksums_pct']:+.1f}%): checksums {res['checksums_pct']:+.1f}%", flush=True)
    print(f"  all times (s): " + "; ".join(f"{k} " + ", ".join(f"{t:.2f}" for t in v) for k, v in times.items()),
          flush=True)
    return res


def overhead(cfg_kw: dict, repeats: int = 7) -> dict:
    """What the chunked host loop costs against one jit of all updates, phase by phase.

    Interleaved, ``repeats`` times, all runs doing the same updates:

    * ``monolithic``: one compiled program of all updates (PureJaxRL's and rejax's way);
    * ``bare chunks``: the compiled chunk called once per chunk as the loop does (the next chunk
      launched before the previous one's metrics are read), no other host work;
    * ``train, no run dir``: ``rljax.train`` keeping rows in memory (metrics read every chunk);
    * ``train + logging``: with a run directory: metrics.jsonl, tensorboard, no checkpoints;
    * ``train + logging + checkpoints``: the default (every 60 s and at the end, async).

    Loop times run from the first chunk's launch to the end of the loop, including the final
    checkpoint's commit; one-time set-up (run directory, manifest, Orbax manager) is ``setup_s``.
    Medians are the headline figures: on a 2-core CPU, XLA's two-thread pool runs one execution
    of these small programs either single-threaded (fast) or on both threads (~40 % slower), at
    random, so a best-of-N favours the one-execution monolithic run. ``NPROC=1`` (a one-thread
    pool) removes the coin flip; the printout says which pool ran.

    The chunked runs share one executable through a persistent compilation cache, so their
    differences are the host loop's, not the compiler's.
    """
    shared_executables()
    cfg = PPOConfig(**cfg_kw)
    env, params = envs.make(cfg.env)
    agent = build_agent(cfg, env, params, None)
    plan = plan_updates(cfg.total_timesteps, agent.env_steps_per_update, cfg.updates_per_chunk)
    init = jax.jit(lambda k: agent.init(k, 0, plan.num_updates, cfg.hyperparams(), params))
    mono = jax.jit(make_chunk(agent.update, plan.num_updates, None), donate_argnums=0)
    mono = mono.lower(init(jax.random.key(0))).compile()
    packed_chunk, unpack = pack_output(make_chunk(agent.update, plan.updates_per_chunk, None))
    chunk = jax.jit(packed_chunk, donate_argnums=0).lower(init(jax.random.key(0))).compile()
    t: dict[str, list[float]] = {k: [] for k in ("monolithic", "bare_chunks", "train_in_memory", "train_logging",
                                                 "train_logging_checkpoints", "checkpoint_host", "setup")}
    rljax.train(cfg, options=rljax.RunOptions(quiet=True))  # fills the cache
    for i in range(repeats):
        state = init(jax.random.key(i))
        jax.block_until_ready(state)
        t0 = time.perf_counter()
        jax.block_until_ready(mono(state))
        t["monolithic"].append(time.perf_counter() - t0)
        state = init(jax.random.key(i))
        jax.block_until_ready(state)
        t0 = time.perf_counter()
        previous = None
        for _ in range(plan.num_chunks):
            state, out = chunk(state)
            if previous is not None:
                unpack(jax.device_get(previous))
            previous = out
        unpack(jax.device_get(previous))
        jax.block_until_ready(state)
        t["bare_chunks"].append(time.perf_counter() - t0)
        cfg_i = dataclasses.replace(cfg, seed=i)
        t["train_in_memory"].append(rljax.train(cfg_i, options=rljax.RunOptions(quiet=True)).timings["loop_s"])
        with tempfile.TemporaryDirectory() as tmp:
            r = rljax.train(cfg_i, options=rljax.RunOptions(run_dir=os.path.join(tmp, "log"), quiet=True,
                                                            checkpoints=False))
            t["train_logging"].append(r.timings["loop_s"])
            r = rljax.train(cfg_i, options=rljax.RunOptions(run_dir=os.path.join(tmp, "ckpt"), quiet=True))
            t["train_logging_checkpoints"].append(r.timings["loop_s"])
            t["checkpoint_host"].append(r.timings["checkpoint_s"])
            t["setup"].append(r.timings["setup_s"])
    res: dict = {"chunks": plan.num_chunks, "updates_per_chunk": plan.updates_per_chunk,
                 "xla_cpu_pool": os.environ.get("NPROC", "default")}
    for k, v in t.items():
        res[f"{k}_s"] = statistics.median(v)
        res[f"{k}_best_s"] = min(v)
    variants = ("bare_chunks", "train_in_memory", "train_logging", "train_logging_checkpoints")
    for k in variants:
        # Median of the paired ratios (each run against the monolithic run of the same round):
        # the machine's speed drifts over minutes, and pairing cancels the drift.
        res[f"{k}_pct"] = 100.0 * (statistics.median(x / m for x, m in zip(t[k], t["monolithic"])) - 1.0)
        res[f"{k}_best_pct"] = 100.0 * (res[f"{k}_best_s"] / res["monolithic_best_s"] - 1.0)
    res["overhead_pct"] = res["train_logging_pct"]
    res["checkpoint_pct"] = 100.0 * (res["train_logging_checkpoints_s"] / res["train_logging_s"] - 1.0)
    pool = "NPROC=" + res["xla_cpu_pool"] if res["xla_cpu_pool"] != "default" else "default XLA CPU pool"
    print(f"overhead ({plan.num_chunks} chunks of {plan.updates_per_chunk} updates, {repeats} interleaved rounds, "
          f"{pool}; median (median paired ratio) [best (best vs best)]): monolithic {res['monolithic_s']:.2f}s [{res['monolithic_best_s']:.2f}s]; "
          + "; ".join(f"{k.replace('_', ' ')} {res[k + '_s']:.2f}s ({res[k + '_pct']:+.1f}%) "
                      f"[{res[k + '_best_s']:.2f}s ({res[k + '_best_pct']:+.1f}%)]" for k in variants), flush=True)
    print(f"  chunked loop + logging vs monolithic: {res['overhead_pct']:+.1f}% (median paired "
          f"ratio; {res['train_logging_best_pct']:+.1f}% best vs best); checkpoints (default interval, async, final "
          f"save committed) {res['checkpoint_pct']:+.1f}% of the logged loop ({res['checkpoint_host_s']:.3f}s "
          f"host time); one-time set-up {res['setup_s']:.2f}s", flush=True)
    return res


def overhead_pools() -> dict:
    """:func:`overhead` in a fresh process per XLA CPU pool: one thread (``NPROC=1``), then the
    default. The pool size is fixed when JAX creates its CPU client, hence the subprocesses."""
    out = {}
    for name, nproc in (("one_thread", "1"), ("default", None)):
        env = {k: v for k, v in os.environ.items() if k != "NPROC"}
        if nproc is not None:
            env["NPROC"] = nproc
        with tempfile.TemporaryDirectory() as tmp:
            report = pathlib.Path(tmp, "overhead.json")
            proc = subprocess.run([sys.executable, "-m", "benchmarks.ppo_cartpole", "--only", "overhead",
                                   "--worker", "overhead", "--json", str(report)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print("".join(line + "\n" for line in proc.stdout.splitlines() if not line.startswith("#")),
                  end="", flush=True)
            out[name] = json.loads(report.read_text())["overhead"] if proc.returncode == 0 else None
    return out


def rejax(cfg_kw: dict, seeds: int = 1) -> dict | None:
    setup = None if PEERS_DIR is None else PEERS_DIR / "setup.sh"
    if setup is None or not setup.exists():
        print(f"rejax: no setup.sh in RLJAX_PEERS_DIR ({PEERS_DIR}); skipped")
        return None
    python = subprocess.run(["bash", str(setup)], capture_output=True, text=True, check=True).stdout.split()[-1]
    keys = ["num_envs", "num_steps", "num_epochs", "num_minibatches", "learning_rate", "total_timesteps",
            "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm"]
    sets = [f"{k}={cfg_kw[k]}" for k in keys]
    proc = subprocess.run([python, str(PEERS_DIR / "rejax_run.py"), "--algo", "ppo", "--env", "CartPole-v1",
                           "--seeds", str(seeds), "--set", *sets], capture_output=True, text=True)
    line = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode or not line:
        print(f"rejax failed: {proc.stderr[-2000:]}")
        return None
    res = json.loads(line[-1])
    print(f"rejax ({seeds} seed): compile {res['compile_s']:.2f}s, {res['sps']:,.0f} steps/s, "
          f"return {res['final_return']:.1f}", flush=True)
    return res


def beside_purejaxrl(a: argparse.Namespace) -> dict:
    """Interleaved rounds of rljax's 1-seed run (a fresh process: its own compile) and PureJaxRL's."""
    from benchmarks.population_vs_purejaxrl import run_purejaxrl
    variants = [("rljax", {})] + ([("rljax NPROC=1", {"NPROC": "1"})] if a.xla_threads == 1 else [])
    rows = {name: [] for name, _ in variants} | {"PureJaxRL": []}
    for r in range(a.rounds):
        for name, extra in variants:
            with tempfile.TemporaryDirectory() as tmp:
                out = pathlib.Path(tmp) / "r.json"
                subprocess.run([sys.executable, "-m", "benchmarks.ppo_cartpole", "--only", "seeds", "--seeds", "1",
                                "--json", str(out)], check=True, capture_output=True, env={**os.environ, **extra})
                res = json.loads(out.read_text())["seeds"]
            rows[name].append(dict(sps=res["sps_median"], compile_s=res["compile_s"]))
        peer = run_purejaxrl(a.peers_python, a.peer_script, a.purejaxrl, 0, PUREJAXRL["total_timesteps"])
        rows["PureJaxRL"].append(dict(sps=peer["sps"], compile_s=peer["compile_s"]))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]['sps']:,.0f} steps/s (compile {v[-1]['compile_s']:.2f}s)"
                                            for n, v in rows.items()), flush=True)
    peer = rows["PureJaxRL"]
    out = {}
    for name, _ in variants:
        sps = statistics.median(x["sps"] / p["sps"] for x, p in zip(rows[name], peer))
        comp = statistics.median(x["compile_s"] / p["compile_s"] for x, p in zip(rows[name], peer))
        out[name] = dict(rounds=rows[name], sps_ratio=sps, compile_ratio=comp)
        print(f"{name} / PureJaxRL, medians of {a.rounds} paired rounds: steps/s {sps:.2f}x, compile {comp:.2f}x")
    out["PureJaxRL"] = peer
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=["seeds", "envs64", "vmap", "overhead", "checkpoint", "rejax"])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--purejaxrl", default=os.environ.get("RLJAX_PUREJAXRL_DIR"),
                    help="the folder holding PureJaxRL's ppo.py (section purejaxrl)")
    ap.add_argument("--peers-python", default=os.environ.get("RLJAX_PEERS_PYTHON", "/tmp/rljax-peers/bin/python"))
    ap.add_argument("--peer-script", default=os.environ.get("RLJAX_PEER_SCRIPT", ""),
                    help="the peers' PureJaxRL timing script (purejaxrl_run.py)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (section purejaxrl)")
    ap.add_argument("--xla-threads", type=int, default=0, choices=[0, 1],
                    help="1: also run rljax with a one-thread XLA CPU pool (section purejaxrl)")
    a = ap.parse_args(argv)
    print(f"# {jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}, "
          f"{os.cpu_count()} cores; {REFERENCE}", flush=True)
    results = {}
    if "purejaxrl" in a.only:
        if not a.purejaxrl or not a.peer_script:
            ap.error("--only purejaxrl needs --purejaxrl DIR and --peer-script FILE")
        results["purejaxrl"] = beside_purejaxrl(a)
    if "rejax" in a.only:
        results["rejax"] = rejax(PUREJAXRL)
    if "seeds" in a.only:
        results["seeds"] = run_seeds(PUREJAXRL, list(range(a.seeds)), "PureJaxRL config")
    if "envs64" in a.only:
        results["envs64"] = run_seeds({**PUREJAXRL, "num_envs": 64}, [0], "64 envs")
    if "vmap" in a.only:
        results["vmap"] = vmapped_seeds(PUREJAXRL, 8)
    if "overhead" in a.only:
        results["overhead"] = overhead(PUREJAXRL) if a.worker == "overhead" else overhead_pools()
    if "checkpoint" in a.only:
        results["checkpoint"] = checkpoint_cost({**PUREJAXRL, "total_timesteps": 2_500_000})
    if results.get("rejax") and results.get("seeds"):
        rj, ours = results["rejax"], results["seeds"]
        print(f"ratio rljax/rejax: steps/s {ours['sps_median'] / rj['sps']:.2f}x, "
              f"compile {ours['compile_s'] / rj['compile_s']:.2f}x (lower is better)")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
