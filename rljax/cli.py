"""Command lines: a flag for every config field, and the ``rljax`` console script.

Experiment modules are a config plus one call::

    def main(argv=None):
        return run_experiment(PPOConfig, dict(env="CartPole-v1"), argv, description=__doc__)

which gives ``python -m experiments.ppo_cartpole --seed 3 --total-timesteps 1e6 --run-dir runs/x``
with ``--help`` listing every field and its help line. Unknown or malformed flags exit with status
2 and a message naming the flag or value (and the closest valid flag).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import time
import typing
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "config_from_args", "run_experiment", "main", "enable_compilation_cache",
           "request_cpu_devices"]


class _Parser(argparse.ArgumentParser):
    """argparse with a 'did you mean' for unknown flags."""

    def error(self, message: str) -> typing.NoReturn:
        if "unrecognized arguments" in message:
            flags = [s for a in self._actions for s in a.option_strings]
            bad = message.split(":", 1)[1].split()
            hints = []
            for b in bad:
                if b.startswith("-"):
                    close = difflib.get_close_matches(b.split("=")[0], flags, n=1)
                    if close:
                        hints.append(f"{b} -> did you mean {close[0]}?")
            if hints:
                message += " (" + "; ".join(hints) + ")"
        # A short message, not the whole usage block: the flag list is one --help away.
        self.exit(2, f"{self.prog}: error: {message}\n(run with --help to list every flag)\n")


def _field_type(cls: Any, f: dataclasses.Field) -> Any:
    hints = typing.get_type_hints(cls)
    return hints.get(f.name, type(f.default))


def _parse_int(text: str) -> int:
    """Ints that accept scientific notation when integral: '1e6' -> 1000000."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    return int(value)


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _parse_int_tuple(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(p) for p in text.replace(" ", "").split(",") if p)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 64,64") from None
    return values


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser(config_cls: Any, defaults: dict[str, Any] | None = None, description: str | None = None,
                 prog: str | None = None) -> argparse.ArgumentParser:
    """An argument parser with one flag per field of ``config_cls`` plus run options.

    Args:
        config_cls: a config dataclass whose fields were declared with ``rljax.config.field``.
        defaults: experiment defaults that override the dataclass defaults.
        description: text for ``--help``.
        prog: program name for messages.
    """
    defaults = defaults or {}
    parser = _Parser(prog=prog, description=description,
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    group = parser.add_argument_group("config (every field of " + config_cls.__name__ + ")")
    for f in dataclasses.fields(config_cls):
        default = defaults.get(f.name, f.default)
        help_text = f.metadata.get("help", "") + (" [sweepable]" if f.metadata.get("sweepable") else "")
        ftype = _field_type(config_cls, f)
        if ftype is bool:
            group.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                               default=default, help=help_text)
            continue
        if ftype is int:
            conv: Any = _parse_int
        elif ftype is float:
            conv = _parse_float
        elif typing.get_origin(ftype) is tuple:
            conv = _parse_int_tuple
        else:
            conv = str
        metavar = "N,N" if conv is _parse_int_tuple else None
        group.add_argument(_flag(f.name), dest=f.name, type=conv, default=default, help=help_text,
                           metavar=metavar)
    run = parser.add_argument_group("run")
    run.add_argument("--run-dir", default=None,
                     help="run directory (default: runs/<experiment>-<time>); 'none' keeps no files")
    run.add_argument("--resume", default=None, metavar="RUN_DIR",
                     help="continue the run in RUN_DIR from its newest valid checkpoint (its saved config "
                          "is used; flags given explicitly override it where that is allowed)")
    run.add_argument("--checkpoint-every", type=_parse_int, default=0, metavar="CHUNKS",
                     help="save a checkpoint every this many chunks; 0: every --checkpoint-interval seconds "
                          "(always at the end and on SIGTERM/SIGINT)")
    run.add_argument("--checkpoint-interval", type=_parse_float, default=60.0, metavar="SECONDS",
                     help="time between checkpoints when --checkpoint-every is 0")
    run.add_argument("--keep-checkpoints", type=_parse_int, default=3, help="recent checkpoints to keep")
    run.add_argument("--no-checkpoints", action="store_true", help="never save (the run cannot be resumed)")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument("--no-tensorboard", action="store_true", help="do not write tensorboard events")
    run.add_argument("--no-compile-cache", action="store_true",
                     help="disable the persistent XLA compilation cache (~/.cache/rljax/xla)")
    return parser


def config_from_args(config_cls: Any, args: argparse.Namespace, base: dict[str, Any] | None = None,
                     explicit: set[str] | None = None) -> Any:
    """Builds the config from parsed args (validation errors propagate as ``ValueError``).

    With ``base`` (a saved ``config.json``), fields come from it except those in ``explicit``
    (the flags the user actually typed).
    """
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)}
    if base is not None:
        explicit = explicit or set()
        for f in dataclasses.fields(config_cls):
            if f.name in base and f.name not in explicit:
                v = base[f.name]
                values[f.name] = tuple(v) if isinstance(v, list) else v
    return config_cls(**values)


def _explicit_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The dests of the flags present on the command line (not filled from defaults)."""
    probe = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            kwargs: dict[str, Any] = {"dest": action.dest, "default": argparse.SUPPRESS}
            if isinstance(action, argparse.BooleanOptionalAction):
                kwargs["action"] = argparse.BooleanOptionalAction
            elif action.nargs == 0:
                kwargs["action"] = "store_true"
            probe.add_argument(*action.option_strings, **kwargs)
    known, _ = probe.parse_known_args(argv)
    return set(vars(known))


# Run flags (dest) -> ``rljax.loop.train`` option, for the options a run saves and a resume keeps.
_RUN_OPTION_FLAGS = {"checkpoint_every": "checkpoint_every", "checkpoint_interval": "checkpoint_interval_s",
                     "keep_checkpoints": "keep_checkpoints", "no_checkpoints": "checkpoints",
                     "no_tensorboard": "tensorboard"}


def train_kwargs(args: argparse.Namespace, saved: dict[str, Any] | None = None,
                 explicit: set[str] | None = None) -> dict[str, Any]:
    """The ``rljax.loop.train`` keyword arguments given by the run flags of :func:`build_parser`.

    With ``saved`` (the run options a resumed run was started with), an option keeps its saved
    value unless its flag is in ``explicit`` (typed on this command line).
    """
    out = dict(quiet=args.quiet, tensorboard=not args.no_tensorboard, resume=bool(args.resume),
               checkpoint_every=args.checkpoint_every, checkpoint_interval_s=args.checkpoint_interval,
               keep_checkpoints=args.keep_checkpoints, checkpoints=not args.no_checkpoints)
    for dest, option in _RUN_OPTION_FLAGS.items():
        if saved and option in saved and dest not in (explicit or set()):
            out[option] = saved[option]
    return out


EXIT_USAGE = 2
"""Exit status of a usage error: a bad flag or config, a used or locked run directory, nothing to resume."""
EXIT_DIVERGED = 65
"""Exit status (EX_DATAERR) of a run stopped because it diverged (non-finite loss or state)."""
EXIT_SOFTWARE = 70
"""Exit status (EX_SOFTWARE) of a data-parallel run whose devices fell out of sync."""
EXIT_IO = 74
"""Exit status (EX_IOERR) of a run stopped by an I/O error (a full disk, a read-only file system)."""


def _os_error(err: BaseException) -> OSError | None:
    """The first :class:`OSError` in ``err``'s chain (Orbax wraps them), or None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and not isinstance(err, (FileExistsError, FileNotFoundError)):
            return err
        err = err.__cause__ or err.__context__
    return None


def _hold_off_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM handler of the command line around and after training: the run's own guard turns
    SIGTERM into a stop while it trains; before and after, the signal changes nothing."""


def _ignore_sigterm_at_exit() -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def call_training(run: Any, run_dir: Any) -> tuple[Any, int | None]:
    """Calls ``run()`` and maps its outcome to an exit status for the command line.

    Returns:
        ``(result, None)`` when training finished; ``(None, status)`` after printing one line for
        a usage error (2: bad config, used or locked directory, nothing to resume), a diverged run
        (65), devices out of sync (70) or an I/O error such as a full disk (74); ``(result, 75)``
        after printing how to resume a preempted run. From the moment training starts, SIGTERM
        is held off until the process exits (the run's own guard turns it into a stop; once the
        run has returned, a no-op handler stays installed): a SIGTERM after the final or the stop's checkpoint
        committed cannot turn status 0 or 75 into death by signal.
    """
    import signal
    import threading

    from rljax.checkpoint import PREEMPTED_EXIT_CODE, NoCheckpointError
    from rljax.loop import DesyncError, NonFiniteError
    from rljax.rundir import RunDirError
    from rljax.runlock import RunLockError

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _hold_off_sigterm) if main_thread else None
    resume_hint = f" Resume with: rljax resume {run_dir}" if run_dir is not None else ""
    try:
        out = run()
    except NonFiniteError as err:
        print(f"error: {err}", file=sys.stderr)
        return None, EXIT_DIVERGED
    except DesyncError as err:
        print(f"error: {err}", file=sys.stderr)
        return None, EXIT_SOFTWARE
    except (RunLockError, RunDirError, NoCheckpointError, FileExistsError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return None, EXIT_USAGE
    except ValueError as err:
        io = _os_error(err)
        if io is not None:
            print(f"error: I/O error: {io}.{resume_hint} once it is fixed (the newest committed checkpoint is "
                  f"intact)", file=sys.stderr)
            return None, EXIT_IO
        print(f"error: {err}", file=sys.stderr)
        return None, EXIT_USAGE
    except OSError as err:
        print(f"error: I/O error: {err}.{resume_hint} once it is fixed (the newest committed checkpoint is "
              f"intact)", file=sys.stderr)
        return None, EXIT_IO
    except BaseException:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        raise
    # The run finished or stopped and its checkpoint committed: the process only has to exit now, so
    # a SIGTERM during the exit (interpreter shutdown can take a while) must not turn its status
    # into death by signal. The no-op handler stays installed (unlike SIG_IGN, a handler is not
    # inherited by programs this process starts later); Python drops its handlers during
    # finalisation, so at exit SIGTERM is ignored outright.
    if main_thread:
        import atexit

        atexit.unregister(_ignore_sigterm_at_exit)
        atexit.register(_ignore_sigterm_at_exit)
    result = out[0] if isinstance(out, tuple) else out
    if result.preempted:
        print(f"preempted ({result.preempted}); exit status {PREEMPTED_EXIT_CODE}.{resume_hint}", file=sys.stderr)
        return out, PREEMPTED_EXIT_CODE
    return out, None


def enable_compilation_cache(path: str | None = None) -> str:
    """Turns on JAX's persistent compilation cache (a repeat run's compile drops from seconds to
    a fraction of a second). Experiment entry points call this; the library never does."""
    import jax

    path = path or os.path.join(os.path.expanduser("~"), ".cache", "rljax", "xla")
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def request_cpu_devices(num_devices: int) -> None:
    """Makes ``num_devices`` CPU devices available when JAX has not started yet and the CPU is the
    platform (fake devices for data-parallel runs and tests on one machine)."""
    import jax
    from jax._src import xla_bridge

    if num_devices <= 1 or xla_bridge.backends_are_initialized():
        return
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    jax.config.update("jax_num_cpu_devices", num_devices)


def run_experiment(config_cls: Any, defaults: dict[str, Any] | None = None,
                   argv: Sequence[str] | None = None, description: str | None = None,
                   name: str | None = None) -> int:
    """Parses flags, trains, and prints a summary. Returns a process exit status.

    Args:
        config_cls: the algorithm's config class.
        defaults: this experiment's defaults (override the config class's).
        argv: flags (default ``sys.argv[1:]``).
        description: ``--help`` text.
        name: experiment name, used for the default run directory.
    """
    name = name or config_cls.__name__.lower()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:
        from rljax.sweep import sweep_main

        return sweep_main(config_cls, defaults, argv[1:], name)
    parser = build_parser(config_cls, defaults, description, prog=f"python -m experiments.{name}")
    args = parser.parse_args(argv)
    base = None
    saved_options: dict[str, Any] = {}
    explicit = _explicit_flags(parser, argv)
    if args.resume:
        from rljax.rundir import RunDirError, run_record

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
    request_cpu_devices(config.num_devices)
    if not args.no_compile_cache:
        enable_compilation_cache()

    from rljax.loop import train

    run_dir = args.run_dir
    if run_dir is None:
        run_dir = os.path.join("runs", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-s{config.seed}")
    elif run_dir.lower() == "none":
        run_dir = None
    result, status = call_training(
        lambda: train(config, run_dir=run_dir, **train_kwargs(args, saved_options, explicit)), run_dir)
    if status is not None:
        return status
    t = result.timings
    ran = len(result.rows) * t["updates_per_chunk"] * (t["total_env_steps"] // t["num_updates"])
    print(f"done: {t['total_env_steps']:,} env steps, return {result.final_return:.2f}, "
          f"compile {t['compile_s']:.1f}s, compute {t['compute_s']:.1f}s "
          f"({ran / max(t['compute_s'], 1e-9):,.0f} steps/s), logging {t['logging_s']:.2f}s, "
          f"checkpoints {t['checkpoint_s']:.2f}s"
          + (f"; run directory: {result.run_dir}" if result.run_dir else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rljax`` console script: ``rljax envs`` | ``rljax train ALGO [flags]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    algos = _algorithms()
    usage = ("usage: rljax envs\n"
             f"       rljax train {{{','.join(algos)}}} [--flag value ...]   (--help for the flags)\n"
             f"       rljax sweep {{{','.join(algos)}}} --grid FIELD=V1,V2 [--seeds N] [--flag value ...]\n"
             "       rljax resume RUN_DIR [--total-timesteps N] [--flag value ...]\n"
             "       rljax supervise [--max-restarts N] [--backoff S] [--max-backoff S] -- COMMAND ...")
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "envs":
        import envs

        print("\n".join(envs.registered() + envs.gymnax_registered()))
        return 0
    if cmd == "sweep":
        if not rest or rest[0] not in algos:
            print(f"error: sweep needs an algorithm, one of {sorted(algos)}; got {rest[:1]}\n{usage}",
                  file=sys.stderr)
            return 2
        return run_experiment(algos[rest[0]], None, ["sweep", *rest[1:]], name=rest[0])
    if cmd == "train":
        if not rest or rest[0] not in algos:
            print(f"error: train needs an algorithm, one of {sorted(algos)}; got {rest[:1]}\n{usage}",
                  file=sys.stderr)
            return 2
        return run_experiment(algos[rest[0]], None, rest[1:], name=rest[0])
    if cmd == "supervise":
        from rljax.supervise import supervise_main

        return supervise_main(rest)
    if cmd == "resume":
        if not rest or rest[0].startswith("-"):
            print(f"error: resume needs a run directory\n{usage}", file=sys.stderr)
            return 2
        run_dir = rest[0]
        from rljax.rundir import RunDirError, run_record

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
        if record.sweep:
            return run_experiment(cls, None, ["sweep", *rest[1:], "--resume", run_dir], name=name)
        return run_experiment(cls, None, [*rest[1:], "--resume", run_dir], name=name)
    print(f"error: unknown command {cmd!r}\n{usage}", file=sys.stderr)
    return 2


def _algorithms() -> dict[str, Any]:
    """Command name -> config class, for every registered algorithm (:mod:`rljax.agents`)."""
    from rljax.agents import algorithms

    return {name: entry.config_cls for name, entry in algorithms().items()}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
