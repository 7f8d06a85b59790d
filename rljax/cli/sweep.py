"""``rljax sweep ALGO [flags]`` and every experiment module's ``sweep``: seeds x hyperparameters x env
params trained as one compiled program, then ranked (:mod:`rljax.training.sweep`).

::

    rljax sweep ppo --grid learning_rate=1e-4,3e-4,1e-3 --seeds 4 --run-dir runs/sweep1
    rljax sweep --help          # the registered algorithms
    rljax sweep ppo --help      # the run's flags plus the sweep's (--grid, --sample, --seeds, --pbt ...)
    rljax sweep ppo --grid learning_rate=1e-4,3e-4,1e-3 --grid ent_coef=0,0.01,0.03 --halving   # 3 slots, 9 trials

The flags are a run's (:func:`rljax.cli.flags.build_parser`) plus the sweep's; ``--num-devices`` splits
the population over devices (each member is a single-device run). ``--resume RUN_DIR`` continues a
sweep with its saved spec and devices.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

from rljax.cli.configfile import parse_with_config
from rljax.cli.flags import (add_algorithm_command, algorithm_config, build_parser, config_from_args, explicit_flags,
                             train_kwargs)
from rljax.cli.process import (call_training, enable_compilation_cache, report_finished, request_cpu_devices,
                               setting_up_line)
from rljax.runtime.determinism import request_deterministic

__all__ = ["add_parser", "run", "sweep_command", "sweep_parser"]

HALVING_FLAGS = ("halving", "halving_slots", "halving_eta", "halving_min_steps", "halving_seed")
"""The successive-halving flags' dests (``--halving`` first)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``sweep`` to the ``rljax`` subcommands."""
    return add_algorithm_command(
        subparsers, "sweep", help="seeds x hyperparameters as one compiled program, ranked",
        usage="rljax sweep ALGO --grid FIELD=V1,V2 [--seeds N] [--flag value ...]",
        description="Sweeps ALGO: seeds x hyperparameters x env params as one compiled program, ranked "
                    "(rljax sweep ALGO --help lists the flags).")


def run(args: argparse.Namespace) -> int:
    """``rljax sweep ALGO FLAGS...``; returns the exit status."""
    config_cls = algorithm_config(args, "sweep")
    return sweep_command(config_cls, None, args.flags, args.algorithm, prog=f"rljax sweep {args.algorithm}")


def _population_devices(parser: Any, args: Any, explicit: set[str]) -> None:
    """Moves ``--num-devices`` (or its deprecated alias ``--devices``, with a warning) to
    ``args.devices``, the devices the population is split over (0 when neither is given: as many as
    divide the member count); each member's config keeps ``num_devices=1`` (members are
    single-device runs)."""
    given = "num_devices" in explicit
    if args.devices is not None:
        print("warning: --devices is deprecated; use --num-devices (the same flag as a run's)", file=sys.stderr)
        if given and args.num_devices != args.devices:
            parser.error(f"--devices {args.devices} and --num-devices {args.num_devices} disagree; give --num-devices")
        args.num_devices, given = args.devices, True
    args.devices, args.num_devices = (args.num_devices if given else 0), 1
    explicit.discard("num_devices")


def sweep_parser(config_cls: Any, defaults: dict[str, Any] | None, prog: str) -> argparse.ArgumentParser:
    """The run's flags (:func:`rljax.cli.flags.build_parser`) plus the sweep's."""
    from rljax.training import sweep as library

    parser = build_parser(config_cls, defaults, description=library.__doc__, prog=prog)
    group = parser.add_argument_group("sweep")
    group.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                       help="values of a sweepable field (or env.<param>); repeat for a grid")
    group.add_argument("--sample", action="append", default=[], metavar="FIELD=uniform|log:LOW:HIGH",
                       help="random-search range of a field; with --num-samples")
    group.add_argument("--num-samples", type=int, default=0, help="random configurations to draw")
    group.add_argument("--sample-seed", type=int, default=0, help="seed of the random draw")
    group.add_argument("--seeds", type=int, default=1, help="seeds per configuration (0, 1, ..., N-1 + --seed)")
    # One name for devices everywhere: --num-devices (the config field's flag) splits the population over
    # devices; members themselves are single-device runs. --devices, the old name, still works and warns.
    group.add_argument("--devices", type=int, default=None, help="deprecated: use --num-devices")
    group.add_argument("--no-plots", action="store_true", help="skip the learning-curve PNGs")
    group.add_argument("--pbt-interval", type=int, default=0, metavar="CHUNKS",
                       help="population-based training: exploit/explore every this many chunks (with --pbt)")
    group.add_argument("--pbt", action="append", default=[], metavar="FIELD=LOW:HIGH",
                       help="a hyperparameter PBT perturbs, and its allowed range; repeat for several")
    group.add_argument("--pbt-fraction", type=float, default=0.25,
                       help="share of members replaced (bottom) by copies of the best (top) each PBT step")
    halving = parser.add_argument_group(
        "successive halving", "train the space's trials (grid x samples x seeds) in fewer slots: at each rung the "
        "trials below the top 1/eta of the scores recorded there stop and their slots start new trials, all in one "
        "compiled program (ASHA's rule). It beats a full grid when the early ranking predicts the final one and the "
        "space is larger than the slots; its bias: configs that learn slowly but finish well stop early")
    halving.add_argument("--halving", action="store_true", help="successive halving over the space's trials")
    halving.add_argument("--halving-slots", type=int, default=0, metavar="N",
                         help="trials trained at once (default: the trial count / eta, rounded up)")
    halving.add_argument("--halving-eta", type=int, default=3, metavar="ETA",
                         help="reduction factor: the top 1/ETA at each rung continue; rungs at ETA x the previous")
    halving.add_argument("--halving-min-steps", type=int, default=0, metavar="STEPS",
                         help="the first rung's trial age in env steps, rounded up to whole chunks (default: the "
                              "run's chunks / ETA**2)")
    halving.add_argument("--halving-seed", type=int, default=0, help="seed of the order trials start in")
    for action in parser._actions:
        if action.dest == "num_devices":
            action.help = ("devices to split the population over (members are single-device runs; the member count "
                           "must be a multiple); default: as many as divide the member count, on a CPU one fake "
                           "device per core (members never communicate, so a split population uses every core)")
    return parser


def _resumed_sweep(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Any, dict, dict]:
    """``(saved spec, saved config, saved run options)`` of ``--resume RUN_DIR``; points
    ``args.run_dir`` and ``args.devices`` at the saved sweep's. Usage errors exit through ``parser``."""
    from rljax.store.rundir import RunDirError, read_json, run_record
    from rljax.training.sweep import SweepSpec

    saved_path = pathlib.Path(args.resume) / "sweep.json"
    if not saved_path.exists():
        parser.error(f"--resume {args.resume}: no sweep.json there")
    try:
        saved = read_json(saved_path)
        record = run_record(args.resume)
    except RunDirError as err:
        parser.error(f"--resume {args.resume}: {err}")
    args.run_dir = args.resume
    args.devices = saved["devices"]
    return SweepSpec.from_dict(saved["spec"]), record.config, record.run_options


def _new_spec(args: argparse.Namespace, config: Any) -> Any:
    """The :class:`~rljax.training.sweep.SweepSpec` the sweep flags describe (``ValueError`` naming a bad one)."""
    from rljax.training.sweep import SweepSpec, parse_grid, parse_sample

    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.devices < 0:
        raise ValueError(f"--num-devices must be >= 1 (or 0: automatic), got {args.devices}")
    pbt = None
    if args.pbt_interval or args.pbt:
        from rljax.training.hooks.pbt import PBTSpec, parse_pbt

        pbt = PBTSpec(interval=args.pbt_interval, fields=parse_pbt(args.pbt), fraction=args.pbt_fraction)
    spec = SweepSpec(grid=parse_grid(args.grid), sample=parse_sample(args.sample), num_samples=args.num_samples,
                     seeds=tuple(config.seed + i for i in range(args.seeds)), sample_seed=args.sample_seed, pbt=pbt)
    if not spec.grid and not spec.sample and args.seeds == 1:
        raise ValueError("nothing to sweep: give --grid, --sample or --seeds N > 1")
    given = [f"--{n.replace('_', '-')}" for n in HALVING_FLAGS[1:] if n in getattr(args, "explicit", set())]
    if given and not args.halving:
        raise ValueError(f"{', '.join(given)} configure successive halving: add --halving")
    if args.halving and pbt is not None:
        raise ValueError("--halving and --pbt are two ways to spend a sweep's budget: give one of them")
    if args.halving:
        import dataclasses
        import math

        from rljax.training.hooks.halving import HalvingSpec, validate_halving
        from rljax.training.sweep import member_count

        trials = member_count(spec)
        halving = HalvingSpec(slots=args.halving_slots or max(2, math.ceil(trials / max(args.halving_eta, 1))),
                              eta=args.halving_eta, min_steps=args.halving_min_steps, seed=args.halving_seed)
        validate_halving(halving, trials)
        spec = dataclasses.replace(spec, halving=halving)
    return spec


def sweep_command(config_cls: Any, defaults: dict[str, Any] | None, argv: Sequence[str], name: str,
                  prog: str | None = None) -> int:
    """The ``sweep`` command of experiment modules and of ``rljax sweep ALGO``; returns the exit status.

    Args:
        config_cls: the algorithm's config class.
        defaults: the experiment's defaults (override the config class's).
        argv: the flags after ``sweep``.
        name: the experiment's name, used for the default run directory ``runs/<name>-sweep-<time>``.
        prog: the command as usage and error lines show it (default ``python -m experiments.<name> sweep``).
    """
    argv = list(argv)
    parser = sweep_parser(config_cls, defaults, prog or f"python -m experiments.{name} sweep")
    args, argv = parse_with_config(parser, argv, config_cls)
    explicit = explicit_flags(parser, argv)
    _population_devices(parser, args, explicit)
    base, saved_options, spec = None, {}, None
    args.explicit = explicit
    if args.resume:
        typed = [f"--{n.replace('_', '-')}" for n in HALVING_FLAGS if n in explicit]
        if typed:
            parser.error(f"{', '.join(typed)}: a resumed sweep continues the spec it saved in sweep.json (with its "
                         f"halving, if it had one); start a new sweep to change it")
        spec, base, saved_options = _resumed_sweep(parser, args)
    try:
        config = config_from_args(config_cls, args, base, explicit)
        spec = spec or _new_spec(args, config)
    except ValueError as err:
        parser.error(str(err))
    if args.resume and report_finished(args.resume, config, parser):  # nothing to train: said so, nothing compiled
        return 0
    run_dir = args.run_dir or os.path.join("runs", f"{name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir = None if str(run_dir).lower() == "none" else run_dir
    from rljax.runtime.distributed import launched_as_leader

    if not args.quiet and launched_as_leader():  # processes 1.. of a multi-process run stay quiet
        print(setting_up_line(config, run_dir, sweep=True), flush=True)
    options = train_kwargs(args, saved_options, explicit)
    if args.devices:
        request_cpu_devices(args.devices)
    else:  # one fake CPU device per core, as many as divide the population (no effect off the CPU)
        from rljax.training.population import auto_devices
        from rljax.training.sweep import member_count

        request_cpu_devices(auto_devices(member_count(spec), os.cpu_count() or 1))
    # XLA reads its flags once, when JAX starts: deterministic mode must be set before anything uses it.
    request_deterministic(options["deterministic"])
    if not args.no_compile_cache:
        enable_compilation_cache()
    from rljax.training.sweep import run_sweep

    _, status = call_training(lambda: run_sweep(config, spec, run_dir=run_dir, devices=args.devices or None,
                                                plots=not args.no_plots, **options), run_dir)
    return status or 0
