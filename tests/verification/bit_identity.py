"""Same seeds, same bits: fingerprints every experiment module's run and compares two commits.

A refactor must not change what a run computes. This script trains, at fixed seeds and short
budgets, every experiment module's configuration (its ``DEFAULTS``, with ``total_timesteps``
shortened), the algorithm variants the modules document, a sweep, a PBT run and data-parallel runs
on 2 CPU devices, and records for each the final params (every leaf, exact bytes) and the metrics
rows (every column but the wall-clock ones). ``--save DIR`` writes the records; ``--compare DIR``
recomputes them and reports every case whose params or rows differ, bit for bit::

    git checkout <before> && python -m tests.verification.bit_identity --save /tmp/bits-before
    git checkout <after>  && python -m tests.verification.bit_identity --compare /tmp/bits-before

Exit status 0 when every case is identical, 1 otherwise. The cases run on the CPU (the
fingerprints of one backend are only comparable with the same backend and jax version).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import numpy as np

from rljax.training.hooks.observe import is_measured

# Columns that measure the machine, not the run.

# name -> (experiment module, config overrides, how: "train" | "sweep" | "pbt")
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "ppo_cartpole": ("experiments.ppo_cartpole", dict(total_timesteps=20_000), "train"),
    "ppo_cartpole_norm": ("experiments.ppo_cartpole", dict(total_timesteps=10_000, normalize_obs=True,
                                                           normalize_reward=True, shared_torso=True), "train"),
    "ppo_pendulum": ("experiments.ppo_pendulum", dict(total_timesteps=20_480), "train"),
    "dqn_cartpole": ("experiments.dqn_cartpole", dict(total_timesteps=15_000, learning_starts=5_000), "train"),
    "dqn_cartpole_variants": ("experiments.dqn_cartpole",
                              dict(total_timesteps=15_000, learning_starts=2_000, double_q=True, dueling=True,
                                   n_step=3, prioritized=True, normalize_obs=True, anneal_lr=True, tau=0.5,
                                   loss="huber"), "train"),
    "sac_pendulum": ("experiments.sac_pendulum", dict(total_timesteps=3_000), "train"),
    "sac_pendulum_variants": ("experiments.sac_pendulum",
                              dict(total_timesteps=3_000, n_step=3, num_steps=4, prioritized=True,
                                   normalize_obs=True), "train"),
    "ppo_sweep": ("experiments.ppo_cartpole", dict(total_timesteps=8_192), "sweep"),
    "ppo_pbt": ("experiments.ppo_cartpole", dict(total_timesteps=10_240, updates_per_chunk=2), "pbt"),
    "dqn_sweep": ("experiments.dqn_cartpole", dict(total_timesteps=6_000, learning_starts=1_000), "sweep"),
    "td3_pendulum": ("experiments.td3_pendulum", dict(total_timesteps=3_000), "train"),
    "pqn_cartpole": ("experiments.pqn_cartpole", dict(total_timesteps=20_480), "train"),
    "pqn_sweep": ("experiments.pqn_cartpole", dict(total_timesteps=8_192), "sweep"),
    "a2c_cartpole": ("experiments.a2c_cartpole", dict(total_timesteps=10_240), "train"),
    "c51_cartpole": ("experiments.c51_cartpole", dict(total_timesteps=6_000, learning_starts=1_000), "train"),
    "qrdqn_cartpole": ("experiments.qrdqn_cartpole", dict(total_timesteps=6_000, learning_starts=1_000), "train"),
    "rainbow_cartpole": ("experiments.rainbow_cartpole", dict(total_timesteps=6_000, learning_starts=1_000), "train"),
    "d4pg_pendulum": ("experiments.d4pg_pendulum", dict(total_timesteps=3_000), "train"),
    "alphazero_tictactoe": ("experiments.alphazero_tictactoe", dict(total_timesteps=4_096), "train"),
    "muzero_cartpole": ("experiments.muzero_cartpole", dict(total_timesteps=8_192), "train"),
}
# Data-parallel cases, run in a child process with 2 CPU devices.
PARALLEL_CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "ppo_cartpole_2dev": ("experiments.ppo_cartpole", dict(total_timesteps=10_240, num_devices=2), "train"),
    "dqn_cartpole_2dev": ("experiments.dqn_cartpole", dict(total_timesteps=6_000, learning_starts=1_000,
                                                           num_envs=10, batch_size=128, num_devices=2,
                                                           prioritized=True), "train"),
    "sac_pendulum_2dev": ("experiments.sac_pendulum", dict(total_timesteps=2_000, num_devices=2), "train"),
}


def _config(module: str, overrides: dict[str, Any]) -> Any:
    """The experiment module's config (its ``DEFAULTS``) at seed 0 with ``overrides``."""
    from rljax.core.config import RunConfig

    mod = importlib.import_module(module)
    classes = [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, RunConfig) and v is not RunConfig]
    if len(classes) != 1:
        raise RuntimeError(f"{module} should import exactly one config class, found {classes}")
    return classes[0](**{**mod.DEFAULTS, "seed": 0, **overrides})


def _params_of(result: Any) -> Any:
    """The trained params of a result, through whichever name the agent interface uses."""
    agent = result.agent
    for name in ("params_of", "params"):
        fn = getattr(agent, name, None)
        if callable(fn):
            return fn(result.state)
    raise AttributeError("the agent exposes neither params_of nor params")


def _leaves(tree: Any) -> dict[str, np.ndarray]:
    import jax

    return {jax.tree_util.keystr(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _clean_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not is_measured(k)} for r in rows]


def run_case(name: str, spec: tuple[str, dict[str, Any], str]) -> tuple[dict[str, np.ndarray], Any]:
    """Trains one case; returns (params leaves, rows)."""
    import rljax

    module, overrides, how = spec
    config = _config(module, overrides)
    if how == "train":
        result = rljax.train(config, options=rljax.RunOptions(quiet=True, handle_signals=False))
        return _leaves(_params_of(result)), _clean_rows(result.rows)
    from rljax.training.sweep import SweepSpec, run_sweep

    if how == "sweep":
        field = "learning_rate"
        sweep = SweepSpec(grid={field: [getattr(config, field), 2 * getattr(config, field)]}, seeds=(0, 1))
    else:
        from rljax.training.hooks.pbt import PBTSpec

        sweep = SweepSpec(grid={"learning_rate": [1e-4, 2.5e-4, 5e-4, 1e-3]}, seeds=(0,),
                          pbt=PBTSpec(interval=2, fields={"learning_rate": (1e-5, 1e-2)}, fraction=0.25, seed=3))
    result, _, _ = run_sweep(config, sweep, quiet=True, plots=False, handle_signals=False)
    rows = [_clean_rows(r) for r in result.member_rows]
    return _leaves(_params_of(result)), rows


def fingerprints(cases: dict[str, tuple[str, dict[str, Any], str]], only: set[str] | None
                 ) -> dict[str, tuple[dict[str, np.ndarray], Any]]:
    out = {}
    for name, spec in cases.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        out[name] = run_case(name, spec)
        print(f"  {name}: {len(out[name][0])} param leaves, {time.perf_counter() - t0:.1f}s", flush=True)
    return out


def _write(directory: pathlib.Path, records: dict[str, tuple[dict[str, np.ndarray], Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, (leaves, rows) in records.items():
        np.savez(directory / f"{name}.npz", **{f"leaf{i}": v for i, v in enumerate(leaves.values())})
        (directory / f"{name}.json").write_text(json.dumps({"paths": list(leaves), "rows": rows}, sort_keys=True))


def _compare(directory: pathlib.Path, name: str, leaves: dict[str, np.ndarray], rows: Any) -> list[str]:
    """What differs between a saved case and a fresh one (empty: bit-identical)."""
    if not (directory / f"{name}.json").exists():
        print(f"  {name}: new case, no saved record in {directory} (not compared)")
        return []
    saved = json.loads((directory / f"{name}.json").read_text())
    arrays = np.load(directory / f"{name}.npz")
    saved_leaves = [arrays[f"leaf{i}"] for i in range(len(saved["paths"]))]
    problems = []
    new_leaves = list(leaves.values())
    if len(saved_leaves) != len(new_leaves):
        problems.append(f"{name}: {len(saved_leaves)} param leaves saved, {len(new_leaves)} now")
    for i, (a, b) in enumerate(zip(saved_leaves, new_leaves)):
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            diff = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))) if a.shape == b.shape else "shape"
            problems.append(f"{name}: param {saved['paths'][i]} differs (max |diff| {diff})")
    fresh = json.loads(json.dumps(rows, sort_keys=True))
    if saved["rows"] != fresh:
        problems.append(f"{name}: metrics rows differ: {_first_row_difference(saved['rows'], fresh)}")
    return problems


def _first_row_difference(a: Any, b: Any) -> str:
    flat_a = a if a and isinstance(a[0], dict) else [r for member in a for r in member]
    flat_b = b if b and isinstance(b[0], dict) else [r for member in b for r in member]
    if len(flat_a) != len(flat_b):
        return f"{len(flat_a)} rows saved, {len(flat_b)} now"
    for i, (ra, rb) in enumerate(zip(flat_a, flat_b)):
        keys = sorted(set(ra) | set(rb))
        bad = [f"{k}: {ra.get(k)!r} -> {rb.get(k)!r}" for k in keys if ra.get(k) != rb.get(k)]
        if bad:
            return f"row {i}: " + "; ".join(bad[:4])
    return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--save", metavar="DIR", help="record the fingerprints in DIR")
    what.add_argument("--compare", metavar="DIR", help="compare with the fingerprints saved in DIR")
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--parallel-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    directory = pathlib.Path(args.save or args.compare)
    only = set(args.only) if args.only else None
    unknown = sorted((only or set()) - set(CASES) - set(PARALLEL_CASES))
    if unknown:  # (names given as one comma-joined word land here too)
        parser.error(f"--only: unknown case(s) {', '.join(unknown)}; cases (space-separated): "
                     f"{' '.join([*CASES, *PARALLEL_CASES])}")

    import jax

    jax.config.update("jax_platforms", "cpu")
    child_status = 0
    if args.parallel_child:
        records = fingerprints(PARALLEL_CASES, only)
    else:
        records = fingerprints(CASES, only)
        if not only or only & set(PARALLEL_CASES):
            env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
            with_child = [sys.executable, "-m", "tests.verification.bit_identity", "--parallel-child",
                          "--save" if args.save else "--compare", str(directory)]
            if only:
                with_child += ["--only", *sorted(only)]
            child_status = subprocess.run(with_child, env=env, timeout=1800).returncode
            if child_status:  # this process's own cases are still compared and reported below
                print(f"data-parallel cases: status {child_status}")
    if args.save:
        if child_status:
            return 1
        _write(directory, records)
        print(f"saved {len(records)} cases in {directory}")
        return 0
    problems = [p for name, (leaves, rows) in records.items() for p in _compare(directory, name, leaves, rows)]
    for p in problems:
        print("DIFFERS", p)
    compared = [n for n in records if (directory / f"{n}.json").exists()]
    print(f"{len(compared) - len({p.split(':')[0] for p in problems})} of {len(compared)} cases bit-identical"
          + (" (data-parallel child)" if args.parallel_child else ""))
    return 1 if problems or child_status else 0


if __name__ == "__main__":
    sys.exit(main())
