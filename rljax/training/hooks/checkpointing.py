"""The checkpointing hook: the run's saves on their cadence, after the last chunk and on a stop.

Saves go through the run's :class:`rljax.store.checkpoint.Checkpointer` (asynchronous: the write
overlaps the next chunk). Each save's meta records where the loop stood (chunk, env steps, plan),
the config, the saved run options and the chunk's rows, so a resume continues bit for bit. A state
the checkpointer refuses as non-finite is handed to the run's :class:`~rljax.training.hooks.base.Recovery`
(a rollback or a stop).
"""

from __future__ import annotations

import dataclasses
import time

from rljax.store.checkpoint import Checkpointer, NonFiniteStateError
from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["Checkpointing"]


class Checkpointing(Hook):
    """The boundary hook that saves the run: on its cadence, after the last chunk and on a stop.

    Args:
        checkpointer: the run's :class:`~rljax.store.checkpoint.Checkpointer`.
        every: save every this many chunks; 0 saves instead when ``interval_s`` seconds have passed
            since the last save.
        interval_s: the time-based interval.
        nonfinite_ok: save even when the state holds non-finite values (a sweep: a diverged member
            is that member's result and must not stop the others' checkpoints).
    """

    def __init__(self, checkpointer: Checkpointer, every: int, interval_s: float, nonfinite_ok: bool,
                 start: float = 0.0):
        self.checkpointer = checkpointer
        self.every = every
        self.interval_s = interval_s
        self.nonfinite_ok = nonfinite_ok
        self.last_save = start  # on the run's clock (Run.clock)
        self.last_saved: int | None = None  # the env steps of the newest checkpoint this run saved or restored

    def due(self, run: Run, chunk_index: int, last: bool) -> bool:
        """Whether the cadence asks for a checkpoint after this chunk (the last chunk and a stop
        always save)."""
        if self.every:
            return (chunk_index + 1) % self.every == 0
        return run.clock() - self.last_save >= self.interval_s

    def boundary(self, run: Run, chunk_index: int, rows: list[Row], last: bool) -> int | None:
        """Saves when due; a state found non-finite is handed to the run's health (a rollback):
        returns the chunk to continue from then, else None."""
        from rljax.store.tracking import boundary_line, config_to_dict, json_scalar

        guard = run.guard
        if not (last or guard.requested or self.due(run, chunk_index, last)):
            return None
        guard.finishing = guard.requested or last
        t_ckpt = time.perf_counter()
        row = rows[0]
        meta = {"chunk_index": chunk_index, "env_steps": row["env_steps"], "updates": row["updates"],
                "wall_time_s": row["wall_time_s"], "plan": dataclasses.asdict(run.plan),
                "algorithm": type(run.config).__name__, "config": config_to_dict(run.config),
                "run_options": run.options.saved(), "rollbacks": run.rollbacks,
                **run.checkpoint_meta, "rows": [{k: json_scalar(v) for k, v in r.items()} for r in rows],
                "lines": [{k: json_scalar(v) for k, v in boundary_line(r, lines).items()}
                          for r, lines in zip(rows, run.update_rows or [None] * len(rows))]}
        try:
            self.checkpointer.save(row["env_steps"], run.state, meta, nonfinite_ok=self.nonfinite_ok)
        except NonFiniteStateError as err:  # non-finite where the per-chunk count does not look
            guard.finishing = False
            return run.health.roll_back(run, chunk_index, row, str(err))
        finally:
            run.timings["checkpoint_s"] += time.perf_counter() - t_ckpt
            run.timings["checkpoint_bytes"] = self.checkpointer.bytes_written
        self.last_save = run.clock()
        self.last_saved = int(row["env_steps"])
        return None

    def close(self, run: Run) -> None:
        """Waits for the pending save to commit."""
        t_ckpt = time.perf_counter()
        self.checkpointer.close()
        run.timings["checkpoint_s"] += time.perf_counter() - t_ckpt
