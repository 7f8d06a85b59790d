"""Per-chunk host timings and device memory in every metrics row (the ``time/*`` and ``memory/*`` columns).

The host loop (:mod:`rljax.training.loop`) accumulates, per run, the seconds spent computing, waiting for the
device, logging, evaluating and checkpointing (``TrainResult.timings``). :class:`ChunkTiming` is the
boundary hook that turns those running totals into per-chunk figures: each time a chunk's rows are
recorded it adds the difference of every total since the previous row, so the columns of one row
describe the host's time between the previous row and this one. ``docs/metrics.md`` defines each
column; in short, for the row of chunk ``c``:

* ``time/compute_s``: chunk ``c``'s device time (what ``sps`` is computed from);
* ``time/host_wait_s``: how long the host was blocked waiting for chunk ``c``'s output;
* ``time/eval_s``: the evaluation of chunk ``c`` (0 when it was not evaluated);
* ``time/logging_s``: writing the *previous* row (chunk ``c - 1``'s record phase: metrics file,
  tensorboard, progress line), which ends after that row was written and so can only be reported here;
* ``time/checkpoint_s``: the checkpoint saved at the *previous* boundary (after chunk ``c - 1``'s
  row was written), 0 when none was;
* ``time/agree_s``: the processes' agreement at chunk ``c``'s boundary (a multi-process run's one
  small all-gather, :mod:`rljax.runtime.distributed`; 0 for one process);
* ``time/interval_s``: host time since the previous row was recorded (the first row of a process:
  since the loop started, after compiling).

``memory/*`` is the device memory the backend reports (``jax.Device.memory_stats()``), the largest
value over the run's devices; on a backend that reports nothing (CPU) the columns are present and
null. These columns vary from run to run like ``wall_time_s`` and ``sps``: :func:`is_measured` names
every such column, so comparisons of runs (bit-exact resume tests) leave them out.

Nothing here runs in compiled code; the hook's cost is a few dict look-ups and one
``memory_stats()`` call per device per chunk (well under a millisecond).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["ChunkTiming", "TIME_COLUMNS", "MEMORY_COLUMNS", "MEASURED_FIELDS", "is_measured", "device_memory"]

# Row column -> the running total in ``Run.timings`` it is the per-row difference of.
TIME_COLUMNS = {"time/compute_s": "compute_s", "time/host_wait_s": "host_wait_s", "time/eval_s": "eval_s",
                "time/logging_s": "logging_s", "time/checkpoint_s": "checkpoint_s", "time/agree_s": "agree_s"}
MEMORY_COLUMNS = {"memory/bytes_in_use": "bytes_in_use", "memory/peak_bytes_in_use": "peak_bytes_in_use",
                  "memory/bytes_limit": "bytes_limit"}
MEASURED_FIELDS = ("wall_time_s", "sps")
"""Row columns measured by the clock rather than computed from the run's data (with every ``time/*``
and ``memory/*`` column): they differ between two runs that are otherwise bit-identical."""
_MEASURED_PREFIXES = ("time/", "memory/")


def is_measured(key: str) -> bool:
    """Whether the row column ``key`` is measured by the clock or the allocator (``wall_time_s``,
    ``sps``, ``time/*``, ``memory/*``), so it differs between otherwise identical runs."""
    return key in MEASURED_FIELDS or key.startswith(_MEASURED_PREFIXES)


def device_memory(devices: Sequence[Any]) -> dict[str, int | None]:
    """The ``memory/*`` columns: for each statistic, its largest value over ``devices`` (the device
    nearest its limit is the one that runs out), None when no device reports it (CPU: ``memory_stats()``
    is None)."""
    out: dict[str, int | None] = dict.fromkeys(MEMORY_COLUMNS)
    for device in devices:
        try:
            stats = device.memory_stats()
        except Exception:  # noqa: BLE001 - a backend without the call reports nothing, as CPU does
            stats = None
        if not stats:
            continue
        for column, name in MEMORY_COLUMNS.items():
            value = stats.get(name)
            if value is not None:
                out[column] = max(int(value), out[column] or 0)
    return out


class ChunkTiming(Hook):
    """The boundary hook that adds the ``time/*`` and ``memory/*`` columns to every chunk's rows.

    Placed just before :class:`rljax.store.tracking.Tracking`, so the columns are in the rows it logs
    (and in ``TrainResult.rows`` and the rows saved with checkpoints); a sweep's members get the
    same values (they share one program).

    Args:
        devices: the run's devices (``program.parallel.devices``).
        clock: the clock for ``time/interval_s`` (tests pass a fake one).
    """

    def __init__(self, devices: Sequence[Any], clock: Any = time.perf_counter):
        self.devices = list(devices)
        self.clock = clock
        self._totals: dict[str, float] = {}
        self._t_last = clock()

    def _snapshot(self, timings: dict[str, Any]) -> dict[str, float]:
        return {name: float(timings.get(name, 0.0)) for name in TIME_COLUMNS.values()}

    def start(self, run: Run) -> None:
        """Before the first chunk (after compiling): the totals start from here."""
        self._totals = self._snapshot(run.timings)
        self._t_last = self.clock()

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Adds the columns to ``rows``: the totals' growth since the previous row, and device memory."""
        now, totals = self.clock(), self._snapshot(run.timings)
        columns: dict[str, Any] = {column: totals[name] - self._totals.get(name, 0.0)
                                   for column, name in TIME_COLUMNS.items()}
        columns["time/interval_s"] = now - self._t_last
        columns.update(device_memory(self.devices))
        self._totals, self._t_last = totals, now
        for row in rows:
            row.update(columns)
