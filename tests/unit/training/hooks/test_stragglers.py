"""Stragglers: per-process time columns, the lag rule, the warning and the inspect line, on hand-made
per-process times (the 2-process run with a sleeping process is in tests/integration/test_multihost.py)."""

from __future__ import annotations

import io
import types

import numpy as np
import pytest

from rljax.cli.flags import build_parser, train_kwargs
from rljax.agents.ppo import PPOConfig
from rljax.training.hooks.stragglers import (CHUNKS_IN_A_ROW, MIN_LAG_S, PROCESS_TIMES, Stragglers, lags,
                                             process_columns, straggler_summary)
from rljax.training.options import RunOptions


def _times(boundary, compute, host_wait=(0.0, 0.0), agree=(0.0, 0.0)) -> np.ndarray:
    return np.stack([boundary, compute, host_wait, agree], axis=1).astype(np.float64)


def test_the_times_are_in_the_documented_order():
    assert PROCESS_TIMES == ("boundary_s", "compute_s", "host_wait_s", "agree_s")


def test_a_late_launch_is_the_lag_when_the_others_wait_inside_the_collectives():
    # Data-parallel: process 1 spent 0.5 s more between chunks; process 0's chunk waited for it at its
    # collectives, so both chunks end together. Lags by hand: boundary spread 0.5, arrivals equal.
    times = _times(boundary=(0.01, 0.51), compute=(0.60, 0.10))
    np.testing.assert_allclose(lags(times), [0.0, 0.5])
    cols = process_columns(times)
    assert cols["time/straggler"] == 1 and cols["time/straggler_lag_s"] == pytest.approx(0.5)
    assert cols["time/boundary_s_max_process"] == 1 and cols["time/boundary_s_max"] == pytest.approx(0.51)
    assert cols["time/compute_s_max_process"] == 0 and cols["time/compute_s_min"] == pytest.approx(0.10)


def test_a_late_arrival_is_the_lag_when_chunks_do_not_communicate():
    # A sweep split over processes: process 0's chunk took 0.3 s longer, process 1 waited at the agreement.
    times = _times(boundary=(0.02, 0.02), compute=(0.5, 0.2), agree=(0.0, 0.3))
    np.testing.assert_allclose(lags(times), [0.3, 0.0])
    cols = process_columns(times)
    assert cols["time/straggler"] == 0 and cols["time/agree_s_max_process"] == 1
    assert set(cols) == {f"time/{t}_{s}" for t in PROCESS_TIMES for s in ("max", "min", "max_process")} | {
        "time/straggler", "time/straggler_lag_s"}


def _run(times) -> types.SimpleNamespace:
    return types.SimpleNamespace(process_times=times)


def _feed(hook: Stragglers, lag_per_chunk, interval: float = 1.0) -> list[dict]:
    rows = []
    for c, lag in enumerate(lag_per_chunk):
        row = {"time/interval_s": interval}
        hook.record(_run(_times(boundary=(0.0, lag), compute=(0.1 + lag, 0.1))), c, [row])
        rows.append(row)
    return rows


def test_the_same_process_late_in_two_chunks_in_a_row_is_named_once():
    out = io.StringIO()
    hook = Stragglers(margin=0.2, stream=out)
    _feed(hook, [0.0, 0.5])
    assert out.getvalue() == "", "one late chunk is not a straggler yet"
    _feed(hook, [0.5, 0.5, 0.5])
    text = out.getvalue()
    assert text.count("warning: process 1 is a straggler") == 1, text
    assert "0.5 s" in text and "50 % of the chunk's interval" in text and "margin of 20 %" in text
    assert CHUNKS_IN_A_ROW == 2


def test_the_warning_comes_at_the_second_late_chunk_and_again_after_a_recovery():
    out = io.StringIO()
    hook = Stragglers(margin=0.2, stream=out)
    warned_at = []
    for c, lag in enumerate([0.0, 0.5, 0.5, 0.0, 0.5, 0.5]):
        before = out.getvalue().count("straggler:")
        _feed(hook, [lag])
        if out.getvalue().count("straggler:") > before:
            warned_at.append(c)
    assert warned_at == [2, 5]  # chunk 0 is on time; late from chunk 1: named at chunk 2, within 3 chunks


def test_lags_under_the_margin_or_the_floor_and_followers_do_not_warn():
    for margin, lag, interval, leader in ((0.2, 0.15, 1.0, True),            # 15 % < 20 %
                                          (0.2, MIN_LAG_S * 0.9, 0.01, True),  # over 20 % but under the floor
                                          (0.0, 5.0, 1.0, True),              # margin 0: no warning
                                          (0.2, 0.5, 1.0, False)):            # not the leader
        out = io.StringIO()
        _feed(Stragglers(margin=margin, leader=leader, stream=out), [lag] * 4, interval)
        assert out.getvalue() == "", (margin, lag, interval, leader)


def test_alternating_stragglers_are_not_named():
    out = io.StringIO()
    hook = Stragglers(margin=0.2, stream=out)
    for c in range(6):
        late = (0.5, 0.0) if c % 2 else (0.0, 0.5)
        hook.record(_run(_times(boundary=late, compute=(0.1, 0.1))), c, [{"time/interval_s": 1.0}])
    assert out.getvalue() == ""


def test_one_process_gets_no_columns():
    row = {"time/interval_s": 1.0}
    Stragglers(margin=0.2).record(_run(None), 0, [row])
    assert row == {"time/interval_s": 1.0}


def test_every_row_of_a_sweep_gets_the_columns():
    rows = [{"time/interval_s": 1.0}, {"time/interval_s": 1.0}]
    Stragglers(margin=0.2).record(_run(_times((0.0, 0.3), (0.4, 0.1))), 0, rows)
    assert rows[0] == rows[1] and rows[0]["time/straggler"] == 1


def test_the_inspect_line_names_the_process_that_lagged_most_often():
    rows = _feed(Stragglers(margin=0.2, stream=io.StringIO()), [0.0, 0.5, 0.5, 0.7, 0.5])
    line = straggler_summary(rows)
    assert line == "processes: process 1 kept the others waiting in 4 of 5 chunks, by 0.5 s per chunk (median; " \
                   "max 0.7 s)", line
    quiet = _feed(Stragglers(margin=0.2, stream=io.StringIO()), [0.001, 0.002])
    assert straggler_summary(quiet).startswith("processes: no straggler")
    assert straggler_summary([{"time/interval_s": 1.0}]) is None


def test_the_margin_option_and_flag():
    assert RunOptions().straggler_margin == 0.2
    assert RunOptions(straggler_margin=0).straggler_margin == 0.0
    for bad in (-0.1, float("nan"), True, "0.2"):
        with pytest.raises(ValueError, match="straggler_margin must be a finite number >= 0"):
            RunOptions(straggler_margin=bad)
    args = build_parser(PPOConfig, {}).parse_args(["--straggler-margin", "0.5"])
    assert train_kwargs(args)["straggler_margin"] == 0.5
    assert "straggler_margin" in RunOptions().saved()
