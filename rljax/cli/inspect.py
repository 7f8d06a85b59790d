"""``rljax inspect RUN_DIR``: a one-screen summary of a run or a sweep, and PNG plots of it
(``rljax inspect A B ...``: several compared, :mod:`rljax.cli.compare`).

Reads only what a run writes (``metrics.jsonl``, ``chunks.jsonl``, ``manifest.json``, ``config.json``,
``checkpoints/``, ``stall-*.txt``; for a sweep also ``sweep.json`` and ``members/<name>/``), so it
works on a run in progress, a finished one or a copy, and compiles nothing. The summary says how
far the run got, its best and latest scores (training return, greedy evaluation), the steps/s trend,
where the host's time per chunk went (the ``time/*`` columns), device memory, checkpoints, resumes,
incidents and stall reports. The metrics are defined in ``docs/metrics.md``.

How far a run got and whether it finished are what ``rljax status`` says (the run's
``status.json``); a run without that file (a copy, an older run) is measured against the plan its
config and manifest give (:func:`rljax.cli.rundata.planned_total`).

Plots go to ``RUN_DIR/inspect/`` (``--out`` elsewhere, ``--no-plots`` for none):

* a run: ``returns.png`` (training return and evaluation against env steps and against wall
  time), ``throughput.png`` (steps/s and the host's time per chunk against wall time) and
  ``losses.png`` (a grid of small panels against env steps: the losses, then every other
  algorithm metric the rows hold, such as entropy, approx KL, clip fraction, explained variance,
  grad norms, Q values, epsilon, alpha; a column with one value throughout is named in the title
  instead of drawn);
* a sweep: ``configs.png`` (each config's training return, mean and spread over its seeds, and its
  evaluations: the configs compared on one plot, each named by the values it sweeps) and
  ``throughput.png`` (the population's).

On a bench directory (one holding ``bench.json``, :mod:`rljax.bench.runner`) it prints the bench's
cells done, running and left, then its ``report.md`` (per algorithm the IQM, mean, median and
optimality gap of the normalised scores with their intervals, the probability-of-improvement table,
the mean score per env and the references), and names the PNGs the bench drew in ``DIR/plots/``. A
bench without a report yet (no cell has finished) is refused; ``--out`` and ``--smooth``, which
apply to a run's or sweep's plots, are refused with a bench, as is a bench among several
directories to compare (its cells, ``DIR/cells/ALGO/ENV``, are sweeps and compare).

``--smooth W`` draws each curve of training return and of the metrics as its centred rolling mean
over W points (:func:`rljax.cli.rundata.smooth`: the mean of the W points around each one, fewer at
the ends, so a curve is not shifted along env steps), with the raw values faintly behind;
evaluations are drawn as they are. Env-steps axes are labelled compactly (``100k``, ``1.5M``).
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
from rljax.cli.plotting import draw_curve, new_figure, save, steps_axis
from rljax.cli.rundata import (EVAL, TRAIN, NotARunError, config_label, finite_values, fmt_number, metric_columns,
                               planned_total, read_json, read_run_status, run_kind, smooth, wall_times)
from rljax.store.tracking import FINAL_RETURN_CHUNKS

__all__ = ["add_parser", "run", "summary_text", "bench_summary", "write_plots", "returns_figure", "metrics_figure",
           "configs_figure", "throughput_figure", "seeds_text", "configs_plot_title", "smooth_window"]


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
    actors = f"{layout['num_actors']} actor(s)"
    low, high = layout.get("min_actors") or layout["num_actors"], layout.get("max_actors") or layout["num_actors"]
    if low != high:  # autoscaled: the count now, its range and what it was over the run
        counts = [int(v) for v in values("host/actors")]
        actors = (f"{counts[-1] if counts else layout['num_actors']} actor(s) now (autoscaled {low}-{high}, started "
                  f"with {layout['num_actors']}, {min(counts, default=low)}-{max(counts, default=high)} over the "
                  f"logged chunks; decisions in scaling.jsonl)")
    return [f"host: {actors}, policy lag <= {layout['max_policy_lag']} (largest seen "
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


def _seeds_list(seeds: Sequence[int]) -> str:
    """``seed 3``, ``seeds 0, 1``, ``seeds 0, 1, ..., 9`` (the sorted distinct seeds)."""
    seeds = sorted(set(seeds))
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    shown = seeds if len(seeds) <= 4 else [*seeds[:2], "...", seeds[-1]]
    return "seeds " + ", ".join(map(str, shown))


def _header(run_dir: pathlib.Path, manifest: dict[str, Any], config: dict[str, Any], what: str,
            seeds: Sequence[int] | None = None) -> str:
    algo = str(manifest.get("algorithm") or "?").removesuffix("Config")
    git = manifest.get("git_commit")
    seed = _seeds_list(seeds) if seeds else f"seed {config.get('seed', '?')}"
    return (f"{what} {run_dir}: {algo} on {config.get('env', '?')}, {seed}, started "
            f"{_when(manifest.get('created_unix'))}"
            + (f", git {git[:10]}{' (dirty)' if manifest.get('git_dirty') else ''}" if git else "")
            + f", {manifest.get('backend', '?')} backend")


def _progress_line(rows: list[dict[str, Any]], total: int | None, per: str = "",
                   status: dict[str, Any] | None = None) -> str:
    """How far the run got against ``total``, and its state: the one ``status`` (its ``status.json``)
    gives, as ``rljax status`` says it; without it, finished or not by the env steps logged."""
    done = int(rows[-1]["env_steps"]) if rows else 0
    wall = float(rows[-1].get("wall_time_s") or 0.0) if rows else 0.0
    state = (status or {}).get("state")
    if state is None and total:
        state = "finished" if done >= total else "not finished"
    if state == "preempted":
        state += " (rljax resume continues it)"
    if total:
        percent = 100 * done / total
        # Never "100 %, not finished": short of the total shows at most 99.
        percent_text = f"{percent:.0f}" if done >= total else f"{min(round(percent), 99)}"
        head = f"progress: {done:,} / {total:,} env steps{per} ({percent_text} %, {state})"
    else:
        head = f"progress: {done:,} env steps{per}" + (f" ({state})" if state else "")
    return head + f", {len(rows)} chunks logged, {_fmt_s(wall)} of run time"


def _run_summary(run_dir: pathlib.Path) -> tuple[str, list[dict[str, Any]]]:
    from rljax.store.tracking import read_chunks

    manifest = read_json(run_dir / "manifest.json") or {}
    config = read_json(run_dir / "config.json") or {}
    rows = read_chunks(run_dir)
    status = read_run_status(run_dir)
    lines = [_header(run_dir, manifest, config, "run"),
             _progress_line(rows, planned_total(manifest, config, status), status=status)]
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
    from rljax.training.sweep import Member, ranking

    manifest = read_json(run_dir / "manifest.json") or {}
    config = read_json(run_dir / "config.json") or {}
    members, member_rows = _sweep_members(run_dir)
    if not members:
        raise NotARunError(f"{run_dir}/sweep.json lists no members")
    first_manifest = read_json(run_dir / "members" / members[0].name / "manifest.json") or {}
    labels = list(dict.fromkeys(m.label for m in members))
    record = read_json(run_dir / "sweep.json") or {}
    schedule = read_json(run_dir / "halving.json") if record.get("trials") else None
    shape = (f"{len(members)} slots, successive halving over {len(record['trials'])} trials" if schedule else
             f"{len(members)} members ({len(labels)} configs x {seeds_text(len(members) // max(len(labels), 1))})")
    lines = [_header(run_dir, {**first_manifest, **manifest}, config, "sweep", seeds=[m.seed for m in members])
             + f"; {shape}"]
    from rljax.store.tracking import read_chunks

    done = [int(rows[-1]["env_steps"]) if rows else 0 for rows in member_rows]
    least = read_chunks(run_dir / "members" / members[int(np.argmin(done))].name)
    status = read_run_status(run_dir)
    lines.append(_progress_line(least, planned_total(first_manifest, config, status), per=" per member", status=status))
    if schedule:  # the trials' table: the slots' own ranking would mix the trials each slot ran
        from rljax.training.halving_summary import halving_table

        trials = [Member(**m) for m in record["trials"]]
        table = halving_table(trials, member_rows, schedule)[1].rstrip("\n").splitlines()
        lines += table[2:3] + table[4:18]
        if len(table) > 18:
            lines.append(f"  ... {len(table) - 18} more trials (summary.md)")
    else:
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


def bench_summary(run_dir: str | pathlib.Path) -> tuple[str, list[pathlib.Path]]:
    """The summary of the bench in ``run_dir`` (its status line, then its ``report.md``) and the PNGs
    in ``DIR/plots/``.

    Raises:
        NotARunError: the bench has no report yet (no cell has finished), or its files are damaged.
    """
    from rljax.bench.report import MARKDOWN_FILE
    from rljax.bench.runner import bench_status, status_text

    run_dir = pathlib.Path(run_dir)
    try:
        status = bench_status(run_dir)
    except (OSError, ValueError) as err:
        raise NotARunError(str(err)) from None
    cells, done = len(status["cells"]), status["done"]
    path = run_dir / MARKDOWN_FILE
    if not path.is_file() and not done:
        raise NotARunError(f"bench {run_dir} has no report yet: no cell has finished ({done} of {cells} cells done, "
                           f"{status['running']} running); `rljax status {run_dir}` shows its progress")
    if not path.is_file():
        raise NotARunError(f"bench {run_dir} has no {MARKDOWN_FILE} although {done} of {cells} cells are done (the "
                           f"bench was stopped before writing it); its own rljax bench command writes it")
    covers = "every cell" if done == cells else f"the {done} finished cells of {cells}"
    head = f"{status_text(status).splitlines()[0]}; the report covers {covers}"
    return f"{head}\n\n{path.read_text(encoding='utf-8').rstrip()}", sorted((run_dir / "plots").glob("*.png"))


def _inspect_bench(args: argparse.Namespace, run_dir: str) -> None:
    """``rljax inspect BENCH_DIR``: the report and the bench's own plots (nothing drawn)."""
    if args.out is not None:
        raise NotARunError(f"--out {args.out}: a bench draws its plots into {run_dir}/plots/ itself "
                           f"(rljax.bench.write_plots redraws them); inspect a bench without --out")
    if args.smooth != 1:
        raise NotARunError(f"--smooth {args.smooth}: a bench's plots are not smoothed; inspect a bench without "
                           f"--smooth, or one of its cells (a sweep: {run_dir}/cells/ALGO/ENV) with it")
    text, plots = bench_summary(run_dir)
    print(text, flush=True)
    if not args.no_plots:
        print("plots: " + (", ".join(str(p) for p in plots) if plots else
                           f"none in {run_dir}/plots/ (rljax.bench.write_plots draws them)"), flush=True)


def smooth_window(text: str) -> int:
    """``--smooth W``: a whole number of points >= 1; an ``argparse.ArgumentTypeError`` naming the value otherwise."""
    try:
        window = int(text)
    except ValueError:
        window = 0
    if window < 1 or str(window) != text.strip():
        raise argparse.ArgumentTypeError(f"expected a whole number of points >= 1 (1: no smoothing), got {text!r}")
    return window


def _smoothed_note(window: int) -> str:
    return f"centred mean over {window} points, raw faint" if window > 1 else ""


def returns_figure(rows: list[dict[str, Any]], window: int = 1) -> Any:
    """``returns.png``: the training return (smoothed over ``window`` points, :mod:`rljax.cli.plotting`)
    and the greedy evaluations, against env steps (left) and wall time (right)."""
    fig = new_figure((11, 4))
    axes = fig.subplots(1, 2, sharey=True)
    wall = dict(zip((r["env_steps"] for r in rows), wall_times(rows)))
    note = _smoothed_note(window)
    train, evals = finite_values(rows, TRAIN), finite_values(rows, EVAL)
    for ax, x_of in ((axes[0], lambda r: r["env_steps"]), (axes[1], lambda r: wall.get(r["env_steps"], np.nan))):
        if train:
            draw_curve(ax, [x_of(r) for r, _ in train], [v for _, v in train], window, linewidth=1,
                       label=f"training ({TRAIN}" + (f"; {note})" if note else ")"))
        if evals:
            ax.plot([x_of(r) for r, _ in evals], [v for _, v in evals], "o--", markersize=3,
                    label=f"greedy evaluation ({EVAL})")
        ax.grid(alpha=0.3)
    steps_axis(axes[0])
    axes[1].set_xlabel("wall time (s)")
    axes[0].set_ylabel("episode return")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=8)
    return fig


def throughput_figure(rows: list[dict[str, Any]], members: int = 1) -> Any:
    """``throughput.png``: steps/s (a sweep: the population's) and the host's seconds per chunk by
    kind (the ``time/*`` columns), against wall time; ``rows``: ``chunks.jsonl``'s."""
    fig = new_figure((11, 4))
    ax1, ax2 = fig.subplots(1, 2)
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
        host_run = any("host/learner_busy" in r for r in rows)
        why = "a host-env run logs its actors and learner as host/* instead" if host_run else \
            "a run from before they were logged"
        ax2.text(0.5, 0.5, f"no time/* columns ({why})", ha="center", transform=ax2.transAxes, fontsize=8)
    return fig


METRIC_COLUMNS = 4
"""Panels per row of ``losses.png``."""


def metrics_figure(rows: list[dict[str, Any]], window: int = 1) -> Any | None:
    """``losses.png``: one small panel per algorithm metric that changes
    (:func:`~rljax.cli.rundata.metric_columns`: the losses first), against env steps, in rows of
    :data:`METRIC_COLUMNS`, each smoothed over ``window`` points; the title names the columns with
    one value throughout. None when the rows hold no algorithm metric."""
    keys, constant = metric_columns(rows)
    if not keys and not constant:
        return None
    ncols = max(1, min(METRIC_COLUMNS, len(keys)))
    nrows = max(1, -(-len(keys) // ncols))
    fig = new_figure((3.2 * ncols + 0.4, 2.5 * nrows + 0.5))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for i, (ax, key) in enumerate(zip(axes, keys)):
        vals = finite_values(rows, key)
        draw_curve(ax, [r["env_steps"] for r, _ in vals], [v for _, v in vals], window, linewidth=1)
        ax.set_title(key, fontsize=9)
        steps_axis(ax, nbins=4, label="env steps" if i + ncols >= len(keys) else None)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[len(keys):]:
        fig.delaxes(ax)
    notes = [_smoothed_note(window)] if window > 1 else []
    if constant:
        notes.append("constant: " + ", ".join(f"{k}={v:.4g}" for k, v in constant.items()))
    if not keys:
        axes[0].text(0.5, 0.5, "no metric changed", ha="center", transform=axes[0].transAxes, fontsize=8)
        axes[0].set_axis_off()
    if notes:
        fig.suptitle("; ".join(notes), fontsize=8)
    return fig


def seeds_text(n: int) -> str:
    """``"1 seed"``, ``"4 seeds"``."""
    return f"{n} seed" + ("" if n == 1 else "s")


def configs_plot_title(evaluated: bool, window: int = 1) -> str:
    """What ``configs.png`` draws, as its title (short enough for the axes; eval dots only when drawn)."""
    return ("training return: lines, mean ± std over seeds" + (f" ({_smoothed_note(window)})" if window > 1 else "")
            + ("; greedy evaluation: dots" if evaluated else ""))


def configs_figure(members: Sequence[Any], member_rows: Sequence[list[dict[str, Any]]], window: int = 1) -> Any:
    """``configs.png``: each config's training return against env steps (the mean and std over its
    seeds, smoothed over ``window`` points) and its mean evaluations, labelled by the values the
    sweep gives it (``lr=0.001, ent=0.01``) and how many seeds it has."""
    from rljax.training.sweep import mean_curve

    fig = new_figure((8, 5))
    ax = fig.subplots()
    groups: dict[str, list[Any]] = {}
    evaluated = False
    for m in members:
        groups.setdefault(m.label, []).append(m)
    for label, group in groups.items():
        curve = mean_curve([member_rows[m.index] for m in group], TRAIN)
        if curve is None:
            continue
        x, mean, std = curve
        name = config_label(group[0].values) if group[0].values else label
        line = draw_curve(ax, x, mean, window, linewidth=1.5, label=f"{name} ({seeds_text(len(group))})")
        mean, std = smooth(mean, window), smooth(std, window)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        evals = mean_curve([member_rows[m.index] for m in group], EVAL)
        if evals is not None:
            evaluated = True
            ax.plot(evals[0], evals[1], "o--", color=line.get_color(), markersize=3, linewidth=0.8)
    steps_axis(ax)
    ax.set_ylabel("episode return")
    ax.set_title(configs_plot_title(evaluated, window), fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return fig


def write_plots(run_dir: str | pathlib.Path, out: str | pathlib.Path | None = None,
                window: int = 1) -> list[pathlib.Path]:
    """Writes the PNGs of the run or sweep in ``run_dir`` to ``out`` (default ``RUN_DIR/inspect``),
    curves smoothed over ``window`` points (1: none); returns their paths."""
    run_dir = pathlib.Path(run_dir)
    out = run_dir / "inspect" if out is None else pathlib.Path(out)
    smooth([], window)  # a bad window is refused before anything is written
    out.mkdir(parents=True, exist_ok=True)
    from rljax.store.tracking import read_chunks, read_metrics

    if run_kind(run_dir) == "sweep":
        members, member_rows = _sweep_members(run_dir)
        paths = [save(configs_figure(members, member_rows, window), out / "configs.png")]
        chunks = read_chunks(run_dir / "members" / members[0].name) if members else []
        if chunks:
            paths.append(save(throughput_figure(chunks, members=len(members)), out / "throughput.png"))
        return paths
    rows = read_metrics(run_dir)
    if not rows:
        return []
    paths = [save(returns_figure(rows, window), out / "returns.png"),
             save(throughput_figure(read_chunks(run_dir)), out / "throughput.png")]
    metrics = metrics_figure(rows, window)
    return paths + ([save(metrics, out / "losses.png")] if metrics is not None else [])


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``inspect`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("inspect", help="a run's or sweep's summary and plots, a bench's report; several "
                                   "runs side by side",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", nargs="+",
                        help="a run, sweep or bench directory; several runs or sweeps: compared side by side "
                             "(rljax.cli.compare)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help=f"where the PNGs go (default RUN_DIR/inspect; comparing several: {COMPARE_OUT}/)")
    parser.add_argument("--no-plots", action="store_true", help="print the summary only")
    parser.add_argument("--smooth", type=smooth_window, default=1, metavar="W",
                        help="draw training returns and metrics as their centred rolling mean over W points "
                             "(fewer at the ends), the raw values faint behind (default 1: raw)")
    return parser


COMPARE_OUT = "inspect-compare"
"""Where ``rljax inspect A B ...`` writes ``compare.png`` without ``--out`` (in the current directory)."""


def run(args: argparse.Namespace) -> int:
    """``rljax inspect RUN_DIR... [--out DIR] [--no-plots] [--smooth W]``; returns the exit status (2: not a
    run, or a bench without a report)."""
    from rljax.cli.status import is_bench

    try:
        benches = [d for d in args.run_dir if is_bench(d)]
        if len(args.run_dir) > 1 and benches:
            raise NotARunError(f"{benches[0]} is a bench directory: compare runs and sweeps (its cells, "
                               f"{benches[0]}/cells/ALGO/ENV, are sweeps), or inspect a bench on its own")
        if benches:
            _inspect_bench(args, benches[0])
            return 0
        if len(args.run_dir) > 1:
            from rljax.cli.compare import compare_plot, comparison_text, curves

            items = curves(args.run_dir)
            print(comparison_text(items), flush=True)
            if not args.no_plots:
                path = compare_plot(items, pathlib.Path(args.out or COMPARE_OUT) / "compare.png", args.smooth)
                print(f"plots: {path}", flush=True)
            return 0
        (run_dir,) = args.run_dir
        print(summary_text(run_dir), flush=True)
        if not args.no_plots:
            paths = write_plots(run_dir, args.out, args.smooth)
            if paths:
                print("plots: " + ", ".join(str(p) for p in paths), flush=True)
    except NotARunError as err:
        print(f"rljax inspect: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return 0
