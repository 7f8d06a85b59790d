"""``rljax supervise``: run a training command until it is done, restarting it after preemptions and crashes.

    rljax supervise [--max-restarts N] [--backoff S] [--max-backoff S] [--shrink-after K [--min-processes M]
                    [--grow-when CMD [--grow-interval S]]] -- <train command ...>
    rljax supervise -- python -m experiments.ppo_cartpole --total-timesteps 1e7 --run-dir runs/cp

The command runs as a child in its own process group, with its output passed through unchanged.
When it ends:

- status 0 (done): the supervisor exits 0;
- status 2 (usage error: a bad flag or config, a run directory in use by another run, nothing to
  resume), 65 (the run diverged and its ``on_nonfinite`` policy gave up) or 70 (data-parallel
  devices out of sync): a restart would meet the same end, so it exits with that status;
- status 75 (preempted: the run stopped cleanly after a SIGTERM/SIGINT that the supervisor did not
  send), any other status (a crash) or death by a signal (SIGKILL, the OOM killer): it is
  restarted after a back-off, until ``--max-restarts`` restarts are spent; then the supervisor
  exits with the last status (``128 + N`` for death by signal N) and says so.

Every attempt, the first included (so a requeued job continues where it stopped), runs the command
plus ``--resume D`` when its run directory D holds a ``config.json``, and the command unchanged
otherwise. The command must therefore name D (``--run-dir D``, ``--resume D`` or
``rljax resume D``); one that does not is refused with status 2.

The back-off starts at ``--backoff`` seconds and doubles with each attempt in a row that ended
without committing a new checkpoint, up to ``--max-backoff``; an attempt that made progress
(a newer step under ``D/checkpoints``) starts the doubling again.

SIGTERM, SIGINT or SIGHUP sent to the supervisor is forwarded to the child's process group
(SIGHUP as SIGTERM; each signal once, so a second signal is a second signal for the child too),
the supervisor waits for the child and exits with its status (75 after a clean stop) without
restarting it: a scheduler that preempts the whole job is obeyed. Signals that were ignored when
the supervisor started (``nohup``) stay ignored.

With ``--shrink-after K`` and an ``rljax launch -n P -d D -- ...`` command, a job that fails K
attempts in a row without committing a new checkpoint (a failure: not done, not preempted; a host
lost for good fails every attempt at start-up) continues with one process fewer: the next attempt
runs ``rljax launch -n P-1`` and, when the training command names ``--num-devices``, ``--num-devices
(P-1)*D``. The run resumes elastically on the devices left (the same training, not bit-exact:
``docs/scale-out.md``), down to ``--min-processes``; each shrink is recorded and printed. With
``--grow-when CMD``, while a shrunk job runs the supervisor runs the shell command CMD every
``--grow-interval`` seconds; when it exits 0 (the host is back) the job is stopped cleanly (SIGTERM:
it saves its chunk) and continues with one process more, up to the size it started with, resuming
elastically again; each grow is recorded (``{"event": "grow"}``) and printed.

Each attempt is appended to ``D/supervisor.jsonl`` (attempt, argv, start and end times, exit status
or signal, action, back-off) and printed as one line on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import threading
import time
import typing
from collections.abc import Sequence
from typing import Any

__all__ = ["add_parser", "run", "main", "configure", "find_run_dir", "attempt_command", "backoff_delay", "newest_checkpoint",
           "Supervisor", "launch_layout", "shrunk_command", "LOG_FILE", "USAGE_EXIT_CODE", "PREEMPTED_EXIT_CODE", "DEFAULT_MAX_RESTARTS",
           "DEFAULT_BACKOFF_S", "DEFAULT_MAX_BACKOFF_S"]

LOG_FILE = "supervisor.jsonl"
"""The attempt record, one JSON object per line, in the run directory."""

USAGE_EXIT_CODE = 2
"""Exit status of a usage error (``rljax.cli.main``): the supervisor never restarts it."""

FINAL_EXIT_CODES = {
    USAGE_EXIT_CODE: "a usage error (a bad flag or config, a run directory in use by another run, nothing to "
                     "resume): restarting cannot help",
    65: "the run diverged (a NaN/inf loss or state) and its on_nonfinite policy gave up: a restart from the same "
        "checkpoint would diverge again; resume it by hand with --on-nonfinite rollback or a lower learning rate",
    70: "the data-parallel devices fell out of sync: a restart cannot help",
}
"""Exit statuses of ``rljax.cli.main`` that the supervisor never restarts, with the reason it prints."""

PREEMPTED_EXIT_CODE = 75
"""Exit status of a run stopped cleanly by SIGTERM/SIGINT (``rljax.store.checkpoint.PREEMPTED_EXIT_CODE``;
repeated here so that the supervisor, which lives as long as the job, needs neither JAX nor the
rest of rljax)."""

DEFAULT_MAX_RESTARTS = 10
DEFAULT_BACKOFF_S = 10.0
DEFAULT_MAX_BACKOFF_S = 600.0

_PREFIX = "rljax supervise:"
HINT = "(run with --help for the options)"
"""The line under a usage error."""
_FORWARDED = {signal.SIGTERM: signal.SIGTERM, signal.SIGINT: signal.SIGINT, signal.SIGHUP: signal.SIGTERM}


def _flag_value(command: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag V`` or ``flag=V`` in ``command`` (None if absent)."""
    value = None
    for i, token in enumerate(command):
        if token == flag and i + 1 < len(command):
            value = command[i + 1]
        elif token.startswith(flag + "="):
            value = token[len(flag) + 1:]
    return value


def _subcommand_at(command: Sequence[str], name: str) -> list[int]:
    """The indices of ``name`` where it follows ``rljax`` or ``-m rljax.cli.main`` in ``command``
    (``rljax resume``, ``python -m rljax.cli.main launch``)."""
    return [i for i in range(1, len(command)) if command[i] == name
            and (os.path.basename(command[i - 1]) == "rljax" or command[i - 1] == "rljax.cli.main")]


def _resume_subcommand(command: Sequence[str]) -> str | None:
    """D of ``rljax resume D`` / ``python -m rljax.cli.main resume D``, else None."""
    for i in _subcommand_at(command, "resume"):
        if i + 1 < len(command) and not command[i + 1].startswith("-"):
            return command[i + 1]
    return None


def find_run_dir(command: Sequence[str]) -> tuple[str | None, bool]:
    """The run directory a training command names, and whether the command already resumes it.

    Looks for ``--resume D``, ``rljax resume D`` and ``--run-dir D`` (``--flag=D`` too; the last
    occurrence wins, as for argparse). Returns ``(None, False)`` when the command names none or
    keeps its run in memory (``--run-dir none``).
    """
    resume = _flag_value(command, "--resume") or _resume_subcommand(command)
    if resume:
        return resume, True
    run_dir = _flag_value(command, "--run-dir")
    if not run_dir or run_dir.lower() == "none":
        return None, False
    return run_dir, False


def attempt_command(command: Sequence[str], run_dir: str) -> list[str]:
    """What an attempt runs: ``command`` plus ``--resume run_dir`` when the run directory holds a
    ``config.json`` (the run has started) and the command does not resume already."""
    _, resumes = find_run_dir(command)
    if not resumes and (pathlib.Path(run_dir) / "config.json").exists():
        return [*command, "--resume", run_dir]
    return list(command)


_LAUNCH_OPTIONS = {"-n": "processes", "--num-processes": "processes", "-d": "devices",
                   "--devices-per-process": "devices"}


def _launch_start(command: Sequence[str]) -> int | None:
    """The index of the first option after ``rljax launch`` / ``python -m rljax.cli.main launch``."""
    found = _subcommand_at(command, "launch")
    return found[0] + 1 if found else None


def _launch_options(command: Sequence[str]) -> tuple[dict[str, tuple[int, str, str]], int] | None:
    """``({"processes"|"devices": (index, flag form, value)}, index of the training command)`` of an
    ``rljax launch`` command, or None when ``command`` is not one. A form is ``"split"`` (``-n P``),
    ``"="`` (``--num-processes=P``) or ``"joined"`` (``-nP``)."""
    start = _launch_start(command)
    if start is None:
        return None
    found: dict[str, tuple[int, str, str]] = {}
    i = start
    while i < len(command) and command[i] != "--":
        token = command[i]
        name, _, value = token.partition("=")
        if name in _LAUNCH_OPTIONS and value:
            found[_LAUNCH_OPTIONS[name]] = (i, "=", value)
        elif token in _LAUNCH_OPTIONS and i + 1 < len(command):
            found[_LAUNCH_OPTIONS[token]] = (i + 1, "split", command[i + 1])
            i += 1
        elif token[:2] in ("-n", "-d") and len(token) > 2 and not token.startswith("--"):
            found[_LAUNCH_OPTIONS[token[:2]]] = (i, "joined", token[2:])
        i += 1
    return found, i + 1


def launch_layout(command: Sequence[str]) -> tuple[int, int] | None:
    """``(P, D)`` of an ``rljax launch -n P [-d D] -- ...`` command (D defaults to 1, as in
    ``rljax launch``), or None when ``command`` is not such a command or its P or D is not an integer."""
    parsed = _launch_options(command)
    if parsed is None or "processes" not in parsed[0]:
        return None
    options = parsed[0]
    try:
        return int(options["processes"][2]), int(options["devices"][2]) if "devices" in options else 1
    except ValueError:
        return None


def _replace_value(command: list[str], where: tuple[int, str, str], value: str) -> None:
    index, form, _ = where
    if form == "split":
        command[index] = value
    elif form == "=":
        command[index] = command[index].split("=", 1)[0] + "=" + value
    else:
        command[index] = command[index][:2] + value


def shrunk_command(command: Sequence[str], processes: int) -> list[str]:
    """``command`` (an ``rljax launch`` command, :func:`launch_layout`) with ``processes`` processes:
    its ``-n`` replaced and, when its training command names ``--num-devices``, that set to
    ``processes * D``."""
    parsed = _launch_options(command)
    layout = launch_layout(command)
    if parsed is None or layout is None:
        raise ValueError(f"not an `rljax launch -n P ...` command: {shlex.join(command)}")
    options, inner = parsed
    out = list(command)
    _replace_value(out, options["processes"], str(processes))
    devices = str(processes * layout[1])
    for i in range(inner, len(out)):
        if out[i] == "--num-devices" and i + 1 < len(out):
            out[i + 1] = devices
        elif out[i].startswith("--num-devices="):
            out[i] = "--num-devices=" + devices
    return out


def backoff_delay(backoff_s: float, max_backoff_s: float, failures: int) -> float:
    """Seconds to wait before a restart after ``failures`` attempts in a row without progress (>= 1)."""
    return min(max_backoff_s, backoff_s * 2.0 ** max(0, min(failures - 1, 64)))


def newest_checkpoint(run_dir: str | os.PathLike) -> int | None:
    """The newest checkpoint step under ``RUN_DIR/checkpoints`` (None when there is none).

    Steps are directories named by their env step; Orbax's temporary directories of saves in
    progress are not steps.
    """
    try:
        names = os.listdir(pathlib.Path(run_dir) / "checkpoints")
    except OSError:
        return None
    steps = [int(n) for n in names if n.isdigit()]
    return max(steps) if steps else None


def _now_iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def _status(returncode: int) -> tuple[int, str | None]:
    """``(exit status as a shell reports it, signal name or None)`` of a Popen return code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return 128 - returncode, name
    return returncode, None


class Supervisor:
    """Runs ``command`` until it is done (see the module docstring).

    Args:
        command: the training command (argv, no shell).
        run_dir: its run directory (:func:`find_run_dir`).
        max_restarts: restarts allowed after the first attempt.
        backoff_s: the first back-off.
        max_backoff_s: the back-off's cap.
        shrink_after: failed attempts in a row without a new checkpoint after which an ``rljax
            launch`` job continues with one process fewer (0: never).
        min_processes: the fewest processes a shrink leaves.
        grow_when: a shell command; while a shrunk job runs, it is run every ``grow_interval_s``, and
            when it exits 0 (the lost capacity is back) the job is stopped cleanly (SIGTERM: it saves)
            and continues with one process more, up to the size it started with. None: never grow.
        grow_interval_s: seconds between two runs of ``grow_when``.
        stream: where the one-line reports go (default stderr).
    """

    def __init__(self, command: Sequence[str], run_dir: str, *, max_restarts: int = DEFAULT_MAX_RESTARTS,
                 backoff_s: float = DEFAULT_BACKOFF_S, max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
                 shrink_after: int = 0, min_processes: int = 1, grow_when: str | None = None,
                 grow_interval_s: float = 60.0, stream: Any = None):
        self.command = list(command)
        self.shrink_after = shrink_after
        self.min_processes = min_processes
        self.grow_when, self.grow_interval_s = grow_when, float(grow_interval_s)
        layout = launch_layout(self.command)
        self.full_processes = layout[0] if layout is not None else None  # the size a grow may restore
        self._growing = False
        self.run_dir = run_dir
        self.max_restarts = max_restarts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.stream = stream
        self.stop_signal: int | None = None
        self._child: subprocess.Popen | None = None
        self._unforwarded: int | None = None
        self._log_failed = False

    # -- reporting -----------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        print(f"{_PREFIX} {text}", file=self.stream or sys.stderr, flush=True)

    def _say_now(self, text: str) -> None:
        """:meth:`_say` for signal handlers: one unbuffered write, which cannot re-enter a buffered
        stream that the handler interrupted."""
        if self.stream is not None:
            self._say(text)
            return
        try:
            os.write(sys.stderr.fileno(), f"{_PREFIX} {text}\n".encode())
        except (OSError, ValueError):
            pass

    def _record(self, record: dict[str, Any]) -> None:
        """Appends one line to ``RUN_DIR/supervisor.jsonl`` (one write: lines never interleave)."""
        path = pathlib.Path(self.run_dir) / LOG_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(record) + "\n").encode())
            finally:
                os.close(fd)
        except OSError as err:
            if not self._log_failed:
                self._say(f"warning: cannot append to {path} ({err}); attempts are reported here only")
                self._log_failed = True

    # -- signals -------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
        child = self._child
        forwarded = _FORWARDED.get(signal.Signals(signum), signal.SIGTERM)
        if child is not None:
            try:
                os.killpg(child.pid, forwarded)
            except (ProcessLookupError, PermissionError):
                pass
        else:
            self._unforwarded = signum  # a child being started gets it as soon as it is known
        name = signal.Signals(signum).name
        if child is not None:
            self._say_now(f"got {name}: forwarded {forwarded.name} to the training process group {child.pid}; "
                          f"waiting for it to stop (it is not restarted)")
        else:
            self._say_now(f"got {name}: stopping (no restart)")

    def _install_handlers(self) -> dict[int, Any]:
        previous = {}
        for sig in _FORWARDED:
            current = signal.getsignal(sig)
            if current == signal.SIG_IGN:  # nohup and background jobs: keep ignoring
                continue
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _sleep(self, seconds: float) -> None:
        """Sleeps, returning early once a stop signal has arrived."""
        deadline = time.monotonic() + seconds
        while self.stop_signal is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        """Runs attempts until one is done, fails for good, the budget is spent or a signal stops it.

        Returns:
            the exit status for the supervisor (see the module docstring).
        """
        in_main = threading.current_thread() is threading.main_thread()
        previous = self._install_handlers() if in_main else {}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _decide(self, status: int, signame: str | None, restarts: int, failures: int, progress: bool,
                after: Any) -> tuple[str, str, str, float | None]:
        """What an attempt's end means: ``(outcome, action, note, backoff delay)``, the action one of
        done, stop, give up and restart."""
        if signame is not None:
            outcome = f"was killed by {signame}"
        elif status == PREEMPTED_EXIT_CODE:
            outcome = f"was preempted (status {status})"
        else:
            outcome = f"exited with status {status}" + (" (done)" if status == 0 else "")
        delay = None
        if status == 0:
            action, note = "done", "the run is complete"
        elif self.stop_signal is not None:
            action = "stop"
            note = (f"stopped by {signal.Signals(self.stop_signal).name} sent to the supervisor; not restarted; "
                    f"exit status {status}")
        elif signame is None and status in FINAL_EXIT_CODES:
            action = "stop"
            note = f"{FINAL_EXIT_CODES[status]}; exit status {status}"
        elif restarts >= self.max_restarts:
            action = "give up"
            note = (f"restart budget spent ({self.max_restarts} restart{'s' if self.max_restarts != 1 else ''}); "
                    f"exit status {status}. The run directory keeps its newest checkpoint "
                    f"({after if after is not None else 'none yet'}): `rljax resume {self.run_dir}` "
                    f"or this supervise command again continues it")
        else:
            action = "restart"
            delay = backoff_delay(self.backoff_s, self.max_backoff_s, failures)
            nxt = attempt_command(self.command, self.run_dir)
            how = "with --resume" if nxt[len(self.command):] else "unchanged (no config.json yet)"
            note = (f"restarting in {delay:g} s {how} (restart {restarts + 1} of {self.max_restarts}"
                    + ("" if progress else "; no new checkpoint in that attempt") + ")")
        return outcome, action, note, delay

    def _run(self) -> int:
        restarts = 0
        failures = 0  # attempts in a row that committed no new checkpoint
        stalled = 0  # failed attempts (not done, not preempted) in a row that committed no new checkpoint
        last_status = PREEMPTED_EXIT_CODE
        attempt = 0
        while True:
            if self.stop_signal is not None:
                return last_status
            attempt += 1
            argv = attempt_command(self.command, self.run_dir)
            before = newest_checkpoint(self.run_dir)
            started = time.time()
            budget = f"restart {restarts} of {self.max_restarts}" if restarts else "first attempt"
            try:
                self._child = subprocess.Popen(argv, process_group=0)
            except OSError as err:
                status = 127 if isinstance(err, FileNotFoundError) else 126
                self._say(f"attempt {attempt}: cannot start {shlex.join(argv)} ({type(err).__name__}: {err}); "
                          f"exit status {status}, not restarted")
                self._record({"event": "attempt", "attempt": attempt, "argv": argv, "start": _now_iso(started),
                              "start_unix": started, "end": _now_iso(time.time()), "end_unix": time.time(),
                              "duration_s": 0.0, "exit_status": status, "signal": None,
                              "error": f"{type(err).__name__}: {err}", "action": "stop", "backoff_s": None,
                              "checkpoint": before, "supervisor_pid": os.getpid()})
                return status
            child = self._child
            self._say(f"attempt {attempt} ({budget}), pid {child.pid}: {shlex.join(argv)}")
            if self._unforwarded is not None:  # arrived while the child was starting: forward it now
                signum, self._unforwarded = self._unforwarded, None
                try:
                    os.killpg(child.pid, _FORWARDED.get(signal.Signals(signum), signal.SIGTERM))
                except ProcessLookupError:
                    pass
            returncode = self._wait(child)
            self._child = None
            growing, self._growing = self._growing, False
            stopped_cleanly = _status(returncode)[0] == PREEMPTED_EXIT_CODE or _status(returncode)[1] == "SIGTERM"
            if growing and stopped_cleanly and self.stop_signal is None:
                self._grow(attempt, child, started, returncode)  # stopped to grow: relaunch at once, one more
                continue
            ended = time.time()
            status, signame = _status(returncode)
            last_status = status
            after = newest_checkpoint(self.run_dir)
            progress = after is not None and (before is None or after > before)
            failures = 1 if progress else failures + 1
            failed = signame is not None or status not in (0, PREEMPTED_EXIT_CODE)
            stalled = stalled + 1 if failed and not progress else 0

            outcome, action, note, delay = self._decide(status, signame, restarts, failures, progress, after)
            self._record({"event": "attempt", "attempt": attempt, "argv": argv, "pid": child.pid,
                          "start": _now_iso(started), "start_unix": started, "end": _now_iso(ended),
                          "end_unix": ended, "duration_s": round(ended - started, 3),
                          "exit_status": None if signame else status, "signal": signame,
                          "action": action, "backoff_s": delay, "checkpoint": after, "new_checkpoint": progress,
                          "supervisor_pid": os.getpid()})
            self._say(f"attempt {attempt} {outcome} after {ended - started:.1f} s; {note}")
            if action != "restart":
                return status
            if self._shrink(attempt, stalled):
                stalled = 0
            self._sleep(delay)
            if self.stop_signal is not None:
                name = signal.Signals(self.stop_signal).name
                self._record({"event": "stop", "after_attempt": attempt, "signal": name, "time": _now_iso(time.time()),
                              "exit_status": status, "supervisor_pid": os.getpid()})
                self._say(f"got {name} during the back-off: not restarting; exit status {status}")
                return status
            restarts += 1

    def _wait(self, child: subprocess.Popen) -> int:
        """Waits for ``child``; while the job runs shrunk and ``grow_when`` is set, runs it every
        ``grow_interval_s`` and, when it exits 0, stops the child cleanly (SIGTERM to its group: the run
        saves and exits 75) and marks the attempt as one to grow from."""
        layout = launch_layout(self.command)
        if self.grow_when is None or layout is None or self.full_processes is None or \
                layout[0] >= self.full_processes:
            return child.wait()
        next_probe = time.monotonic() + self.grow_interval_s
        while True:
            try:
                return child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if self._growing or self.stop_signal is not None or time.monotonic() < next_probe:
                continue
            next_probe = time.monotonic() + self.grow_interval_s
            try:
                probe = subprocess.run(self.grow_when, shell=True, capture_output=True,
                                       timeout=max(1.0, self.grow_interval_s))
            except subprocess.TimeoutExpired:
                self._say(f"--grow-when {shlex.quote(self.grow_when)} did not finish within "
                          f"{max(1.0, self.grow_interval_s):g} s (--grow-interval): taken as not yet")
                continue
            # The job may have ended, or the supervisor been told to stop, while the probe ran.
            if probe.returncode == 0 and child.poll() is None and self.stop_signal is None:
                self._growing = True
                self._say(f"--grow-when {shlex.quote(self.grow_when)} exited 0: stopping the job cleanly to "
                          f"continue with {layout[0] + 1} processes")
                try:
                    os.killpg(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def _grow(self, attempt: int, child: subprocess.Popen, started: float, returncode: int) -> None:
        """Records the attempt the supervisor stopped and continues the job with one process more."""
        ended = time.time()
        status, signame = _status(returncode)
        processes, devices = launch_layout(self.command)
        grown = processes + 1
        self._record({"event": "attempt", "attempt": attempt, "argv": attempt_command(self.command, self.run_dir),
                      "pid": child.pid, "start": _now_iso(started), "start_unix": started, "end": _now_iso(ended),
                      "end_unix": ended, "duration_s": round(ended - started, 3),
                      "exit_status": None if signame else status, "signal": signame, "action": "grow",
                      "backoff_s": 0.0, "checkpoint": newest_checkpoint(self.run_dir), "new_checkpoint": None,
                      "supervisor_pid": os.getpid()})
        self.command = shrunk_command(self.command, grown)
        self._record({"event": "grow", "after_attempt": attempt, "time": _now_iso(ended), "from_processes": processes,
                      "to_processes": grown, "devices_per_process": devices, "grow_when": self.grow_when,
                      "argv": self.command, "supervisor_pid": os.getpid()})
        self._say(f"attempt {attempt} stopped after {ended - started:.1f} s (exit {status if not signame else signame}"
                  f"); continuing with {grown} processes of {devices} device{'s' if devices != 1 else ''}: the run "
                  f"resumes elastically on {grown * devices} devices")

    def _shrink(self, attempt: int, stalled: int) -> bool:
        """Drops one process of an ``rljax launch`` job after ``shrink_after`` failed attempts in a
        row without a new checkpoint (see the module docstring); True when it did."""
        layout = launch_layout(self.command)
        if not self.shrink_after or stalled < self.shrink_after or layout is None:
            return False
        processes, devices = layout
        if processes <= self.min_processes:
            return False
        self.command = shrunk_command(self.command, processes - 1)
        self._record({"event": "shrink", "after_attempt": attempt, "time": _now_iso(time.time()),
                      "from_processes": processes, "to_processes": processes - 1, "devices_per_process": devices,
                      "failed_attempts_without_checkpoint": stalled, "argv": self.command,
                      "supervisor_pid": os.getpid()})
        self._say(f"{stalled} failed attempt{'s' if stalled != 1 else ''} in a row without a new checkpoint: "
                  f"continuing with {processes - 1} process{'es' if processes - 1 != 1 else ''} of {devices} "
                  f"device{'s' if devices != 1 else ''} instead of {processes} (a host lost for good?); the run "
                  f"resumes elastically on {(processes - 1) * devices} devices: the same training, not bit-exact")
        return True


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit with status 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(USAGE_EXIT_CODE, f"{_PREFIX} error: {message}\n{HINT}\n")


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, the defaults in the help lines."""


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


PARSER_KWARGS = dict(usage="rljax supervise [--max-restarts N] [--backoff S] [--max-backoff S] "
                           "[--shrink-after K [--min-processes M] [--grow-when CMD [--grow-interval S]]] "
                           "-- COMMAND ...",
                     description=__doc__.split("\n\n", 2)[2], formatter_class=_Formatter, allow_abbrev=False)
"""How the ``rljax supervise`` parser is made (as a subcommand of ``rljax`` and on its own)."""


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Adds the supervisor's options and the training command after ``--`` to ``parser``."""
    parser.add_argument("--max-restarts", type=_count, default=DEFAULT_MAX_RESTARTS, metavar="N",
                        help="restarts allowed after the first attempt (0: never restart)")
    parser.add_argument("--backoff", type=_seconds, default=DEFAULT_BACKOFF_S, metavar="S",
                        help="seconds before the first restart; doubles with each attempt in a row without a new "
                             "checkpoint")
    parser.add_argument("--max-backoff", type=_seconds, default=DEFAULT_MAX_BACKOFF_S, metavar="S",
                        help="the longest back-off")
    parser.add_argument("--grow-when", default=None, metavar="SHELL_COMMAND",
                        help="after a shrink, run this every --grow-interval seconds; when it exits 0 (the lost "
                             "host is back), stop the job cleanly and continue with one process more, up to the "
                             "size it started with (e.g. 'ssh -o ConnectTimeout=5 host2 true')")
    parser.add_argument("--grow-interval", type=_seconds, default=60.0, metavar="SECONDS",
                        help="seconds between two runs of --grow-when")
    parser.add_argument("--shrink-after", type=_count, default=0, metavar="K",
                        help="for an `rljax launch -n P` command: after K failed attempts in a row without a new "
                             "checkpoint, continue with one process fewer (0: never)")
    parser.add_argument("--min-processes", type=_count, default=1, metavar="M",
                        help="the fewest processes --shrink-after leaves")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the training command; it must name its run directory (--run-dir D, --resume D or "
                             "rljax resume D)")
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``supervise`` to the ``rljax`` subcommands (their parser class takes ``hint``)."""
    return configure(subparsers.add_parser("supervise", help="rerun a training command after preemptions and crashes", hint=HINT, **PARSER_KWARGS))


def _checked(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """``(training command, problems)``: the command after ``--``, and what is wrong with the
    options and the command, one sentence each."""
    stray = list(args.command) if args.command[:1] != ["--"] else []
    command = [] if stray else list(args.command[1:])
    problems = []
    if stray:
        problems.append(f"unrecognized arguments: {shlex.join(stray)} (put the training command after --)")
    if args.max_restarts < 0:
        problems.append(f"--max-restarts must be >= 0, got {args.max_restarts}")
    if not (math.isfinite(args.backoff) and args.backoff >= 0):
        problems.append(f"--backoff must be a number of seconds >= 0, got {args.backoff}")
    if not (math.isfinite(args.max_backoff) and args.max_backoff >= max(args.backoff, 0.0)):
        problems.append(f"--max-backoff must be a number of seconds >= --backoff ({args.backoff:g}), "
                        f"got {args.max_backoff}")
    if args.shrink_after < 0:
        problems.append(f"--shrink-after must be >= 0, got {args.shrink_after}")
    if args.min_processes < 1:
        problems.append(f"--min-processes must be >= 1, got {args.min_processes}")
    if not (math.isfinite(args.grow_interval) and args.grow_interval > 0):
        problems.append(f"--grow-interval must be a number of seconds > 0, got {args.grow_interval}")
    if args.grow_when is not None and not args.shrink_after:
        problems.append("--grow-when grows a job back after a shrink: it needs --shrink-after K")
    if command and args.shrink_after > 0 and launch_layout(command) is None:
        problems.append("--shrink-after needs an `rljax launch -n P [-d D] -- ...` command (got "
                        f"{shlex.join(command)}); under SLURM or Kubernetes the scheduler sets the process count "
                        "(docs/scale-out.md, \"Elastic resume\")")
    if not command and not stray:
        problems.append("no training command: put it after --, e.g. rljax supervise --max-restarts 5 -- "
                        "python -m experiments.ppo_cartpole --run-dir runs/cp")
    return command, problems


def run(args: argparse.Namespace) -> int:
    """``rljax supervise [options] -- COMMAND ...``; returns the exit status (see the module docstring)."""
    command, problems = _checked(args)
    if problems:
        print(f"{_PREFIX} error: " + "; ".join(problems), file=sys.stderr)
        return USAGE_EXIT_CODE
    run_dir, _ = find_run_dir(command)
    if run_dir is None:
        print(f"{_PREFIX} error: the command must name its run directory with --run-dir D (not 'none'), "
              f"--resume D or `rljax resume D`: a restart continues the run from the checkpoints in D, and "
              f"without one every attempt would start a new run in a new directory. Got: {shlex.join(command)}",
              file=sys.stderr)
        return USAGE_EXIT_CODE
    return Supervisor(command, run_dir, max_restarts=args.max_restarts, backoff_s=args.backoff,
                      max_backoff_s=args.max_backoff, shrink_after=args.shrink_after,
                      grow_when=args.grow_when, grow_interval_s=args.grow_interval,
                      min_processes=args.min_processes).run()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rljax.cli.supervise [options] -- COMMAND ...``: the supervisor on its own (it needs
    only the standard library); returns the exit status."""
    parser = configure(_Parser(prog="rljax supervise", **PARSER_KWARGS))
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exit_:  # --help, or a bad option (already reported)
        return int(exit_.code or 0)
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
