"""Config files: a run written down as a file, reviewed and versioned, with its run options beside
its hyperparameters.

``--config FILE`` (every training and sweep command) reads a TOML file (stdlib ``tomllib``) or a
run directory's ``config.json``. Top-level keys are config fields; a ``[run]`` table holds the
other flags of the command by their names (``checkpoint_every``, ``log_every``,
``no_tensorboard``, a sweep's ``grid`` or ``seeds``, ...). A file is flags written down: each key
becomes its flag, placed before the command line's, so a flag typed on the command line overrides
the file (a repeatable flag typed there replaces the file's entries), every value goes through
the flag's own parsing and checks (an error names the file and key, not the flag), and a resume
treats the file's values as typed flags. A number is written as a number: ``learning_rate =
"0.001"`` is refused with the unquoted form, and so is a run option at the top level or a field
under ``[run]``, saying where it belongs. An ``algorithm`` key, when present, must name the
command's algorithm.

``rljax config ALGO`` prints such a file with every field at its default and its help as a comment
(:func:`config_toml`)::

    rljax config ppo > run.toml          # edit it, then
    rljax train ppo --config run.toml --seed 3
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import pathlib
import textwrap
import tomllib
from collections.abc import Sequence
from typing import Any

__all__ = ["NOT_IN_FILES", "config_tokens", "config_toml", "parse_with_config", "add_parser", "run"]

NOT_IN_FILES = ("help", "config", "resume")
"""Flags a config file cannot hold: what to read and which run to resume are the command line's."""


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's flags by destination, but :data:`NOT_IN_FILES`."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in NOT_IN_FILES}


def _config_dests(parser: argparse.ArgumentParser) -> set[str]:
    return {a.dest for group in parser._action_groups if group.title and group.title.startswith("config")
            for a in group._group_actions}


def _read(path: pathlib.Path) -> dict[str, Any]:
    if path.is_dir():
        hint = f"; did you mean {path / 'config.json'}?" if (path / "config.json").is_file() else ""
        raise ValueError(f"--config {path} is a directory, not a file{hint}")
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as err:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ValueError(f"--config {path} is not valid {kind}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a table of config fields, got {type(data).__name__}")
    return data


def _tokens(action: argparse.Action, value: Any, where: str) -> list[str]:
    """``value`` as the command-line tokens of ``action``'s flag, each checked by the flag's own type
    and choices here, so that a bad value is named by the file and key it came from (:func:`_checked`)."""
    flag = next(s for s in action.option_strings if s.startswith("--"))
    if isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0:
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, got {value!r}")
        if isinstance(action, argparse.BooleanOptionalAction):
            return [flag if value else "--no-" + flag[2:]]
        return [flag] if value else []
    # FLAG=VALUE: a value that starts with '-' stays a value.
    if isinstance(action, argparse._AppendAction):
        values = value if isinstance(value, list) else [value]
        return [f"{flag}={_checked(action, v, _scalar(v, where), where)}" for v in values]
    if isinstance(value, list):
        return [f"{flag}=" + _checked(action, value, ",".join(_scalar(v, where) for v in value), where)]
    return [f"{flag}={_checked(action, value, _scalar(value, where), where)}"]


def _checked(action: argparse.Action, value: Any, text: str, where: str) -> str:
    """``text`` (``value`` as its flag's token) once the flag's type and choices accept it.

    Raises:
        ValueError: naming ``where`` (the file and key), the value and why: the flag's own message
            (``'1.5' is not an integer``), the valid choices, for a number written as a string
            (``learning_rate = "0.001"``) the unquoted form to write instead, and for a number or
            boolean given to a string flag (``run_dir = 5``) the quoted form.
    """
    convert = action.type if callable(action.type) else (lambda t: t)
    try:
        converted = convert(text)
    except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
        raise ValueError(f"{where} = {_shown(value)}: {err}") from None
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"{where} = {_shown(value)}: must be one of {', '.join(map(repr, action.choices))}")
    raw = value if isinstance(value, list) else [value]
    if isinstance(converted, str) and any(isinstance(v, (bool, int, float)) for v in raw):
        # A string flag given a number or a boolean (run_dir = 5, wandb = true) would be read as its text.
        key = where.rsplit(" ", 1)[-1]
        what = "holds a number or boolean" if isinstance(value, list) else \
            f"is a {'boolean' if isinstance(value, bool) else 'number'}, not a string"
        raise ValueError(f"{where} = {_shown(value)} {what}: write it quoted, {key} = {json.dumps(text)}")
    quoted = [v for v in raw if isinstance(v, str) and _is_number(v)]
    if quoted and _numeric(converted):
        # A quoted number would be read all the same; refused, as a typo in a type would be elsewhere.
        key = where.rsplit(" ", 1)[-1]
        what = "holds a number in quotes" if isinstance(value, list) else "is a string, not a number"
        raise ValueError(f"{where} = {_shown(value)} {what}: write it unquoted, {key} = {_toml_value(converted)}")
    return text


def _numeric(value: Any) -> bool:
    """Whether a flag's parsed value is a number (or a tuple of numbers, ``hidden_sizes``)."""
    if isinstance(value, tuple):
        return bool(value) and all(map(_numeric, value))
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _shown(value: Any) -> str:
    """``value`` as the file wrote it (TOML and JSON quote strings with double quotes)."""
    return json.dumps(value) if isinstance(value, (str, list)) else _scalar(value, "")


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise ValueError(f"{where} must be a number, a string or a boolean, got {value!r}")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_tokens(path: str | pathlib.Path, parser: argparse.ArgumentParser, config_cls: Any,
                  typed: set[str] = frozenset()) -> list[str]:
    """The command-line tokens the config file ``path`` stands for (see the module docstring).

    ``typed`` holds the destinations typed on the command line: a repeatable flag among them drops
    the file's entries. Raises ``ValueError`` naming the file, the key and what would be valid.
    """
    path = pathlib.Path(path)
    data = _read(path)
    actions = _actions(parser)
    fields = _config_dests(parser)
    algorithm = data.pop("algorithm", None)
    if algorithm is not None:
        from rljax.cli.flags import algorithm_classes

        named = algorithm_classes().get(str(algorithm).lower())
        if named is not config_cls:
            raise ValueError(f"--config {path} is for algorithm {algorithm!r}, not {config_cls.__name__} "
                             f"(remove its 'algorithm' key or use `rljax train {algorithm}`)")
    run = data.pop("run", {})
    if not isinstance(run, dict):
        raise ValueError(f"--config {path}: 'run' must be a table ([run]) of run flags, got {run!r}")
    tokens: list[str] = []
    for table, entries, valid in (("", data, fields), ("[run] ", run, set(actions) - fields)):
        for key, value in entries.items():
            if key not in valid and key in actions:
                if table:
                    raise ValueError(f"--config {path}: [run] {key!r} is a field of {config_cls.__name__}: put it "
                                     f"at the top level, above [run]")
                raise ValueError(f"--config {path}: {key!r} is a run option, not a field of {config_cls.__name__}: "
                                 f"put it under [run]")
            if key not in valid:
                close = difflib.get_close_matches(key, sorted(valid), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(sorted(valid))}"
                what = "a field of " + config_cls.__name__ if not table else "a flag of this command"
                raise ValueError(f"--config {path}: {table}{key!r} is not {what}{hint}")
            action = actions[key]
            if isinstance(action, argparse._AppendAction) and key in typed:
                continue
            tokens += _tokens(action, value, f"--config {path}: {table}{key}")
    return tokens


def parse_with_config(parser: argparse.ArgumentParser, argv: Sequence[str], config_cls: Any
                      ) -> tuple[argparse.Namespace, list[str]]:
    """Parses ``argv`` with the tokens of its ``--config FILE`` (if any) in front of it; returns
    ``(args, tokens)``, ``tokens`` being the whole command line as parsed (for
    :func:`rljax.cli.flags.explicit_flags`). A bad file exits through ``parser.error``."""
    from rljax.cli.flags import explicit_flags

    argv = list(argv)
    probe = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    probe.add_argument("--config", default=None)
    known, _ = probe.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    tokens = argv
    if known.config:
        try:
            tokens = config_tokens(known.config, parser, config_cls, explicit_flags(parser, argv)) + argv
        except ValueError as err:
            parser.error(str(err))
    return parser.parse_args(tokens), tokens


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def config_toml(parser: argparse.ArgumentParser, algorithm: str) -> str:
    """A config file of every flag of ``parser`` at its default, each with its help as a comment:
    the config's fields at the top level, the other flags in ``[run]``; a flag without a default
    (``run_dir``) is written commented out."""
    fields = _config_dests(parser)
    lines = [f"# rljax {algorithm} config: every field at its default, its help above it. Use it with",
             f"#   rljax train {algorithm} --config FILE [FLAGS]   (flags typed there override this file)",
             f'algorithm = "{algorithm}"', ""]
    actions = _actions(parser)
    run_lines = ["[run]", "# The run's flags, by name (--checkpoint-every is checkpoint_every)."]
    for dest, action in actions.items():
        out = lines if dest in fields else run_lines
        if action.help:
            out += ["# " + line for line in textwrap.wrap(" ".join(action.help.split()).replace("%%", "%"), 98)]
        default = action.default
        if isinstance(action, argparse._AppendAction):
            default = list(default or [])
        if default is None:
            out.append(f'# {dest} = "..."')
        else:
            out.append(f"{dest} = {_toml_value(default)}")
        out.append("")
    return "\n".join(lines + run_lines).rstrip() + "\n"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``config`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("config", help="print a config file of ALGO (every field, its help as a comment)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("algorithm", metavar="ALGO", help="a registered algorithm (rljax train --help lists them)")
    return parser


def run(args: argparse.Namespace) -> int:
    """``rljax config ALGO``: prints the file; returns the exit status."""
    from rljax.cli.flags import UsageError, algorithm_classes, build_parser

    algos = algorithm_classes()
    if args.algorithm not in algos:
        raise UsageError(f"config needs an algorithm, one of {sorted(algos)}; got {args.algorithm!r}")
    print(config_toml(build_parser(algos[args.algorithm]), args.algorithm), end="")
    return 0
