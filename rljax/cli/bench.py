"""``rljax bench SUITE|SPEC.toml --run-dir DIR``: algorithms x envs x seeds as ordinary sweeps, then
the scores and their statistics (:mod:`rljax.bench`).

::

    rljax bench classic --run-dir runs/classic                       # a shipped suite
    rljax bench my_bench.toml --algorithms ppo,dqn --seeds 3 --run-dir runs/b1
    rljax bench classic --envs CartPole-v1 --total-timesteps 20000 --run-dir runs/quick
    rljax bench --status --run-dir runs/classic                      # cells done, running, left; time left

Killed at any moment, the same command continues the bench: finished cells are not rerun and a
cell killed mid-way resumes from its checkpoint. A spec that cannot run is refused before anything
runs (exit status 2, one line naming the cell and the value); the flags narrow and override the
spec, and a DIR holding a bench with another spec is refused, naming what differs. The same command
run by several processes at once (``rljax launch -n 4 -- rljax bench ...``, a SLURM array whose tasks
all run it) spreads the cells over them: each takes the cells no other live process runs, and a
killed one's cell is taken by the next that reaches it. On a bench directory ``rljax status DIR``
prints the cells done, running and left and the processes running them, ``rljax stop DIR`` stops
every one of them (exit status 75; the same command continues the bench) and ``rljax inspect DIR``
prints its report.

The module is a command of the ``rljax`` parser's shape (``add_parser``, ``run``) and runs on its
own as ``python -m rljax.cli.bench SUITE|SPEC.toml --run-dir DIR`` (:func:`main`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["add_parser", "run", "main"]


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``bench`` to the ``rljax`` subcommands."""
    summary, examples = __doc__.split("\n\n")[0], __doc__.split("::\n\n")[1].split("\n\n")[0]
    parser = subparsers.add_parser("bench", help="algorithms x envs x seeds, scored with interval estimates",
                                   description=f"{summary}\n\n{examples}",
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", metavar="SUITE|SPEC.toml", nargs="?",
                        help="a shipped suite (classic, minatar, bsuite, memory) or a spec file (docs/bench.md)")
    parser.add_argument("--status", action="store_true",
                        help="print the bench's cells done, running and left and the time left, and exit")
    parser.add_argument("--run-dir", required=True, help="the bench directory (created, or continued)")
    parser.add_argument("--algorithms", type=_names, default=None, metavar="A,B",
                        help="run only these of the spec's algorithms")
    parser.add_argument("--envs", type=_names, default=None, metavar="ID,ID", help="run only these of the spec's envs")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (overrides the spec's)")
    parser.add_argument("--total-timesteps", type=float, default=None, metavar="T",
                        help="env steps per run (overrides the spec's, every env's and every algorithm's)")
    parser.add_argument("--wandb", default=None, metavar="PROJECT",
                        help="also log every cell's sweep to this W&B project (as rljax sweep --wandb)")
    parser.add_argument("--mlflow", default=None, metavar="URI",
                        help="also log every cell's sweep to this MLflow tracking URI (as rljax sweep --mlflow)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--no-tensorboard", action="store_true", help="no tensorboard events in the cells")
    parser.add_argument("--no-compile-cache", action="store_true",
                        help="do not turn on the persistent compilation cache (one set already, e.g. by "
                             "JAX_COMPILATION_CACHE_DIR, is used)")
    return parser


def run(args: argparse.Namespace) -> int:
    """``rljax bench ...``; returns the exit status (2: a spec that cannot run, or a DIR holding another
    spec or that cannot be locked; 75: stopped before the end)."""
    from rljax.bench.runner import BenchStopped, run_bench
    from rljax.bench.spec import SpecError, check_spec, load_spec, narrow
    from rljax.cli.process import EXIT_USAGE, enable_compilation_cache
    from rljax.store.runlock import RunLockError

    if args.status:
        from rljax.bench.runner import bench_status, status_text

        try:
            print(status_text(bench_status(args.run_dir)))
        except (ValueError, OSError) as err:  # FileNotFoundError: not a bench directory
            print(f"rljax bench: error: {err}", file=sys.stderr)
            return EXIT_USAGE
        return 0
    if args.spec is None:
        print("rljax bench: error: give a suite or a spec file (or --status)", file=sys.stderr)
        return EXIT_USAGE
    try:
        spec = narrow(load_spec(args.spec), algorithms=args.algorithms, envs=args.envs, seeds=args.seeds,
                      total_timesteps=args.total_timesteps)
        check_spec(spec)
    except SpecError as err:
        print(f"rljax bench: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if not args.no_compile_cache:  # a cache directory set already is kept
        enable_compilation_cache()
    try:
        trackers = {k: v for k, v in (("wandb", args.wandb), ("mlflow", args.mlflow)) if v is not None}
        run_bench(spec, args.run_dir, quiet=args.quiet, tensorboard=not args.no_tensorboard, **trackers)
    except (SpecError, RunLockError) as err:  # another spec in DIR; a DIR that cannot be locked
        print(f"rljax bench: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BenchStopped as err:
        print(f"rljax bench: {err}: rljax bench {args.spec} --run-dir {args.run_dir}", file=sys.stderr)
        return 75
    if not args.quiet:
        print(f"bench: scores in {args.run_dir}/scores.csv, report in {args.run_dir}/report.md")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rljax.cli.bench ...`` (the flags of ``rljax bench``); returns the exit status."""
    from rljax.cli.flags import CommandParser

    top = CommandParser(prog="rljax")
    add_parser(top.add_subparsers(dest="subcommand", parser_class=CommandParser))
    try:
        args = top.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
