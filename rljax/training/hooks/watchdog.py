"""The stall watchdog: a warning, with every thread's Python stack, when no chunk finishes in time.

A run whose chunks stop finishing (a host callback that blocks, a deadlocked collective, a checkpoint
write to a hung file system, a user ``on_chunk`` that waits on something) otherwise looks exactly
like a slow one. :class:`StallWatchdog` is a boundary hook with a background thread: every recorded
chunk resets its clock, and when no chunk has finished for longer than the stall threshold it writes
one report and warns once on stderr.

The threshold (run options ``stall_factor``, ``stall_first_chunk_s``, ``stall_min_s``; flags
``--stall-factor``, ``--stall-first-chunk``, ``--stall-min``):

* until a chunk has finished: ``stall_first_chunk_s`` after the loop starts. The clock starts once
  the chunk is compiled, so compilation never counts as a stall;
* afterwards: ``max(stall_factor * median, stall_min_s)``, the median over the intervals between
  the last (up to) :data:`WINDOW` chunk finishes (an interval holds the chunk and the host's work at
  its boundary: logging, evaluation, checkpoints); the floor keeps a slow checkpoint between very
  short chunks from reading as a stall;
* ``stall_factor = 0`` turns the watchdog off.

The report, ``RUN_DIR/stall-<UTC time>.txt`` (on stderr after the warning for a run without a
directory), holds the threshold and how it was reached, what the run was doing (``Run.phase``, the
innermost rljax frame of the main thread, the last finished chunk and its row, the plan) and the
Python stack of every thread (``sys._current_frames()``; threads that XLA runs host callbacks on
included). The watchdog warns once per run (a resumed run is a new process and can warn again): a
stall that persists gives one report, not one per poll. It only reads the run; it never stops it.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import pathlib
import statistics
import sys
import threading
import time
import traceback
from typing import Any, TextIO

from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["StallWatchdog", "WINDOW", "stack_report"]

WINDOW = 50
"""Chunk intervals the median is taken over (the most recent ones: a run that settles into a new
speed gets a threshold from its new speed)."""


def stack_report() -> str:
    """The Python stack of every live thread, most recent call last, with each thread's name."""
    names = {t.ident: (t.name, t.daemon) for t in threading.enumerate()}
    parts = []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda kv: kv[0] != threading.main_thread().ident):
        name, daemon = names.get(ident, ("(not started by threading: e.g. an XLA host-callback thread)", None))
        parts.append(f"--- thread {name} (id {ident}{'' if daemon is None else f', daemon={daemon}'}) ---\n"
                     + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def _innermost_rljax_frame(ident: int | None) -> str | None:
    """``path:line in function`` of the innermost frame of thread ``ident`` inside the rljax package."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    root = str(pathlib.Path(__file__).resolve().parents[2])  # the rljax package
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(root):
            return f"{os.path.relpath(filename, os.path.dirname(root))}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return None


class StallWatchdog(Hook):
    """The boundary hook that warns once when no chunk finishes within the stall threshold.

    Args:
        run_dir: where the report goes (None: on stderr).
        factor: the multiple of the median chunk interval; 0 disables the watchdog.
        first_chunk_s: the threshold until the first chunk of this process finishes.
        min_s: the threshold's floor once a chunk has finished.
        stream: where the one-line warning goes (default ``sys.stderr``).
        clock: a monotonic clock (tests pass a fake one).
        poll_s: the longest the thread sleeps between checks (it also wakes at every chunk).
    """

    def __init__(self, run_dir: Any, factor: float, first_chunk_s: float, min_s: float, *,
                 stream: TextIO | None = None, clock: Any = time.monotonic, poll_s: float = 1.0):
        self.run_dir = None if run_dir is None else pathlib.Path(run_dir)
        self.factor, self.first_chunk_s, self.min_s = float(factor), float(first_chunk_s), float(min_s)
        self.stream = stream
        self.clock = clock
        self.poll_s = poll_s
        self.report_path: pathlib.Path | None = None  # set when the watchdog has fired
        self.fired = False
        self._intervals: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._last: float | None = None  # when the last chunk finished (or the loop started)
        self._chunk: int | None = None
        self._row: dict[str, Any] | None = None
        self._run: Run | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._main_ident: int | None = None

    @property
    def enabled(self) -> bool:
        return self.factor > 0

    def threshold(self) -> tuple[float, str]:
        """``(seconds, how they were reached)`` without a chunk finishing before it is a stall."""
        with self._cond:
            intervals = list(self._intervals)
        if not intervals:
            return self.first_chunk_s, f"stall_first_chunk_s={self.first_chunk_s:g} (no chunk has finished yet)"
        median = statistics.median(intervals)
        seconds = max(self.factor * median, self.min_s)
        return seconds, (f"max(stall_factor={self.factor:g} x median chunk interval {median:.3g} s over the last "
                         f"{len(intervals)} chunks, stall_min_s={self.min_s:g})")

    def start(self, run: Run) -> None:
        """Arms the watchdog (the loop calls this after compiling, before the first chunk)."""
        if not self.enabled:
            return
        self._run = run
        self._main_ident = threading.get_ident()
        with self._cond:
            self._last = self.clock()
        self._thread = threading.Thread(target=self._watch, name="rljax-stall-watchdog", daemon=True)
        self._thread.start()

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """A chunk finished: its interval joins the median and the clock restarts."""
        if not self.enabled:
            return
        with self._cond:
            now = self.clock()
            if self._last is not None:
                self._intervals.append(now - self._last)
            self._last, self._chunk, self._row = now, chunk_index, dict(rows[0])
            self._cond.notify_all()

    def check(self) -> pathlib.Path | str | None:
        """Fires when the stall threshold has passed since the last chunk finished (once); returns
        the report's path (or ``"stderr"``) when it fired now, else None. The thread calls this."""
        with self._cond:
            if self.fired or self._last is None:
                return None
            waited = self.clock() - self._last
        limit, how = self.threshold()
        if waited <= limit:
            return None
        self.fired = True
        return self._fire(waited, limit, how)

    def _watch(self) -> None:
        while True:
            limit, _ = self.threshold()
            with self._cond:
                if self._stop:
                    return
                # Sleep until the threshold would pass (at most poll_s); a finished chunk wakes it early.
                remaining = limit - (self.clock() - self._last) if self._last is not None else self.poll_s
                self._cond.wait(min(self.poll_s, max(remaining, 0.0) + 0.01))
                if self._stop:
                    return
            if self.check() is not None:
                return  # warns once

    def _fire(self, waited: float, limit: float, how: str) -> pathlib.Path | str:
        run = self._run
        stamp = datetime.datetime.now(datetime.timezone.utc)
        row = self._row
        plan = run.plan if run is not None else None
        phase = run.phase if run is not None else None
        lines = [
            f"rljax stall report, {stamp.isoformat(timespec='seconds')}",
            f"run directory: {self.run_dir if self.run_dir is not None else '(none)'}",
            f"no chunk finished for {waited:.1f} s; the stall threshold is {limit:.3g} s = {how}",
            f"phase: {phase}",
            f"main thread in: {_innermost_rljax_frame(self._main_ident)}",
            f"last finished chunk: {self._chunk if self._chunk is not None else 'none yet in this process'}"
            + (f" (env step {row['env_steps']:,})" if row else ""),
            f"plan: {plan}",
            f"last row: {json.dumps(row, default=str) if row else None}",
            "",
            "Python stacks of all threads (most recent call last):",
            stack_report(),
        ]
        text = "\n".join(lines) + "\n"
        stream = self.stream or sys.stderr
        where: pathlib.Path | str = "stderr"
        if self.run_dir is not None:
            try:
                path = self.run_dir / f"stall-{stamp.strftime('%Y%m%d-%H%M%S')}.txt"
                path.write_text(text, encoding="utf-8")
                where = self.report_path = path
            except OSError as err:
                print(f"rljax: could not write the stall report to {self.run_dir} ({err})", file=stream, flush=True)
        print(f"rljax: warning: no chunk finished for {waited:.0f} s (stall threshold {limit:.3g} s; {phase}); "
              + (f"stacks of all threads and the run's state: {where}" if where != "stderr"
                 else "stacks of all threads and the run's state follow"), file=stream, flush=True)
        if where == "stderr":
            print(text, file=stream, flush=True)
        return where

    def close(self, run: Run | None = None) -> None:
        """Stops the thread (the loop ended)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
