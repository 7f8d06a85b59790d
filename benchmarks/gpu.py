"""The accelerator table: rljax beside PureJaxRL and gymnax on one GPU, in one script (< 5 min on an H200).

    python -m benchmarks.gpu                                     # the whole table
    python -m benchmarks.gpu --purejaxrl .peers/purejaxrl/purejaxrl --peer-script .peers/purejaxrl_run.py \\
        --peers-pythonpath /tmp/peers-site                       # with PureJaxRL run beside it
    python -m benchmarks.gpu --smoke                             # tiny sizes: checks the script on a CPU
    python -m benchmarks.gpu --only ppo1,determinism             # some rows

Rows (each measured in its own fresh process, so each pays its own compile and one process's GPU
memory is freed before the next starts):

==============  ==============================================================================
ppo1            PPO CartPole, PureJaxRL's config (4 envs x 128 steps, 4 epochs x 4 minibatches,
                5e5 steps), 1 seed, ``rljax.train`` with a run directory (tracking, checkpoints)
ppo512          the same, 512 seeds vmapped through ``rljax.training.sweep.run_sweep`` (tracking on)
envs2048        2048 envs x 128 steps, 1e8 env steps, ``rljax.train`` with a run directory
envstep         env stepping (a jitted scan of vmapped steps, auto-reset, actions pre-drawn), CartPole
                and Pendulum at 65,536 and 1,048,576 envs, rljax's envs beside gymnax's
sweepcli        the sweep CLI, 512 seeds x 5e5 steps, whole process, its host work split into phases
                (``benchmarks/sweep_host_work.py``)
determinism     the 2048-env config (3 chunks) with ``--deterministic on`` and ``off``: steps/s of
                each, and whether a run resumed in a second process ends bit-identical to an
                uninterrupted one (final checkpoint, every leaf)
==============  ==============================================================================

Steps/s are env steps over compiled compute time (compile excluded), as PureJaxRL's script
measures. PureJaxRL runs from a checkout kept outside the project: ``--purejaxrl DIR`` (the folder
holding its ``ppo.py``) and the peers' timing script ``--peer-script`` (``purejaxrl_run.py``); it
needs gymnax 0.0.9 and distrax, which conflict with rljax's gymnax 1.0.1, so they go in their own
site folder (``--peers-pythonpath``, put first on that subprocess's PYTHONPATH). Without
``--purejaxrl`` the table shows PureJaxRL's recorded H200 figures (``benchmarks/results.md``, "GPU").

On the project's H200 machine (python 3.12, jax 0.11.2 with CUDA 13, flax, optax, orbax, chex,
matplotlib preinstalled; gymnax and tensorboardX are not), carry rljax's missing packages as
wheels, and PureJaxRL's in a second folder (see benchmarks/README.md for the download commands)::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \\
    python3 -m pip install -q --no-index --no-deps --target /tmp/peers-site .whl-peers/*.whl && \\
    PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu --purejaxrl .peers/purejaxrl/purejaxrl \\
        --peer-script .peers/purejaxrl_run.py --peers-pythonpath /tmp/peers-site --json $OUT/gpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUREJAXRL_CFG = dict(num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4, learning_rate=2.5e-4,
                     anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
                     max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh", total_timesteps=500_000)
SECTIONS = ("ppo1", "ppo512", "envs2048", "envstep", "sweepcli", "determinism")

# Recorded figures (one H200; date and versions in benchmarks/results.md, "GPU"): PureJaxRL's own
# make_train, gymnax, and rljax before the changes this table measures.
RECORDED = {
    "ppo1": {"purejaxrl": 87.1e3, "purejaxrl_compile_s": 7.3, "rljax_before": 88.5e3},
    "ppo512": {"purejaxrl": 24.1e6, "purejaxrl_compile_s": 9.9, "rljax_before": 22.9e6},
    "envs2048": {"purejaxrl": 23.6e6, "rljax_before": 22.1e6},
    "envstep CartPole-v1 65536": {"gymnax": 3.9e9, "rljax_before": 3.2e9},
    "envstep CartPole-v1 1048576": {"gymnax": 26.2e9, "rljax_before": 35.5e9},
    "sweepcli": {"purejaxrl_note": "in-process 10.6 s + 9.9 s compile", "rljax_before": "45.8 s whole process: "
                 "12.7 s training, 7.4 s compile, ~25 s host work"},
    "determinism": {"rljax_before": "not bit-identical (params differ by up to 6.5e-5); deterministic flags cost "
                    "28-31 % (2048 envs 22.0M -> 16.0M steps/s)"},
}
TARGETS = {"ppo1": ">= 1.0x PureJaxRL", "ppo512": ">= 1.1x PureJaxRL", "envs2048": ">= 1.1x PureJaxRL",
           "envstep": ">= gymnax", "sweepcli": "host work <= 10 % of training", "determinism":
           "bit-identical when on; on costs <= 10 %"}


def sizes(smoke: bool) -> dict:
    """Every row's sizes: the issue's, or tiny ones (``--smoke``) that run in seconds on a CPU."""
    if smoke:
        return dict(ppo1_steps=4 * 128 * 4, seeds=4, seed_steps=4 * 128 * 4, big_envs=64, big_steps=64 * 16 * 8,
                    big_num_steps=16, env_sizes=(64, 256), env_steps=20, sweep_members=4, sweep_steps=4 * 128 * 4,
                    det_envs=16, det_num_steps=16, det_updates=2)
    return dict(ppo1_steps=500_000, seeds=512, seed_steps=500_000, big_envs=2048, big_steps=100_000_000,
                big_num_steps=128, env_sizes=(65_536, 1_048_576), env_steps=200, sweep_members=512,
                sweep_steps=500_000, det_envs=2048, det_num_steps=128, det_updates=20)


# ------------------------------------------------------------------------------------------------
# Sections, each run in a child process (``--section NAME``): they print ``RESULT {json}``.
# ------------------------------------------------------------------------------------------------

def section_ppo1(z: dict) -> dict:
    import rljax
    from rljax.agents.ppo import PPOConfig

    cfg = PPOConfig(**{**PUREJAXRL_CFG, "total_timesteps": z["ppo1_steps"]})
    with tempfile.TemporaryDirectory() as tmp:
        r = rljax.train(cfg, options=rljax.RunOptions(run_dir=os.path.join(tmp, "run"), quiet=True))
    t = r.timings
    return {"sps": t["total_env_steps"] / t["compute_s"], "compile_s": t["compile_s"], "return": r.final_return}


def section_ppo512(z: dict) -> dict:
    from rljax.agents.ppo import PPOConfig
    from rljax.training.sweep import SweepSpec, run_sweep

    cfg = PPOConfig(**{**PUREJAXRL_CFG, "total_timesteps": z["seed_steps"]})
    with tempfile.TemporaryDirectory() as tmp:
        result, members, _ = run_sweep(cfg, SweepSpec(seeds=tuple(range(z["seeds"]))),
                                       run_dir=os.path.join(tmp, "sweep"), quiet=True)
    t = result.timings
    return {"sps": t["population_sps"], "compile_s": t["compile_s"], "members": len(members),
            "logging_s": t["logging_s"], "summary_s": t.get("summary_s", 0.0)}


def section_envs2048(z: dict) -> dict:
    import rljax
    from rljax.agents.ppo import PPOConfig

    cfg = PPOConfig(**{**PUREJAXRL_CFG, "num_envs": z["big_envs"], "num_steps": z["big_num_steps"],
                       "total_timesteps": z["big_steps"]})
    with tempfile.TemporaryDirectory() as tmp:
        r = rljax.train(cfg, options=rljax.RunOptions(run_dir=os.path.join(tmp, "run"), quiet=True))
    t = r.timings
    return {"sps": t["total_env_steps"] / t["compute_s"], "compile_s": t["compile_s"], "return": r.final_return}


def section_envstep(z: dict) -> dict:
    import gymnax

    import envs
    from benchmarks.env_throughput import make_runner, measure

    out = {}
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        for n in z["env_sizes"]:
            for impl, (env, params) in (("rljax", envs.make(env_id)), ("gymnax", gymnax.make(env_id))):
                fn, args = make_runner(env, params, n, z["env_steps"])
                out[f"{env_id} {n} {impl}"] = n * z["env_steps"] / measure(fn, args, 3)
                del fn, args
    return out


def section_sweepcli(z: dict) -> dict:
    from benchmarks.sweep_host_work import measure

    return measure(ROOT, z["sweep_members"], z["sweep_steps"], [])


def _cli(args: list[str], env: dict) -> tuple[float, str]:
    proc = subprocess.run([sys.executable, "-m", "experiments.ppo_cartpole", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"{args}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    found = re.findall(r"\(([\d,]+) steps/s\)", proc.stdout)
    return (float(found[-1].replace(",", "")) if found else float("nan")), proc.stdout


def section_determinism(z: dict) -> dict:
    """Per mode: an uninterrupted run of 3 chunks, and a run of 1 chunk resumed to 3 in a second
    process (the learning rate is not annealed, so the total does not enter the maths); every
    process compiles afresh (no compilation cache), as a preempted job on a new machine would."""
    per_chunk = z["det_envs"] * z["det_num_steps"] * z["det_updates"]
    flags = ["--num-envs", str(z["det_envs"]), "--num-steps", str(z["det_num_steps"]), "--updates-per-chunk",
             str(z["det_updates"]), "--no-anneal-lr", "--no-compile-cache", "--no-tensorboard", "--quiet",
             "--checkpoint-every", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("off", "on"):
            full, cut = os.path.join(tmp, f"{mode}-full"), os.path.join(tmp, f"{mode}-cut")
            sps, _ = _cli(flags + ["--deterministic", mode, "--total-timesteps", str(3 * per_chunk), "--run-dir", full],
                          env)
            _cli(flags + ["--deterministic", mode, "--total-timesteps", str(per_chunk), "--run-dir", cut], env)
            _cli(["--resume", cut, "--total-timesteps", str(3 * per_chunk), "--no-compile-cache", "--quiet"], env)
            same, max_diff = _same_final_checkpoint(full, cut)
            manifest = json.loads(pathlib.Path(full, "manifest.json").read_text())
            out[mode] = {"sps": sps, "bit_identical": same, "max_abs_diff": max_diff,
                         "deterministic": manifest["determinism"]["deterministic"],
                         "xla_flags": manifest["determinism"]["xla_flags"]}
    return out


def _same_final_checkpoint(a: str, b: str) -> tuple[bool, float]:
    """Whether the newest checkpoints of runs ``a`` and ``b`` hold the same bits, and the largest
    absolute difference of their float leaves. Read in a CPU-only subprocess: this process must
    not take GPU memory (the next row's process needs it)."""
    code = ("import sys, json, numpy as np\nfrom rljax.store.checkpoint import Checkpointer\n"
            "def leaves(d):\n    c = Checkpointer(d)\n    out = c.read(max(c.steps()))[0]\n    c.close()\n    return out\n"
            "x, y = leaves(sys.argv[1]), leaves(sys.argv[2])\n"
            "same = len(x) == len(y) and all(np.array_equal(p, q) for p, q in zip(x, y))\n"
            "diff = max((float(np.max(np.abs(np.asarray(p, float) - np.asarray(q, float)))) for p, q in zip(x, y)\n"
            "            if np.asarray(p).dtype.kind == 'f' and np.asarray(p).size), default=0.0)\n"
            "print(json.dumps([same, diff]))\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code, a, b], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode:
        raise RuntimeError(f"comparing checkpoints failed:\n{proc.stderr[-2000:]}")
    same, diff = json.loads(proc.stdout.splitlines()[-1])
    return same, diff


# ------------------------------------------------------------------------------------------------
# PureJaxRL beside it (its own make_train, through the peers' timing script).
# ------------------------------------------------------------------------------------------------

def run_purejaxrl(a: argparse.Namespace, z: dict, seeds: int, cfg: dict) -> dict | None:
    sets = [f"{k}={v}" for k, v in cfg.items()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [a.peers_pythonpath, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([a.peers_python, a.peer_script, "--dir", a.purejaxrl, "--seeds", str(seeds),
                           "--repeats", str(a.peer_repeats), "--set", *sets], env=env, capture_output=True, text=True,
                          timeout=a.timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        print(f"# PureJaxRL ({seeds} seeds, {sets}) failed ({proc.returncode}): {proc.stderr[-1500:]}", flush=True)
        return None
    return json.loads(lines[-1])


# ------------------------------------------------------------------------------------------------
# The table.
# ------------------------------------------------------------------------------------------------

def _fmt(sps: float | None) -> str:
    if sps is None or sps != sps:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if sps >= scale:
            return f"{sps / scale:.{1 if sps / scale >= 10 else 2}f}{unit}"
    return f"{sps:.0f}"


def run_section(name: str, smoke: bool, timeout: int) -> dict | None:
    cmd = [sys.executable, "-m", "benchmarks.gpu", "--section", name] + (["--smoke"] if smoke else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"# {name}: timed out after {timeout}s", flush=True)
        return None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        print(f"# {name} failed ({proc.returncode}):\n{proc.stderr[-2500:]}", flush=True)
        return None
    out = json.loads(lines[-1][len("RESULT "):])
    out["section_wall_s"] = time.perf_counter() - t0
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (seconds on a CPU): checks the script")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated rows of {SECTIONS}")
    ap.add_argument("--purejaxrl", default=os.environ.get("RLJAX_PUREJAXRL_DIR"),
                    help="folder holding PureJaxRL's ppo.py (kept outside the project); default $RLJAX_PUREJAXRL_DIR")
    ap.add_argument("--peer-script", default=os.environ.get("RLJAX_PEER_SCRIPT", ""),
                    help="a script, kept outside this repository, that times PureJaxRL's own make_train "
                         "(purejaxrl_run.py); without it the recorded PureJaxRL figures are shown")
    ap.add_argument("--peers-python", default=sys.executable, help="python for PureJaxRL")
    ap.add_argument("--peers-pythonpath", default=None, help="site folder with gymnax 0.0.9 and distrax")
    ap.add_argument("--peer-repeats", type=int, default=1,
                    help="PureJaxRL's timed runs per row after its compile (best one counts); 1 keeps the script "
                         "under 5 minutes on an H200")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per row")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write every figure to FILE")
    ap.add_argument("--section", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    z = sizes(a.smoke)
    if a.section:
        print("RESULT " + json.dumps(globals()[f"section_{a.section}"](z)), flush=True)
        return 0
    only = [s for s in a.only.split(",") if s]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        ap.error(f"--only {unknown[0]!r} is not one of {SECTIONS}")
    peers = bool(a.purejaxrl) and bool(a.peer_script) and os.path.exists(a.peer_script)
    t_start = time.perf_counter()
    print(f"# benchmarks/gpu.py {'--smoke ' if a.smoke else ''}{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"PureJaxRL: {'run beside it from ' + a.purejaxrl if peers else 'figures recorded in issue 14 (H200, 2026-12)'}",
          flush=True)
    results: dict = {"smoke": a.smoke, "sizes": z}
    table = []  # (work, rljax, peer, ratio, target)

    def peer(name, seeds, cfg):
        if not peers:
            return None
        return run_purejaxrl(a, z, seeds, cfg)

    ppo_cfg = {"TOTAL_TIMESTEPS": z["ppo1_steps"]}
    for name, seeds, cfg, label in (
            ("ppo1", 0, ppo_cfg, "PPO CartPole, PureJaxRL config, 1 seed"),
            ("ppo512", z["seeds"], {"TOTAL_TIMESTEPS": z["seed_steps"]}, f"same, {z['seeds']} seeds vmapped"),
            ("envs2048", 0, {"NUM_ENVS": z["big_envs"], "NUM_STEPS": z["big_num_steps"],
                             "TOTAL_TIMESTEPS": z["big_steps"]},
             f"{z['big_envs']} envs x {z['big_num_steps']} steps, {z['big_steps']:.0e} steps")):
        if name not in only:
            continue
        mine = run_section(name, a.smoke, a.timeout)
        theirs = peer(name, seeds, cfg)
        results[name] = {"rljax": mine, "purejaxrl": theirs}
        ref = theirs["sps"] if theirs else (None if a.smoke else RECORDED[name]["purejaxrl"])
        ref_compile = theirs["compile_s"] if theirs else RECORDED[name].get("purejaxrl_compile_s")
        sps = mine["sps"] if mine else None
        table.append((label, f"{_fmt(sps)}/s, compile {mine['compile_s']:.1f} s" if mine else "failed",
                      (f"{_fmt(ref)}/s" + (f", compile {ref_compile:.1f} s" if ref_compile else "")
                       + ("" if theirs else " (recorded)")) if ref else "-",
                      f"{sps / ref:.2f}x" if sps and ref else "-", TARGETS[name]))
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    if "envstep" in only:
        mine = run_section("envstep", a.smoke, a.timeout)
        results["envstep"] = mine
        for env_id in ("CartPole-v1", "Pendulum-v1"):
            for n in z["env_sizes"]:
                r, g = (mine or {}).get(f"{env_id} {n} rljax"), (mine or {}).get(f"{env_id} {n} gymnax")
                table.append((f"env stepping, {env_id}, {n:,} envs", f"{_fmt(r)}/s" if r else "failed",
                              f"gymnax {_fmt(g)}/s" if g else "-", f"{r / g:.2f}x" if r and g else "-",
                              TARGETS["envstep"]))
        print(f"envstep: {json.dumps(mine)}", flush=True)
    if "sweepcli" in only:
        mine = run_section("sweepcli", a.smoke, max(a.timeout, 300))
        results["sweepcli"] = mine
        if mine:
            train = mine["compute_s"]
            table.append((f"sweep CLI, {z['sweep_members']} seeds x {z['sweep_steps']:.0e}, whole process",
                          f"{mine['process_s']:.1f} s: {train:.1f} s training, {mine['compile_s']:.1f} s compile, "
                          f"{mine['host_s']:.1f} s host work (imports {mine['imports_s']:.1f}, set-up "
                          f"{mine['setup_s']:.1f}, logging {mine['logging_s']:.1f}, checkpoints "
                          f"{mine['checkpoint_s']:.1f}, summary+plots {mine['summary_s']:.1f}, exit/other "
                          f"{mine['other_s']:.1f})",
                          RECORDED["sweepcli"]["purejaxrl_note"] + " (recorded)",
                          f"host {100 * mine['host_s'] / max(train, 1e-9):.0f} % of training", TARGETS["sweepcli"]))
        print(f"sweepcli: {json.dumps(mine)}", flush=True)
    if "determinism" in only:
        mine = run_section("determinism", a.smoke, max(a.timeout, 400))
        results["determinism"] = mine
        if mine:
            cost = 100 * (1 - mine["on"]["sps"] / mine["off"]["sps"])
            table.append(("deterministic mode, 2048-env config" if not a.smoke else "deterministic mode (smoke)",
                          f"on {_fmt(mine['on']['sps'])}/s, off {_fmt(mine['off']['sps'])}/s (cost {cost:.0f} %); "
                          f"resumed == uninterrupted: on {mine['on']['bit_identical']}, off "
                          f"{mine['off']['bit_identical']} (max diff {mine['off']['max_abs_diff']:.1e})",
                          "-", "-", TARGETS["determinism"]))
        print(f"determinism: {json.dumps(mine)}", flush=True)
    print("\n| work | rljax | PureJaxRL / gymnax | ratio | target |\n|---|---|---|---|---|", flush=True)
    for row in table:
        print("| " + " | ".join(row) + " |", flush=True)
    if not peers and not a.smoke:
        print("\nPureJaxRL and gymnax-recorded figures: issue 14, one H200, jax 0.11.2 + CUDA 13, 2026-12. rljax "
              "then: " + "; ".join(f"{k} {_fmt(v['rljax_before']) if isinstance(v['rljax_before'], float) else v['rljax_before']}"
                                   for k, v in RECORDED.items()), flush=True)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s", flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
