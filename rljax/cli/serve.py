"""``rljax serve RUN_DIR|EXPORT_DIR [--port P]``: serves a trained policy to clients over the network.

Clients (``rljax.serve.Client``, or any program that speaks the protocol of ``docs/serving.md``) send
observations and get actions and the version that chose them; concurrent requests are computed as
one batch of up to ``--max-batch`` rows, each waiting at most ``--max-wait-ms`` for others to join it.
A run directory serves its newest checkpoint (``--step``, ``--member`` choose another); ``--follow``
swaps in each newer checkpoint of a run while it trains, without a recompile and without dropping a
request. An export directory (``rljax export``) serves its deterministic policy.

It listens on 127.0.0.1 unless ``--host`` says otherwise; any other address needs the shared token in
``RLJAX_SERVE_TOKEN`` (on both sides). Its figures (requests/s, batch sizes, queue wait, p50/p99
latency, errors per client) go to ``--stats-dir`` (default ``<DIR>/serve/<port>``) as ``serve.json``,
which ``rljax status`` reads, and ``serve.jsonl``. Runs until interrupted (Ctrl-C or SIGTERM: exit 0).
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import signal
import sys
from typing import Any

from rljax.cli.process import EXIT_USAGE

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``serve`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("serve", help="serve a trained policy to clients over the network",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="RUN_DIR|EXPORT_DIR", nargs="?", default=None,
                        help="a run (or sweep) directory, or an export directory")
    parser.add_argument("--follow", metavar="RUN_DIR", nargs="?", const="", default=None,
                        help="swap in each newer checkpoint of the run (RUN_DIR: the one served) as it is saved")
    parser.add_argument("--follow-every", type=float, default=1.0, metavar="SECONDS",
                        help="how often to look for a newer checkpoint (default 1)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=5600, help="the port (0: any free port, printed)")
    parser.add_argument("--max-batch", type=int, default=64, metavar="ROWS",
                        help="the most rows computed at once, and in one request (default 64)")
    parser.add_argument("--max-wait-ms", type=float, default=2.0, metavar="MS",
                        help="how long a request waits for others to join its batch (default 2)")
    parser.add_argument("--min-rows", type=int, default=64, metavar="ROWS",
                        help="the fewest rows a batch is computed at, padded (default 64: served actions are the bits "
                             "of policy.act on a large batch; 1: a lone request computed alone, cheaper for a large "
                             "network, a continuous action may differ in its last bit)")
    parser.add_argument("--step", type=int, default=None, help="the checkpoint step to serve (default: the newest)")
    parser.add_argument("--member", default=None, help="a sweep's member (name or index)")
    parser.add_argument("--stats-dir", default=None, metavar="DIR",
                        help="where serve.json and serve.jsonl go (default <DIR>/serve/<port>; 'none': nowhere)")
    parser.add_argument("--stats-every", type=float, default=10.0, metavar="SECONDS",
                        help="how often the figures are written (default 10)")
    parser.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="drop a client silent this long (default 600)")
    parser.add_argument("--stall-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="drop a client that leaves a message unfinished this long (default 10)")
    parser.add_argument("--max-clients", type=int, default=1024, help="refuse connections beyond this many")
    return parser


def _source(args: argparse.Namespace) -> tuple[pathlib.Path, bool]:
    """``(the directory served, whether to follow it)``; ValueError for a bad combination."""
    if args.path is None and not args.follow:
        raise ValueError("give the directory to serve: rljax serve RUN_DIR|EXPORT_DIR (or --follow RUN_DIR)")
    same = args.path is None or not args.follow or \
        pathlib.Path(args.follow).resolve() == pathlib.Path(args.path).resolve()
    if not same:
        raise ValueError(f"--follow {args.follow} is another directory than the one served ({args.path}): follow "
                         f"the run you serve (rljax serve RUN_DIR --follow)")
    path = pathlib.Path(args.path if args.path is not None else args.follow)
    follow = args.follow is not None
    if follow and args.step is not None:
        raise ValueError(f"--step {args.step} and --follow: following serves the newest checkpoint, then each newer "
                         f"one")
    return path, follow


def run(args: argparse.Namespace) -> int:
    """Serves until interrupted; 0 then, 2 for bad arguments or a directory that cannot be served."""
    from rljax.serve.model import load_model
    from rljax.serve.server import MAX_ROWS, PolicyServer

    served_log = logging.getLogger("rljax.serve")  # its reloads and dropped clients, not other libraries' chatter
    if not served_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        served_log.addHandler(handler)
        served_log.setLevel(logging.INFO)
        served_log.propagate = False
    try:
        path, follow = _source(args)
        if not path.is_dir():
            raise ValueError(f"{path} is not a directory: give a run directory or an export directory")
        if not 0 <= args.port < 65536:
            raise ValueError(f"--port {args.port}: 0..65535")
        member: Any = int(args.member) if args.member is not None and args.member.isdigit() else args.member
        if not 0 < args.max_batch <= MAX_ROWS:  # said before the policy is loaded and compiled
            raise ValueError(f"--max-batch {args.max_batch}: 1 to {MAX_ROWS} rows")
        model = load_model(path, step=args.step, member=member)
        server = PolicyServer(model, args.host, args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                              follow_s=args.follow_every if follow else None, idle_timeout_s=args.idle_timeout,
                              stall_timeout_s=args.stall_timeout, max_clients=args.max_clients,
                              stats_every_s=args.stats_every, min_rows=args.min_rows)
    except (ValueError, FileNotFoundError, OSError) as err:
        print(f"rljax serve: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # while loading or compiling: nothing to close yet
        print("rljax serve: interrupted while starting", file=sys.stderr)
        return 130
    host, port = server.address
    if (args.stats_dir or "").lower() != "none":
        server.stats_dir = pathlib.Path(args.stats_dir) if args.stats_dir else path / "serve" / str(port)
    signal.signal(signal.SIGTERM, lambda *_: server.request_stop())
    what = "the newest checkpoint, following the run" if follow else f"version {server.version}"
    print(f"serving {path} ({model.info.get('algorithm')} on {model.info.get('env')}; {what}) on {host}:{port}, "
          f"batches of up to {server.max_batch} rows (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
