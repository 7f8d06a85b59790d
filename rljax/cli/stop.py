"""``rljax stop RUN_DIR [--wait SECONDS]``: asks a running run (or sweep) to stop at its next chunk
boundary, save a checkpoint and exit with status 75, as SIGTERM does, from any host that sees the run
directory (``RUN_DIR/stop.request``, :mod:`rljax.store.status`). ``rljax resume RUN_DIR`` continues
it. With ``--wait`` the command returns once the run has stopped (status 0) or, the run still running
(or stalled) when the time is up, with status 1; the request then stands. Status 2: nothing to stop,
or a bad ``--wait``."""

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
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run or sweep directory")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait up to this long for the run to stop (0: ask and return; inf: until it stops); "
                             "exit status 1 if it is still running then")
    return parser


def run(args: argparse.Namespace) -> int:
    """Asks the run to stop; returns 0 (asked, or stopped with --wait), 1 (--wait ran out) or 2 (not running)."""
    from rljax.cli.status import status_line
    from rljax.store.status import read_status, request_stop

    if not args.wait >= 0:  # NaN too
        print(f"rljax stop: error: --wait is the seconds to wait for the run to stop, >= 0 (0: ask and return, "
              f"inf: until it stops); got {args.wait:g}", file=sys.stderr)
        return EXIT_USAGE
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
