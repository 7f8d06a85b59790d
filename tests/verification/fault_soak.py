"""Fault soak: kill real rljax runs at random, resume each, and compare it bit for bit.

    python -m tests.verification.fault_soak                      # 50 kills over PPO and DQN CartPole
    python -m tests.verification.fault_soak --kills 20 --seed 3 --configs ppo --keep /tmp/soak-failures

Each trial starts a short training run as a subprocess (``python -m experiments.X``) and kills it
with one of

* ``SIGKILL`` -- a hard kill (OOM killer, power loss);
* ``SIGTERM`` -- a scheduler's preemption: the run should save and exit with status 75;
* ``2xSIGTERM`` -- a second SIGTERM 10-300 ms after the first (a scheduler that repeats itself,
  or an impatient user);

at a random delay after the start of the process, or after a random progress line (one line per
chunk). The delays reach from the imports and the compile through every chunk, checkpoint write
and chunk boundary to the final save and past the end. The run is then resumed -- ``--resume
RUN_DIR`` alone (a run keeps its checkpoint cadence and other run options) when
``RUN_DIR/config.json`` exists, else the original command again -- until it
finishes (``--chain P``: each resume is itself killed with probability P). The finished run is
compared with an uninterrupted reference run of the same config (one per config): every leaf of
the final checkpoint must have the same bytes, and ``metrics.jsonl`` and ``chunks.jsonl`` must hold
the reference's rows, each exactly once, identical in every field but the measured ones
(``wall_time_s``, ``sps``, ``time/*``, ...).

Results, one line per trial (the kills of a chained trial on one line):

* ``identical`` -- resumed, and bit-identical to the reference;
* ``differs`` -- resumed, but a leaf or a metrics row differs (or a row is duplicated);
* ``lost`` -- the directory could not be resumed (a resume exited with an error of its own), or
  the finished run lacks rows or its final checkpoint;
* ``stuck`` -- more than ``--max-resumes`` resumes, or a process ran past its hard timeout.

A trial's line also shows the phase the process was in when the (first) signal was sent, judged
from outside: ``startup`` (no ``config.json`` yet: imports, tracing, compile), ``first-chunk``
(no progress line yet), ``ckpt-write`` (an ``*.orbax-checkpoint-tmp`` directory exists),
``mid-run``, ``final`` (every chunk logged, the process still alive: final save, teardown) and
``after-end`` (the process had already exited), plus ``/uncaught`` when the process had no
SIGTERM handler (``SigCgt`` in ``/proc/PID/status``: rljax's preemption guard is installed only
around the training loop). For a double SIGTERM it also shows, at the second signal, whether a
checkpoint write was under way and whether SIGTERM was still caught. ``rc`` is the killed
process's exit status (negative: ended by that signal); ``+tmp``: it left an uncommitted
checkpoint write. A SIGTERM that the process caught must end it cleanly -- status 75 (0 if the
run was finishing anyway) and no uncommitted write left -- otherwise it is counted as ``unclean``.

Every subprocess runs in its own process group with a hard timeout, and the whole group is killed
when a trial ends, so nothing outlives the script. The children get ``--no-compile-cache`` plus
``JAX_COMPILATION_CACHE_DIR`` pointing at a private cache (``--cache-dir``), so the reference run
compiles and the trials load its programs, without touching ``~/.cache/rljax/xla``.

The script exits 0 unless it breaks itself (2: the reference run failed); ``--strict`` exits 1
unless every trial is ``identical`` and no SIGTERM exit was unclean.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from rljax.training.hooks.observe import is_measured

ROOT = pathlib.Path(__file__).resolve().parents[2]
"""Metrics fields that depend on the clock; every other field must match the reference exactly."""

PREEMPTED = 75
KINDS = ("SIGKILL", "SIGTERM", "2xSIGTERM")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One training run to soak: an experiment module, its config flags, and its run flags.

    The run flags (checkpoint cadence, compile cache) are not part of the saved config, so
    ``--resume RUN_DIR`` alone would continue at the default cadence (a checkpoint per 60 s, i.e.
    only the final one here); the resume command passes them again, as a requeue script would.
    """

    name: str
    module: str
    flags: tuple[str, ...]
    run_flags: tuple[str, ...] = ()

    def command(self, run_dir: pathlib.Path) -> list[str]:
        return [sys.executable, "-m", self.module, *self.flags, *self.run_flags, "--run-dir", str(run_dir)]

    def resume_command(self, run_dir: pathlib.Path) -> list[str]:
        # Only the flags that are not run options: the checkpoint cadence must come back by itself.
        keep = [f for f in self.run_flags if f == "--no-compile-cache"]
        return [sys.executable, "-m", self.module, "--resume", str(run_dir), *keep]


CONFIGS = {
    # 13 chunks of 30 updates (~0.3 s each on 2 cores), a checkpoint after every second chunk: the
    # other chunk boundaries launch the next chunk before logging (the launch-ahead path).
    "ppo": RunConfig("ppo", "experiments.ppo_cartpole", ("--total-timesteps", "2e5", "--updates-per-chunk", "30"),
                     ("--checkpoint-every", "2", "--no-compile-cache")),
    # 50 chunks of 200 updates (~0.2 s), a checkpoint after every chunk (~0.1 s to write: a 1e4-slot
    # prioritized replay buffer with its sum and min trees).
    "dqn": RunConfig("dqn", "experiments.dqn_cartpole",
                     ("--prioritized", "--n-step", "3", "--double-q", "--total-timesteps", "1e5"),
                     ("--checkpoint-every", "1", "--no-compile-cache")),
}


@dataclasses.dataclass(frozen=True)
class Kill:
    """When and how to kill one process.

    Attributes:
        kind: one of :data:`KINDS`.
        after_line: 0: ``delay`` counts from the start of the process; n: from its n-th progress line
            (if the process exits before that line, the signal is sent after its exit: a no-op).
        delay: seconds after the trigger.
        gap: for ``2xSIGTERM``, seconds between the two signals. None ("on-write"): the second
            signal goes out during the checkpoint write that the first one causes (a new
            ``*.orbax-checkpoint-tmp`` directory): as soon as the process no longer catches SIGTERM
            while that write is under way, else as soon as the write has committed (or after 10 s
            if no write starts). A process that keeps its SIGTERM handler until the write commits
            gets the signal after the commit.
    """

    kind: str
    after_line: int = 0
    delay: float = 0.0
    gap: float | None = 0.1

    def describe(self) -> str:
        at = f"+{self.delay:.2f}s" if not self.after_line else f"line{self.after_line}+{self.delay:.2f}s"
        if self.kind == "2xSIGTERM":
            at += f" gap {'on-write' if self.gap is None else f'{self.gap * 1000:.0f}ms'}"
        return f"{self.kind:<9} {at}"


@dataclasses.dataclass
class Outcome:
    """What happened to one process."""

    rc: int | None
    seconds: float
    lines: int
    timed_out: bool = False
    phase: str | None = None
    caught: bool | None = None
    phase2: str | None = None
    left_write: bool = False  # an uncommitted checkpoint write of this process remains
    stderr_tail: str = ""

    def describe(self) -> str:
        at = (self.phase or "") + {True: "", False: "/uncaught", None: ""}[self.caught]
        at += "" if self.phase2 is None else f", 2nd: {self.phase2}"
        return f"[{at}] -> rc {self.rc}" + (" +tmp" if self.left_write else "")


@dataclasses.dataclass
class Reference:
    config: RunConfig
    run_dir: pathlib.Path
    seconds: float
    compile_s: float
    num_chunks: int
    chunk_s: float
    rows: list[dict[str, Any]]
    final_step: int
    leaves: list[np.ndarray]
    lines: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class TrialResult:
    index: int
    config: str
    kills: list[tuple[Kill, Outcome]]
    resumes: int
    result: str
    detail: str = ""
    unclean: list[str] = dataclasses.field(default_factory=list)
    run_dir: pathlib.Path | None = None

    def line(self) -> str:
        kills = "; ".join(f"{k.describe()} {o.describe()}" for k, o in self.kills)
        text = f"{self.index:3d} {self.config:<4} {kills:<64} resumes {self.resumes}  {self.result}"
        if self.unclean:
            text += "  (unclean: " + ", ".join(self.unclean) + ")"
        return text + (f"  -- {self.detail}" if self.detail else "")


# ---------------------------------------------------------------------------------------------
# Processes


_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()
_STOP = threading.Event()  # set on Ctrl-C / SIGTERM: no new process starts


class Interrupted(Exception):
    """The soak was interrupted; the trial was abandoned."""


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Sends ``sig`` to the process group of ``proc`` if ``proc`` has not been reaped (while it is
    unreaped its id, and so its group's, cannot be reused by another process)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all_live() -> None:
    """SIGKILLs the process group of every child still running (on the way out)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)


def child_env(cache_dir: pathlib.Path | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    if cache_dir is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache_dir)
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    else:
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def _tmp_writes(run_dir: pathlib.Path) -> set[str]:
    """The checkpoint writes under way: Orbax's uncommitted ``*.orbax-checkpoint-tmp*`` directories."""
    try:
        return {p.name for p in (run_dir / "checkpoints").iterdir() if "orbax-checkpoint-tmp" in p.name}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def catches_sigterm(pid: int) -> bool | None:
    """Whether process ``pid`` has a SIGTERM handler installed (``SigCgt`` in ``/proc/PID/status``);
    None where that cannot be read. rljax's preemption guard installs one for the training loop;
    outside it SIGTERM has its default action and ends the process."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError):
        pass
    return None


def _phase2(proc: subprocess.Popen, run_dir: pathlib.Path) -> str:
    """At the second SIGTERM: is a checkpoint write under way, and is SIGTERM still caught?"""
    if proc.poll() is not None:
        return "exited"
    caught = catches_sigterm(proc.pid)
    return (("write" if _tmp_writes(run_dir) else "no-write") + "/"
            + {True: "caught", False: "uncaught", None: "?"}[caught])


def _phase(proc: subprocess.Popen, run_dir: pathlib.Path, lines: int, num_chunks: int) -> str:
    """Where the process stands, judged from outside (see the module docstring)."""
    if proc.poll() is not None:
        return "after-end"
    if _tmp_writes(run_dir):
        return "ckpt-write"
    if not (run_dir / "config.json").exists():
        return "startup"
    if lines == 0:
        return "first-chunk"
    rows, _ = _metric_rows(run_dir)  # a resumed process prints only the chunks it runs
    return "final" if len(rows) >= num_chunks else "mid-run"


def drive(cmd: list[str], run_dir: pathlib.Path, log: pathlib.Path, env: dict[str, str], timeout: float,
          kill: Kill | None = None, num_chunks: int = 0) -> Outcome:
    """Runs ``cmd`` in a new process group, sends ``kill`` (if any), and waits for it to end.

    The process is SIGKILLed (whole group) if it runs past ``timeout`` seconds (``timed_out``).
    Its stdout (progress lines) and stderr are appended to ``log``.
    """
    if _STOP.is_set():
        raise Interrupted
    t0 = time.monotonic()
    deadline = t0 + timeout
    stale = _tmp_writes(run_dir)  # left by earlier processes (resume does not remove them)
    with open(log, "a", encoding="utf-8") as logf:
        logf.write(f"$ {' '.join(cmd)}\n")
        logf.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, bufsize=1, start_new_session=True)
    with _LIVE_LOCK:
        _LIVE.add(proc)
    if _STOP.is_set():  # interrupted while starting it
        _signal_group(proc, signal.SIGKILL)
    progress: list[float] = []
    err_lines: list[str] = []
    seen = threading.Condition()

    def read_stdout() -> None:
        with open(log, "a", encoding="utf-8") as logf:
            for text in proc.stdout:
                logf.write(text)
                logf.flush()
                if text.startswith("["):
                    with seen:
                        progress.append(time.monotonic())
                        seen.notify_all()
        with seen:
            seen.notify_all()

    def read_stderr() -> None:
        for text in proc.stderr:
            err_lines.append(text)
            del err_lines[:-40]

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for r in readers:
        r.start()

    def wait_until(t: float) -> bool:
        """Waits until monotonic time ``t``; False if the process ended first."""
        try:
            proc.wait(timeout=max(0.0, t - time.monotonic()))
            return False
        except subprocess.TimeoutExpired:
            return True

    phase = phase2 = caught = None
    try:
        if kill is not None:
            trigger = t0
            if kill.after_line:
                with seen:
                    while (len(progress) < kill.after_line and proc.poll() is None
                           and time.monotonic() < deadline):
                        seen.wait(0.05)
                    trigger = progress[kill.after_line - 1] if len(progress) >= kill.after_line else time.monotonic()
            wait_until(min(trigger + kill.delay, deadline))
            phase = _phase(proc, run_dir, len(progress), num_chunks)
            before = _tmp_writes(run_dir)
            caught = catches_sigterm(proc.pid) if proc.poll() is None else None
            first = signal.SIGKILL if kill.kind == "SIGKILL" else signal.SIGTERM
            _signal_group(proc, first)
            if kill.kind == "2xSIGTERM":
                if kill.gap is not None:
                    wait_until(time.monotonic() + kill.gap)
                else:
                    _await_write(proc, run_dir, before)
                phase2 = _phase2(proc, run_dir)
                _signal_group(proc, signal.SIGTERM)
        timed_out = wait_until(deadline)
    finally:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        for r in readers:
            r.join(timeout=5)
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    with open(log, "a", encoding="utf-8") as logf:
        logf.write("".join(err_lines) + f"[exit status {proc.returncode}{', timed out' if timed_out else ''}]\n")
    return Outcome(rc=proc.returncode, seconds=time.monotonic() - t0, lines=len(progress), timed_out=timed_out,
                   phase=phase, caught=caught, phase2=phase2, left_write=bool(_tmp_writes(run_dir) - stale),
                   stderr_tail="".join(err_lines[-6:]))


def _await_write(proc: subprocess.Popen, run_dir: pathlib.Path, before: set[str]) -> None:
    """Waits for the moment of an "on-write" second signal (see :class:`Kill`)."""
    limit = time.monotonic() + 10.0
    started = False
    while proc.poll() is None and time.monotonic() < limit:
        if _tmp_writes(run_dir) - before:
            started = True
            if catches_sigterm(proc.pid) is False:
                return
        elif started:
            return  # the write committed
        time.sleep(0.001)


# ---------------------------------------------------------------------------------------------
# Comparison


def final_checkpoint(run_dir: pathlib.Path) -> tuple[list[int], list[np.ndarray] | None, int | None]:
    """The committed steps, and the leaves and step of the newest one (None, None if there is none)."""
    from rljax.store.checkpoint import Checkpointer

    if not (run_dir / "checkpoints").is_dir():
        return [], None, None
    ckpt = Checkpointer(run_dir)
    try:
        steps = ckpt.steps()
        if not steps:
            return [], None, None
        return steps, ckpt.read(max(steps))[0], max(steps)
    finally:
        ckpt.close()


def _metric_rows(run_dir: pathlib.Path, name: str = "chunks.jsonl") -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of ``run_dir/name``, and the numbers of lines that do not parse."""
    rows, bad = [], []
    path = run_dir / name
    if path.exists():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                bad.append(i)
    return rows, bad


def _strip(row: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in row.items() if not is_measured(k)}, sort_keys=True)


def _compare_rows(name: str, rows: list[dict[str, Any]], bad: list[int], ref_rows: list[dict[str, Any]]
                  ) -> list[str]:
    """What differs between a run's rows of the file ``name`` and the reference's."""
    problems = []
    steps, ref_steps = [int(r["env_steps"]) for r in rows], [int(r["env_steps"]) for r in ref_rows]
    if bad:
        problems.append(f"{name} lines {bad} do not parse")
    if steps != ref_steps:
        dup = sorted({s for s in steps if steps.count(s) > 1})
        problems.append(f"{name}: rows out of order or repeated (repeated env steps {dup[:5]}; {len(steps)} rows, "
                        f"reference {len(ref_steps)})")
    else:
        differ = [s for r, q, s in zip(rows, ref_rows, steps) if _strip(r) != _strip(q)]
        if differ:
            first = next(r for r in rows if int(r["env_steps"]) == differ[0])
            ref_first = next(r for r in ref_rows if int(r["env_steps"]) == differ[0])
            fields = sorted(k for k in set(first) | set(ref_first)
                            if not is_measured(k) and json.dumps(first.get(k)) != json.dumps(ref_first.get(k)))
            problems.append(f"{name}: metrics differ at env steps {differ[:5]} (fields {fields[:6]})")
    return problems


def compare(run_dir: pathlib.Path, ref: Reference) -> tuple[str, str]:
    """``(result, detail)`` of a finished run against the reference: identical, differs or lost."""
    files = {name: _metric_rows(run_dir, name) for name in ("chunks.jsonl", "metrics.jsonl")}
    for name, ref_rows in (("chunks.jsonl", ref.rows), ("metrics.jsonl", ref.lines)):
        steps = {int(r["env_steps"]) for r in files[name][0]}
        missing = sorted({int(r["env_steps"]) for r in ref_rows} - steps)
        if missing:
            return "lost", f"{name} lacks the rows of env steps {missing[:5]}{' ...' if len(missing) > 5 else ''}"
    ckpt_steps, leaves, step = final_checkpoint(run_dir)
    if step != ref.final_step:
        return "lost", f"final checkpoint {ref.final_step} missing (committed steps {ckpt_steps})"
    problems = _compare_rows("chunks.jsonl", *files["chunks.jsonl"], ref.rows)
    problems += _compare_rows("metrics.jsonl", *files["metrics.jsonl"], ref.lines)
    if len(leaves) != len(ref.leaves):
        problems.append(f"final checkpoint has {len(leaves)} leaves, the reference {len(ref.leaves)}")
    else:
        differ = [i for i, (a, b) in enumerate(zip(leaves, ref.leaves))
                  if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes()]
        if differ:
            problems.append(f"final checkpoint leaves {differ[:8]} differ ({len(differ)} of {len(leaves)})")
    return ("differs", "; ".join(problems)) if problems else ("identical", "")


# ---------------------------------------------------------------------------------------------
# Trials


def reference_run(config: RunConfig, workdir: pathlib.Path, env: dict[str, str], timeout: float) -> Reference:
    run_dir = workdir / f"reference-{config.name}"
    log = workdir / f"reference-{config.name}.log"
    out = drive(config.command(run_dir), run_dir, log, env, timeout)
    if out.rc != 0:
        raise RuntimeError(f"the uninterrupted {config.name} reference run exited with status {out.rc}"
                           f"{' (timed out)' if out.timed_out else ''}; see {log}:\n{out.stderr_tail}")
    rows, bad = _metric_rows(run_dir)
    lines, bad_lines = _metric_rows(run_dir, "metrics.jsonl")
    _, leaves, step = final_checkpoint(run_dir)
    if bad or bad_lines or not rows or leaves is None:
        raise RuntimeError(f"the {config.name} reference run left no usable metrics or checkpoint in {run_dir}")
    # Chunk duration from the logged wall times (the reference runs without interruption).
    walls = [float(r["wall_time_s"]) for r in rows]
    gaps = sorted(b - a for a, b in zip(walls, walls[1:])) or [1.0]
    done = re.search(r"compile ([0-9.]+)s", log.read_text())
    return Reference(config=config, run_dir=run_dir, seconds=out.seconds,
                     compile_s=float(done.group(1)) if done else 0.0, num_chunks=len(rows),
                     chunk_s=gaps[len(gaps) // 2], rows=rows, final_step=step, leaves=leaves, lines=lines)


def random_kill(rng: random.Random, ref: Reference, span: float) -> Kill:
    """A kill of a random kind: half of them at a delay after the start, up to ``span`` seconds
    (anywhere from the imports to past the end), half within a chunk after a random progress line."""
    kind = rng.choice(KINDS)
    gap = rng.uniform(0.01, 0.3) if kind == "2xSIGTERM" else None
    if rng.random() < 0.5:
        return Kill(kind, 0, round(rng.uniform(0.0, span), 3), gap)
    return Kill(kind, rng.randint(1, ref.num_chunks), round(rng.uniform(0.0, 1.5 * ref.chunk_s), 3), gap)


def schedule(rng: random.Random, refs: dict[str, Reference], kills: int, chain: float,
             cached: bool) -> list[tuple[str, list[Kill]]]:
    """Trials ``(config, kills)`` with ``kills`` kills in all; with probability ``chain`` a trial's
    next resume is killed too. With a compilation cache (``cached``) the trials load the programs
    the reference compiled, so the span of the delays after the start leaves its compile out."""
    trials: list[tuple[str, list[Kill]]] = []
    left = kills
    while left > 0:
        name = rng.choice(sorted(refs))
        ref = refs[name]
        span = 1.1 * (ref.seconds - (max(0.0, ref.compile_s - 1.0) if cached else 0.0))
        ks = [random_kill(rng, ref, span)]
        while len(ks) < left and rng.random() < chain:
            ks.append(random_kill(rng, ref, span))
        trials.append((name, ks))
        left -= len(ks)
    return trials


def _killed(rc: int | None) -> bool:
    """Ended by a signal: by one of ours, or the guard's forced exit (128 + signum) after a second one."""
    return rc is None or rc < 0 or rc in (128 + signal.SIGKILL, 128 + signal.SIGTERM)


def run_trial(index: int, ref: Reference, kills: list[Kill], workdir: pathlib.Path, env: dict[str, str],
              timeout: float, max_resumes: int) -> TrialResult:
    """Runs, kills and resumes one run until it finishes, then compares it with the reference."""
    config = ref.config
    run_dir = workdir / f"trial-{index:03d}-{config.name}"
    log = workdir / f"trial-{index:03d}-{config.name}.log"
    pending = list(kills)
    done: list[tuple[Kill, Outcome]] = []
    unclean: list[str] = []
    resumes = 0

    def step(cmd: list[str]) -> Outcome:
        kill = pending.pop(0) if pending else None
        out = drive(cmd, run_dir, log, env, timeout, kill, ref.num_chunks)
        if kill is not None:
            done.append((kill, out))
            # A SIGTERM that the process caught (its preemption guard was installed) must end it
            # cleanly: status 75, or 0 if the run was finishing anyway, with its checkpoint committed.
            if kill.kind != "SIGKILL" and out.caught:
                if out.rc not in (0, PREEMPTED):
                    unclean.append(f"{kill.kind} [{out.phase}] exit {out.rc}")
                if out.left_write:
                    unclean.append(f"{kill.kind} [{out.phase}] left an uncommitted checkpoint write")
        return out

    def result(res: str, detail: str = "") -> TrialResult:
        return TrialResult(index, config.name, done, resumes, res, detail, unclean, run_dir)

    out = step(config.command(run_dir))
    while True:
        if out.timed_out:
            return result("stuck", f"a process ran past the {timeout:.0f} s timeout (killed)")
        if out.rc == 0:
            break
        if out.rc != PREEMPTED and not _killed(out.rc):
            reason = out.stderr_tail.strip().splitlines()[-1:] or ["(no message)"]
            return result("lost", f"{'resume' if resumes else 'run'} exited {out.rc}: {reason[0][:200]}")
        if resumes >= max_resumes:
            return result("stuck", f"not finished after {resumes} resumes")
        resumes += 1
        if (run_dir / "config.json").exists():
            out = step(config.resume_command(run_dir))
        else:
            out = step(config.command(run_dir))
    res, detail = compare(run_dir, ref)
    return result(res, detail)


# ---------------------------------------------------------------------------------------------
# Main


def summarize(results: list[TrialResult]) -> dict[str, int]:
    counts = {k: 0 for k in ("kills", "resumed", "bit-identical", "differs", "lost", "stuck", "unclean")}
    for r in results:
        counts["kills"] += len(r.kills)
        counts["resumed"] += r.result in ("identical", "differs")
        counts["bit-identical"] += r.result == "identical"
        counts["differs"] += r.result == "differs"
        counts["lost"] += r.result == "lost"
        counts["stuck"] += r.result == "stuck"
        counts["unclean"] += len(r.unclean)
    return counts


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=50, help="kills in all (trials x kills per trial)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    ap.add_argument("--configs", default="ppo,dqn", help=f"comma-separated, from {sorted(CONFIGS)}")
    ap.add_argument("--jobs", type=int, default=1, help="trials run at once")
    ap.add_argument("--chain", type=float, default=0.2,
                    help="probability that a trial's next resume is killed too")
    ap.add_argument("--max-resumes", type=int, default=6, help="resumes before a run counts as stuck")
    ap.add_argument("--timeout", type=float, default=0.0,
                    help="hard timeout of each process in seconds (0: 4 x the reference run + 60 s)")
    ap.add_argument("--keep", default=None, metavar="DIR", help="copy failing run directories and logs here")
    ap.add_argument("--workdir", default=None, help="where the runs go (default: a temporary directory, removed)")
    ap.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "rljax", "soak-xla"),
                    help="the children's XLA compilation cache ('none': compile in every process)")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 unless every trial resumed bit-identical and every SIGTERM exit was clean")
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        ap.error(f"--configs: unknown {unknown}; known: {sorted(CONFIGS)}")
    if a.kills < 1 or a.jobs < 1 or a.max_resumes < 0 or not 0.0 <= a.chain < 1.0:
        ap.error("--kills and --jobs must be >= 1, --max-resumes >= 0, 0 <= --chain < 1")
    cache = None if a.cache_dir.lower() == "none" else pathlib.Path(a.cache_dir)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    env = child_env(cache)
    workdir = pathlib.Path(a.workdir) if a.workdir else pathlib.Path(tempfile.mkdtemp(prefix="rljax-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM, like Ctrl-C, ends the children first
    results: list[TrialResult] = []
    try:
        refs: dict[str, Reference] = {}
        for name in names:
            ref = reference_run(CONFIGS[name], workdir, env, timeout=a.timeout or 900.0)
            refs[name] = ref
            print(f"reference {name}: {ref.num_chunks} chunks of ~{ref.chunk_s:.2f} s, {ref.seconds:.1f} s in all "
                  f"(compile {ref.compile_s:.1f} s), "
                  f"final checkpoint {ref.final_step} ({len(ref.leaves)} leaves)", flush=True)
        rng = random.Random(a.seed)
        trials = schedule(rng, refs, a.kills, a.chain, cached=cache is not None)
        print(f"{len(trials)} trials, {a.kills} kills, seed {a.seed}, workdir {workdir}", flush=True)

        def one(i: int) -> TrialResult:
            name, ks = trials[i]
            ref = refs[name]
            timeout = a.timeout or 4 * ref.seconds + 60.0
            r = run_trial(i, ref, ks, workdir, env, timeout, a.max_resumes)
            if r.result != "identical" or r.unclean:
                if a.keep:
                    keep = pathlib.Path(a.keep)
                    keep.mkdir(parents=True, exist_ok=True)
                    shutil.copytree(r.run_dir, keep / r.run_dir.name, dirs_exist_ok=True, symlinks=True)
                    log = workdir / f"{r.run_dir.name}.log"
                    if log.exists():
                        shutil.copy2(log, keep / log.name)
            else:
                shutil.rmtree(r.run_dir, ignore_errors=True)
                (workdir / f"{r.run_dir.name}.log").unlink(missing_ok=True)
            print(r.line(), flush=True)
            return r

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs)
        try:
            results = list(pool.map(one, range(len(trials))))
        finally:
            if len(results) < len(trials):  # interrupted: end the running trials, start no more
                _STOP.set()
                kill_all_live()
            pool.shutdown(wait=True, cancel_futures=True)
    except KeyboardInterrupt:
        print("fault_soak: interrupted; every child process group was killed", file=sys.stderr, flush=True)
        return 130
    finally:
        kill_all_live()
        if not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    counts = summarize(results)
    print(", ".join(f"{k} {v}" for k, v in counts.items() if k != "unclean")
          + f"  (unclean SIGTERM exits {counts['unclean']}; {a.kills - counts['kills']} planned kills of resumes "
            f"not sent: the run had finished; {time.monotonic() - t_start:.0f} s)", flush=True)
    failures = [r for r in results if r.result != "identical"]
    for r in failures:
        print(f"  trial {r.index} {r.result}: {r.detail}", flush=True)
    ok = counts["bit-identical"] == len(results) and counts["unclean"] == 0
    return 1 if a.strict and not ok else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as err:
        print(f"fault_soak: {err}", file=sys.stderr)
        sys.exit(2)
