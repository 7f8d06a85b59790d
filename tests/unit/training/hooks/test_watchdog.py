"""The stall watchdog (:mod:`rljax.training.hooks.watchdog`) on a fake clock, without its thread:
the threshold (first-chunk allowance, then ``max(factor x median interval, floor)`` over the last
:data:`WINDOW` intervals), firing once, the report's content and where it goes, and the disabled
watchdog. A real hung chunk: tests/unit/training/hooks/test_observe.py."""

from __future__ import annotations

import io
import pathlib

from rljax.training.hooks.watchdog import WINDOW, StallWatchdog, stack_report


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _fake_run():
    run = type("R", (), {})()
    run.phase, run.plan = "computing chunk 3 (the host waits for the device)", None
    return run


def test_watchdog_thresholds_and_warns_once(tmp_path):
    clock, stream = _Clock(), io.StringIO()
    dog = StallWatchdog(tmp_path, factor=4, first_chunk_s=50, min_s=2, stream=stream, clock=clock)
    clock.t += 1000  # compiling: not armed yet, never a stall
    assert dog.check() is None
    dog._run = _fake_run()  # armed as start() does, without its thread
    dog._last = clock.t
    assert dog.threshold()[0] == 50  # no chunk finished yet: the first chunk's allowance
    clock.t += 49
    assert dog.check() is None
    for dt in (1.0, 1.0, 1.0, 3.0, 1.0):  # intervals 50, 1, 1, 3, 1: median 1 s -> max(4 x 1, 2) = 4 s
        clock.t += dt
        dog.record(None, 0, [{"env_steps": 64}])
    seconds, how = dog.threshold()
    assert seconds == 4 and "median chunk interval 1 s" in how
    clock.t += 3.9
    assert dog.check() is None
    clock.t += 0.2
    path = dog.check()
    assert isinstance(path, pathlib.Path) and path.parent == tmp_path and path.name.startswith("stall-")
    clock.t += 100
    assert dog.check() is None  # once
    assert stream.getvalue().count("\n") == 1 and str(path) in stream.getvalue()
    text = path.read_text()
    assert "no chunk finished for 4.1 s" in text and "computing chunk 3" in text and '"env_steps": 64' in text
    assert "--- thread MainThread" in text and "test_watchdog_thresholds_and_warns_once" in text


def test_watchdog_floor_and_off():
    clock = _Clock()
    dog = StallWatchdog(None, factor=10, first_chunk_s=5, min_s=60, clock=clock)
    dog._last = clock.t - 0.1
    dog.record(None, 0, [{"env_steps": 1}])
    assert dog.threshold()[0] == 60  # 10 x 0.1 s would be 1 s: the floor
    off = StallWatchdog(None, factor=0, first_chunk_s=5, min_s=60)
    off.start(_fake_run())
    assert off._thread is None and not off.enabled


def test_the_median_is_over_the_last_window_of_intervals():
    clock = _Clock()
    dog = StallWatchdog(None, factor=2, first_chunk_s=5, min_s=0, clock=clock)
    dog._last = clock.t
    for _ in range(WINDOW):  # 50 slow intervals of 10 s, then 50 fast ones of 1 s
        clock.t += 10
        dog.record(None, 0, [{"env_steps": 1}])
    assert dog.threshold()[0] == 20
    for _ in range(WINDOW // 2 + 1):  # 26 of the last 50 are fast: the median is 1 s
        clock.t += 1
        dog.record(None, 0, [{"env_steps": 1}])
    seconds, how = dog.threshold()
    assert seconds == 2 and f"over the last {WINDOW} chunks" in how


def test_without_a_run_directory_the_report_goes_to_the_stream():
    clock, stream = _Clock(), io.StringIO()
    dog = StallWatchdog(None, factor=1, first_chunk_s=10, min_s=0, stream=stream, clock=clock)
    dog._run, dog._last = _fake_run(), clock.t
    clock.t += 10.5
    assert dog.check() == "stderr" and dog.report_path is None and dog.fired
    out = stream.getvalue()
    assert out.startswith("rljax: warning: no chunk finished for 10 s (stall threshold 10 s; computing chunk 3")
    assert "stall_first_chunk_s=10 (no chunk has finished yet)" in out and "last finished chunk: none yet" in out


def test_an_unwritable_run_directory_still_warns(tmp_path):
    clock, stream = _Clock(), io.StringIO()
    missing = tmp_path / "gone"
    dog = StallWatchdog(missing, factor=1, first_chunk_s=1, min_s=0, stream=stream, clock=clock)
    dog._run, dog._last = _fake_run(), clock.t
    clock.t += 2
    assert dog.check() == "stderr"
    assert f"could not write the stall report to {missing}" in stream.getvalue()


def test_a_disabled_watchdog_records_nothing():
    dog = StallWatchdog(None, factor=0, first_chunk_s=5, min_s=1, clock=_Clock())
    dog.record(None, 0, [{"env_steps": 1}])
    assert dog._last is None and dog.check() is None
    dog.close()


def test_stack_report_lists_every_thread_main_first():
    text = stack_report()
    assert text.startswith("--- thread MainThread") and "test_stack_report_lists_every_thread_main_first" in text
