"""The ``rljax`` console script: one argparse parser with a subparser per command.

Each command is a module of this package with ``add_parser(subparsers)`` (its flags and help) and
``run(args) -> exit status`` (:data:`COMMANDS`). The experiment modules' ``main`` is
:func:`rljax.cli.experiment.run_experiment`. Exit statuses: :mod:`rljax.cli.process`; a usage
error the dispatcher finds (an unknown command or flag, bad input a command rejects with
:class:`~rljax.cli.flags.UsageError`) is status 2, returned.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import rljax
from rljax.cli import (bench, configfile, env_server, envs, eval as eval_command, export, inspect, launch, resume,
                       serve, status, stop, supervise, sweep, train)
from rljax.cli.experiment import run_experiment
from rljax.cli.flags import CommandParser, UsageError, algorithm_classes, build_parser, config_from_args
from rljax.cli.process import (EXIT_BROKEN_PIPE, EXIT_DIVERGED, EXIT_IO, EXIT_SOFTWARE, EXIT_USAGE, call_training,
                               enable_compilation_cache, request_cpu_devices)

__all__ = ["main", "command_parser", "usage", "unknown_command", "COMMANDS", "run_experiment", "build_parser",
           "config_from_args", "call_training", "enable_compilation_cache", "request_cpu_devices", "EXIT_USAGE",
           "EXIT_DIVERGED", "EXIT_SOFTWARE", "EXIT_IO"]

COMMANDS = (envs, train, sweep, bench, resume, eval_command, export, supervise, launch, inspect, status, stop,
            configfile, env_server, serve)
"""The command modules, in the order ``rljax --help`` lists them."""


def usage() -> str:
    """The usage lines of ``rljax`` (one a command; naming the registered algorithms imports them)."""
    algos = ",".join(algorithm_classes())
    return ("rljax envs [SUITE]   (each env's spaces and the algorithms that fit it)\n"
            f"       rljax train {{{algos}}} [--env NAME|module:Name] [--env-param k=v ...] "
            "[--flag value ...]   (--help for the flags)\n"
            f"       rljax sweep {{{algos}}} --grid FIELD=V1,V2 [--seeds N] [--flag value ...]\n"
            "       rljax bench SUITE|SPEC.toml --run-dir DIR [--algorithms A,B] [--envs ID,ID] [--seeds N] "
            "[--total-timesteps T]\n"
            "       rljax resume RUN_DIR [--total-timesteps N] [--flag value ...]\n"
            "       rljax eval RUN_DIR [--episodes N] [--stochastic] [--env-param k=v ...] [--video FILE.gif] "
            "[--step S] [--member NAME] [--seed N]\n"
            "       rljax export RUN_DIR OUT_DIR [--step S] [--member NAME] [--onnx auto|yes|no] [--force]\n"
            "       rljax supervise [--max-restarts N] [--backoff S] [--max-backoff S] -- COMMAND ...\n"
            "       rljax launch --num-processes P --devices-per-process D -- COMMAND ...   (multi-host on this "
            "machine)\n"
            "       rljax inspect RUN_DIR [--out DIR] [--no-plots] [--smooth W]   (a run's or sweep's summary and plots)\n"
            "       rljax env-server gymnasium/ID --num-envs N [--host H] [--port P]   (serve an env over rljax's "
            "env protocol)\n"
            "       rljax serve RUN_DIR|EXPORT_DIR [--port P] [--follow] [--max-batch N]   (serve a policy to clients "
            "over the network)\n"
            "       rljax --version")


class _TopParser(CommandParser):
    """The ``rljax`` parser: its usage lines are made when shown (they import the algorithms)."""

    def format_usage(self) -> str:
        self.usage = self.usage or usage()
        return super().format_usage()

    def format_help(self) -> str:
        self.usage = self.usage or usage()
        return super().format_help()


def command_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """``(the rljax parser, command name -> its subparser)``; each subparser's ``run`` default is its
    module's ``run``."""
    parser = _TopParser(prog="rljax", formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="JAX-native reinforcement learning: train, sweep, resume, evaluate, export and "
                                    "inspect runs.\n`rljax COMMAND --help` describes a command.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {rljax.__version__}",
                        help="print rljax's version and exit")
    subparsers = parser.add_subparsers(title="commands", dest="subcommand", metavar="COMMAND", required=True,
                                       prog="rljax", parser_class=CommandParser)
    for module in COMMANDS:
        module.add_parser(subparsers).set_defaults(run=module.run)
    return parser, subparsers.choices


def unknown_command(name: str, commands: Sequence[str]) -> str:
    """The error for a command that is not one: the closest command (``rljax trian``: did you mean
    'train'?), or, with none close, every command."""
    import difflib

    close = difflib.get_close_matches(name, list(commands), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else "the commands: " + ", ".join(commands)
    return f"unknown command {name!r}; {hint}"


def _status(exit_: SystemExit) -> int:
    code = exit_.code
    return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rljax`` console script; returns the process exit status.

    ``--help`` (of ``rljax`` or of a command), ``--version`` and usage errors of the commands' own
    arguments return their status (0, 0, 2). The flags of ``train``/``sweep``/``resume`` are parsed
    by the algorithm's config parser, which exits as an experiment module's does (``SystemExit``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = command_parser()
    if not argv:
        parser.print_help()
        return 0
    if argv[0] not in commands and argv[0] not in ("-h", "--help", "--version"):
        print(f"error: {unknown_command(argv[0], commands)}\n{parser.format_usage()}", file=sys.stderr, end="")
        return EXIT_USAGE
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            commands[args.subcommand].error("unrecognized arguments: " + " ".join(extras))
    except SystemExit as exit_:
        return _status(exit_)
    try:
        code = args.run(args)
        sys.stdout.flush()  # here, so a closed pipe is caught below rather than at interpreter exit
        return code
    except UsageError as err:
        command: Any = commands[args.subcommand]
        print(command.error_text(str(err)), file=sys.stderr, end="")
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader closed the pipe (`rljax status DIR | head -3`): stop quietly with the status a
        # tool killed by SIGPIPE has, and keep Python's exit-time flush of stdout from raising again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # a stdout with no file descriptor (captured)
            pass
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
