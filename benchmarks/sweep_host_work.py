"""Host work of a sweep against its member count: the sweep CLI's process, split into phases.

    python -m benchmarks.sweep_host_work                          # 64, 128, 512 members
    python -m benchmarks.sweep_host_work --members 512 --compare /work/main   # beside another checkout

Each measurement is one fresh process running ``experiments.ppo_cartpole sweep --seeds N`` with a
tiny budget (``--total-timesteps``, default 10 updates per member), so training is short and the
host's share shows: imports, set-up (members, population, trackers: each member's config.json,
manifest.json, metrics.jsonl and tensorboard writer), compile, compute, per-chunk logging,
checkpoints, the summary and plots, interpreter exit. ``host work`` is the process's wall time
less compile and compute. With ``--compare DIR`` the same command runs with ``PYTHONPATH=DIR`` (an
older checkout) in interleaved rounds, for a before/after table.
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
TIMING = re.compile(r"RLJAX_TIMINGS (\{.*\})")


def measure(checkout: pathlib.Path, members: int, steps: int, extra: list[str]) -> dict:
    """One sweep CLI process over ``members`` seeds; its phases in seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        code = ("import json, sys, time; t0 = time.perf_counter()\n"
                "import rljax.training.sweep as sweep\n"
                "from experiments.ppo_cartpole import main\n"
                "t_imports = time.perf_counter() - t0\n"
                "real = sweep._run_sweep\n"
                "def timed(*a, **k):\n"
                "    out = real(*a, **k)\n"
                "    t = {k: v for k, v in out[0].timings.items() if isinstance(v, (int, float))}\n"
                "    print('RLJAX_TIMINGS ' + json.dumps(dict(t, imports_s=t_imports)), flush=True)\n"
                "    return out\n"
                "sweep._run_sweep = timed\n"
                "sys.exit(main(sys.argv[1:]))\n")
        cmd = [sys.executable, "-c", code, "sweep", "--seeds", str(members), "--total-timesteps", str(steps),
               "--run-dir", os.path.join(tmp, "sweep"), "--quiet", "--no-compile-cache", *extra]
        env = {**os.environ, "PYTHONPATH": str(checkout), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "")}
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - t0
    found = TIMING.findall(proc.stdout)
    if proc.returncode or not found:
        raise RuntimeError(f"sweep of {members} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    t = json.loads(found[-1])
    out = {"members": members, "process_s": wall, **{k: t.get(k, 0.0) for k in (
        "imports_s", "setup_s", "compile_s", "compute_s", "logging_s", "checkpoint_s", "summary_s")}}
    out["host_s"] = wall - out["compile_s"] - out["compute_s"]
    out["other_s"] = out["host_s"] - sum(out[k] for k in ("imports_s", "setup_s", "logging_s", "checkpoint_s",
                                                          "summary_s"))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", default="64,128,512")
    ap.add_argument("--steps", type=int, default=4 * 128 * 10, help="env steps per member")
    ap.add_argument("--compare", default=None, metavar="DIR", help="another checkout to measure beside this one")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", default=None, metavar="FILE", help="also write every measurement to FILE")
    a, extra = ap.parse_known_args(argv)
    checkouts = {"this": ROOT}
    if a.compare:
        checkouts = {"before": pathlib.Path(a.compare).resolve(), "after": ROOT}
    print(f"# {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; PPO CartPole sweep CLI, "
          f"{a.steps:,} env steps per member; seconds", flush=True)
    print(f"{'checkout':>8} {'members':>7} {'process':>8} {'host':>7} {'imports':>7} {'setup':>6} {'compile':>7} "
          f"{'compute':>7} {'logging':>7} {'ckpt':>5} {'summary':>7} {'other':>6}", flush=True)
    results = []
    for _ in range(a.rounds):
        for n in (int(x) for x in a.members.split(",")):
            for name, path in checkouts.items():
                r = dict(measure(path, n, a.steps, extra), checkout=name)
                results.append(r)
                print(f"{name:>8} {n:>7} {r['process_s']:>8.1f} {r['host_s']:>7.1f} {r['imports_s']:>7.1f} "
                      f"{r['setup_s']:>6.1f} {r['compile_s']:>7.1f} {r['compute_s']:>7.1f} {r['logging_s']:>7.2f} "
                      f"{r['checkpoint_s']:>5.2f} {r['summary_s']:>7.2f} {r['other_s']:>6.1f}", flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
