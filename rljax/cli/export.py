"""``rljax export RUN_DIR OUT_DIR``: a trained policy as a deployable artefact (:mod:`rljax.policy.export`).

::

    rljax export RUN_DIR OUT_DIR [--step S] [--member NAME] [--onnx auto|yes|no] [--force]

Writes ``policy.stablehlo`` (and ``policy.onnx`` where the converter is installed) with
``policy.json`` into OUT_DIR, each checked against the policy before anything is written. The
library raises; this command maps each failure to an exit status (:mod:`rljax.cli.process`): 2 for
bad input (an unknown run directory, step or member, a non-empty OUT_DIR without ``--force``, an
OUT_DIR inside the run), 70 when an artefact does not reproduce the policy, 74 when writing fails
(nothing is left behind).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rljax.cli.process import EXIT_IO, EXIT_SOFTWARE, EXIT_USAGE

__all__ = ["add_parser", "run", "summary", "ONNX_CHOICES"]

PROG = "rljax export"
"""The command as its error lines name it."""

ONNX_CHOICES = {"auto": "auto", "yes": True, "no": False}
"""``--onnx`` -> the ``onnx`` argument of :func:`rljax.policy.export.export`."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``export`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser(
        "export", help="a trained policy as StableHLO (and ONNX) to deploy",
        description="Write a trained policy as a deployable artefact (policy.stablehlo, policy.onnx, "
                    "policy.json) that needs neither rljax nor the training code; see docs/export.md.")
    parser.add_argument("run_dir", help="the run directory (or a sweep's, with --member)")
    parser.add_argument("out_dir", help="the directory to create: new or empty (see --force)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (env steps); default: the newest")
    parser.add_argument("--member", default=None, help="a sweep member's name or index (sweep run directories)")
    parser.add_argument("--onnx", choices=tuple(ONNX_CHOICES), default="auto",
                        help="also write policy.onnx: auto (when jax2onnx and onnxruntime are installed), yes "
                             "(fail without it), no")
    parser.add_argument("--force", action="store_true", help="replace a non-empty OUT_DIR")
    return parser


def run(args: argparse.Namespace) -> int:
    """``rljax export``; returns the exit status (see the module docstring)."""
    from rljax.policy.export import ExportError, check_out_dir, export
    from rljax.policy.trained import load

    try:
        check_out_dir(args.out_dir, args.force)
    except (FileExistsError, NotADirectoryError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    member = int(args.member) if args.member is not None and args.member.isdigit() else args.member
    try:
        policy = load(args.run_dir, args.step, member=member)
    except (FileNotFoundError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        meta = export(policy, args.out_dir, onnx=ONNX_CHOICES[args.onnx], force=args.force)
    except (FileExistsError, NotADirectoryError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ExportError as err:
        print(f"{PROG}: error: {err}; nothing was written", file=sys.stderr)
        return EXIT_SOFTWARE
    except OSError as err:
        print(f"{PROG}: error: writing {args.out_dir} failed: {err}; nothing was left behind", file=sys.stderr)
        return EXIT_IO
    print(summary(meta, args.out_dir))
    return 0


def summary(meta: dict[str, Any], out_dir: str) -> str:
    """What ``rljax export`` prints for the artefact ``meta`` (the contents of ``policy.json``, plus
    ``export_seconds``): what was exported, its signature, each file with its measured difference
    from ``policy.act``, and why ``policy.onnx`` was skipped."""
    from rljax.policy.export import ONNX_FILE

    def shape(entry: dict[str, Any]) -> str:
        return f"{entry['dtype']}[{', '.join(map(str, entry['shape']))}]"

    sig, checks = meta["signature"], meta["checks"]
    inputs = ", ".join(f"{e['name']} {shape(e)}" for e in sig["inputs"])
    outputs = ", ".join(f"{e['name']} {shape(e)}" for e in sig["outputs"])
    checked = (f"{checks['observations']} observations" if "observations" in checks else
               f"{checks['steps']:,} steps of episodes fed its own state")  # a recurrent policy's check
    lines = [f"exported {meta['algorithm']} on {meta['env']} (step {meta['step']:,}"
             f"{', member ' + str(meta['member']) if meta['member'] is not None else ''}) to {out_dir} "
             f"in {meta['export_seconds']:.1f}s",
             f"  ({inputs}) -> ({outputs}) (b: any batch size)" if "memory" in meta else
             f"  obs {shape(sig['inputs'][0])} -> action {shape(sig['outputs'][0])} (b: any batch size)"]
    lines += [f"  {name}: {entry['bytes']:,} bytes, max |action - policy.act| = "
              f"{checks['max_abs_diff'][name]:.3g} on {checked}"
              for name, entry in meta["files"].items()]
    if "memory" in meta:
        lines.append(f"  state: {', '.join(meta['memory']['state'])} (zeros at an episode's start; feed next_* back)")
    if "onnx_skipped" in meta:
        lines.append(f"  {ONNX_FILE} not written: {meta['onnx_skipped']}")
    return "\n".join(lines)
