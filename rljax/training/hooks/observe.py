"""Per-chunk host timings, cost and device memory in every metrics row (``time/*``, ``cost/*``, ``memory/*``).

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

``cost/*`` is what the chunk cost, for sizing a run (``docs/metrics.md``):

* ``cost/device_s``: device-seconds, ``time/interval_s`` times the devices the run holds (every process's);
* ``cost/env_steps_per_device_s``: the chunk's env steps (all members of a sweep) per device-second;
* ``cost/checkpoint_bytes``: the state bytes the checkpoint at the *previous* boundary wrote (0 when none);
* ``cost/collective_bytes_per_update``: the bytes each device hands to collectives in one update, read
  from the traced program (:meth:`rljax.training.program.Program.collective_bytes_per_update`; 0 on
  one device).

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

__all__ = ["ChunkTiming", "TIME_COLUMNS", "COST_COLUMNS", "MEMORY_COLUMNS", "MEASURED_FIELDS", "is_measured", "device_memory"]

# Row column -> the running total in ``Run.timings`` it is the per-row difference of.
TIME_COLUMNS = {"time/compute_s": "compute_s", "time/host_wait_s": "host_wait_s", "time/eval_s": "eval_s",
                "time/logging_s": "logging_s", "time/checkpoint_s": "checkpoint_s", "time/agree_s": "agree_s"}
MEMORY_COLUMNS = {"memory/bytes_in_use": "bytes_in_use", "memory/peak_bytes_in_use": "peak_bytes_in_use",
                  "memory/bytes_limit": "bytes_limit"}
COST_COLUMNS = ("cost/device_s", "cost/env_steps_per_device_s", "cost/checkpoint_bytes",
                "cost/collective_bytes_per_update")
MEASURED_FIELDS = ("wall_time_s", "sps")
"""Row columns measured by the clock rather than computed from the run's data (with every ``time/*``,
``cost/*`` and ``memory/*`` column): they differ between two runs that are otherwise bit-identical."""
_MEASURED_PREFIXES = ("time/", "cost/", "memory/")


def is_measured(key: str) -> bool:
    """Whether the row column ``key`` is measured by the clock or the allocator (``wall_time_s``,
    ``sps``, ``time/*``, ``cost/*``, ``memory/*``), so it differs between otherwise identical runs."""
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
    """The boundary hook that adds the ``time/*``, ``cost/*`` and ``memory/*`` columns to every chunk's rows.

    Placed just before :class:`rljax.store.tracking.Tracking`, so the columns are in the rows it logs
    (and in ``TrainResult.rows`` and the rows saved with checkpoints); a sweep's members get the
    same values (they share one program).

    Args:
        devices: this process's devices of the run (their memory is reported).
        clock: the clock for ``time/interval_s`` (tests pass a fake one).
        num_devices: the devices the run holds over all processes (device-seconds); by default
            ``len(devices)``.
    """

    def __init__(self, devices: Sequence[Any], clock: Any = time.perf_counter, num_devices: int | None = None):
        self.devices = list(devices)
        self.clock = clock
        self.num_devices = num_devices or len(self.devices)
        self._bytes = 0
        self._totals: dict[str, float] = {}
        self._t_last = clock()

    def _snapshot(self, timings: dict[str, Any]) -> dict[str, float]:
        return {name: float(timings.get(name, 0.0)) for name in TIME_COLUMNS.values()}

    def start(self, run: Run) -> None:
        """Before the first chunk (after compiling): the totals start from here."""
        self._totals = self._snapshot(run.timings)
        self._bytes = int(run.timings.get("checkpoint_bytes", 0))
        self._t_last = self.clock()

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Adds the columns to ``rows``: the totals' growth since the previous row, and device memory."""
        now, totals = self.clock(), self._snapshot(run.timings)
        columns: dict[str, Any] = {column: totals[name] - self._totals.get(name, 0.0)
                                   for column, name in TIME_COLUMNS.items()}
        columns["time/interval_s"] = now - self._t_last
        device_s = columns["time/interval_s"] * self.num_devices
        plan, written = run.plan, int(run.timings.get("checkpoint_bytes", 0))
        columns["cost/device_s"] = device_s
        columns["cost/env_steps_per_device_s"] = (plan.updates_per_chunk * plan.env_steps_per_update
                                                  * run.program.size / max(device_s, 1e-9))
        columns["cost/checkpoint_bytes"] = written - self._bytes
        columns["cost/collective_bytes_per_update"] = int(run.timings.get("collective_bytes_per_update", 0))
        columns.update(device_memory(self.devices))
        self._totals, self._t_last, self._bytes = totals, now, written
        for row in rows:
            row.update(columns)

    def close(self, run: Run) -> None:
        """Writes the run's cost totals into ``manifest.json`` (:meth:`rljax.store.tracking.Tracking.record_cost`;
        the hooks close last first, so the final checkpoint and the rows are written by now)."""
        tracking = getattr(run, "tracking", None)
        if tracking is not None and getattr(run, "leader", True):
            tracking.record_cost(int(run.timings.get("checkpoint_bytes", 0)) - self._bytes)
