"""A bench's cells (seeds vmapped in one compiled sweep) against the same runs one seed at a time.

    python -m benchmarks.bench_vmap                        # ppo, a2c x the 5 classic envs x 10 seeds
    python -m benchmarks.bench_vmap --quick                # a check of the script: CartPole, 2 seeds, 2,048 steps
    python -m benchmarks.bench_vmap --algorithms ppo,pqn --rounds 2 --run-dir runs/bench-vmap

The issue's target: "a bench of 2 algorithms x 5 classic envs x 10 seeds: one compile per cell;
cells with seeds vmapped >= 3x faster than the same runs one by one (this CPU, same run)".

The bench is the shipped ``classic`` suite (``rljax/bench/suites/classic.toml``: its envs, each env's
algorithms, its evaluation protocol) narrowed to ``--algorithms`` (default ppo and a2c, the two that
fit all five envs) and ``--seeds``, with small per-env budgets (:data:`BUDGETS`, or ``--total-timesteps``
for all) so the whole comparison takes minutes, not hours. Per cell, in turn:

- **vmapped**: :func:`rljax.bench.run_bench` on the bench narrowed to that cell, in a fresh bench
  directory: its seeds as one compiled sweep, checkpointed every chunk, evaluated every chunk, with
  tensorboard events, then the scores and the report (``plots=False``). The seconds are the whole
  call, so they include what a bench adds around its cells (the env's random-score rollout, compiled
  once, and the report): counted against the vmapped side.
- **one by one**: :func:`rljax.train` once per seed on the cell's config
  (:func:`rljax.bench.spec.cell_config`, the seed replaced), each with its own run directory, the
  same checkpoint interval (every chunk), evaluation and tensorboard events. The seconds are the sum
  of the calls.

Compiles are counted with jax's monitoring events (``/jax/core/compile/backend_compile_duration``,
as ``tests/unit/agents/test_ppo.py`` counts them): the chunk program's (``jit(packed_chunk)``) and
every program's, with their seconds. The persistent compilation cache is left as the environment
sets it (off unless ``JAX_COMPILATION_CACHE_DIR`` is set; the header says which): with it on, runs
after the first load their programs from disk instead of compiling them.

Rounds (``--rounds``) interleave the two sides cell by cell, vmapped first in even rounds and one by
one first in odd ones, so both see the same machine load. Printed: the CPU, then one row per cell
and round: chunk compiles of each side, seconds of each side, their ratio, and the ratio with every
compile's seconds taken out of both sides (how much of the gain is the batched computation rather
than the compiles saved); then per cell the median ratio over rounds, and whether the target holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import statistics
import tempfile
import time
from typing import Any

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CHUNK_PROGRAM = "packed_chunk"
"""The name a cell's (and a run's) chunk program compiles under: ``jit(packed_chunk)``."""

BUDGETS = {"CartPole-v1": 20_000, "Acrobot-v1": 20_000, "MountainCar-v0": 20_000, "Pendulum-v1": 10_000,
           "MountainCarContinuous-v0": 20_000}
"""Env steps per run: about a fifth of the classic suite's (100k; MountainCar 200k, Pendulum 50k)."""


class Compiles:
    """Counts backend compiles (all, and the chunk program's) and their seconds, from jax's events."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = self.chunk = 0
        self.seconds = self.chunk_seconds = 0.0

    def __call__(self, event: str, duration: float, **kwargs: Any) -> None:
        if event != COMPILE_EVENT:
            return
        self.count += 1
        self.seconds += duration
        if CHUNK_PROGRAM in str(kwargs.get("fun_name", "")):
            self.chunk += 1
            self.chunk_seconds += duration

    def take(self) -> dict[str, Any]:
        out = {"compiles": self.count, "compile_s": self.seconds, "chunk_compiles": self.chunk,
               "chunk_compile_s": self.chunk_seconds}
        self.reset()
        return out


def cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bench_spec(algorithms: list[str], envs: list[str] | None, seeds: int, total_timesteps: int | None) -> Any:
    """The classic suite narrowed to ``algorithms`` (and ``envs``) and ``seeds``, at the small budgets."""
    from rljax.bench import load_spec, narrow

    spec = narrow(load_spec("classic"), algorithms=algorithms, envs=envs, seeds=seeds, total_timesteps=total_timesteps)
    if total_timesteps is None:
        spec = dataclasses.replace(spec, envs=tuple(dataclasses.replace(e, total_timesteps=BUDGETS.get(e.id, 20_000))
                                                    for e in spec.envs))
    return spec


def run_vmapped(spec: Any, cell: Any, directory: pathlib.Path, compiles: Compiles) -> dict[str, Any]:
    """The cell as a bench of its own (run_bench): its seeds as one compiled sweep."""
    from rljax.bench import narrow, run_bench

    one = narrow(spec, algorithms=[cell.algorithm], envs=[cell.env.id])
    compiles.reset()
    t0 = time.perf_counter()
    run_bench(one, directory, quiet=True, plots=False)
    return {"seconds": time.perf_counter() - t0, **compiles.take()}


def run_one_by_one(spec: Any, cell: Any, directory: pathlib.Path, compiles: Compiles) -> dict[str, Any]:
    """The cell's runs one seed at a time (rljax.train), each checkpointed every chunk like the cell's sweep."""
    import rljax
    from rljax.bench.spec import cell_config

    config = cell_config(spec, cell)
    compiles.reset()
    t0 = time.perf_counter()
    for seed in range(spec.seeds):
        rljax.train(dataclasses.replace(config, seed=seed),
                    options=rljax.RunOptions(run_dir=str(directory / f"seed{seed}"), quiet=True, checkpoint_every=1))
    return {"seconds": time.perf_counter() - t0, **compiles.take()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algorithms", default="ppo,a2c", help="comma-separated, of the classic suite's (default ppo,a2c)")
    ap.add_argument("--envs", default=None, help="comma-separated classic envs (default: all five)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--total-timesteps", type=int, default=None,
                    help="env steps per run on every env (default: the per-env BUDGETS)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds per cell")
    ap.add_argument("--run-dir", default=None, help="keep the bench and run directories here (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="a check of the script: CartPole-v1, 2 seeds, 2,048 env steps")
    a = ap.parse_args(argv)
    if a.quick:
        a.envs, a.seeds, a.total_timesteps = a.envs or "CartPole-v1", 2, a.total_timesteps or 2048

    import jax

    compiles = Compiles()
    jax.monitoring.register_event_duration_secs_listener(compiles)
    spec = bench_spec([n.strip() for n in a.algorithms.split(",")], a.envs and [n.strip() for n in a.envs.split(",")],
                      a.seeds, a.total_timesteps)
    cells = spec.cells()
    cache = jax.config.jax_compilation_cache_dir
    print(f"# {cpu_model()}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; persistent compile cache: {cache or 'off'}")
    print(f"# classic suite: {', '.join(spec.algorithms)} x {len(spec.envs)} envs = {len(cells)} cells, "
          f"{spec.seeds} seeds, {a.rounds} round(s); env steps per run: "
          + ", ".join(f"{e.id} {spec.budget(next(iter(spec.algorithms)), e):,}" for e in spec.envs), flush=True)
    print("| round | cell | chunk compiles vmapped / one by one | compile s vmapped / one by one | vmapped s "
          "| one-by-one s | ratio | ratio without compiles |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(a.run_dir or tmp)
        for r in range(a.rounds):
            for cell in cells:
                where = root / f"round{r}" / cell.algorithm / cell.env.id.replace("/", "--")
                sides = [("vmapped", run_vmapped, where / "bench"), ("one_by_one", run_one_by_one, where / "runs")]
                out = {}
                for side, fn, path in (sides if r % 2 == 0 else sides[::-1]):
                    out[side] = fn(spec, cell, path, compiles)
                v, o = out["vmapped"], out["one_by_one"]
                row = {"round": r, "cell": cell.name, "total_timesteps": cell.total_timesteps, "vmapped": v,
                       "one_by_one": o, "ratio": o["seconds"] / v["seconds"],
                       "ratio_without_compiles": (o["seconds"] - o["compile_s"]) / max(v["seconds"] - v["compile_s"], 1e-9)}
                rows.append(row)
                print(f"| {r} | {cell.name} | {v['chunk_compiles']} / {o['chunk_compiles']} | "
                      f"{v['compile_s']:.1f} / {o['compile_s']:.1f} | {v['seconds']:.1f} | {o['seconds']:.1f} | "
                      f"{row['ratio']:.2f}x | {row['ratio_without_compiles']:.2f}x |", flush=True)
    total = time.perf_counter() - t_all
    print(f"# whole comparison {total / 60:.1f} min; vmapped {sum(x['vmapped']['seconds'] for x in rows):.0f} s, "
          f"one by one {sum(x['one_by_one']['seconds'] for x in rows):.0f} s in all")
    ratios = {c.name: statistics.median(x["ratio"] for x in rows if x["cell"] == c.name) for c in cells}
    if a.rounds > 1:
        for name, q in ratios.items():
            print(f"# {name}: median ratio {q:.2f}x over {a.rounds} rounds")
    one_compile = all(x["vmapped"]["chunk_compiles"] == 1 for x in rows)
    print(f"# target: one chunk compile per cell: {'yes' if one_compile else 'NO'}; every cell >= 3x: "
          f"{'yes' if min(ratios.values()) >= 3 else 'NO'} (lowest {min(ratios.values()):.2f}x, median "
          f"{statistics.median(ratios.values()):.2f}x)", flush=True)
    print("RESULT " + json.dumps({"cpu": cpu_model(), "rows": rows, "total_s": total}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
