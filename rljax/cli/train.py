"""``rljax train ALGO [flags]``: one training run of a registered algorithm, configured by flags.

::

    rljax train ppo --env CartPole-v1 --total-timesteps 1e6 --run-dir runs/cp
    rljax train --help          # the registered algorithms
    rljax train ppo --help      # every field of PPOConfig and every run option, with its help line

:func:`train_command` is also what an experiment module runs (:mod:`rljax.cli.experiment`): it
parses the flags of one config class (:func:`rljax.cli.flags.build_parser`), resumes from a run
directory's saved config with ``--resume``, prints one line before JAX starts and a summary at the
end, and maps how the run ended to an exit status (:mod:`rljax.cli.process`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any

from rljax.cli.configfile import parse_with_config
from rljax.cli.flags import (add_algorithm_command, algorithm_config, build_parser, config_from_args, explicit_flags,
                             train_kwargs)
from rljax.cli.process import (call_training, enable_compilation_cache, report_finished, request_caller_thread_cpu_ops,
                               request_cpu_devices, setting_up_line)
from rljax.runtime.determinism import request_deterministic

__all__ = ["add_parser", "run", "train_command"]


HELP = dict(help="train one run of an algorithm",
            usage="rljax train ALGO [--env NAME|module:Name] [--env-param k=v ...] [--flag value ...]",
            description="Trains ALGO: every field of its config is a flag (rljax train ALGO --help lists them).\n"
                        "Sweeps: rljax sweep ALGO --help. Resume or extend a run: rljax resume RUN_DIR.")
"""The ``rljax train`` lines of ``rljax --help`` and of ``rljax train --help``."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``train`` to the ``rljax`` subcommands."""
    return add_algorithm_command(subparsers, "train", **HELP)


def run(args: argparse.Namespace) -> int:
    """``rljax train ALGO FLAGS...``; returns the exit status."""
    config_cls = algorithm_config(args, "train")
    return train_command(config_cls, None, args.flags, name=args.algorithm, prog=f"rljax train {args.algorithm}",
                         sweep_prog=f"rljax sweep {args.algorithm}")


def _resume_base(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 config_cls: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``(saved config, saved run options)`` of ``--resume RUN_DIR`` (``(None, {})`` without it);
    points ``args.run_dir`` at the resumed directory. Usage errors exit through ``parser``."""
    if not args.resume:
        return None, {}
    from rljax.store.rundir import RunDirError, run_record

    try:
        record = run_record(args.resume)
    except RunDirError as err:
        parser.error(f"--resume {args.resume}: {err}")
    if record.algorithm not in (None, config_cls.__name__):
        parser.error(f"--resume {args.resume}: that run trained {record.algorithm}, not {config_cls.__name__}")
    if args.run_dir not in (None, args.resume):
        parser.error(f"--resume {args.resume} continues that directory; do not also pass --run-dir {args.run_dir}")
    args.run_dir = args.resume
    return record.config, record.run_options


def train_command(config_cls: Any, defaults: dict[str, Any] | None, argv: Sequence[str], *,
                  description: str | None = None, name: str, prog: str, sweep_prog: str) -> int:
    """Parses the flags of ``config_cls``, trains, and prints a summary. Returns a process exit status.

    Args:
        config_cls: the algorithm's config class.
        defaults: this experiment's defaults (override the config class's).
        argv: the flags.
        description: ``--help`` text (default: one line naming the algorithm).
        name: the experiment's name, used for the default run directory ``runs/<name>-<time>-s<seed>``.
        prog: the command as usage and error lines show it.
        sweep_prog: the command that sweeps this experiment (named in ``--help``).
    """
    argv = list(argv)
    algo = config_cls.__name__.removesuffix("Config")
    epilog = (f"Sweeps (seeds x hyperparameters x env params as one compiled program, ranked): {sweep_prog} --help\n"
              f"Resume or extend a run: rljax resume RUN_DIR [--total-timesteps N]. Environments: rljax envs.")
    parser = build_parser(config_cls, defaults,
                          description or f"Trains {algo}: every field of {config_cls.__name__} is a flag.",
                          prog=prog, epilog=epilog)
    args, argv = parse_with_config(parser, argv, config_cls)
    explicit = explicit_flags(parser, argv)
    base, saved_options = _resume_base(parser, args, config_cls)
    try:
        config = config_from_args(config_cls, args, base, explicit)
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    options = train_kwargs(args, saved_options, explicit)
    if args.resume and report_finished(args.resume, config, parser):  # nothing to train: said so, nothing compiled
        return 0
    run_dir = args.run_dir
    if run_dir is None:
        run_dir = os.path.join("runs", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-s{config.seed}")
    elif run_dir.lower() == "none":
        run_dir = None
    from rljax.cli.host import refuse_host_flags_for_jax_envs, train_host_command
    from rljax.host.sources import is_host_env
    from rljax.runtime.distributed import launched_as_leader

    host_envs = is_host_env(config.env)
    if not host_envs:
        refuse_host_flags_for_jax_envs(parser, args, explicit)

    if not args.quiet and launched_as_leader():  # processes 1.. of a multi-process run stay quiet
        print(setting_up_line(config, run_dir), flush=True)
    if host_envs:  # before JAX starts: XLA reads its flags once
        request_caller_thread_cpu_ops()
    request_cpu_devices(config.num_devices)
    # XLA reads its flags once, when JAX starts: deterministic mode must be set before anything uses it.
    request_deterministic(options["deterministic"])
    if not args.no_compile_cache:
        enable_compilation_cache()
    if host_envs:  # the actor-learner path, on the same run directory and options
        return train_host_command(config, args, parser, explicit, options, args.resume, run_dir)
    config = _all_devices_of_a_job(config, parser, explicit)

    from rljax.training.loop import train
    from rljax.training.options import RunOptions

    result, status = call_training(
        lambda: train(config, options=RunOptions(run_dir=run_dir, **options)), run_dir)
    if status is not None:
        return status
    import jax

    if jax.process_index() == 0:  # a multi-process run: process 0 reports it
        print(done_line(result), flush=True)
    return 0


def _all_devices_of_a_job(config: Any, parser: Any, explicit: set[str]) -> Any:
    """``config`` with ``num_devices`` = every device of a multi-process job when the command line did
    not give it (a multi-process run uses all of them); unchanged in a single process. A resume in a
    job of another size than the saved run's so continues on the job's devices (an elastic resume,
    :mod:`rljax.training.elastic`): a job requeued on the hosts left carries on."""
    import jax

    from rljax.runtime.distributed import is_initialized

    # is_initialized first: asking JAX for its process count would start its backend in a single process.
    if not is_initialized() or "num_devices" in explicit or config.num_devices == jax.device_count():
        return config
    try:
        return dataclasses.replace(config, num_devices=jax.device_count())
    except ValueError as err:  # e.g. num_envs not divisible by the job's device count
        parser.error(f"this job has {jax.device_count()} devices, which a multi-process run uses: {err}")


def done_line(result: Any) -> str:
    """The summary line of a finished run: env steps, final return (``TrainResult.final_return``,
    saying over what), greedy evaluation, and where the time went (compile, compute with its steps/s, logging, checkpoints, evaluation)."""
    t = result.timings
    ran = len(result.rows) * t["updates_per_chunk"] * (t["total_env_steps"] // t["num_updates"])
    evaluated = result.final_eval
    from rljax.store.tracking import FINAL_RETURN_CHUNKS

    # final_return averages the last chunks that ended episodes; the last progress line shows one.
    chunks = min(FINAL_RETURN_CHUNKS, sum(r.get("episode_return_mean") is not None for r in result.rows))
    over = {0: " (no episode ended)", 1: " (the last chunk's episodes)"}.get(chunks, f" (mean of the last {chunks} chunks)")
    return (f"done: {t['total_env_steps']:,} env steps, return {result.final_return:.2f}{over}, "
            + ("" if evaluated is None else f"greedy eval {evaluated['eval/return_mean']:.2f} over "
                                            f"{evaluated['eval/episodes']} episodes, ")
            + f"compile {t['compile_s']:.1f}s, compute {t['compute_s']:.1f}s "
            f"({ran / max(t['compute_s'], 1e-9):,.0f} steps/s), logging {t['logging_s']:.2f}s, "
            f"checkpoints {t['checkpoint_s']:.2f}s" + (f", evaluation {t['eval_s']:.1f}s" if evaluated else "")
            + (f"; run directory: {result.run_dir}" if result.run_dir else ""))
