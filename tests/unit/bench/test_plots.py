"""rljax.bench.plots: the figures are drawn from scores.csv and curves.csv alone (nothing here trains)."""

import numpy as np
import pytest

from rljax.bench import stats
from rljax.bench.plots import (CURVE_COLUMNS, POINTS, curve_arrays, plot_env_curves, plot_performance_profile,
                               plot_sample_efficiency, read_curves, write_plots)
from rljax.bench.runner import write_scores


def _curves():
    """ppo on envs a, b with 2 seeds, evaluated at 1/2 and all of its budget (100 env steps)."""
    rows = []
    for env, base in (("a", 0.2), ("b", 0.4)):
        for seed in range(2):
            for steps in (50, 100):
                value = base + seed / 10 + steps / 1000
                rows.append({"algorithm": "ppo", "env": env, "seed": seed, "env_steps": steps, "fraction": steps / 100,
                             "score": 10 * value, "normalized_score": value})
    return rows


def _scores():
    return [{"algorithm": r["algorithm"], "env": r["env"], "seed": r["seed"], "score": r["score"],
             "normalized_score": r["normalized_score"]} for r in _curves() if r["env_steps"] == 100]


def test_curves_are_interpolated_at_fractions_of_each_runs_budget():
    array = curve_arrays(_curves())["ppo"]
    assert array.shape == (2, 2, len(POINTS))
    # seed 1 on env b: 0.55 at half the budget, 0.6 at all of it; before 0.5 it holds its first value.
    np.testing.assert_allclose(array[1, 1, [0, 4, 7, 9]], [0.55, 0.55, 0.58, 0.6])


def test_the_sample_efficiency_curve_is_the_iqm_at_each_point(tmp_path):
    fig = plot_sample_efficiency(_curves(), tmp_path / "se.png", reps=100)
    line = fig.axes[0].get_lines()[0]
    expected = stats.sample_efficiency_intervals({"ppo": curve_arrays(_curves())["ppo"]}, reps=100)["ppo"]
    np.testing.assert_allclose(line.get_ydata(), expected.estimate)
    assert (tmp_path / "se.png").stat().st_size > 0


def test_the_performance_profile_is_the_score_distribution(tmp_path):
    fig = plot_performance_profile(_scores(), tmp_path / "pp.png", reps=100)
    line = fig.axes[0].get_lines()[0]
    # final normalised scores 0.3, 0.4 (env a), 0.5, 0.6 (env b): half of them are above 0.45.
    taus = line.get_xdata()
    assert line.get_ydata()[np.searchsorted(taus, 0.45)] == pytest.approx(0.5)


def test_an_envs_curve_is_the_mean_over_seeds(tmp_path):
    fig = plot_env_curves(_curves(), "a", tmp_path / "a.png")
    # seeds 0 and 1 at 50 steps: 0.25, 0.35; at 100: 0.3, 0.4 (times 10).
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), [3.0, 3.5])


def test_write_plots_draws_every_figure_from_the_bench_files(tmp_path):
    write_scores(tmp_path, _scores())
    write_scores(tmp_path, _curves(), "curves.csv", CURVE_COLUMNS)
    assert read_curves(tmp_path / "curves.csv") == _curves()
    paths = write_plots(tmp_path, reps=50)
    assert sorted(p.name for p in paths) == ["env_a.png", "env_b.png", "performance_profile.png",
                                             "sample_efficiency.png"]
    assert all(p.stat().st_size > 0 for p in paths)
