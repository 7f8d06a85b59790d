"""``rljax status RUN_DIR [--json]``: whether a run (or sweep) is running, stalled, preempted,
finished or failed, how far it got, its rate and ETA, its newest checkpoint and who holds it; read
from the ``status.json`` the run keeps current (:mod:`rljax.store.status`), so it works from any host
that sees the directory and never disturbs the run. ``--json`` prints the record for tools.

On a bench directory (one holding ``bench.json``, :mod:`rljax.bench.runner`) it prints the bench's
cells done, running and left, the time left and the processes (workers) running it
(:func:`rljax.bench.runner.status_text`); ``--json`` prints
:func:`rljax.bench.runner.bench_status`'s record.

On a policy server's directory (``serve.json``: ``rljax serve --stats-dir``) it prints the server's
state, version, requests/s, batch size, p50/p99 latency and errors; on a run directory, the servers
under ``RUN_DIR/serve/`` (``rljax serve RUN_DIR``'s default) follow the run's line (``--json``: under
``servers``)."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

from rljax.cli.process import EXIT_USAGE

__all__ = ["add_parser", "run", "status_line", "is_bench"]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    m, s = divmod(int(seconds + 0.5), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def status_line(record: dict[str, Any]) -> str:
    """One line a person reads: the state (and, while it runs, its phase), progress, rate and ETA,
    checkpoint, holder and age."""
    run_dir, state = record.get("run_dir", "?"), record["state"]
    if state == "not started":
        return f"{run_dir}: not started (no status.json: no run has started in it)"
    done, total = int(record.get("env_steps") or 0), int(record.get("total_env_steps") or 0)
    parts = [f"{done:,} / {total:,} env steps ({100 * done / total:.0f} %)" if total else f"{done:,} env steps"]
    if state in ("running", "stalled") and record.get("sps"):
        parts.append(f"{record['sps']:,.0f} steps/s, ETA {_duration(record.get('eta_s'))}")
    if record.get("actors") is not None:
        parts.append(f"{record['actors']} actor(s)")
    ckpt = record.get("last_checkpoint_env_steps")
    parts.append(f"last checkpoint at {ckpt:,} env steps" if ckpt is not None else "no checkpoint yet")
    parts.append(f"{record.get('host', '?')}:{record.get('pid', '?')}, written {_duration(record.get('age_s'))} ago")
    why = {"stalled": f" (no chunk for longer than {record.get('stall_after_s', 0):.0f} s)",
           "preempted": f" by {record.get('stopped_by', '?')}: resume with `rljax resume {run_dir}`",
           "failed": f" ({record.get('reason', 'an error ended it: see its output')})"}.get(state, "")
    phase = "" if state not in ("running", "stalled") or not record.get("phase") else (
        f" ({record['phase']})" if state == "running" else f" while {record['phase']}")
    return f"{run_dir}: {state}{phase}{why}; " + "; ".join(parts)


def is_bench(run_dir: str | pathlib.Path) -> bool:
    """Whether ``run_dir`` is a bench directory (it holds ``bench.json``)."""
    from rljax.bench.runner import BENCH_FILE

    return (pathlib.Path(run_dir) / BENCH_FILE).is_file()


def _served(directory: str, alone: bool) -> dict[str, Any]:
    """A policy server's status; a damaged one is an error of its own when asked for alone, else a line
    beside the run's (it does not hide the run's status)."""
    from rljax.serve.stats import read_serve_status

    try:
        return read_serve_status(directory)
    except ValueError as err:
        if alone:
            raise
        return {"dir": directory, "error": str(err)}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``status`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("status", help="is a run running, stalled, preempted, finished or failed",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run, sweep or bench directory")
    parser.add_argument("--json", action="store_true", help="print the status record as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    """Prints the status; returns 0, or 2 when RUN_DIR is not a directory or its status (a bench: its
    ``bench.json`` or a cell's status) is damaged."""
    from rljax.store.status import read_status

    if not pathlib.Path(args.run_dir).is_dir():
        print(f"rljax status: error: {args.run_dir} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    if is_bench(args.run_dir):
        from rljax.bench.runner import bench_status, status_text

        try:
            bench = bench_status(args.run_dir)
        except (ValueError, OSError) as err:
            print(f"rljax status: error: {err}", file=sys.stderr)
            return EXIT_USAGE
        print(json.dumps(bench, sort_keys=True) if args.json else status_text(bench), flush=True)
        return 0
    from rljax.serve.stats import is_serve_dir, serve_line

    servers = [args.run_dir] if is_serve_dir(args.run_dir) else sorted(
        str(p.parent) for p in pathlib.Path(args.run_dir).glob("serve/*/serve.json"))
    try:
        record = None if is_serve_dir(args.run_dir) else read_status(args.run_dir)
        served = [_served(d, alone=record is None) for d in servers]
    except ValueError as err:
        print(f"rljax status: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(record if not served else {**(record or {}), "servers": served}, sort_keys=True), flush=True)
        return 0
    lines = ([status_line(record)] if record is not None else []) + [
        serve_line(s) if "error" not in s else f"policy server {s['dir']}: {s['error']}" for s in served]
    print("\n".join(lines), flush=True)
    return 0
