"""The distributional family's targets: C51, QR-DQN and Rainbow on CartPole-v1 beside DQN, D4PG on
Pendulum-v1 beside TD3, each from its experiment module's defaults, and the MinAtar cost per env
step of Rainbow against DQN.

    python -m benchmarks.distributional                       # cartpole and pendulum, 3 seeds
    python -m benchmarks.distributional --tasks pendulum --seeds 6
    python -m benchmarks.distributional --tasks minatar-cost  # Rainbow vs DQN, env steps/s on MinAtar

Each learner runs its seeds as one sweep (vmapped in one program) with a greedy evaluation every 5
chunks (16 episodes; the noisy layers at their mean). Printed per learner: each seed's greedy return at
the last evaluation, their mean and std, the mean of the last 3 evaluations, the wall time (compile
included) and env steps/s over all seeds. ``minatar-cost`` trains DQN's and Rainbow's MinAtar
configurations (``experiments/dqn_minatar.py``, ``experiments/rainbow_minatar.py``) for a fixed number of
env steps after learning starts, 5 seeds vmapped, and prints each one's env steps/s and their ratio
(interleaved rounds, compile excluded).
"""

from __future__ import annotations

import argparse
import importlib
import os
import time

import jax
import numpy as np

from benchmarks.bench_vmap import cpu_model
from rljax.training.sweep import SweepSpec, run_sweep

TASKS = {
    "cartpole": ("dqn_cartpole", "c51_cartpole", "qrdqn_cartpole", "rainbow_cartpole"),
    "pendulum": ("td3_pendulum", "d4pg_pendulum"),
}


def experiment_config(module: str, **overrides):
    """The config of ``experiments.<module>`` at its DEFAULTS, with ``overrides``."""
    mod = importlib.import_module(f"experiments.{module}")
    from rljax.core.config import RunConfig

    (cls,) = [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, RunConfig) and v is not RunConfig]
    return cls(**{**mod.DEFAULTS, **overrides})


def learning(modules, seeds: int) -> None:
    print("| experiment | greedy return per seed (last evaluation) | mean +- std | mean of the last 3 | wall s | "
          "env steps/s |")
    print("|---|---|---|---|---|---|")
    for module in modules:
        config = experiment_config(module, eval_interval=5)
        t0 = time.perf_counter()
        result, _, _ = run_sweep(config, SweepSpec(seeds=tuple(range(seeds))), quiet=True, plots=False)
        wall = time.perf_counter() - t0
        evals = [[r["eval/return_mean"] for r in rows if "eval/return_mean" in r] for rows in result.member_rows]
        last = [e[-1] for e in evals]
        last3 = [float(np.mean(e[-3:])) for e in evals]
        steps = result.member_rows[0][-1]["env_steps"] * seeds
        print(f"| {module} | {', '.join(f'{g:.0f}' for g in last)} | {np.mean(last):.1f} +- {np.std(last):.1f} | "
              f"{np.mean(last3):.1f} | {wall:.0f} | {steps / wall:,.0f} |", flush=True)


def minatar_cost(seeds: int, steps: int, rounds: int) -> None:
    """DQN's and Rainbow's MinAtar configs: env steps/s of ``steps`` learning env steps, ``rounds`` rounds."""
    sps = {"dqn_minatar": [], "rainbow_minatar": []}
    for r in range(rounds):
        for module in sps:
            config = experiment_config(module, total_timesteps=5_000 + steps, updates_per_chunk=5_000)
            result, _, _ = run_sweep(config, SweepSpec(seeds=tuple(range(seeds))), quiet=True, plots=False)
            rows = result.member_rows[0]
            # chunk 0 holds the compile and the warm-up; the later chunks are learning steps only.
            chunk_s = [row["wall_time_s"] for row in rows]
            learn_s = chunk_s[-1] - chunk_s[0]
            learn_steps = (rows[-1]["env_steps"] - rows[0]["env_steps"]) * seeds
            sps[module].append(learn_steps / learn_s)
            print(f"round {r}: {module}: {learn_steps / learn_s:,.0f} env steps/s ({seeds} seeds)", flush=True)
    ratio = [d / rb for d, rb in zip(sps["dqn_minatar"], sps["rainbow_minatar"])]
    print(f"Rainbow's cost per env step / DQN's: {np.mean(ratio):.2f} (rounds: {', '.join(f'{x:.2f}' for x in ratio)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tasks", nargs="+", default=["cartpole", "pendulum"], choices=[*TASKS, "minatar-cost"])
    ap.add_argument("--minatar-steps", type=int, default=20_000,
                    help="learning env steps per member, a multiple of 5000, minatar-cost")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds, minatar-cost")
    a = ap.parse_args()
    print(f"# {cpu_model()}, {os.cpu_count()} cores, jax {jax.__version__}, {jax.devices()[0].platform}")
    for task in a.tasks:
        if task == "minatar-cost":
            minatar_cost(max(a.seeds, 5), a.minatar_steps, a.rounds)
        else:
            learning(TASKS[task], a.seeds)


if __name__ == "__main__":
    main()
