"""The ``rljax`` console script and the ``main`` of every experiment module.

Experiment modules are a config plus one call::

    def main(argv=None):
        return run_experiment(PPOConfig, dict(env="CartPole-v1"), argv, description=__doc__)

which gives ``python -m experiments.ppo_cartpole --seed 3 --total-timesteps 1e6 --run-dir runs/x``
with ``--help`` listing every field and its help line (:mod:`rljax.cli.flags`), and ``... sweep
--grid ...`` (:mod:`rljax.training.sweep`). Exit statuses: :mod:`rljax.cli.process`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from rljax.runtime.distributed import launched_as_leader
from rljax.cli.flags import build_parser, config_from_args, explicit_flags, train_kwargs
from rljax.cli.process import (EXIT_DIVERGED, EXIT_IO, EXIT_SOFTWARE, EXIT_USAGE, call_training,
                               enable_compilation_cache, report_finished, request_cpu_devices, setting_up_line)
from rljax.runtime.determinism import request_deterministic

__all__ = ["run_experiment", "main", "build_parser", "config_from_args", "call_training", "enable_compilation_cache",
           "request_cpu_devices", "EXIT_USAGE", "EXIT_DIVERGED", "EXIT_SOFTWARE", "EXIT_IO"]


def run_experiment(config_cls: Any, defaults: dict[str, Any] | None = None,
                   argv: Sequence[str] | None = None, description: str | None = None,
                   name: str | None = None, prog: str | None = None, sweep_prog: str | None = None) -> int:
    """Parses flags, trains, and prints a summary. Returns a process exit status.

    Args:
        config_cls: the algorithm's config class.
        defaults: this experiment's defaults (override the config class's).
        argv: flags (default ``sys.argv[1:]``).
        description: ``--help`` text.
        name: experiment name, used for the default run directory.
        prog: the command as usage and error lines show it (default ``python -m experiments.<name>``).
        sweep_prog: the command that sweeps this experiment (default ``<prog> sweep``).
    """
    name = name or config_cls.__name__.lower()
    prog = prog or f"python -m experiments.{name}"
    sweep_prog = sweep_prog or f"{prog} sweep"
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:
        from rljax.training.sweep import sweep_main

        return sweep_main(config_cls, defaults, argv[1:], name, prog=sweep_prog)
    algo = config_cls.__name__.removesuffix("Config")
    epilog = (f"Sweeps (seeds x hyperparameters x env params as one compiled program, ranked): {sweep_prog} --help\n"
              f"Resume or extend a run: rljax resume RUN_DIR [--total-timesteps N]. Environments: rljax envs.")
    parser = build_parser(config_cls, defaults,
                          description or f"Trains {algo}: every field of {config_cls.__name__} is a flag.",
                          prog=prog, epilog=epilog)
    args = parser.parse_args(argv)
    base = None
    saved_options: dict[str, Any] = {}
    explicit = explicit_flags(parser, argv)
    if args.resume:
        from rljax.store.rundir import RunDirError, run_record

        try:
            record = run_record(args.resume)
        except RunDirError as err:
            parser.error(f"--resume {args.resume}: {err}")
        if record.algorithm not in (None, config_cls.__name__):
            parser.error(f"--resume {args.resume}: that run trained {record.algorithm}, not {config_cls.__name__}")
        base, saved_options = record.config, record.run_options
        if args.run_dir not in (None, args.resume):
            parser.error(f"--resume {args.resume} continues that directory; do not also pass --run-dir {args.run_dir}")
        args.run_dir = args.resume
    try:
        config = config_from_args(config_cls, args, base, explicit)
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    options = train_kwargs(args, saved_options, explicit)
    if args.resume and report_finished(args.resume, config):  # nothing to train: said so, nothing compiled
        return 0
    run_dir = args.run_dir
    if run_dir is None:
        run_dir = os.path.join("runs", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-s{config.seed}")
    elif run_dir.lower() == "none":
        run_dir = None
    if not args.quiet and launched_as_leader():  # processes 1.. of a multi-process run stay quiet
        print(setting_up_line(config, run_dir), flush=True)
    request_cpu_devices(config.num_devices)
    # XLA reads its flags once, when JAX starts: deterministic mode must be set before anything uses it.
    request_deterministic(options["deterministic"])
    if not args.no_compile_cache:
        enable_compilation_cache()

    from rljax.training.loop import train
    from rljax.training.options import RunOptions

    result, status = call_training(
        lambda: train(config, options=RunOptions(run_dir=run_dir, **options)), run_dir)
    if status is not None:
        return status
    import jax

    if jax.process_index() == 0:  # a multi-process run: process 0 reports it
        print(_done_line(result), flush=True)
    return 0


def _done_line(result: Any) -> str:
    """The summary line of a finished run."""
    t = result.timings
    ran = len(result.rows) * t["updates_per_chunk"] * (t["total_env_steps"] // t["num_updates"])
    evaluated = result.final_eval
    return (f"done: {t['total_env_steps']:,} env steps, return {result.final_return:.2f}, "
            + ("" if evaluated is None else f"greedy eval {evaluated['eval/return_mean']:.2f} over "
                                            f"{evaluated['eval/episodes']} episodes, ")
            + f"compile {t['compile_s']:.1f}s, compute {t['compute_s']:.1f}s "
            f"({ran / max(t['compute_s'], 1e-9):,.0f} steps/s), logging {t['logging_s']:.2f}s, "
            f"checkpoints {t['checkpoint_s']:.2f}s" + (f", evaluation {t['eval_s']:.1f}s" if evaluated else "")
            + (f"; run directory: {result.run_dir}" if result.run_dir else ""))


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rljax`` console script: ``rljax envs`` | ``rljax train ALGO [flags]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    algos = _algorithms()
    usage = ("usage: rljax envs [SUITE]   (each env's spaces and the algorithms that fit it)\n"
             f"       rljax train {{{','.join(algos)}}} [--env NAME|module:Name] [--env-param k=v ...] "
             "[--flag value ...]   (--help for the flags)\n"
             f"       rljax sweep {{{','.join(algos)}}} --grid FIELD=V1,V2 [--seeds N] [--flag value ...]\n"
             "       rljax resume RUN_DIR [--total-timesteps N] [--flag value ...]\n"
             "       rljax eval RUN_DIR [--episodes N] [--stochastic] [--env-param k=v ...] [--video FILE.gif] "
             "[--step S] [--member NAME] [--seed N]\n"
             "       rljax export RUN_DIR OUT_DIR [--step S] [--member NAME] [--onnx auto|yes|no] [--force]\n"
             "       rljax supervise [--max-restarts N] [--backoff S] [--max-backoff S] -- COMMAND ...\n"
             "       rljax launch --num-processes P --devices-per-process D -- COMMAND ...   (multi-host on this "
             "machine)\n"
             "       rljax inspect RUN_DIR [--out DIR] [--no-plots]   (a run's or sweep's summary and plots)")
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "envs":
        from rljax.cli.envs import envs_main

        return envs_main(rest)
    if cmd == "eval":
        from rljax.cli.eval import eval_main

        return eval_main(rest, prog="rljax eval")
    if cmd == "sweep":
        if not rest or rest[0] not in algos:
            print(f"error: sweep needs an algorithm, one of {sorted(algos)}; got {rest[:1]}\n{usage}",
                  file=sys.stderr)
            return 2
        from rljax.training.sweep import sweep_main

        return sweep_main(algos[rest[0]], None, rest[1:], rest[0], prog=f"rljax sweep {rest[0]}")
    if cmd == "train":
        if not rest or rest[0] not in algos:
            print(f"error: train needs an algorithm, one of {sorted(algos)}; got {rest[:1]}\n{usage}",
                  file=sys.stderr)
            return 2
        return run_experiment(algos[rest[0]], None, rest[1:], name=rest[0], prog=f"rljax train {rest[0]}",
                              sweep_prog=f"rljax sweep {rest[0]}")
    if cmd in _TOOLS:
        import importlib

        module, function = _TOOLS[cmd]
        return getattr(importlib.import_module(module), function)(rest)
    if cmd == "resume":
        if not rest or rest[0].startswith("-"):
            print(f"error: resume needs a run directory\n{usage}", file=sys.stderr)
            return 2
        run_dir = rest[0]
        from rljax.store.rundir import RunDirError, run_record

        try:
            record = run_record(run_dir)
        except RunDirError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        algorithm = record.algorithm
        by_class = {cls.__name__: (name, cls) for name, cls in algos.items()}
        if algorithm not in by_class:
            print(f"error: cannot tell which algorithm {run_dir} trained (its checkpoints and manifest.json name "
                  f"{algorithm!r}; known: {sorted(by_class)}); resume it with its experiment module: "
                  f"python -m experiments.<name> --resume {run_dir}", file=sys.stderr)
            return 2
        name, cls = by_class[algorithm]
        prog = f"rljax resume {run_dir}"
        if record.sweep:
            from rljax.training.sweep import sweep_main

            return sweep_main(cls, None, [*rest[1:], "--resume", run_dir], name, prog=prog)
        return run_experiment(cls, None, [*rest[1:], "--resume", run_dir], name=name, prog=prog,
                              sweep_prog=f"rljax sweep {name}")
    print(f"error: unknown command {cmd!r}\n{usage}", file=sys.stderr)
    return 2


# Subcommands that take their arguments whole: name -> (module, function), imported when used.
_TOOLS = {"export": ("rljax.policy.export", "export_main"), "supervise": ("rljax.cli.supervise", "supervise_main"),
          "launch": ("rljax.cli.launch", "launch_main"), "inspect": ("rljax.cli.inspect", "inspect_main")}


def _algorithms() -> dict[str, Any]:
    """Command name -> config class, for every registered algorithm (:mod:`rljax.agents`)."""
    from rljax.agents import algorithms

    return {name: entry.config_cls for name, entry in algorithms().items()}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
