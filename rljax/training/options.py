"""How a run is run: :class:`RunOptions`, everything :func:`rljax.training.loop.train` takes beside what it trains.

``train(config, env, env_params, options=RunOptions(...))``: the config, the env and its params say
*what* is trained (the compiled program and its numbers depend on them); the options say *how* the
run is kept and watched: where it is saved and how often, whether it resumes, what it prints, which
signals stop it, the caller's per-chunk callback, a sweep's population and the stall watchdog. Of
these, the fields in :data:`SAVED_FIELDS` are recorded with the run (``manifest.json`` and every
checkpoint) and kept by a command-line resume.

The options are validated when they are made: a bad value raises ``ValueError`` (``TypeError`` for
a value of the wrong kind) naming the field, the value and what would be valid.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

from rljax.store.trackers import START_TIMEOUT_S
from rljax.training.population import Population

__all__ = ["ROW_BUDGET", "RunOptions", "SAVED_FIELDS", "OnChunkCallback", "auto_log_every"]

ROW_BUDGET = 200
"""With ``log_every = 0`` (automatic), a chunk writes at most about this many rows over all members."""


def auto_log_every(updates_per_chunk: int, members: int = 1) -> int:
    """The automatic ``log_every``: one row per update while a chunk's rows over its ``members``
    stay within :data:`ROW_BUDGET` (a single run with the automatic chunk size: every update),
    else the fewest updates per row that keep them there (at least one row per chunk)."""
    rows = max(1, ROW_BUDGET // max(1, members))
    return max(1, math.ceil(updates_per_chunk / rows))

OnChunkCallback = Callable[[int, Any, dict[str, Any]], Any]
"""``on_chunk(chunk_index, state, row) -> stop``: called after every chunk with its train state and
member 0's metrics row; a true result stops the run there as a preemption would."""

SAVED_FIELDS = ("checkpoint_every", "checkpoint_interval_s", "keep_checkpoints", "checkpoints", "tensorboard",
                "stall_factor", "stall_first_chunk_s", "stall_min_s", "straggler_margin", "deterministic", "log_every",
                "wandb", "mlflow", "tracker_timeout_s", "video_interval")
"""The options recorded with a run (``run_options`` in ``manifest.json`` and checkpoint metas) and kept
by ``rljax resume`` (:meth:`RunOptions.saved`)."""

_BOOLEANS = ("resume", "checkpoints", "tensorboard", "quiet", "handle_signals")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a run is saved, resumed, logged and watched (everything :func:`~rljax.training.loop.train`
    takes beside the config, the env and its params).

    Attributes:
        run_dir: where ``config.json``, ``manifest.json``, ``metrics.jsonl``, ``tb/`` and
            ``checkpoints/`` go; None keeps the run in memory (rows are still returned). The
            directory is locked for the run (:mod:`rljax.store.runlock`).
        resume: continue the run in ``run_dir`` (required then) from its newest valid checkpoint;
            the config must match except for :data:`rljax.store.rundir.RESUMABLE_FIELDS`. A run
            with no committed checkpoint starts over (its rows move to ``metrics.superseded.jsonl``).
        checkpoint_every: save every this many chunks; 0 saves instead when
            ``checkpoint_interval_s`` seconds have passed since the last save. Either way a
            checkpoint is always saved after the last chunk and on a stop.
        checkpoint_interval_s: the time-based interval used when ``checkpoint_every`` is 0.
        keep_checkpoints: how many recent checkpoints to keep.
        checkpoints: False disables checkpointing entirely (the run cannot be resumed).
        tensorboard: write tensorboard events.
        log_every: one row of ``metrics.jsonl`` (and tensorboard) per this many updates, each
            the mean of their metrics and the episodes that ended in them (at most a chunk's
            updates: a row never spans two chunks; the value used is in ``manifest.json``'s
            ``plan``); 0 (automatic): every
            update while a chunk's rows over all members stay within
            :data:`ROW_BUDGET`, else fewer
            (:func:`auto_log_every`). Rows per chunk (progress lines,
            health, PBT, checkpoints) go to ``chunks.jsonl`` whatever this is.
        wandb: a W&B project to log to as well (the ``wandb`` extra; online with W&B credentials,
            else offline into ``RUN_DIR/wandb``), or None. Needs ``run_dir``.
        mlflow: an MLflow tracking URI to log to as well (the ``mlflow`` extra; a local path is a
            file store; credentials from MLflow's environment variables, never in the URI), or
            None. Needs ``run_dir``. What both log, and how a failing tracker is met:
            :mod:`rljax.store.trackers`.
        tracker_timeout_s: how long the start of training waits for W&B and MLflow to start their
            runs (:data:`rljax.store.trackers.START_TIMEOUT_S`); a tracker not started by then
            goes on starting in the background and gets the rows once it has, or is dropped with one
            warning when it fails or has still not started this long after the run's end.
        video_interval: every this many env steps (and after the last chunk), a GIF of one greedy
            episode in ``RUN_DIR/videos/<env_steps>.gif`` (and as an image in tensorboard); 0: none.
            The env must draw itself (:func:`rljax.policy.video.frame_drawer`); the episodes use a
            key of their own, so the run's training is bit for bit the same with or without videos
            (:mod:`rljax.training.hooks.video`).
        quiet: no progress lines.
        handle_signals: SIGTERM/SIGINT stop the run cleanly at the next chunk boundary (saved,
            ``result.preempted`` set); during set-up or compilation, before the first chunk
            (:mod:`rljax.training.signals`).
        on_chunk: ``on_chunk(chunk_index, state, row)`` after each chunk (:data:`OnChunkCallback`);
            a true result stops the run there (``result.preempted == "on_chunk"``).
        population: a sweep's :class:`rljax.training.population.Population` (see
            :mod:`rljax.training.sweep`): the state gets a leading ``[P]`` axis, member rows go to
            ``RUN_DIR/members/<name>``, and a diverged member is reported, not fatal. None: a
            single run.
        stall_factor: warn (once, with every thread's stack in ``RUN_DIR/stall-*.txt``) when no
            chunk finished for this many times the median chunk interval; 0 turns the watchdog off
            (:mod:`rljax.training.hooks.watchdog`).
        stall_first_chunk_s: the stall threshold until the first chunk finishes (compiling does
            not count).
        stall_min_s: the threshold's floor after the first chunk.
        straggler_margin: in a multi-process run, warn (once per straggler) when the same process
            kept the others waiting for more than this fraction of the chunk's interval (and at
            least 50 ms) in 2 chunks in a row; 0: no warning (the rows still carry the
            per-process times: :mod:`rljax.training.hooks.stragglers`).
        deterministic: ``"auto"``, ``"on"`` or ``"off"``: whether the run must be bit-identical
            when rerun or resumed in another process (:func:`rljax.runtime.determinism.request_deterministic`;
            what each backend guarantees: docs/runbook.md). ``"on"`` sets XLA's deterministic
            flags if JAX has not started yet, and :func:`~rljax.training.loop.train` raises
            ``ValueError`` on a GPU that started without them. Recorded in ``manifest.json``.

    Raises:
        ValueError: a value out of range (the message names the field, the value and the valid
            range), or ``resume=True`` without a ``run_dir``.
        TypeError: a value of the wrong kind (a flag that is not a bool, an ``on_chunk`` that
            cannot be called, a ``population`` that is not a ``Population``).
    """

    run_dir: str | os.PathLike | None = None
    resume: bool = False
    checkpoint_every: int = 0
    checkpoint_interval_s: float = 60.0
    keep_checkpoints: int = 3
    checkpoints: bool = True
    tensorboard: bool = True
    log_every: int = 0
    wandb: str | None = None
    mlflow: str | None = None
    tracker_timeout_s: float = START_TIMEOUT_S
    video_interval: int = 0
    quiet: bool = False
    handle_signals: bool = True
    on_chunk: OnChunkCallback | None = None
    population: Population | None = None
    stall_factor: float = 10.0
    stall_first_chunk_s: float = 600.0
    stall_min_s: float = 60.0
    straggler_margin: float = 0.2
    deterministic: str = "auto"

    def __post_init__(self) -> None:
        self._check_kinds()
        self._check_checkpoints()
        self._check_stall()
        from rljax.runtime.determinism import check_deterministic_mode

        check_deterministic_mode(self.deterministic)
        if self.resume and self.run_dir is None:
            raise ValueError("RunOptions(resume=True) needs the run_dir of the run to continue")
        self._check_trackers()

    def _check_kinds(self) -> None:
        for name in _BOOLEANS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"RunOptions.{name} must be True or False, got {value!r}")
        if self.run_dir is not None and not isinstance(self.run_dir, (str, os.PathLike)):
            raise TypeError(f"RunOptions.run_dir must be a path (str or os.PathLike) or None, got {self.run_dir!r}")
        if self.on_chunk is not None and not callable(self.on_chunk):
            raise TypeError(f"RunOptions.on_chunk must be callable as on_chunk(chunk_index, state, row) or None, "
                            f"got {self.on_chunk!r}")
        if self.population is not None and not isinstance(self.population, Population):
            raise TypeError(f"RunOptions.population must be a rljax.training.population.Population or None, "
                            f"got {type(self.population).__name__}")

    def _check_checkpoints(self) -> None:
        every, interval, keep = self.checkpoint_every, self.checkpoint_interval_s, self.keep_checkpoints
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise ValueError(f"checkpoint_every must be an integer >= 0 (0: every checkpoint_interval_s), "
                             f"got {every!r}")
        if not (isinstance(interval, (int, float)) and not isinstance(interval, bool) and math.isfinite(interval)
                and interval > 0):
            raise ValueError(f"checkpoint_interval_s must be a finite number > 0, got {interval!r}")
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"keep_checkpoints must be an integer >= 1, got {keep!r}")
        if not isinstance(self.log_every, int) or isinstance(self.log_every, bool) or self.log_every < 0:
            raise ValueError(f"log_every must be an integer >= 0 (updates per metrics row; 0: automatic), "
                             f"got {self.log_every!r}")
        object.__setattr__(self, "checkpoint_interval_s", float(interval))

    def _check_stall(self) -> None:
        for name in ("stall_factor", "stall_first_chunk_s", "stall_min_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    and value >= 0 and (value > 0 or name == "stall_factor")):
                allowed = ">= 0 (0: no stall watchdog)" if name == "stall_factor" else "> 0"
                raise ValueError(f"{name} must be a finite number {allowed}, got {value!r}")
            object.__setattr__(self, name, float(value))
        margin = self.straggler_margin
        if not (isinstance(margin, (int, float)) and not isinstance(margin, bool) and math.isfinite(margin)
                and margin >= 0):
            raise ValueError(f"straggler_margin must be a finite number >= 0 (a fraction of the chunk's interval; "
                             f"0: no straggler warning), got {margin!r}")
        object.__setattr__(self, "straggler_margin", float(margin))

    def _check_trackers(self) -> None:
        if self.wandb is not None and (not isinstance(self.wandb, str) or not self.wandb.strip()):
            raise ValueError(f"wandb must be a W&B project name or None, got {self.wandb!r}")
        if self.mlflow is not None:
            from rljax.store.trackers import check_mlflow_uri

            check_mlflow_uri(self.mlflow)
        timeout = self.tracker_timeout_s
        if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and math.isfinite(timeout)
                and timeout > 0):
            raise ValueError(f"tracker_timeout_s must be a finite number of seconds > 0, got {timeout!r}")
        object.__setattr__(self, "tracker_timeout_s", float(timeout))
        every = self.video_interval
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise ValueError(f"video_interval must be an integer >= 0 (env steps between videos; 0: no videos), "
                             f"got {every!r}")
        if every and self.run_dir is None:
            raise ValueError(f"video_interval={every} needs a run_dir: the videos are written to RUN_DIR/videos")
        if (self.wandb or self.mlflow) and self.run_dir is None:
            raise ValueError("wandb/mlflow need a run_dir: the tracker run ids are kept there so a resume continues "
                             "them")

    def saved(self) -> dict[str, Any]:
        """The options recorded with the run and kept by a resume (:data:`SAVED_FIELDS`), by name."""
        return {name: getattr(self, name) for name in SAVED_FIELDS}

    def replace(self, **changes: Any) -> "RunOptions":
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)
