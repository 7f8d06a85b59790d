"""Boundary work defined outside the training layer, as hooks: evaluation, tracking, external
trackers, the caller's callback.

:class:`rljax.policy.evaluate.Evaluation` and :class:`rljax.store.tracking.Tracking` live in lower
layers, which cannot import :class:`~rljax.training.hooks.base.Hook`; each adapter here forwards
exactly the hook methods its object implements. :class:`OnChunk` turns the caller's
``on_chunk(chunk_index, state, row)`` into a hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rljax.training.hooks.base import Hook, Row, Run
from rljax.training.options import OnChunkCallback

if TYPE_CHECKING:
    from rljax.policy.evaluate import Evaluation
    from rljax.store.trackers import Trackers
    from rljax.store.tracking import Tracking

__all__ = ["EvaluationHook", "TrackingHook", "TrackersHook", "OnChunk"]


class EvaluationHook(Hook):
    """The greedy policy's episodes every ``eval_interval`` chunks and after the last (the ``eval/*``
    columns, added in :meth:`record`: placed before :class:`TrackingHook` so they are logged)."""

    def __init__(self, evaluation: Evaluation):
        self.evaluation = evaluation

    def due(self, run: Run, chunk_index: int, last: bool) -> bool:
        return self.evaluation.due(run, chunk_index, last)

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        self.evaluation.record(run, chunk_index, rows)


class TrackingHook(Hook):
    """The metrics files, tensorboard and progress lines (:class:`rljax.store.tracking.Tracking`)."""

    def __init__(self, tracking: Tracking):
        self.tracking = tracking

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        self.tracking.record(run, chunk_index, rows)

    def close(self, run: Run) -> None:
        self.tracking.close(run)


class TrackersHook(Hook):
    """W&B and MLflow (:class:`rljax.store.trackers.Trackers`): placed after :class:`TrackingHook`,
    so they get the rows as ``metrics.jsonl`` does."""

    def __init__(self, trackers: Trackers):
        self.trackers = trackers

    def start(self, run: Run) -> None:
        self.trackers.start(run)

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        self.trackers.record(run, chunk_index, rows)

    def boundary(self, run: Run, chunk_index: int, rows: list[Row], last: bool) -> None:
        self.trackers.boundary(run, chunk_index, rows, last)

    def close(self, run: Run) -> None:
        self.trackers.close(run)


class OnChunk(Hook):
    """The caller's ``on_chunk(chunk_index, state, row)`` as a hook: returning True stops the run
    at this chunk as a preemption would (saved; ``result.preempted == "on_chunk"``). It reads every
    chunk's state, so no chunk is launched ahead while it is set."""

    needs_every_state: ClassVar[bool] = True

    def __init__(self, callback: OnChunkCallback):
        self.callback = callback

    def react(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        if self.callback(chunk_index, run.state, rows[0]):
            run.guard.request("on_chunk")
        return None
