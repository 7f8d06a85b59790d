"""Signals around a run: SIGTERM/SIGINT become a request to stop at the next chunk boundary.

A scheduler that preempts a job sends SIGTERM and, after a grace period, SIGKILL. The host loop
(:mod:`rljax.training.loop`) enters a :class:`PreemptionGuard` before building anything; the guard
turns the signal into :attr:`PreemptionGuard.requested`, the loop stops after the chunk in flight,
and the checkpointing hook (:mod:`rljax.training.hooks.checkpointing`) saves it. A repeated signal
that the run does not obey within :data:`FORCED_EXIT_GRACE_S` ends the process. Several processes
(:mod:`rljax.runtime.distributed`) act on a signal together, at the boundary's agreement
(:meth:`PreemptionGuard.agree`).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["PreemptionGuard", "FORCED_EXIT_GRACE_S", "DUPLICATE_SIGTERM_S"]


FORCED_EXIT_GRACE_S = 10.0
"""After a second SIGTERM/SIGINT, how long the process gets to stop by itself before it is ended."""

DUPLICATE_SIGTERM_S = 1.0
"""SIGTERMs closer together than this count as one for the forced exit (a job-wide signal that also
reaches the process through a supervisor)."""


class PreemptionGuard:
    """Turns SIGTERM/SIGINT into a request to stop at the next chunk boundary.

    Signals arrive while the host waits for a compiled chunk; Python runs the handler when the
    chunk returns, so the current chunk always finishes. The guard is entered before anything is
    built (a signal during initialisation or compilation stops the run before its first chunk)
    and left only after the final checkpoint has committed, so a second signal during the stop's
    save never kills the process with its default action.

    A second SIGINT (Ctrl-C twice) raises ``KeyboardInterrupt`` as soon as Python runs, unless the
    run is already :attr:`finishing` (saving after a stop), which it lets complete. A second
    signal of either kind is also seen by a watcher thread (through :func:`signal.set_wakeup_fd`,
    which works while the main thread is blocked inside XLA): if the process has not left the
    guard :data:`FORCED_EXIT_GRACE_S` seconds later, it exits with status ``128 + signum`` without
    saving, so a stuck job always obeys a repeated signal. The newest committed checkpoint stays
    valid. SIGTERMs less than :data:`DUPLICATE_SIGTERM_S` apart count as one there (a scheduler
    that signals the whole job and a supervisor that forwards it). Handlers are installed only in
    the main thread and restored on exit. :meth:`request`
    asks for the same stop from code (tests, notebooks). With ``announce``, the watcher says at once
    (on stderr) that the first signal was received, even while the main thread is inside a compile
    that delays the stop by seconds.
    """

    def __init__(self, enabled: bool = True, grace_s: float = FORCED_EXIT_GRACE_S, deferred: bool = False,
                 announce: bool = False):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.announce = announce
        self.interrupted = False  # a second Ctrl-C: the run stops without saving (raise_if_interrupted)
        self._unraisablehook: Any = None
        self.grace_s = grace_s
        self.deferred = deferred
        self.signal_name: str | None = None
        self.finishing = False
        self.pending = 0  # deferred: the signal received since the last agreement
        self.agreed_clock = 0.0
        self.process_times: Any = None
        self.local_clock: Any = time.perf_counter
        self._previous: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def request(self, reason: str = "request") -> None:
        self.signal_name = reason

    def ask(self, reason: str) -> None:
        """A stop asked from outside the process (``rljax stop``), taken like a signal: with several
        processes it waits for the boundary's agreement, so all of them stop after the same chunk."""
        if self.deferred:
            from rljax.runtime.distributed import STOP_REQUEST

            self.pending = self.pending or STOP_REQUEST
        elif self.signal_name is None:
            self.signal_name = reason

    def agree(self, times: Sequence[float] = ()) -> None:
        """The boundary's agreement between the processes of a multi-process run (a no-op for one).

        A ``deferred`` guard holds a signal as :attr:`pending` until here; then all processes
        learn of any process's signal at once, so all of them stop after the same chunk, and take
        the leader's clock as :attr:`agreed_clock` (:func:`rljax.runtime.distributed.agree`; a collective:
        every process calls it at the same points). ``times`` rides along: every process's are
        :attr:`process_times` afterwards (``[P, len(times)]``; None for a guard that is not deferred).
        """
        if not self.deferred:
            return
        from rljax.runtime.distributed import agree, signal_name

        signum, who, self.agreed_clock, self.process_times = agree(self.pending, self.local_clock(), times)
        if signum and self.signal_name is None:
            self.signal_name = f"{signal_name(signum)} (process {who})"

    def raise_if_interrupted(self) -> None:
        """Raises the ``KeyboardInterrupt`` of a second Ctrl-C that Python swallowed: the handler
        raises it wherever the main thread is, which may be a callback whose errors are only printed
        (JAX's garbage-collection hook). The loop calls this at every chunk boundary."""
        if self.interrupted:
            raise KeyboardInterrupt

    def _handler(self, signum: int, frame: Any) -> None:
        if (self.signal_name is not None or self.pending) and signum == signal.SIGINT and not self.finishing:
            self.interrupted = True
            raise KeyboardInterrupt
        if self.deferred:
            self.pending = self.pending or int(signum)
        else:
            self.signal_name = signal.Signals(signum).name

    def _watch(self, read_fd: int) -> None:
        try:
            self._watch_until_eof(read_fd)
        finally:
            os.close(read_fd)

    def _watch_until_eof(self, read_fd: int) -> None:
        seen = 0
        last_term = -math.inf
        while True:
            data = os.read(read_fd, 64)
            if not data:
                return
            now = time.monotonic()
            for b in data:
                if b == signal.SIGINT:
                    seen += 1
                elif b == signal.SIGTERM:
                    # A scheduler that signals every process of a job (plain scancel, systemd's
                    # control-group kill) and a supervisor forwarding it deliver one SIGTERM twice
                    # within moments: that is one request, not a second one.
                    seen += now - last_term >= DUPLICATE_SIGTERM_S
                    last_term = now
            if seen == 1 and self.announce:
                self.announce = False  # once: the loop's own line follows when the run stops
                name = signal.Signals(next(b for b in data if b in (signal.SIGTERM, signal.SIGINT))).name
                os.write(2, (f"rljax: {name}: stopping at the next chunk boundary with a checkpoint (after the "
                             f"compile or chunk in progress); {name} again stops now, without saving\n").encode())
            if seen >= 2:
                signum = next(b for b in reversed(data) if b in (signal.SIGTERM, signal.SIGINT))
                deadline = time.monotonic() + self.grace_s
                while time.monotonic() < deadline:
                    if self._pipe is None:  # the guard exited: the process is stopping by itself
                        return
                    time.sleep(0.1)
                os.write(2, (f"\nrljax: second {signal.Signals(signum).name} and the run did not stop within "
                             f"{self.grace_s:g} s: exiting without saving; the newest committed checkpoint "
                             f"is intact\n").encode())
                os._exit(128 + signum)

    def __enter__(self) -> "PreemptionGuard":
        if self.enabled:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handler)
            self._unraisablehook, sys.unraisablehook = sys.unraisablehook, self._unraisable
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            if previous != -1:  # someone else (an asyncio loop) listens: leave theirs in place
                signal.set_wakeup_fd(previous)
                os.close(read_fd), os.close(write_fd)
            else:
                self._pipe = (read_fd, write_fd)
                threading.Thread(target=self._watch, args=(read_fd,), name="rljax-signal-watcher",
                                 daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pipe is not None:
            signal.set_wakeup_fd(-1)
            _, write_fd = self._pipe
            self._pipe = None
            os.close(write_fd)  # the watcher reads EOF and ends
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._unraisablehook is not None:
            sys.unraisablehook, self._unraisablehook = self._unraisablehook, None

    def _unraisable(self, unraisable: Any) -> None:
        """Keeps quiet about the interrupt it will raise again at the next boundary; the rest as before."""
        if not (self.interrupted and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            self._unraisablehook(unraisable)
