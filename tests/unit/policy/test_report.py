"""Evaluation reports (:mod:`rljax.policy.report`): summary statistics by hand, the bootstrap interval
(reproducible, narrowing, degenerate cases, bad input), the report record and its three files
(written atomically), the markdown page, and JSON without non-finite floats."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rljax.policy import report

VALUES = [1.0, 2.0, 3.0, 4.0, 10.0]


def test_summary_statistics_by_hand():
    s = report.summarize(VALUES)
    # mean 20/5; population std sqrt((9+4+1+0+36)/5); quantiles by linear interpolation over
    # positions 0..4: q25 at position 1, median at 2, q75 at 3.
    assert s["mean"] == 4.0 and s["std"] == pytest.approx(math.sqrt(10.0))
    assert (s["median"], s["q25"], s["q75"], s["iqr"]) == (3.0, 2.0, 4.0, 2.0)
    assert (s["min"], s["max"]) == (1.0, 10.0)
    assert s["ci_low"] <= s["mean"] <= s["ci_high"]
    assert 1.0 <= s["ci_low"] < s["ci_high"] <= 10.0


def test_bootstrap_interval_is_reproducible_and_narrows_with_more_episodes():
    rng = np.random.default_rng(3)
    few, many = rng.normal(100, 10, 10), rng.normal(100, 10, 1000)
    assert report.bootstrap_ci(few) == report.bootstrap_ci(few)
    lo, hi = report.bootstrap_ci(many)
    assert lo < many.mean() < hi and hi - lo < (report.bootstrap_ci(few)[1] - report.bootstrap_ci(few)[0])
    # ~ mean ± 1.96 sigma / sqrt(n) for a normal sample
    assert hi - lo == pytest.approx(2 * 1.96 * many.std() / math.sqrt(many.size), rel=0.1)
    assert report.bootstrap_ci([7.0]) == (7.0, 7.0) and report.bootstrap_ci([5.0] * 4) == (5.0, 5.0)
    with pytest.raises(ValueError, match="at least one"):
        report.bootstrap_ci([])


def test_report_files(tmp_path):
    rec = report.build_report(VALUES, [10, 20, 30, 40, 50], [False, False, True, False, True], checkpoint_step=64,
                              config_hash="abc", deterministic=True, seed=0, env_param_overrides={"length": 0.7},
                              env="CartPole-v1", algorithm="ppo", returns_extra=None)
    path = report.write_report(tmp_path / "eval" / "64", rec)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(report.REPORT_FILES)
    saved = json.loads(path.read_text())
    assert saved["returns"] == VALUES and saved["lengths"] == [10, 20, 30, 40, 50]
    assert saved["truncated"] == [False, False, True, False, True] and saved["truncated_fraction"] == 0.4
    assert saved["return"]["mean"] == 4.0 and saved["length"]["median"] == 30.0
    assert saved["checkpoint_step"] == 64 and saved["env_param_overrides"] == {"length": 0.7}
    md = (path.parent / "report.md").read_text()
    assert "| return | 4 |" in md and "`length=0.7`" in md and "step: 64" in md
    assert (path.parent / "returns.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="differ in length"):
        report.build_report([1.0], [1, 2], [False])


def test_even_count_quantiles_interpolate_and_lengths_are_summarized_too():
    # positions 0..3: q25 at 0.75 (1 + 0.75 * 1), median at 1.5 (2.5), q75 at 2.25 (3 + 0.25 * 5).
    s = report.summarize([1.0, 2.0, 3.0, 8.0])
    assert (s["q25"], s["median"], s["q75"]) == (1.75, 2.5, 4.25) and s["iqr"] == 2.5
    assert s["mean"] == 3.5 and s["std"] == pytest.approx(math.sqrt((6.25 + 2.25 + 0.25 + 20.25) / 4))
    assert all(type(v) is float for v in s.values())
    with pytest.raises(ValueError, match="at least one value"):
        report.summarize([])


def test_bootstrap_interval_by_hand_and_its_errors():
    # Two values a < b: every resampled mean is a, (a + b) / 2 or b, with probabilities 1/4, 1/2, 1/4;
    # the 2.5 % and 97.5 % quantiles of 10 000 such means are a and b.
    assert report.bootstrap_ci([0.0, 2.0]) == (0.0, 2.0)
    # A 50 % interval of the same: the quartiles of {0: 1/4, 1: 1/2, 2: 1/4} are 1 and 1.
    assert report.bootstrap_ci([0.0, 2.0], confidence=0.5) == (1.0, 1.0)
    assert report.bootstrap_ci([0.0, 2.0], seed=1) == (0.0, 2.0)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=rf"confidence must be in \(0, 1\), got {bad}"):
            report.bootstrap_ci([1.0], confidence=bad)


def test_markdown_page_names_what_was_evaluated():
    rec = report.build_report([1.0, 3.0], [5, 7], [False, True], env="Pendulum-v1", algorithm="sac", member=2,
                              deterministic=False, seed=9, run_dir="runs/x", config_hash="h")
    md = report.format_markdown(rec)
    assert md.startswith("# Evaluation: sac on Pendulum-v1, member 2\n")
    assert "- policy: stochastic" in md and "- episodes: 2 (seed 9); 50 % cut by the time limit" in md
    assert "- env param overrides: none (the params the policy trained with)" in md
    assert "| return | 2 |" in md and "| length | 6 |" in md and "`runs/x`" in md
    assert rec["num_episodes"] == 2 and rec["bootstrap"] == {"method": "percentile", "resamples": 10_000, "seed": 0}


def test_non_finite_values_are_written_as_null(tmp_path):
    rec = report.build_report([1.0, 2.0], [1, 2], [False, False], env="E", algorithm="a", wall_s=float("inf"),
                              extra={"x": [float("nan"), 1.5]})
    text = report.write_report(tmp_path, rec).read_text()
    saved = json.loads(text)  # strict JSON: no NaN or Infinity tokens
    assert saved["wall_s"] is None and saved["extra"] == {"x": [None, 1.5]} and saved["returns"] == [1.0, 2.0]
    assert "NaN" not in text and "Infinity" not in text


@pytest.mark.parametrize("returns", [[1.0, float("nan"), 3.0], [float("nan"), float("inf")]])
def test_a_report_with_non_finite_returns_is_written(tmp_path, returns):
    # write_report raised "autodetected range of [nan, nan] is not finite" drawing the histogram.
    rec = report.build_report(returns, [5] * len(returns), [False] * len(returns), env="E", algorithm="a")
    saved = json.loads(report.write_report(tmp_path, rec).read_text())
    assert saved["returns"] == [r if np.isfinite(r) else None for r in returns]
    assert (tmp_path / "returns.png").stat().st_size > 0 and (tmp_path / "report.md").exists()


def test_replace_into_leaves_no_temporary_file_behind(tmp_path):
    target = tmp_path / "f.txt"
    report.replace_into(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "new"

    def fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        report.replace_into(target, fail)
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
