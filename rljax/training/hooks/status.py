"""``RUN_DIR/status.json`` kept current, and ``rljax stop``'s request taken at a chunk boundary.

:class:`RunStatus` is the leader's last boundary hook (:mod:`rljax.store.status` says what the file
holds and how a reader turns it into a state): it writes the file before compiling
(:meth:`RunStatus.begin`), after each chunk's rows and after each checkpoint, and when the loop ends (``finished``, ``preempted`` or,
when an error ended it, ``failed``). At every chunk it also takes a pending ``stop.request``: the run
stops after that chunk as after SIGTERM (or, over several processes, after the next one, when all
of them have agreed), saving a checkpoint. A request left from before the run started is dropped
with a warning rather than stopping the new run at once.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["RunStatus"]


class RunStatus(Hook):
    """Writes ``status.json`` and takes stop requests (see the module docstring).

    Args:
        run_dir: the run directory.
        watchdog: the run's :class:`~rljax.training.hooks.watchdog.StallWatchdog` (its threshold
            is when a reader calls the run stalled), or None.
        checkpointing: the run's checkpointing hook (its ``last_saved`` step), or None.
    """

    def __init__(self, run_dir: Any, watchdog: Any = None, checkpointing: Any = None):
        self.run_dir = run_dir
        self.watchdog = watchdog
        self.checkpointing = checkpointing
        self.record_: dict[str, Any] = {}

    def _write(self, run: Run, **changes: Any) -> None:
        from rljax.store.status import write_status

        self.record_.update(changes)
        if self.watchdog is not None and self.watchdog.enabled:
            self.record_["stall_after_s"] = self.watchdog.threshold()[0]
        saved = getattr(self.checkpointing, "last_saved", None)
        if saved is not None:
            self.record_["last_checkpoint_env_steps"] = saved
        write_status(self.run_dir, self.record_)

    def begin(self, run: Run) -> None:
        """Before compiling: the run is ``running`` (phase ``compiling``) from here on, so a stop can
        be asked while it compiles; a request left from before this run is dropped."""
        from rljax.store.status import take_stop_request

        stale = take_stop_request(self.run_dir)
        if stale is not None:
            warnings.warn(f"{self.run_dir}: dropped a stop request written before this run started "
                          f"({time.ctime(stale.get('requested_unix', 0))}); `rljax stop` asks a running run", stacklevel=2)
        plan = run.plan
        done = getattr(run, "start_env_steps", None)  # a run that may stop between chunks says it
        if done is None:
            done = run.start_chunk * plan.updates_per_chunk * plan.env_steps_per_update
        self._write(run, state="running", phase="compiling", run_dir=str(self.run_dir),
                    algorithm=type(run.config).__name__, env=str(getattr(run.config, "env", "")), env_steps=done,
                    total_env_steps=plan.total_env_steps, chunks_done=run.start_chunk, num_chunks=plan.num_chunks,
                    started_unix=time.time(), sps=None, eta_s=None)

    def start(self, run: Run) -> None:
        """Compiled: the first chunk runs."""
        self._write(run, phase="training")

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """The chunk's progress; a pending stop request becomes a stop."""
        from rljax.store.status import take_stop_request

        row = rows[0]  # every member moves at the same rate: steps and steps/s are each member's
        steps, sps = int(row["env_steps"]), float(row.get("sps") or 0.0)
        left = self.record_.get("total_env_steps", steps) - steps
        self._write(run, env_steps=steps, chunks_done=chunk_index + 1, sps=sps * len(rows),
                    eta_s=left / sps if sps > 0 else None, wall_time_s=row.get("wall_time_s"))
        if "host/actors" in row:  # a host-env run's actor count now (autoscaled: it changes)
            self._write(run, actors=int(row["host/actors"]))
        request = take_stop_request(self.run_dir)
        if request is not None:
            who = request.get("by") or f"{request.get('host', '?')}:{request.get('pid', '?')}"
            run.guard.ask(f"rljax stop ({who})")
            self._write(run, stop_requested_unix=request.get("requested_unix"))

    def boundary(self, run: Run, chunk_index: int, rows: list[Row], last: bool) -> None:
        saved = getattr(self.checkpointing, "last_saved", None)
        if saved is not None and saved != self.record_.get("last_checkpoint_env_steps"):
            self._write(run)

    def close(self, run: Run) -> None:
        """The end: finished (the plan is done), preempted (a stop was asked) or failed (an error)."""
        steps = self.record_.get("env_steps", 0)
        if steps >= self.record_.get("total_env_steps", math.inf):
            state = "finished"
        elif run.guard.requested:
            state = "preempted"
        else:
            state = "failed"
        self._write(run, state=state, phase="ended", ended_unix=time.time(),
                    **({"stopped_by": run.guard.signal_name} if state == "preempted" else {}), eta_s=None)
