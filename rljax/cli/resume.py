"""``rljax resume RUN_DIR [flags]``: continue a run or a sweep from its newest valid checkpoint.

::

    rljax resume runs/cp                              # to the run's own total_timesteps
    rljax resume runs/cp --total-timesteps 2e6        # extend it

The algorithm comes from the run directory (its ``manifest.json`` and checkpoints name the config
class); the run's saved config and run options are the base, and flags typed here override them
where that is allowed (:func:`rljax.cli.flags.explicit_flags`). A sweep directory (``sweep.json``)
resumes as a sweep (:mod:`rljax.cli.sweep`), anything else as a run (:mod:`rljax.cli.train`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rljax.cli.flags import UsageError, algorithm_classes
from rljax.cli.process import EXIT_USAGE

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``resume`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser(
        "resume", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="rljax resume RUN_DIR [--total-timesteps N] [--flag value ...]",
        help="continue or extend a run or a sweep",
        description=__doc__.split("\n\n", 1)[1])
    parser.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="the run (or sweep) directory to continue")
    parser.add_argument("flags", nargs=argparse.REMAINDER, metavar="FLAGS",
                        help="flags that override the saved ones (rljax resume RUN_DIR --help lists them)")
    return parser


def run(args: argparse.Namespace) -> int:
    """``rljax resume RUN_DIR FLAGS...``; returns the exit status."""
    if args.run_dir is None:
        raise UsageError("resume needs a run directory")
    from rljax.store.rundir import RunDirError, run_record

    run_dir = args.run_dir
    try:
        record = run_record(run_dir)
    except RunDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    by_class = {cls.__name__: (name, cls) for name, cls in algorithm_classes().items()}
    if record.algorithm not in by_class:
        print(f"error: cannot tell which algorithm {run_dir} trained (its checkpoints and manifest.json name "
              f"{record.algorithm!r}; known: {sorted(by_class)}); resume it with its experiment module: "
              f"python -m experiments.<name> --resume {run_dir}", file=sys.stderr)
        return EXIT_USAGE
    name, cls = by_class[record.algorithm]
    argv = [*args.flags, "--resume", run_dir]
    prog = f"rljax resume {run_dir}"
    if record.sweep:
        from rljax.cli.sweep import sweep_command

        return sweep_command(cls, None, argv, name, prog=prog)
    from rljax.cli.train import train_command

    return train_command(cls, None, argv, name=name, prog=prog, sweep_prog=f"rljax sweep {name}")
