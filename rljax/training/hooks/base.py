"""The contract between the host loop and its boundary hooks: :class:`Hook` and the :class:`Run` it sees.

The host loop (:mod:`rljax.training.loop`) runs the compiled chunks; everything else at a chunk
boundary is a hook, called through :class:`Hook`'s six methods in this order:

* ``start(run)``: once after compiling, before the first chunk;
* ``due(run, c, last) -> bool``: whether the hook needs chunk ``c``'s state on the host; while no
  hook is due (and no stop is asked) the loop launches chunk ``c + 1`` before reading ``c``'s
  output, so host work overlaps device work;
* ``record(run, c, rows)``: every chunk's rows (one per member), in hook order, before any hook
  reacts: a hook may add columns to the rows that later hooks log;
* ``react(run, c, rows) -> int | None``: may change the run; a chunk index returned is where the
  loop continues from (a rollback), and later hooks do not react to this chunk;
* ``boundary(run, c, rows, last) -> int | None``: as ``react``, but only once chunk ``c``'s state
  is the current one (no chunk was launched ahead);
* ``close(run)``: when the loop ends, however it ends, in reverse hook order.

A hook subclasses :class:`Hook` and overrides what it needs; the rest are no-ops (``due`` says
False). ``needs_every_state = True`` keeps the loop from ever launching ahead (a callback that
reads every chunk's state).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import jax

if TYPE_CHECKING:
    from rljax.core.config import RunConfig
    from rljax.store.checkpoint import Checkpointer
    from rljax.store.tracking import Tracking
    from rljax.training.options import RunOptions
    from rljax.training.program import Plan, Program
    from rljax.training.signals import PreemptionGuard

__all__ = ["Hook", "Recovery", "Row", "Run"]

Row = dict[str, Any]
"""One member's metrics row of one chunk (``metrics.jsonl``'s columns)."""


class Hook(Protocol):
    """What runs at chunk boundaries (the module docstring says when each method is called).

    Attributes:
        needs_every_state: the hook reads every chunk's state, so no chunk may be launched
            before the previous one's output was handled.
    """

    needs_every_state: ClassVar[bool] = False

    def start(self, run: Run) -> None:
        """Before the first chunk, after compiling."""
        return None

    def due(self, run: Run, chunk_index: int, last: bool) -> bool:
        """Whether chunk ``chunk_index``'s state is needed on the host before the next chunk starts."""
        return False

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Sees (and may add columns to) every chunk's rows."""
        return None

    def react(self, run: Run, chunk_index: int, rows: list[Row]) -> int | None:
        """May change the run; returns the chunk to continue from, or None."""
        return None

    def boundary(self, run: Run, chunk_index: int, rows: list[Row], last: bool) -> int | None:
        """As :meth:`react`, once chunk ``chunk_index``'s state is the current one."""
        return None

    def close(self, run: Run) -> None:
        """The loop ended (finished, stopped or failed)."""
        return None


class Recovery(Protocol):
    """What meets a diverged state found outside the rows (a checkpoint refusing NaN/inf):
    :class:`rljax.training.hooks.health.Health`."""

    def roll_back(self, run: Run, chunk_index: int, row: Row, reason: str) -> int:
        """Stops (raises) or rolls the run back; returns the chunk to run next."""
        ...


@dataclasses.dataclass
class Run:
    """A run in progress, as the host loop and its boundary hooks see it.

    Attributes:
        config: the run's algorithm config (a sweep's base config).
        program: the :class:`~rljax.training.program.Program` that runs its chunks.
        plan: how it is cut into chunks (:class:`~rljax.training.program.Plan`).
        state: the current train state (replaced by every chunk, a PBT step or a rollback).
        guard: the :class:`~rljax.training.signals.PreemptionGuard` (``requested`` once a stop is asked).
        options: the run's :class:`~rljax.training.options.RunOptions`.
        checkpointer: the :class:`rljax.store.checkpoint.Checkpointer`, or None.
        tracking: the :class:`rljax.store.tracking.Tracking` (metrics files, incidents), or None
            before it is made.
        health: what meets a divergence found outside the rows (:class:`Recovery`).
        start_chunk: the first chunk this process runs.
        rollbacks: rollbacks so far (saved with each checkpoint).
        rows: member 0's rows; member_rows: every member's rows.
        timings: seconds spent per phase, and the plan.
        ahead: ``(state, output, launch time)`` of a chunk launched before the current one was read.
        clock: seconds on the run's clock since it started: time-based decisions (the checkpoint
            cadence) read it, so that every process of a multi-process run takes them at the same
            chunk (there it is the leader's clock at the last boundary).
        leader: this process writes the run directory (always, but for processes 1.. of a
            multi-process run).
        log_every: updates per row of ``metrics.jsonl`` (resolved: at least 1).
        update_rows: the current chunk's rows per ``log_every`` updates, one list per member
            (:func:`rljax.training.loop.update_rows`).
        phase: what the host loop is doing, in words (read by the stall watchdog's report).
        process_times: a multi-process run's ``[P, 4]`` seconds per process for the current chunk
            (:data:`rljax.training.hooks.stragglers.PROCESS_TIMES`); None with one process.
        saved_meta: the meta of the checkpoint the run resumed from, or None (a fresh start).
        checkpoint_meta: JSON a hook keeps in every checkpoint's meta (a host-side schedule, by its
            key), read back from ``saved_meta`` on resume.
    """

    config: RunConfig
    program: Program
    plan: Plan
    state: Any
    guard: PreemptionGuard
    options: RunOptions
    checkpointer: Checkpointer | None = None
    tracking: Tracking | None = None
    health: Recovery | None = None
    start_chunk: int = 0
    rollbacks: int = 0
    rows: list[Row] = dataclasses.field(default_factory=list)
    member_rows: list[list[Row]] = dataclasses.field(default_factory=list)
    timings: dict[str, Any] = dataclasses.field(default_factory=dict)
    ahead: tuple[Any, Any, float] | None = None
    clock: Callable[[], float] = time.perf_counter
    leader: bool = True
    log_every: int = 1
    update_rows: list[list[Row]] = dataclasses.field(default_factory=list)
    phase: str = "setting up"
    process_times: Any = None
    saved_meta: dict[str, Any] | None = None
    checkpoint_meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def discard_ahead(self) -> None:
        """Drops the chunk launched ahead (it ran on a state being replaced); its output state is
        the only live one (the earlier state was donated to it)."""
        if self.ahead is not None:
            self.state, self.ahead = self.ahead[0], None
            jax.block_until_ready(self.state)
