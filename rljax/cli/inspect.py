"""``rljax inspect RUN_DIR``: a one-screen summary of a run or a sweep, and PNG plots of it
(``rljax inspect A B ...``: several compared, :mod:`rljax.cli.compare`).

Reads only what a run writes (``metrics.jsonl``, ``chunks.jsonl``, ``manifest.json``, ``config.json``,
``checkpoints/``, ``stall-*.txt``; for a sweep also ``sweep.json`` and ``members/<name>/``), so it
works on a run in progress, a finished one or a copy, and compiles nothing. The summary says how
far the run got, its best and latest scores (training return, greedy evaluation), the steps/s trend,
where the host's time per chunk went (the ``time/*`` columns), device memory, checkpoints, resumes,
incidents and stall reports. The metrics are defined in ``docs/metrics.md``.

Plots go to ``RUN_DIR/inspect/`` (``--out`` elsewhere, ``--no-plots`` for none):

* a run: ``returns.png`` (training return and evaluation against env steps and against wall
  time), ``throughput.png`` (steps/s and the host's time per chunk against wall time) and
  ``losses.png`` (every ``*_loss`` column against env steps);
* a sweep: ``configs.png`` (each config's training return, mean and spread over its seeds, and its
  evaluations: the configs compared on one plot) and ``throughput.png`` (the population's).
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from rljax.cli.process import EXIT_USAGE
from rljax.cli.rundata import (EVAL, TRAIN, NotARunError, finite_values, fmt_number, planned_total, read_json, run_kind,
                               wall_times)
from rljax.store.tracking import FINAL_RETURN_CHUNKS

__all__ = ["add_parser", "run", "summary_text", "write_plots"]


def _fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _score_lines(rows: list[dict[str, Any]], indent: str = "") -> list[str]:
    lines = []
    train = finite_values(rows, TRAIN)
    if train:
        best = max(train, key=lambda rv: rv[1])
        recent = [v for _, v in train[-FINAL_RETURN_CHUNKS:]]
        lines.append(f"{indent}training return ({TRAIN}, stochastic policy, episodes that ended in the chunk): "
                     f"latest {fmt_number(train[-1][1])} at {train[-1][0]['env_steps']:,}, best {fmt_number(best[1])} at "
                     f"{best[0]['env_steps']:,}, final (mean of the last {FINAL_RETURN_CHUNKS} chunks) {fmt_number(float(np.mean(recent)))}")
    else:
        lines.append(f"{indent}training return: no episode has finished yet")
    evals = finite_values(rows, EVAL)
    if evals:
        best = max(evals, key=lambda rv: rv[1])
        last = evals[-1][0]
        lines.append(f"{indent}greedy evaluation ({EVAL}, {len(evals)} evaluations): latest {fmt_number(evals[-1][1])} "
                     f"± {fmt_number(last.get('eval/return_std'))} over {last.get('eval/episodes')} episodes at "
                     f"{last['env_steps']:,}, best {fmt_number(best[1])} at {best[0]['env_steps']:,}")
    return lines


def _throughput_lines(rows: list[dict[str, Any]], members: int = 1) -> list[str]:
    sps = [v * members for _, v in finite_values(rows, "sps")]
    if not sps:
        return []
    third = max(1, len(sps) // 3)
    first, last = float(np.median(sps[:third])), float(np.median(sps[-third:]))
    change = (last / first - 1) * 100 if first > 0 else float("nan")
    lines = [f"steps/s{' (population)' if members > 1 else ''}: median {fmt_number(float(np.median(sps)), 0)}; "
             f"first third of the chunks {fmt_number(first, 0)}, last third {fmt_number(last, 0)} ({change:+.0f} %); "
             f"min {fmt_number(min(sps), 0)}, max {fmt_number(max(sps), 0)}"]
    timed = [r for r in rows if "time/interval_s" in r]
    if timed:
        parts = []
        for key, name in (("time/compute_s", "compute"), ("time/host_wait_s", "host wait"),
                          ("time/logging_s", "logging"), ("time/checkpoint_s", "checkpoints"),
                          ("time/eval_s", "evaluation"), ("time/interval_s", "interval")):
            vals = [v for _, v in finite_values(timed, key)]
            if vals:
                parts.append(f"{name} {np.median(vals):.3g} s (max {max(vals):.3g})")
        lines.append("host time per chunk, median: " + ", ".join(parts))
        peak = [v for _, v in finite_values(timed, "memory/peak_bytes_in_use")]
        used = [v for _, v in finite_values(timed, "memory/bytes_in_use")]
        limit = [v for _, v in finite_values(timed, "memory/bytes_limit")]
        if used or peak:
            gib = 2.0 ** 30
            parts = ([f"in use {used[-1] / gib:.2f} GiB at the last chunk"] if used else []) + (
                [f"peak {max(peak) / gib:.2f} GiB"] if peak else [])
            lines.append("device memory (the fullest device): " + ", ".join(parts)
                         + (f", of {limit[-1] / gib:.2f} GiB" if limit else ""))
        else:
            lines.append("device memory: not reported by this backend (CPU reports none)")
        lines += _cost_lines(timed)
        from rljax.training.hooks.stragglers import straggler_summary

        stragglers = straggler_summary(timed)
        if stragglers:
            lines.append(stragglers)
    return lines


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _cost_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The ``cost/*`` columns summed over the chunks (one member's rows: a sweep's members share them)."""
    device_s = [v for _, v in finite_values(rows, "cost/device_s")]
    if not device_s:
        return []
    rate = [v for _, v in finite_values(rows, "cost/env_steps_per_device_s")]
    written = sum(v for _, v in finite_values(rows, "cost/checkpoint_bytes"))
    collective = [v for _, v in finite_values(rows, "cost/collective_bytes_per_update")]
    return [f"cost: {fmt_number(sum(device_s))} device-s over the logged chunks, median "
            f"{fmt_number(float(np.median(rate)), 0)} env steps per device-s; checkpoints wrote {_fmt_bytes(written)}; "
            f"collectives {_fmt_bytes(collective[-1] if collective else 0)} per device per update"]


def _host_lines(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> list[str]:
    """A host-env run's actors and learner (``host/*`` columns over its chunks; docs/metrics.md)."""
    layout = manifest.get("host")
    if not layout or not any("host/policy_lag" in r for r in rows):
        return []

    def values(key: str) -> list[float]:
        return [v for _, v in finite_values(rows, key)]

    slow = [int(v) for v in values("host/slowest_actor")]
    slowest = max(set(slow), key=slow.count) if slow else None
    last = rows[-1]
    return [f"host: {layout['num_actors']} actor(s), policy lag <= {layout['max_policy_lag']} (largest seen "
            f"{int(max(values('host/policy_lag'), default=0))}), queue depth mean "
            f"{fmt_number(float(np.mean(values('host/queue_depth') or [0])), 2)}; busy: actors "
            f"{float(np.mean(values('host/actor_busy') or [0])):.0%}, learner "
            f"{float(np.mean(values('host/learner_busy') or [0])):.0%}; env step p50 "
            f"{fmt_number(float(np.median(values('host/env_step_p50_ms') or [0])), 2)} ms, p99 up to "
            f"{fmt_number(max(values('host/env_step_p99_ms'), default=0), 2)} ms"
            + (f", slowest actor {slowest}" if slowest is not None else "")
            + f"; env restarts {int(last.get('host/env_restarts') or 0)}, lost episodes "
            f"{int(last.get('host/lost_episodes') or 0)}"]


def _run_cost_lines(manifest: dict[str, Any]) -> list[str]:
    """The whole run's cost, as its manifest records it when a session ends (every session, the
    chunks later taken back and the final saves included), or nothing for a run without it."""
    cost = manifest.get("cost")
    if not isinstance(cost, dict) or not cost.get("device_s"):
        return []
    rate = cost.get("env_steps_per_device_s")
    peak = cost.get("peak_memory_bytes")
    taken_back = cost.get("superseded_chunks") or 0
    return [f"cost of the run (manifest.json): {fmt_number(cost['device_s'])} device-s"
            + (f" (with {taken_back} chunks taken back)" if taken_back else "")
            + (f", {fmt_number(rate, 0)} env steps per device-s" if rate else "")
            + f"; checkpoints wrote {_fmt_bytes(cost.get('checkpoint_bytes') or 0)}"
            + f"; peak device memory {_fmt_bytes(peak) if peak is not None else 'not reported by this backend'}"]


def _history_lines(run_dir: pathlib.Path, manifest: dict[str, Any]) -> list[str]:
    from rljax.store.rundir import checkpoint_steps

    lines = []
    steps = checkpoint_steps(run_dir)
    lines.append(f"checkpoints: {len(steps)} kept" + (f", newest at {steps[-1]:,} env steps" if steps else ""))
    resumes = manifest.get("resumes") or []
    if resumes:
        lines.append(f"resumes: {len(resumes)}: " + "; ".join(
            f"{_when(r.get('unix_time'))} from env step "
            + ("(start)" if r.get("from_env_steps") is None else f"{r['from_env_steps']:,}")
            + (f" ({r['layout']['from_num_devices']} -> {r['layout']['num_devices']} devices)"
               if isinstance(r.get("layout"), dict) else "") for r in resumes[-5:])
            + (" (last 5)" if len(resumes) > 5 else ""))
    else:
        lines.append("resumes: none")
    incidents = manifest.get("incidents") or []
    if incidents:
        lines.append(f"incidents: {len(incidents)}")
        for inc in incidents[-5:]:
            detail = ", ".join(f"{k}={v}" for k, v in inc.items() if k not in ("unix_time", "reason"))
            lines.append(f"  {_when(inc.get('unix_time'))} {detail}: {inc.get('reason', '')}")
    else:
        lines.append("incidents: none")
    stalls = sorted(run_dir.glob("stall-*.txt"))
    lines.append(f"stall reports: {', '.join(p.name for p in stalls)}" if stalls else "stall reports: none")
    return lines


def _when(unix: Any) -> str:
    if not isinstance(unix, (int, float)):
        return "?"
    return datetime.datetime.fromtimestamp(unix, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _header(run_dir: pathlib.Path, manifest: dict[str, Any], config: dict[str, Any], what: str) -> str:
    algo = str(manifest.get("algorithm") or "?").removesuffix("Config")
    git = manifest.get("git_commit")
    return (f"{what} {run_dir}: {algo} on {config.get('env', '?')}, seed {config.get('seed', '?')}, started "
            f"{_when(manifest.get('created_unix'))}"
            + (f", git {git[:10]}{' (dirty)' if manifest.get('git_dirty') else ''}" if git else "")
            + f", {manifest.get('backend', '?')} backend")


def _progress_line(rows: list[dict[str, Any]], total: int | None, per: str = "") -> str:
    done = int(rows[-1]["env_steps"]) if rows else 0
    wall = float(rows[-1].get("wall_time_s") or 0.0) if rows else 0.0
    if total:
        state = "finished" if done >= total else "not finished"
        head = f"progress: {done:,} / {total:,} env steps{per} ({100 * done / total:.0f} %, {state})"
    else:
        head = f"progress: {done:,} env steps{per}"
    return head + f", {len(rows)} chunks logged, {_fmt_s(wall)} of run time"


def _run_summary(run_dir: pathlib.Path) -> tuple[str, list[dict[str, Any]]]:
    from rljax.store.tracking import read_chunks

    manifest = read_json(run_dir / "manifest.json") or {}
    config = read_json(run_dir / "config.json") or {}
    rows = read_chunks(run_dir)
    lines = [_header(run_dir, manifest, config, "run"), _progress_line(rows, planned_total(manifest, config))]
    lines += _score_lines(rows) + _throughput_lines(rows) + _host_lines(rows, manifest) + _run_cost_lines(manifest)
    lines += _history_lines(run_dir, manifest)
    return "\n".join(lines), rows


def _sweep_members(run_dir: pathlib.Path) -> tuple[list[Any], list[list[dict[str, Any]]]]:
    from rljax.training.sweep import Member
    from rljax.store.tracking import read_metrics

    record = read_json(run_dir / "sweep.json") or {}
    members = [Member(**m) for m in record.get("members", [])]
    return members, [read_metrics(run_dir / "members" / m.name) for m in members]


def _sweep_summary(run_dir: pathlib.Path) -> tuple[str, list[Any], list[list[dict[str, Any]]]]:
    from rljax.training.sweep import ranking

    manifest = read_json(run_dir / "manifest.json") or {}
    config = read_json(run_dir / "config.json") or {}
    members, member_rows = _sweep_members(run_dir)
    if not members:
        raise NotARunError(f"{run_dir}/sweep.json lists no members")
    first_manifest = read_json(run_dir / "members" / members[0].name / "manifest.json") or {}
    labels = list(dict.fromkeys(m.label for m in members))
    lines = [_header(run_dir, {**first_manifest, **manifest}, config, "sweep")
             + f"; {len(members)} members ({len(labels)} configs x {seeds_text(len(members) // max(len(labels), 1))})"]
    from rljax.store.tracking import read_chunks

    done = [int(rows[-1]["env_steps"]) if rows else 0 for rows in member_rows]
    least = read_chunks(run_dir / "members" / members[int(np.argmin(done))].name)
    lines.append(_progress_line(least, planned_total(first_manifest, config), per=" per member"))
    table = ranking(members, member_rows)[1].rstrip("\n").splitlines()
    lines += table[:1] + [line for line in table[4:]][:12]
    if len(table) > 16:
        lines.append(f"  ... {len(table) - 16} more configs (summary.md)")
    lines += _throughput_lines(read_chunks(run_dir / "members" / members[0].name), members=len(members))
    lines += _run_cost_lines(manifest)
    lines += _history_lines(run_dir, first_manifest)
    return "\n".join(lines), members, member_rows


def summary_text(run_dir: str | pathlib.Path) -> str:
    """The one-screen summary of the run or sweep in ``run_dir``.

    Raises:
        NotARunError: ``run_dir`` holds neither.
    """
    run_dir = pathlib.Path(run_dir)
    if run_kind(run_dir) == "sweep":
        return _sweep_summary(run_dir)[0]
    return _run_summary(run_dir)[0]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    _plt().close(fig)
    return path


def _returns_plot(rows: list[dict[str, Any]], path: pathlib.Path) -> pathlib.Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    wall = dict(zip((r["env_steps"] for r in rows), wall_times(rows)))
    for ax, x_of, x_label in ((axes[0], lambda r: r["env_steps"], "env steps"),
                              (axes[1], lambda r: wall.get(r["env_steps"], np.nan), "wall time (s)")):
        train, evals = finite_values(rows, TRAIN), finite_values(rows, EVAL)
        ax.plot([x_of(r) for r, _ in train], [v for _, v in train], label=f"training ({TRAIN})", linewidth=1)
        if evals:
            ax.plot([x_of(r) for r, _ in evals], [v for _, v in evals], "o--", markersize=3,
                    label=f"greedy evaluation ({EVAL})")
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return")
    axes[0].legend(fontsize=8)
    return _save(fig, path)


def _throughput_plot(rows: list[dict[str, Any]], path: pathlib.Path, members: int = 1) -> pathlib.Path:
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    sps = finite_values(rows, "sps")
    ax1.plot([r["wall_time_s"] for r, _ in sps], [v * members for _, v in sps], ".-", linewidth=1)
    ax1.set_xlabel("wall time (s)")
    ax1.set_ylabel("env steps/s" + (" (population)" if members > 1 else ""))
    ax1.grid(alpha=0.3)
    for key in ("time/compute_s", "time/host_wait_s", "time/logging_s", "time/checkpoint_s", "time/eval_s",
                "time/interval_s"):
        vals = finite_values(rows, key)
        if vals:
            ax2.plot([r["wall_time_s"] for r, _ in vals], [v for _, v in vals], ".-", linewidth=1,
                     label=key.removeprefix("time/"))
    ax2.set_xlabel("wall time (s)")
    ax2.set_ylabel("host seconds per chunk")
    ax2.grid(alpha=0.3)
    if ax2.lines:
        ax2.legend(fontsize=7)
    else:
        ax2.text(0.5, 0.5, "no time/* columns (a run from before they were logged)", ha="center",
                 transform=ax2.transAxes, fontsize=8)
    return _save(fig, path)


def _losses_plot(rows: list[dict[str, Any]], path: pathlib.Path) -> pathlib.Path | None:
    keys = sorted({k for r in rows for k in r if k.endswith("_loss")})
    if not keys:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys) + 0.5, 3.4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        vals = finite_values(rows, key)
        ax.plot([r["env_steps"] for r, _ in vals], [v for _, v in vals], linewidth=1)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    return _save(fig, path)


def seeds_text(n: int) -> str:
    """``"1 seed"``, ``"4 seeds"``."""
    return f"{n} seed" + ("" if n == 1 else "s")


def configs_plot_title(evaluated: bool) -> str:
    """What ``configs.png`` draws, as its title (short enough for the axes; eval dots only when drawn)."""
    return "training return: lines, mean ± std over seeds" + ("; greedy evaluation: dots" if evaluated else "")


def _configs_plot(members: Sequence[Any], member_rows: Sequence[list[dict[str, Any]]],
                  path: pathlib.Path) -> pathlib.Path:
    from rljax.training.sweep import mean_curve

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    by_label: dict[str, list[int]] = {}
    evaluated = False
    for m in members:
        by_label.setdefault(m.label, []).append(m.index)
    for label, idx in by_label.items():
        curve = mean_curve([member_rows[i] for i in idx], TRAIN)
        if curve is None:
            continue
        x, mean, std = curve
        (line,) = ax.plot(x, mean, linewidth=1.5, label=f"{label} ({seeds_text(len(idx))})")
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        evals = mean_curve([member_rows[i] for i in idx], EVAL)
        if evals is not None:
            evaluated = True
            ax.plot(evals[0], evals[1], "o--", color=line.get_color(), markersize=3, linewidth=0.8)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.set_title(configs_plot_title(evaluated), fontsize=9)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    return _save(fig, path)


def write_plots(run_dir: str | pathlib.Path, out: str | pathlib.Path | None = None) -> list[pathlib.Path]:
    """Writes the PNGs of the run or sweep in ``run_dir`` to ``out`` (default ``RUN_DIR/inspect``);
    returns their paths."""
    run_dir = pathlib.Path(run_dir)
    out = run_dir / "inspect" if out is None else pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from rljax.store.tracking import read_chunks, read_metrics

    if run_kind(run_dir) == "sweep":
        members, member_rows = _sweep_members(run_dir)
        paths = [_configs_plot(members, member_rows, out / "configs.png")]
        chunks = read_chunks(run_dir / "members" / members[0].name) if members else []
        if chunks:
            paths.append(_throughput_plot(chunks, out / "throughput.png", members=len(members)))
        return paths
    rows = read_metrics(run_dir)
    if not rows:
        return []
    paths = [_returns_plot(rows, out / "returns.png"), _throughput_plot(read_chunks(run_dir), out / "throughput.png")]
    losses = _losses_plot(rows, out / "losses.png")
    return paths + ([losses] if losses else [])


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``inspect`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("inspect", help="a run's or sweep's summary and plots; several side by side",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", nargs="+",
                        help="a run or sweep directory; several: compared side by side (rljax.cli.compare)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help=f"where the PNGs go (default RUN_DIR/inspect; comparing several: {COMPARE_OUT}/)")
    parser.add_argument("--no-plots", action="store_true", help="print the summary only")
    return parser


COMPARE_OUT = "inspect-compare"
"""Where ``rljax inspect A B ...`` writes ``compare.png`` without ``--out`` (in the current directory)."""


def run(args: argparse.Namespace) -> int:
    """``rljax inspect RUN_DIR... [--out DIR] [--no-plots]``; returns the exit status (2: not a run)."""
    try:
        if len(args.run_dir) > 1:
            from rljax.cli.compare import compare_plot, comparison_text, curves

            items = curves(args.run_dir)
            print(comparison_text(items), flush=True)
            if not args.no_plots:
                path = compare_plot(items, pathlib.Path(args.out or COMPARE_OUT) / "compare.png")
                print(f"plots: {path}", flush=True)
            return 0
        (run_dir,) = args.run_dir
        print(summary_text(run_dir), flush=True)
        if not args.no_plots:
            paths = write_plots(run_dir, args.out)
            if paths:
                print("plots: " + ", ".join(str(p) for p in paths), flush=True)
    except NotARunError as err:
        print(f"rljax inspect: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return 0
