"""The adapters that make Evaluation, Tracking and the caller's on_chunk into hooks: each hook
method forwards to its object's method of the same name, with the same run, chunk index, rows and
flag, and its result; the methods its object lacks keep the Hook defaults."""

from __future__ import annotations

from rljax.training.hooks.adapters import EvaluationHook, OnChunk, TrackingHook
from rljax.training.hooks.base import Run
from rljax.training.options import RunOptions
from rljax.training.program import Plan
from rljax.training.signals import PreemptionGuard

PLAN = Plan(num_updates=4, updates_per_chunk=2, num_chunks=2, env_steps_per_update=8)


def _run(state=0) -> Run:
    return Run(config=None, program=None, plan=PLAN, state=state, guard=PreemptionGuard(enabled=False),
               options=RunOptions())


def test_on_chunk_passes_the_state_and_member_0s_row_and_stops_on_a_true_result():
    seen = []
    hook = OnChunk(lambda c, state, row: seen.append((c, state, row)) or c == 1)
    run = _run(state="s")
    assert hook.needs_every_state is True  # the callback reads every chunk's state
    assert hook.react(run, 0, [{"a": 1}, {"a": 2}]) is None and not run.guard.requested
    hook.react(run, 1, [{"a": 3}])
    assert seen == [(0, "s", {"a": 1}), (1, "s", {"a": 3})]
    assert run.guard.requested and run.guard.signal_name == "on_chunk"


def test_adapters_forward_the_methods_their_objects_have():
    calls = []

    class Fake:
        def due(self, run, c, last):
            calls.append(("due", c, last))
            return c == 3

        def record(self, run, c, rows):
            calls.append(("record", c, len(rows)))

        def close(self, run):
            calls.append(("close",))

    run, rows = _run(), [{}, {}]
    evaluation, tracking = EvaluationHook(Fake()), TrackingHook(Fake())
    assert evaluation.due(run, 3, False) is True and evaluation.due(run, 2, False) is False
    evaluation.record(run, 3, rows)
    evaluation.close(run)  # Evaluation has nothing to close: the default
    assert tracking.due(run, 3, False) is False  # Tracking never needs the state: the default
    tracking.record(run, 4, rows)
    tracking.close(run)
    assert calls == [("due", 3, False), ("due", 2, False), ("record", 3, 2), ("record", 4, 2), ("close",)]




def test_evaluation_hook_forwards_the_same_run_rows_and_last_flag():
    seen = []

    class FakeEvaluation:
        def due(self, run, chunk_index, last):
            seen.append(("due", run, chunk_index, last))
            return last

        def record(self, run, chunk_index, rows):
            seen.append(("record", run, chunk_index, rows))
            rows[0]["eval/return"] = 7.0  # the eval columns land in the rows later hooks log

    run, rows = _run(), [{"env_steps": 8}]
    hook = EvaluationHook(FakeEvaluation())
    assert hook.due(run, 1, True) is True and hook.due(run, 0, False) is False
    assert hook.record(run, 1, rows) is None
    assert seen == [("due", run, 1, True), ("due", run, 0, False), ("record", run, 1, rows)]
    assert seen[0][1] is run and seen[2][3] is rows
    assert rows == [{"env_steps": 8, "eval/return": 7.0}]
    # What Evaluation lacks: the defaults (no reaction, nothing at start or close).
    assert hook.react(run, 1, rows) is None and hook.start(run) is None and hook.close(run) is None
    assert len(seen) == 3 and hook.needs_every_state is False


def test_tracking_hook_forwards_record_and_close_only():
    seen = []

    class FakeTracking:
        def record(self, run, chunk_index, rows):
            seen.append(("record", run, chunk_index, rows))

        def close(self, run):
            seen.append(("close", run))

        def due(self, run, chunk_index, last):  # never consulted: tracking needs no state
            raise AssertionError("TrackingHook forwarded due")

    run, rows = _run(), [{"a": 1.0}, {"a": 2.0}]
    hook = TrackingHook(FakeTracking())
    assert hook.due(run, 0, True) is False
    hook.record(run, 2, rows)
    hook.close(run)
    assert seen == [("record", run, 2, rows), ("close", run)] and seen[0][3] is rows


def test_on_chunk_with_a_false_result_never_stops_the_run():
    hook = OnChunk(lambda c, state, row: None)
    run = _run(state="s")
    for c in range(3):
        assert hook.react(run, c, [{"c": c}]) is None
    assert not run.guard.requested
