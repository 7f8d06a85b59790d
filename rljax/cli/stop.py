"""``rljax stop RUN_DIR [--wait SECONDS]``: asks a running run (or sweep) to stop at its next chunk
boundary, save a checkpoint and exit with status 75, as SIGTERM does, from any host that sees the run
directory (``RUN_DIR/stop.request``, :mod:`rljax.store.status`). ``rljax resume RUN_DIR`` continues
it. With ``--wait`` the command returns once the run has stopped (status 0) or, the run still running
(or stalled) when the time is up, with status 1; the request then stands. Status 2: nothing to stop,
or a bad ``--wait``.

On a bench directory (one holding ``bench.json``) it asks every worker running the bench to stop
(:func:`rljax.bench.runner.request_bench_stop`): a worker's running cell stops at its next chunk
boundary, saved, or a worker between cells before its next one, and each exits with status 75; the
bench's own ``rljax bench`` command continues it. There is something to stop while the bench has a
live worker (:func:`rljax.bench.runner.bench_workers`); ``--wait`` waits until none is left."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rljax.cli.process import EXIT_USAGE

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``stop`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("stop", help="stop a running run at its next chunk boundary (saved, status 75)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run, sweep or bench directory")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait up to this long for the run to stop (0: ask and return; inf: until it stops); "
                             "exit status 1 if it is still running then")
    return parser


def run(args: argparse.Namespace) -> int:
    """Asks the run to stop; returns 0 (asked, or stopped with --wait), 1 (--wait ran out) or 2 (not running)."""
    from rljax.cli.status import is_bench, status_line
    from rljax.store.status import read_status, request_stop

    if not args.wait >= 0:  # NaN too
        print(f"rljax stop: error: --wait is the seconds to wait for the run to stop, >= 0 (0: ask and return, "
              f"inf: until it stops); got {args.wait:g}", file=sys.stderr)
        return EXIT_USAGE
    if is_bench(args.run_dir):
        return _stop_bench(args.run_dir, args.wait)
    try:
        record = read_status(args.run_dir)
    except (ValueError, OSError) as err:
        print(f"rljax stop: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if record["state"] not in ("running", "stalled"):
        print(f"rljax stop: error: nothing to stop: {status_line(record)}", file=sys.stderr)
        return EXIT_USAGE
    request_stop(args.run_dir)
    print(f"asked {args.run_dir} to stop at its next chunk boundary (it saves a checkpoint and exits with status "
          f"75); rljax status {args.run_dir} shows when it has", flush=True)
    deadline = time.monotonic() + args.wait
    while args.wait > 0:
        record = read_status(args.run_dir)
        if record["state"] not in ("running", "stalled"):
            print(status_line(record), flush=True)
            return 0
        if time.monotonic() > deadline:
            print(f"rljax stop: still {record['state']} after {args.wait:g} s; the request stands", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0


def _bench_running(status: dict[str, Any]) -> bool:
    """Whether a bench has something to stop: a live worker."""
    return bool(status["workers"])


def _stop_bench(run_dir: str, wait: float) -> int:
    """``rljax stop`` of a bench directory; the exit statuses of :func:`run`."""
    from rljax.bench.runner import bench_status, request_bench_stop, status_text

    try:
        status = bench_status(run_dir)
    except (ValueError, OSError) as err:
        print(f"rljax stop: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    workers = [f"{w['host']}:{w['pid']}" for w in request_bench_stop(run_dir, "rljax stop")] \
        if _bench_running(status) else []
    if not workers:
        print(f"rljax stop: error: nothing to stop: no process runs the bench "
              f"({status_text(status).splitlines()[0]})", file=sys.stderr)
        return EXIT_USAGE
    running = [c["cell"] for c in status["cells"] if c["state"] == "running"]
    what = (f"{'its running cell' if len(running) == 1 else 'its running cells'} {', '.join(running)} "
            f"{'stops' if len(running) == 1 else 'stop'} at the next chunk boundary (saved)" if running else
            "it stops before its next cell")
    who = workers[0] if len(workers) == 1 else f"its {len(workers)} workers ({', '.join(workers)})"
    print(f"asked bench {run_dir} ({who}) to stop: {what} and each worker exits with status 75; the bench's own "
          f"rljax bench command continues it; rljax status {run_dir} shows when it has", flush=True)
    deadline = time.monotonic() + wait
    while wait > 0:
        status = bench_status(run_dir)
        if not _bench_running(status):
            print(status_text(status), flush=True)
            return 0
        if time.monotonic() > deadline:
            left = [f"{w['host']}:{w['pid']}" for w in status["workers"]]
            print(f"rljax stop: bench still running after {wait:g} s (worker{'s' if len(left) > 1 else ''} "
                  f"{', '.join(left)}); the request stands",
                  file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0
