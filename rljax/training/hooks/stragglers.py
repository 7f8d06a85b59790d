"""Stragglers: the process of a multi-process run that the others wait for.

At every chunk boundary the processes agree (one small all-gather,
:func:`rljax.runtime.distributed.agree`); each hands in four times it measured for chunk ``c``
(:data:`PROCESS_TIMES`, in the loop's ``Run.process_times``, ``[P, 4]``):

* ``boundary_s``: host work between the previous agreement and chunk ``c``'s launch (the previous
  boundary's logging, evaluation, checkpoint writes and callbacks; 0 for a chunk launched ahead);
* ``compute_s``: chunk ``c``'s device time, from its launch to its output on the host;
* ``host_wait_s``: how long the host waited for that output;
* ``agree_s``: how long it waited at the *previous* agreement (this one's wait is not known yet).

A slow process shows in two ways. In a data-parallel program it launches the chunk late and the
others wait for it inside the chunk's collectives: its ``boundary_s`` is the longest while the others'
``compute_s`` grows by as much. In a sweep split over processes (no collectives inside a chunk) it
reaches the agreement late: its ``boundary_s + compute_s`` is the longest. Process ``p``'s lag is how
far behind the earliest process it was on either count::

    lag_p = max(boundary_p - min_q boundary_q, (boundary_p + compute_p) - min_q (boundary_q + compute_q))

and the straggler of the chunk is the process with the largest lag. A device that is slow *inside*
a data-parallel program is not visible this way (every process's chunk ends at the same collective);
the device-side profile is the tool for that.

:class:`Stragglers` adds these columns to every row of a multi-process run (none with one process):

* ``time/<t>_max``, ``time/<t>_min``, ``time/<t>_max_process`` for ``t`` in ``compute_s``,
  ``host_wait_s``, ``agree_s``, ``boundary_s``: the largest and smallest value over the processes and
  the index of the process with the largest;
* ``time/straggler``: the process with the largest lag; ``time/straggler_lag_s``: its lag.

It warns (on the leader, once per straggler until another process or none takes its place) when the
same process lags by more than ``margin`` times the chunk's ``time/interval_s`` (and at least
:data:`MIN_LAG_S`) in :data:`CHUNKS_IN_A_ROW` chunks in a row. ``rljax inspect`` summarises the
columns (:func:`straggler_summary`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["PROCESS_TIMES", "CHUNKS_IN_A_ROW", "MIN_LAG_S", "Stragglers", "process_columns", "lags",
           "straggler_summary"]

PROCESS_TIMES = ("boundary_s", "compute_s", "host_wait_s", "agree_s")
"""The per-process times each process hands in at a chunk's agreement, in this order."""
CHUNKS_IN_A_ROW = 2
"""Chunks in a row that the same process must lag by more than the margin before it is named."""
MIN_LAG_S = 0.05
"""A lag below this many seconds is never a straggler (scheduling noise on short chunks)."""


def lags(times: np.ndarray) -> np.ndarray:
    """Each process's lag behind the earliest one (module docstring), ``[P]`` seconds.

    Args:
        times: ``[P, 4]`` per-process times in :data:`PROCESS_TIMES` order.
    """
    boundary, compute = times[:, 0], times[:, 1]
    arrival = boundary + compute
    return np.maximum(boundary - boundary.min(), arrival - arrival.min())


def process_columns(times: np.ndarray) -> dict[str, Any]:
    """The row columns (module docstring) of one chunk's ``[P, 4]`` per-process times."""
    columns: dict[str, Any] = {}
    for k, name in enumerate(PROCESS_TIMES):
        values = times[:, k]
        columns[f"time/{name}_max"] = float(values.max())
        columns[f"time/{name}_min"] = float(values.min())
        columns[f"time/{name}_max_process"] = int(values.argmax())
    lag = lags(times)
    columns["time/straggler"] = int(lag.argmax())
    columns["time/straggler_lag_s"] = float(lag.max())
    return columns


class Stragglers(Hook):
    """The boundary hook that adds the per-process columns and warns about a straggler.

    Placed after :class:`rljax.training.hooks.observe.ChunkTiming` (it reads ``time/interval_s``) and
    before the rows are logged.

    Args:
        margin: a lag above this fraction of the chunk's interval counts (0: never warn).
        leader: this process prints the warning.
        stream: where the warning goes (standard error).
    """

    def __init__(self, margin: float, leader: bool = True, stream: Any = None):
        self.margin = margin
        self.leader = leader
        self.stream = stream
        self._streak: tuple[int, int] = (-1, 0)  # (process, chunks in a row it lagged past the margin)
        self._named: int | None = None

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Adds the columns to ``rows`` (a run of one process: nothing) and warns when due."""
        times = getattr(run, "process_times", None)
        if times is None or len(times) < 2:
            return
        columns = process_columns(np.asarray(times, np.float64))
        for row in rows:
            row.update(columns)
        interval = float(rows[0].get("time/interval_s") or 0.0) if rows else 0.0
        self._watch(columns["time/straggler"], columns["time/straggler_lag_s"], interval)

    def _watch(self, process: int, lag: float, interval: float) -> None:
        late = self.margin > 0 and lag > max(MIN_LAG_S, self.margin * interval)
        if not late:
            self._streak, self._named = (-1, 0), None
            return
        streak = self._streak[1] + 1 if self._streak[0] == process else 1
        self._streak = (process, streak)
        if streak >= CHUNKS_IN_A_ROW and self._named != process:
            self._named = process
            if self.leader:
                share = f"{100 * lag / interval:.0f} % of the chunk's interval" if interval > 0 else "the chunk"
                print(f"warning: process {process} is a straggler: the other processes waited {lag:.3g} s for it "
                      f"in the last chunk ({share}; over the margin of {100 * self.margin:.0f} % for {streak} chunks "
                      f"in a row). Its host, pid and devices: manifest.json's processes; the per-process times: "
                      f"the rows' time/*_max_process columns (docs/scale-out.md, Stragglers)",
                      file=self.stream or sys.stderr, flush=True)


def straggler_summary(rows: Sequence[dict[str, Any]]) -> str | None:
    """One line for ``rljax inspect``: which process lagged most often and by how much, or None
    for a run without the columns (one process)."""
    lagged = [(int(r["time/straggler"]), float(r["time/straggler_lag_s"])) for r in rows
              if r.get("time/straggler") is not None and r.get("time/straggler_lag_s") is not None]
    if not lagged:
        return None
    who = np.array([p for p, _ in lagged])
    lag = np.array([s for _, s in lagged])
    if lag.max() <= MIN_LAG_S:
        return f"processes: no straggler (the largest lag behind the earliest process was {lag.max():.3g} s)"
    slow = lag > MIN_LAG_S
    worst = int(np.bincount(who[slow]).argmax())
    mine = lag[slow & (who == worst)]
    return (f"processes: process {worst} kept the others waiting in {len(mine)} of {len(lagged)} chunks, by "
            f"{np.median(mine):.3g} s per chunk (median; max {mine.max():.3g} s)")
