"""``rljax env-server gymnasium/<id> --num-envs N [--host H] [--port P]``: serves a Gymnasium env over
rljax's env protocol (``docs/host-envs.md``), each connection its own batch of ``N`` copies.

It listens on 127.0.0.1 unless ``--host`` says otherwise; any other address needs the shared token in
``RLJAX_ENV_SERVER_TOKEN`` (on both sides). Runs until interrupted (Ctrl-C or SIGTERM: exit 0).

``--connect HOST:PORT`` makes it a rollout worker instead: it dials a learner trained with ``--env
listen:HOST:PORT`` (central inference, :mod:`rljax.host.listen`) and serves it one batch, connecting
again when the connection breaks; it exits 0 when the learner ends the session (the run finished or
let the worker go), 1 when no learner answered for ``--retry-for`` seconds.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from rljax.cli.process import EXIT_USAGE

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``env-server`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("env-server", help="serve a Gymnasium env to rljax over its env protocol",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", metavar="gymnasium/ID", help="the Gymnasium env each connection gets copies of")
    parser.add_argument("--num-envs", type=int, required=True, metavar="N", help="envs per connection (>= 1)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=5555, help="the port (0: any free port, printed)")
    parser.add_argument("--async", dest="asynchronous", action="store_true",
                        help="step the copies in worker processes (Gymnasium's AsyncVectorEnv)")
    parser.add_argument("--max-episode-steps", type=int, default=None, metavar="T",
                        help="truncate episodes after T steps (default: the env's own limit)")
    parser.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="drop a connection silent for this long")
    parser.add_argument("--connect", default=None, metavar="HOST:PORT",
                        help="be a rollout worker: dial the learner of a run trained with --env listen:HOST:PORT")
    parser.add_argument("--retry-for", type=float, default=600.0, metavar="SECONDS",
                        help="with --connect: give up after this long without a learner (exit 1)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Serves until interrupted; 0 then, 2 for bad arguments."""
    from rljax.host.gymnasium_env import GymnasiumEnv
    from rljax.host.server import EnvServer

    if not args.env.startswith("gymnasium/"):
        print(f"rljax env-server: error: {args.env!r}: the reference server serves Gymnasium envs, named "
              f"gymnasium/<id> (e.g. gymnasium/CartPole-v1)", file=sys.stderr)
        return EXIT_USAGE
    if args.num_envs < 1 or not 0 <= args.port < 65536:
        print(f"rljax env-server: error: --num-envs {args.num_envs} (>= 1), --port {args.port} (0..65535)",
              file=sys.stderr)
        return EXIT_USAGE
    env_id = args.env[len("gymnasium/"):]
    kwargs = {} if args.max_episode_steps is None else {"max_episode_steps": args.max_episode_steps}
    if args.connect is not None:
        return _worker(args, env_id, kwargs)
    try:
        GymnasiumEnv(env_id, 1, **kwargs).close()  # a bad id or space fails here, not per connection
        server = EnvServer(lambda: GymnasiumEnv(env_id, args.num_envs, args.asynchronous, **kwargs), args.host,
                           args.port, idle_timeout_s=args.idle_timeout)
    except (ValueError, OSError) as err:
        print(f"rljax env-server: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, lambda *_: server.close())
    host, port = server.address
    print(f"serving {args.env} x {args.num_envs} per connection on {host}:{port} as server:{host}:{port} "
          f"(Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    # Every connection and env is closed. Interpreter finalisation after a SIGTERM intermittently
    # aborted in native code ("FATAL: exception not rethrown", status -6); there is nothing left to
    # finalise, so the process ends here, as it says.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _worker(args: argparse.Namespace, env_id: str, kwargs: dict[str, Any]) -> int:
    """``--connect``: a rollout worker of a learner that listens (0: the learner ended the session; 1: it
    refused this worker, or none answered for ``--retry-for`` seconds)."""
    import math

    from rljax.host.base import parse_server
    from rljax.host.gymnasium_env import GymnasiumEnv
    from rljax.host.listen import dial

    try:
        for name in ("retry_for", "idle_timeout"):
            value = getattr(args, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name.replace('_', '-')} {value}: a number of seconds > 0")
        address = parse_server(f"server:{args.connect}")
        GymnasiumEnv(env_id, 1, **kwargs).close()
    except (ValueError, OSError) as err:
        print(f"rljax env-server: error: {err}", file=sys.stderr)
        return EXIT_USAGE

    def interrupt(*_: Any) -> None:  # ends the session in flight too: its env is closed on the way out
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    print(f"rollout worker: {args.env} x {args.num_envs} for the learner at {args.connect} (Ctrl-C to stop)",
          flush=True)
    try:
        code, why = dial(address, lambda: GymnasiumEnv(env_id, args.num_envs, args.asynchronous, **kwargs),
                         idle_timeout_s=args.idle_timeout, retry_for_s=args.retry_for)
    except KeyboardInterrupt:
        code, why = 0, "stopped"
    print(f"rollout worker: {why}" if code == 0 else f"rljax env-server: error: {why}",
          file=sys.stdout if code == 0 else sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
