"""``rljax launch``: run a training command as P processes on this machine, joined as one job.

    rljax launch --num-processes P --devices-per-process D [--port N] [--peer-timeout S] -- <train command ...>
    rljax launch -n 2 -d 2 -- python -m experiments.ppo_cartpole --num-devices 4 --run-dir runs/mh

Each process runs the command unchanged, with the variables :func:`rljax.runtime.distributed.initialize_from_env`
reads: ``RLJAX_COORDINATOR`` (``127.0.0.1:PORT``), ``RLJAX_NUM_PROCESSES``, ``RLJAX_PROCESS_ID``
and ``RLJAX_DEVICES_PER_PROCESS``; on a GPU machine each process also sees only its own D GPUs
(``CUDA_VISIBLE_DEVICES``, unless it is set already). The command's ``--num-devices`` counts every
process's devices (``P * D``). This is how to develop and test a multi-host run on one machine; on a
cluster the same command runs once per host under SLURM or Kubernetes (``docs/scale-out.md``).

Process 0 prints and writes the run directory; the others are quiet. SIGTERM, SIGINT or SIGHUP to
the launcher is forwarded to every process (SIGHUP as SIGTERM): they stop together after the same
chunk, save once and exit 75. When a process ends with a failure (any status but 0 and 75, or a
signal) while others still run, they are given ``--peer-timeout`` seconds to end by themselves
(the distributed runtime fails them fast, see :mod:`rljax.runtime.distributed`), then killed. The
launcher's status is the first failure's (``128 + N`` for death by signal N), else 75 if any
process was preempted, else 0. It composes with the supervisor:
``rljax supervise -- rljax launch -n 2 -d 2 -- <train command --run-dir D>`` restarts the whole job.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from rljax.cli.flags import UsageError

__all__ = ["add_parser", "run", "job_command", "free_port", "process_env", "job_status", "DEFAULT_PEER_TIMEOUT_S"]

DEFAULT_PEER_TIMEOUT_S = 60.0
"""Seconds the other processes get to end by themselves after one failed, before they are killed."""

PREEMPTED = 75


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env(base: dict[str, str], index: int, num_processes: int, devices_per_process: int,
                port: int) -> dict[str, str]:
    """The environment of process ``index`` of the job."""
    env = dict(base)
    env.update(RLJAX_COORDINATOR=f"127.0.0.1:{port}", RLJAX_NUM_PROCESSES=str(num_processes),
               RLJAX_PROCESS_ID=str(index), RLJAX_DEVICES_PER_PROCESS=str(devices_per_process))
    if "CUDA_VISIBLE_DEVICES" not in base:
        first = index * devices_per_process
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(devices_per_process))
    # Output of processes 1.. arrives unbuffered, so a crash's last words are not lost.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def job_status(statuses: Sequence[int | None], first_failure: int | None) -> int:
    """The launcher's exit status from its processes' (``Popen.returncode``: negative for a signal)."""
    def status(code: int) -> int:
        return 128 - code if code < 0 else code

    if first_failure is not None:
        return status(statuses[first_failure])
    codes = [status(c) for c in statuses if c is not None]
    bad = [c for c in codes if c not in (0, PREEMPTED)]
    if bad:
        return bad[0]
    return PREEMPTED if PREEMPTED in codes else 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``launch`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser(
        "launch", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="a multi-host job as several processes on this machine",
        description="Run a training command as several processes on this machine, joined as one multi-host job.",
        epilog="example:\n  rljax launch -n 2 -d 2 -- python -m experiments.ppo_cartpole --num-devices 4 "
               "--run-dir runs/mh\n  rljax launch -n 2 -d 2 -- rljax resume runs/mh")
    parser.add_argument("-n", "--num-processes", type=int, required=True, help="processes to start (P >= 1)")
    parser.add_argument("-d", "--devices-per-process", type=int, default=1,
                        help="devices each process uses (D): fake CPU devices on a CPU, GPUs on a GPU machine; "
                             "the command's --num-devices must be P * D")
    parser.add_argument("--port", type=int, default=0, help="coordinator port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--peer-timeout", type=float, default=DEFAULT_PEER_TIMEOUT_S, metavar="S",
                        help="after one process fails, seconds the others get to end by themselves before they "
                             f"are killed (default {DEFAULT_PEER_TIMEOUT_S:g})")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the train command")
    return parser


def job_command(args: argparse.Namespace) -> list[str]:
    """The train command of ``args`` (without the ``--`` before it), its options checked.

    Raises:
        UsageError: no command, or an option out of its range (naming it and the range).
    """
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("give the train command after --, e.g. rljax launch -n 2 -d 2 -- python -m "
                         "experiments.ppo_cartpole --num-devices 4")
    if args.num_processes < 1:
        raise UsageError(f"--num-processes must be >= 1, got {args.num_processes}")
    if args.devices_per_process < 1:
        raise UsageError(f"--devices-per-process must be >= 1, got {args.devices_per_process}")
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    if not args.peer_timeout > 0:
        raise UsageError(f"--peer-timeout must be > 0 seconds, got {args.peer_timeout}")
    return command


def run(args: argparse.Namespace) -> int:
    """The ``rljax launch`` command; returns the job's exit status."""
    command = job_command(args)
    port = args.port or free_port()
    procs: list[subprocess.Popen] = []
    forwarded: list[int] = []

    def forward(signum: int, frame: object) -> None:
        sig = signal.SIGTERM if signum == signal.SIGHUP else signum
        forwarded.append(sig)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        for i in range(args.num_processes):
            try:
                procs.append(subprocess.Popen(command, env=process_env(dict(os.environ), i, args.num_processes,
                                                                       args.devices_per_process, port)))
            except OSError as err:
                print(f"rljax launch: cannot start {command[0]!r}: {err}", file=sys.stderr)
                for p in procs:
                    p.kill()
                return 127
        return _wait(procs, args.peer_timeout)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _wait(procs: list[subprocess.Popen], peer_timeout: float) -> int:
    """Waits for every process; after the first failure, kills those still running past the timeout."""
    first_failure: int | None = None
    deadline = None
    while True:
        codes = [p.poll() for p in procs]
        for i, code in enumerate(codes):
            if code is not None and code not in (0, PREEMPTED) and first_failure is None:
                first_failure = i
                deadline = time.monotonic() + peer_timeout
                running = [j for j, c in enumerate(codes) if c is None]
                how = f"signal {-code}" if code < 0 else f"status {code}"
                print(f"rljax launch: process {i} of {len(procs)} ended with {how}"
                      + (f"; waiting up to {peer_timeout:g} s for processes {running} to end" if running else ""),
                      file=sys.stderr, flush=True)
        if all(c is not None for c in codes):
            return job_status(codes, first_failure)
        if deadline is not None and time.monotonic() > deadline:
            for j, p in enumerate(procs):
                if p.poll() is None:
                    print(f"rljax launch: killing process {j}: still running {peer_timeout:g} s after process "
                          f"{first_failure} failed", file=sys.stderr, flush=True)
                    p.kill()
            deadline = None
        time.sleep(0.05)
