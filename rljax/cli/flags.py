"""Command-line flags: one per config field plus the run options, and configs built from them.

``build_parser(PPOConfig, defaults)`` gives a parser with ``--help`` listing every field with its
help line; ints accept scientific notation (``--total-timesteps 1e6``), bools are
``--flag/--no-flag``, tuples of ints are comma-separated, tuples of strings repeat their flag
(``--env-param length=0.7 --env-param gravity=3``). A negative number is a value wherever a flag
takes one, in any notation (``--learning-rate -1e-3`` reaches the config's own range check). Unknown flags exit with status 2 naming the
closest valid flag. A resumed run's saved config is the base; only the flags typed on the command
line (:func:`explicit_flags`) override it.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import typing
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "config_from_args", "explicit_flags", "train_kwargs", "RUN_OPTION_FLAGS", "CommandParser",
           "UsageError", "FLAGS_HINT", "algorithm_classes", "add_algorithm_command", "algorithm_config"]


class UsageError(Exception):
    """Bad input found after parsing (an unknown algorithm, an out-of-range option): the command line
    prints it as the command's parser prints its own errors and exits with status 2."""


NEGATIVE_NUMBER = re.compile(r"^-(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?$")
"""What a parser of this module reads as a negative number (a value), not a flag: ``-3``, ``-0.5``,
``-.5``, ``-1e-3``, ``-2E+4``. (argparse before Python 3.13 knows only ``-3`` and ``-0.5``, and
reads ``--learning-rate -1e-3`` as a flag missing its value.)"""


def _numbers_are_values(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    # argparse's own hook for this (a parser attribute, set in its __init__); no flag here looks like a number.
    parser._negative_number_matcher = NEGATIVE_NUMBER
    return parser


class CommandParser(argparse.ArgumentParser):
    """argparse with a 'did you mean' for unknown flags, reading negative numbers in any notation
    as values (:data:`NEGATIVE_NUMBER`).

    Args:
        hint: when given, an error is one line plus this hint (for a parser whose usage block is
            long: the flag list is one ``--help`` away); without it, argparse's usage line and error.
    """

    def __init__(self, *args: Any, hint: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hint = hint
        _numbers_are_values(self)

    def error_text(self, message: str) -> str:
        """What :meth:`error` prints for ``message``."""
        if "unrecognized arguments" in message:
            flags = [s for a in self._actions for s in a.option_strings]
            hints = []
            for bad in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(bad.split("=")[0], flags, n=1) if bad.startswith("-") else []
                if close:
                    hints.append(f"{bad} -> did you mean {close[0]}?")
            if hints:
                message += " (" + "; ".join(hints) + ")"
        if self.hint is not None:
            return f"{self.prog}: error: {message}\n{self.hint}\n"
        return f"{self.format_usage()}{self.prog}: error: {message}\n"

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, self.error_text(message))


FLAGS_HINT = "(run with --help to list every flag)"
"""The line under a config parser's errors."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that keeps the description's and epilog's lines as written (their examples are one
    command a line) and shows each flag's default."""


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
                 prog: str | None = None, epilog: str | None = None) -> argparse.ArgumentParser:
    """An argument parser with one flag per field of ``config_cls`` plus run options.

    Args:
        config_cls: a config dataclass whose fields were declared with ``rljax.core.config.field``.
        defaults: experiment defaults that override the dataclass defaults.
        description: text for ``--help``, above the flags (its lines are kept as written).
        prog: program name for messages.
        epilog: text for ``--help``, below the flags (its lines are kept as written).
    """
    defaults = defaults or {}
    parser = CommandParser(prog=prog, description=description, epilog=epilog, formatter_class=_HelpFormatter,
                           allow_abbrev=False, hint=FLAGS_HINT)
    group = parser.add_argument_group("config (every field of " + config_cls.__name__ + ")")
    for f in dataclasses.fields(config_cls):
        default = defaults.get(f.name, f.default)
        help_text = f.metadata.get("help", "") + (" [sweepable]" if f.metadata.get("sweepable") else "")
        ftype = _field_type(config_cls, f)
        if typing.get_origin(ftype) is tuple and typing.get_args(ftype) == (str, ...):
            # Repeatable: each use adds one entry (--env-param length=0.7 --env-param gravity=3).
            flags = list(dict.fromkeys(filter(None, (f.metadata.get("flag"), _flag(f.name)))))
            group.add_argument(*flags, dest=f.name, action="append", type=str, default=list(default),
                               help=help_text, metavar="NAME=VALUE")
            continue
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
    _add_run_flags(parser.add_argument_group("run"))
    from rljax.cli.host import add_host_flags, supports_host

    if supports_host(config_cls):
        from rljax.agents.offpolicy import OffPolicyConfig

        add_host_flags(parser, _parse_int, _parse_float, offpolicy=issubclass(config_cls, OffPolicyConfig))
    return parser


def _add_run_flags(run: Any) -> None:
    """The run flags (:data:`RUN_OPTION_FLAGS` and the others of :func:`train_kwargs`) in the group ``run``."""
    run.add_argument("--run-dir", default=None,
                     help="run directory (default: runs/<experiment>-<time>); 'none' keeps no files")
    run.add_argument("--config", default=None, metavar="FILE",
                     help="read flags from a TOML file (rljax config ALGO writes one) or a run's config.json; "
                          "flags typed here override it")
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
    run.add_argument("--log-every", type=_parse_int, default=0, metavar="UPDATES",
                     help="one row of metrics.jsonl and tensorboard per this many updates (their means; at most a "
                          "chunk's, recorded in manifest.json's plan); 0: every update while a chunk's rows over all "
                          "members stay within 200, else fewer (chunks.jsonl and the progress lines stay per chunk)")
    run.add_argument("--wandb", default=None, metavar="PROJECT",
                     help="also log to this W&B project (pip install -e '.[wandb]'; offline into RUN_DIR/wandb "
                          "without W&B credentials); a resume continues the same W&B run")
    run.add_argument("--mlflow", default=None, metavar="URI",
                     help="also log to this MLflow tracking URI (pip install -e '.[mlflow]'; a local path is a file "
                          "store; experiment MLFLOW_EXPERIMENT_NAME or 'rljax'; reading a local file store "
                          "afterwards needs MLFLOW_ALLOW_FILE_STORE=true); a resume continues the same run")
    run.add_argument("--tracker-timeout", type=_parse_float, default=5.0, metavar="SECONDS",
                     help="how long the start of training waits for --wandb/--mlflow to start their runs; after it "
                          "they go on starting in the background and catch up, or are dropped with one warning "
                          "(docs/runbook.md, Trackers)")
    run.add_argument("--video-interval", type=_parse_int, default=0, metavar="ENV_STEPS",
                     help="every this many env steps (and at the end), a GIF of one greedy episode in "
                          "RUN_DIR/videos/<env_steps>.gif and tensorboard (the env must draw itself); 0: none")
    run.add_argument("--stall-factor", type=_parse_float, default=10.0, metavar="X",
                     help="warn once, with every thread's Python stack in RUN_DIR/stall-*.txt, when no chunk "
                          "finished for X times the median chunk interval (at least --stall-min); 0: no stall watchdog")
    run.add_argument("--stall-first-chunk", type=_parse_float, default=600.0, metavar="SECONDS",
                     help="the stall threshold until the first chunk finishes (compiling does not count)")
    run.add_argument("--stall-min", type=_parse_float, default=60.0, metavar="SECONDS",
                     help="the stall threshold's floor after the first chunk")
    run.add_argument("--straggler-margin", type=_parse_float, default=0.2, metavar="FRACTION",
                     help="multi-process runs: warn when one process keeps the others waiting for more than this "
                          "fraction of a chunk's interval in 2 chunks in a row; 0: no warning")
    run.add_argument("--deterministic", choices=("auto", "on", "off"), default="auto",
                     help="bit-identical reruns and resumes in another process: auto = on the CPU (free there), "
                          "not on a GPU (it costs throughput there); on = also on a GPU (sets XLA's deterministic "
                          "flags at process start); recorded in manifest.json (docs/runbook.md)")
    run.add_argument("--no-compile-cache", action="store_true",
                     help="disable the persistent XLA compilation cache (~/.cache/rljax/xla)")


def config_from_args(config_cls: Any, args: argparse.Namespace, base: dict[str, Any] | None = None,
                     explicit: set[str] | None = None) -> Any:
    """Builds the config from parsed args (validation errors propagate as ``ValueError``).

    With ``base`` (a saved ``config.json``), fields come from it except those in ``explicit``
    (the flags the user actually typed).
    """
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}  # repeatable flags
    if base is not None:
        explicit = explicit or set()
        for f in dataclasses.fields(config_cls):
            if f.name in base and f.name not in explicit:
                v = base[f.name]
                values[f.name] = tuple(v) if isinstance(v, list) else v
    return config_cls(**values)


def explicit_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The dests of the flags present on the command line (not filled from defaults)."""
    probe = _numbers_are_values(argparse.ArgumentParser(add_help=False, allow_abbrev=False))
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


# Run flags (dest) -> ``rljax.training.loop.train`` option, for the options a run saves and a resume keeps.
RUN_OPTION_FLAGS = {"checkpoint_every": "checkpoint_every", "checkpoint_interval": "checkpoint_interval_s",
                     "keep_checkpoints": "keep_checkpoints", "no_checkpoints": "checkpoints",
                     "no_tensorboard": "tensorboard", "stall_factor": "stall_factor",
                     "stall_first_chunk": "stall_first_chunk_s", "stall_min": "stall_min_s",
                     "straggler_margin": "straggler_margin", "deterministic": "deterministic",
                     "log_every": "log_every", "wandb": "wandb", "mlflow": "mlflow",
                     "tracker_timeout": "tracker_timeout_s", "video_interval": "video_interval"}


def train_kwargs(args: argparse.Namespace, saved: dict[str, Any] | None = None,
                 explicit: set[str] | None = None) -> dict[str, Any]:
    """The ``rljax.training.loop.train`` keyword arguments given by the run flags of :func:`build_parser`.

    With ``saved`` (the run options a resumed run was started with), an option keeps its saved
    value unless its flag is in ``explicit`` (typed on this command line).
    """
    out = dict(quiet=args.quiet, tensorboard=not args.no_tensorboard, resume=bool(args.resume),
               checkpoint_every=args.checkpoint_every, checkpoint_interval_s=args.checkpoint_interval,
               keep_checkpoints=args.keep_checkpoints, checkpoints=not args.no_checkpoints,
               stall_factor=args.stall_factor, stall_first_chunk_s=args.stall_first_chunk, stall_min_s=args.stall_min,
               straggler_margin=args.straggler_margin, deterministic=args.deterministic, log_every=args.log_every,
               wandb=args.wandb, mlflow=args.mlflow, tracker_timeout_s=args.tracker_timeout,
               video_interval=args.video_interval)
    for dest, option in RUN_OPTION_FLAGS.items():
        if saved and option in saved and dest not in (explicit or set()):
            out[option] = saved[option]
    return out


def algorithm_classes() -> dict[str, Any]:
    """Command name -> config class, for every registered algorithm (:mod:`rljax.agents`; importing
    them starts JAX, so only the commands that train ask)."""
    from rljax.agents import algorithms

    return {name: entry.config_cls for name, entry in algorithms().items()}


class _AlgorithmsHelp(argparse.Action):
    """``-h/--help`` of ``rljax train``/``sweep``: the help, with the registered algorithms listed
    below it (looked up only now, so that parsing any other command imports no algorithm)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None):
        algos = algorithm_classes()
        width = max(map(len, algos), default=0)
        parser.epilog = (f"algorithms (`{parser.prog} ALGO --help` lists ALGO's flags):\n"
                         + "\n".join(f"  {name.ljust(width)}  {cls.__name__}" for name, cls in sorted(algos.items())))
        parser.print_help()
        parser.exit()


def add_algorithm_command(subparsers: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """Adds the command ``name`` whose arguments are ``ALGO [FLAGS ...]`` (``rljax train``, ``rljax
    sweep``): the algorithm's name, then everything else for the algorithm's own parser
    (:func:`build_parser`). ``kwargs`` (usage, help, description) go to ``subparsers.add_parser``."""
    parser = subparsers.add_parser(name, add_help=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                                   **kwargs)
    parser.add_argument("-h", "--help", action=_AlgorithmsHelp, help="show this help, with the algorithms, and exit")
    parser.add_argument("algorithm", nargs="?", metavar="ALGO", help="a registered algorithm (listed below)")
    parser.add_argument("flags", nargs=argparse.REMAINDER, metavar="FLAGS",
                        help=f"the flags of ALGO's config and of the run ({parser.prog} ALGO --help lists them)")
    return parser


def algorithm_config(args: argparse.Namespace, command: str) -> Any:
    """The config class of ``args.algorithm``; :class:`UsageError` naming the registered ones otherwise."""
    algos = algorithm_classes()
    if args.algorithm not in algos:
        got = [] if args.algorithm is None else [args.algorithm]
        raise UsageError(f"{command} needs an algorithm, one of {sorted(algos)}; got {got}")
    return algos[args.algorithm]
