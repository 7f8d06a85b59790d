"""An 8-seed PPO CartPole population through rljax's sweep API beside PureJaxRL's 8-seed vmap.

    python -m benchmarks.population_vs_purejaxrl --purejaxrl SCRATCH/purejaxrl/purejaxrl \\
        --peers-python /tmp/rljax-peers/bin/python                   # 3 interleaved rounds
    python -m benchmarks.population_vs_purejaxrl --rounds 1 --devices 1,2 --purejaxrl ...

Both sides train PureJaxRL's CartPole configuration (4 envs x 128 steps, 4 epochs x 4 minibatches,
5e5 env steps per seed) for 8 seeds vmapped in one compiled program, each in a fresh process so each
pays its own compile. rljax runs :func:`rljax.training.sweep.run_sweep` with tracking on (a temporary run
directory: every member's metrics.jsonl and tensorboard events, the sweep's checkpoints, summary
and plots) and its health checks; PureJaxRL runs its own unmodified ``make_train`` through
``purejaxrl_run.py`` (the peers' timing script, beside this project; ``--peer-script``), in the
peers' virtual environment (``--peers-python``, built by the peers' ``setup.sh``). Rounds are
interleaved (rljax, PureJaxRL, rljax, ...), so both see the same machine load.

Printed per round: env steps/s of the whole population (compiled compute only, compile excluded, as
PureJaxRL's script measures), compile seconds, and the ratio rljax / PureJaxRL. ``--devices 1,2``
also runs the population split over 2 fake CPU devices (one process per device count).

``--profile`` instead times, in one process and interleaved, one chunk of the population's program
(what a sweep compiles: the vmapped chunk with its metrics vector, non-finite check and episode
sums) against the same vmapped scan of updates without those, and against a single seed's chunk run
once per member: what the population path adds per member inside the chunk.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

from benchmarks import json_result

PUREJAXRL = dict(num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4, learning_rate=2.5e-4,
                 anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
                 max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", total_timesteps=500_000)
ROOT = pathlib.Path(__file__).resolve().parents[1]
PEER_SCRIPT = ROOT.parent / "shared" / "peers" / "purejaxrl_run.py"


def child(seeds: int, devices: int, steps: int, plots: bool) -> dict:
    """One rljax population run in this (fresh) process: run_sweep with a run directory."""
    from rljax.cli.process import request_cpu_devices

    request_cpu_devices(devices)
    from rljax.agents.ppo import PPOConfig
    from rljax.training.sweep import SweepSpec, run_sweep

    cfg = PPOConfig(**{**PUREJAXRL, "total_timesteps": steps})
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result, members, _ = run_sweep(cfg, SweepSpec(seeds=tuple(range(seeds))), run_dir=os.path.join(tmp, "sweep"),
                                       devices=devices, quiet=True, plots=plots)
        total = time.perf_counter() - t0
    t = result.timings
    returns = [rows[-1]["episode_return_mean"] for rows in result.member_rows]
    return dict(peer="rljax", seeds=seeds, devices=devices, compile_s=round(t["compile_s"], 2),
                compute_s=round(t["compute_s"], 3), sps=round(t["population_sps"]), logging_s=round(t["logging_s"], 3),
                checkpoint_s=round(t["checkpoint_s"], 3), setup_s=round(t["setup_s"], 3), total_s=round(total, 2),
                num_chunks=t["num_chunks"], final_return=round(statistics.mean(r for r in returns if r is not None), 1))


def profile_chunk(seeds: int, steps: int, repeats: int = 3) -> None:
    """Seconds of one chunk: the sweep's program, a bare vmapped scan, and one seed's chunk x ``seeds``."""
    import jax
    import jax.numpy as jnp

    import envs
    from rljax.agents import build_agent
    from rljax.agents.ppo import PPOConfig
    from rljax.training.program import make_chunk, pack_output, plan_updates
    from rljax.runtime.devices import run_once
    from rljax.training.program import population_init
    from rljax.training.sweep import SweepSpec, build_members, make_population

    cfg = PPOConfig(**{**PUREJAXRL, "total_timesteps": steps})
    env, params = envs.make(cfg.env)
    agent = build_agent(cfg, env, params, None)
    plan = plan_updates(cfg.total_timesteps, agent.env_steps_per_update, 0)
    pop = make_population(cfg, params, build_members(cfg, params, SweepSpec(seeds=tuple(range(seeds)))))
    keys = jax.vmap(jax.random.key)(jnp.arange(seeds, dtype=jnp.uint32))
    init = population_init(agent, plan.num_updates)

    def fresh():
        return jax.block_until_ready(run_once(init, keys, pop.hyperparams, pop.env_params))

    packed, _ = pack_output(make_chunk(agent.update, plan.updates_per_chunk, None))

    def bare_chunk(state):
        state, outs = jax.lax.scan(lambda s, _: agent.update(s), state, None, length=plan.updates_per_chunk)
        return state, outs.metrics

    programs = {
        "sweep program (vmapped chunk + metrics vector + checks)": jax.jit(jax.vmap(packed), donate_argnums=0)
        .lower(fresh()).compile(),
        "bare vmapped scan of updates": jax.jit(jax.vmap(bare_chunk), donate_argnums=0).lower(fresh()).compile()}
    one = jax.jit(packed, donate_argnums=0).lower(jax.tree.map(lambda x: x[0], fresh())).compile()
    times: dict[str, list[float]] = {k: [] for k in [*programs, f"one seed's chunk x {seeds}"]}
    for _ in range(repeats):
        for name, fn in programs.items():
            state = fresh()
            t0 = time.perf_counter()
            jax.block_until_ready(fn(state))
            times[name].append(time.perf_counter() - t0)
        state = fresh()
        t0 = time.perf_counter()
        for i in range(seeds):
            jax.block_until_ready(one(jax.tree.map(lambda x, i=i: x[i], state)))
        times[f"one seed's chunk x {seeds}"].append(time.perf_counter() - t0)
    print(f"# one chunk of {plan.updates_per_chunk} updates, {seeds} members, {repeats} interleaved repeats (s)")
    for name, ts in times.items():
        print(f"{name}: " + ", ".join(f"{t:.2f}" for t in ts), flush=True)


def run_rljax(seeds: int, devices: int, steps: int, plots: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    return json_result([sys.executable, "-m", "benchmarks.population_vs_purejaxrl", "--child", "--seeds", str(seeds),
                        "--devices", str(devices), "--steps", str(steps)] + ([] if plots else ["--no-plots"]),
                       "rljax child", marker="RESULT ", env=env, cwd=ROOT)


def run_purejaxrl(python: str, script: str, directory: str, seeds: int, steps: int) -> dict:
    return json_result([python, script, "--dir", directory, "--seeds", str(seeds), "--repeats", "1",
                        "--set", f"TOTAL_TIMESTEPS={steps}"], "PureJaxRL", env={**os.environ, "JAX_PLATFORMS": "cpu"})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--purejaxrl", default=os.environ.get("RLJAX_PUREJAXRL_DIR"),
                    help="folder holding PureJaxRL's ppo.py (kept outside the project); default $RLJAX_PUREJAXRL_DIR")
    ap.add_argument("--peers-python", default=os.environ.get("RLJAX_PEERS_PYTHON", "/tmp/rljax-peers/bin/python"))
    ap.add_argument("--peer-script", default=str(PEER_SCRIPT))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=PUREJAXRL["total_timesteps"], help="env steps per seed")
    ap.add_argument("--devices", default="1", help="comma-separated device counts for rljax's population")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--profile", action="store_true", help="time the population's chunk against its parts")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.profile:
        profile_chunk(a.seeds, a.steps)
        return
    if a.child:
        print("RESULT " + json.dumps(child(a.seeds, int(a.devices), a.steps, not a.no_plots)), flush=True)
        return
    import jax

    devices = [int(d) for d in a.devices.split(",")]
    print(f"# {os.cpu_count()} cores, jax {jax.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"{a.seeds} seeds x {a.steps:,} env steps, PureJaxRL's CartPole config", flush=True)
    peer_ok = a.purejaxrl and os.path.exists(a.peers_python) and os.path.exists(a.peer_script)
    if not peer_ok:
        print("# PureJaxRL not run (give --purejaxrl DIR and --peers-python)", flush=True)
    rows: dict[str, list[dict]] = {}
    for r in range(a.rounds):
        for d in devices:
            out = run_rljax(a.seeds, d, a.steps, not a.no_plots)
            rows.setdefault(f"rljax {d} dev", []).append(out)
            print(f"round {r}: rljax sweep ({d} device{'s' if d > 1 else ''}): {out['sps']:>10,} env steps/s in all, "
                  f"compile {out['compile_s']:.2f}s, logging {out['logging_s']:.2f}s, checkpoints "
                  f"{out['checkpoint_s']:.2f}s, whole run {out['total_s']:.1f}s, return {out['final_return']}",
                  flush=True)
        if peer_ok:
            out = run_purejaxrl(a.peers_python, a.peer_script, a.purejaxrl, a.seeds, a.steps)
            rows.setdefault("purejaxrl", []).append(out)
            print(f"round {r}: PureJaxRL vmap:           {out['sps']:>10,} env steps/s in all, "
                  f"compile {out['compile_s']:.2f}s, return {out['final_return']}", flush=True)
            for d in devices:
                print(f"round {r}: ratio rljax ({d} dev) / PureJaxRL: "
                      f"{rows[f'rljax {d} dev'][-1]['sps'] / out['sps']:.2f}x", flush=True)
    for name, rs in rows.items():
        print(f"{name}: median {statistics.median(x['sps'] for x in rs):,.0f} env steps/s, "
              f"compile {statistics.median(x['compile_s'] for x in rs):.2f}s", flush=True)
    if "purejaxrl" in rows:
        for d in devices:
            ratios = [x["sps"] / y["sps"] for x, y in zip(rows[f"rljax {d} dev"], rows["purejaxrl"])]
            print(f"ratio rljax ({d} dev) / PureJaxRL per round: {', '.join(f'{q:.2f}x' for q in ratios)}; "
                  f"median {statistics.median(ratios):.2f}x", flush=True)
    print("RESULT " + json.dumps(rows), flush=True)


if __name__ == "__main__":
    main()
