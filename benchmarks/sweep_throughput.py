"""Population throughput: a 16-config x 4-seed PPO CartPole sweep as one program vs a single run.

    python -m benchmarks.sweep_throughput                  # 1 device, then 2 fake CPU devices
    python -m benchmarks.sweep_throughput --steps 100000   # env steps per member

Prints compile seconds (one compile for the whole population), total env steps/s of the population,
and the ratio to a single run of the same config measured in the same process. The 2-device figure
runs in a subprocess (the device count is fixed when JAX starts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import jax

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.training.sweep import SweepSpec, run_sweep

GRID = {"learning_rate": [1e-4, 2.5e-4, 5e-4, 1e-3], "ent_coef": [0.0, 0.003, 0.01, 0.03]}  # 16 configs


def measure(steps: int, devices: int, seeds: int) -> dict:
    cfg = PPOConfig(total_timesteps=steps)
    single = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    single_sps = single.timings["total_env_steps"] / single.timings["compute_s"]
    result, members, _ = run_sweep(cfg, SweepSpec(grid=GRID, seeds=tuple(range(seeds))), devices=devices,
                                   quiet=True)
    t = result.timings
    return {"devices": devices, "members": len(members), "compile_s": t["compile_s"],
            "population_sps": t["population_sps"], "single_sps": single_sps, "single_compile_s": single.timings["compile_s"],
            "ratio": t["population_sps"] / single_sps}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000, help="env steps per member")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--devices", type=int, default=0, help="(internal) measure on this many devices")
    a = ap.parse_args(argv)
    if a.devices:
        print("RESULT " + json.dumps(measure(a.steps, a.devices, a.seeds)), flush=True)
        return
    print(f"# {os.cpu_count()} cores, jax {jax.__version__}; 16 configs x {a.seeds} seeds, {a.steps:,} env steps each")
    results = []
    for d in (1, 2):
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={d}"}
        proc = subprocess.run([sys.executable, "-m", "benchmarks.sweep_throughput", "--devices", str(d),
                               "--steps", str(a.steps), "--seeds", str(a.seeds)], env=env, capture_output=True,
                              text=True, timeout=1800)
        line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            print(proc.stderr[-3000:])
            continue
        r = json.loads(line[-1][7:])
        results.append(r)
        print(f"{d} device(s): {r['members']} members, one compile {r['compile_s']:.1f}s, population "
              f"{r['population_sps']:,.0f} env steps/s vs single run {r['single_sps']:,.0f} "
              f"(compile {r['single_compile_s']:.1f}s) -> {r['ratio']:.2f}x", flush=True)
    if len(results) == 2:
        print(f"2 devices vs 1: {results[1]['population_sps'] / results[0]['population_sps']:.2f}x")


if __name__ == "__main__":
    main()
