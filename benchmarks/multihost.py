"""Multi-host overhead on one machine, and a scaling estimate for a real cluster.

    python -m benchmarks.multihost                    # PPO CartPole 64 envs, and an 8-seed sweep
    python -m benchmarks.multihost --updates 64       # longer runs

Runs the same command as 1 process x 4 fake CPU devices and as 2 processes x 2 devices joined on
loopback (``rljax launch``), and reads the ``time/*`` columns of their metrics rows (chunks after
the first). Prints, per configuration:

* the median chunk time of each, and the extra time of the 2-process chunk: the cost of its
  collectives crossing processes (gloo over TCP instead of XLA's in-process all-reduce);
* the boundary agreement (``time/agree_s``) as a share of the 2-process chunk;
* the gradient all-reduce volume per update (params x minibatch steps), from which it prints the
  estimated data-parallel scaling efficiency for 2, 8 and 64 GPU hosts on a 100 Gb/s network.

On one machine with fake devices this is a correctness-and-overhead figure, never a speed-up: all
processes share the same cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Estimate inputs (stated, not measured here): a GPU update's compute time comes from the recorded
# H200 figure (benchmarks/results.md, "GPU": PureJaxRL-sized PPO CartPole, 2048 envs x 128 steps
# at 22.1M env steps/s); the network from its nominal numbers.
NETWORK_GBIT_S = 100.0
LATENCY_S = (10e-6, 30e-6)  # per message hop: RDMA-class, TCP-class
H200_UPDATE_S = 2048 * 128 / 22.1e6


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJAX_") and k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    return env


def _run(argv: list[str], processes: int) -> None:
    cmd = [sys.executable, *argv]
    if processes > 1:
        cmd = [sys.executable, "-m", "rljax.cli.main", "launch", "-n", str(processes), "-d", str(4 // processes), "--", *cmd]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def _rows(run_dir: pathlib.Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return rows[1:] or rows  # the first chunk includes warm-up


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(float(r.get(key) or 0.0) for r in rows)


def _param_bytes(num_envs: int) -> int:
    import jax

    from rljax.agents import build_agent
    from rljax.agents.ppo import PPOConfig
    from rljax.core.registry import make

    config = PPOConfig(num_envs=num_envs)
    env, env_params = make(config.env)
    agent = build_agent(config, env, env_params, None)
    state = jax.eval_shape(lambda k: agent.init(k, 0, 1, config.hyperparams(), env_params), jax.random.key(0))
    return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(state.params))


def estimate(param_bytes: int, allreduces_per_update: int, update_s: float) -> list[str]:
    """Data-parallel efficiency (compute / (compute + all-reduce time)) per host count, for a
    bandwidth-optimal all-reduce: 2 (N-1)/N of the data crosses each link, in 2 log2(N) latency hops
    (tree) for these small messages."""
    lines = []
    for n in (2, 8, 64):
        bw = 2 * (n - 1) / n * param_bytes / (NETWORK_GBIT_S * 1e9 / 8)
        effs = []
        for lat in LATENCY_S:
            comm = allreduces_per_update * (bw + 2 * math.log2(n) * lat)
            effs.append(update_s / (update_s + comm))
        lines.append(f"  {n:>2} hosts: {effs[0]:6.1%} (10 us hops) .. {effs[1]:6.1%} (30 us hops); "
                     f"{allreduces_per_update} all-reduces of {param_bytes / 1e3:.1f} kB per update")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=24, help="updates per run")
    args = parser.parse_args(argv)
    num_envs, num_steps, epochs, minibatches = 64, 128, 4, 4
    steps = args.updates * num_envs * num_steps
    ppo = ["-m", "experiments.ppo_cartpole", "--num-devices", "4", "--num-envs", str(num_envs),
           "--total-timesteps", str(steps), "--updates-per-chunk", "4", "--no-tensorboard", "--no-checkpoints"]
    sweep = ["-m", "experiments.ppo_cartpole", "sweep", "--seeds", "8", "--num-devices", "4", "--total-timesteps",
             str(args.updates * 512), "--updates-per-chunk", "4", "--no-plots", "--no-tensorboard",
             "--no-checkpoints"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv_ in (("PPO CartPole, 64 envs over 4 devices (data parallel)", ppo),
                            ("8-seed PPO CartPole sweep over 4 devices (population)", sweep)):
            one, two = pathlib.Path(tmp) / f"{len(name)}-1", pathlib.Path(tmp) / f"{len(name)}-2"
            _run([*argv_, "--run-dir", str(one)], 1)
            _run([*argv_, "--run-dir", str(two)], 2)
            if "sweep" in argv_:
                one, two = (next((d / "members").iterdir()) for d in (one, two))
            r1, r2 = _rows(one), _rows(two)
            c1, c2, agree = _median(r1, "time/compute_s"), _median(r2, "time/compute_s"), _median(r2, "time/agree_s")
            chunk2 = _median(r2, "time/interval_s")
            print(f"{name}:")
            print(f"  chunk (4 updates): 1 process x 4 devices {c1 * 1e3:8.1f} ms; 2 processes x 2 devices "
                  f"{c2 * 1e3:8.1f} ms (+{(c2 - c1) / c2:.0%} of it for collectives crossing processes)")
            print(f"  boundary agreement: {agree * 1e3:.2f} ms = {agree / chunk2:.2%} of the 2-process chunk interval")
    param_bytes = _param_bytes(4)
    print(f"Estimated data-parallel scaling on GPU hosts at {NETWORK_GBIT_S:g} Gb/s (one PPO update of 2048 envs "
          f"x 128 steps per host = {H200_UPDATE_S * 1e3:.1f} ms on an H200):")
    for line in estimate(param_bytes, epochs * minibatches, H200_UPDATE_S):
        print(line)
    print("  sweeps: members never communicate; per chunk only the metrics all-gather and the agreement cross hosts "
          "(~100% efficiency for chunks of a second or more)")


if __name__ == "__main__":
    main()
